"""Burrow's consumer evaluation rules, in plain Python.

Written from linkedin/Burrow core/internal/evaluator/caching.go (the
CachingEvaluator) and core/internal/storage/inmemory.go (what it evaluates):
for each partition Burrow keeps a ring of the last `intervals` (default 10)
offset commits, each with the lag at the time of the commit (the broker's
log end then, minus the committed offset, never negative), and the last
`intervals` log-end samples of the partition (one per offset refresh).

Partition status, in this order (calculatePartitionStatus):

* current lag <= allowed lag (default 0): OK.
* STOP if now - last commit > last commit - first commit (in the window),
  unless a recent log-end sample was at or below the last committed offset.
* REWIND if some commit is below the one before it and no later commit
  gets back to that earlier offset.
* If some commit in the window had lag <= allowed lag: OK.
* STALL if every commit in the window has the same offset.
* WARN if the lag never decreases from one commit to the next.
* Otherwise OK.

Group status: OK, raised to the worst partition status, where STOP,
STALL and REWIND count as ERR.  `complete` is the fraction of the window
filled (partition) or of partitions whose window is full (group).
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

NOTFOUND, OK, WARN, ERR, STOP, STALL, REWIND = range(7)
STATUS_NAMES = ["NOTFOUND", "OK", "WARN", "ERR", "STOP", "STALL", "REWIND"]

DEFAULT_INTERVALS = 10
DEFAULT_REFRESH_MS = 10_000  # Burrow's cluster offset-refresh: 10 s
DEFAULT_MIN_DISTANCE_S = 1   # Burrow's storage min-distance: 1 s


def add_commit(window: list, offset: int, timestamp: int, min_distance_ms: int) -> None:
    """Store one commit as Burrow's storage does: less than min-distance after
    the previous slot's timestamp it takes that slot, keeping the stored
    timestamp (so commits faster than min-distance still open a new slot
    once min-distance has passed since the slot's first); else a new slot.
    window holds (offset, timestamp) pairs, oldest first."""
    if window and timestamp - window[-1][1] < min_distance_ms:
        window[-1] = (offset, window[-1][1])
    else:
        window.append((offset, timestamp))


@dataclass(frozen=True)
class Commit:
    offset: int
    timestamp: int          # ms
    lag: int | None         # lag when committed; None when the log end was unknown then


def is_lag_always_not_zero(window: list[Commit], allowed_lag: int) -> bool:
    return not any(c.lag is not None and c.lag <= allowed_lag for c in window)


def rewind_index(window: list[Commit]) -> int:
    for i in range(1, len(window)):
        if window[i].offset < window[i - 1].offset:
            return i
    return -1


def rewind_recovered(window: list[Commit], index: int) -> bool:
    previous = window[index - 1].offset
    return any(c.offset >= previous for c in window[index:])


def offsets_stopped(window: list[Commit], now_ms: int) -> bool:
    first, last = window[0].timestamp, window[-1].timestamp
    return now_ms - last > last - first


def offsets_stalled(window: list[Commit]) -> bool:
    return all(window[i].offset == window[i - 1].offset for i in range(1, len(window)))


def lag_not_decreasing(window: list[Commit]) -> bool:
    last = None
    for c in window:
        if c.lag is not None:
            if last is not None and c.lag < last:
                return False
            last = c.lag
    return True


def recent_lag_zero(window: list[Commit], broker_offsets: list[int]) -> bool:
    last = window[-1].offset
    return any(b <= last for b in broker_offsets)


def partition_status(window: list[Commit], broker_offsets: list[int], current_lag: int,
                     now_ms: int, allowed_lag: int = 0) -> int:
    """calculatePartitionStatus over a non-empty window (oldest first)."""
    if current_lag > allowed_lag:
        if offsets_stopped(window, now_ms) and not recent_lag_zero(window, broker_offsets):
            return STOP
        idx = rewind_index(window)
        if idx > 0 and not rewind_recovered(window, idx):
            return REWIND
        if is_lag_always_not_zero(window, allowed_lag):
            if offsets_stalled(window):
                return STALL
            if lag_not_decreasing(window):
                return WARN
    return OK


def evaluate_partition(window: list[Commit], broker_offsets: list[int], current_lag: int,
                       now_ms: int, intervals: int = DEFAULT_INTERVALS, allowed_lag: int = 0,
                       minimum_complete: float = 0.0) -> tuple[int, float]:
    """(status, complete) as evaluatePartitionStatus gives them."""
    if not window:
        return OK, 0.0
    window = window[-intervals:]
    complete = min(1.0, len(window) / intervals)
    if complete >= minimum_complete:
        return partition_status(window, broker_offsets, current_lag, now_ms, allowed_lag), complete
    return OK, complete


def group_status(partition_statuses: list[int]) -> int:
    status = OK
    for s in partition_statuses:
        if s > status:
            status = ERR if s > ERR else s
    return status


class LogEndHistory:
    """Where a partition's log ended at time t: the largest end observed at or before t."""

    def __init__(self, observations) -> None:
        obs = sorted((ts, end) for end, ts in observations)
        self.times: list[int] = []
        self.ends: list[int] = []
        best = None
        for ts, end in obs:
            best = end if best is None else max(best, end)
            if self.times and self.times[-1] == ts:
                self.ends[-1] = best
            else:
                self.times.append(ts)
                self.ends.append(best)

    def at(self, t: int) -> int | None:
        i = bisect.bisect_right(self.times, t)
        return self.ends[i - 1] if i else None

    def latest(self) -> int | None:
        return self.ends[-1] if self.ends else None

    def samples(self, now_ms: int, intervals: int = DEFAULT_INTERVALS,
                refresh_ms: int = DEFAULT_REFRESH_MS) -> list[int]:
        """The log ends Burrow would hold at now: one per offset refresh, oldest first."""
        out = []
        for k in range(intervals - 1, -1, -1):
            v = self.at(now_ms - k * refresh_ms)
            if v is not None:
                out.append(v)
        return out


def commit_window(events, intervals: int = DEFAULT_INTERVALS,
                  min_distance_ms: int = DEFAULT_MIN_DISTANCE_S * 1000):
    """The commits Burrow's ring would hold, from (offset, timestamp, tombstone)
    events in log order: the last `intervals` slots after the last tombstone
    (add_commit's min-distance rule).  None when the latest event is a
    tombstone (the offset is gone)."""
    out: list = []
    for offset, ts, tomb in events:
        if tomb:
            out = []
        else:
            add_commit(out, offset, ts, min_distance_ms)
    if events and events[-1][2]:
        return None
    return out[-intervals:]


def lag_seconds(window: list[Commit], lag: int | None) -> float | None:
    """Seconds the consumer needs to catch up at the rate it consumed over the window."""
    if lag is None:
        return None
    if lag == 0:
        return 0.0
    if len(window) < 2:
        return None
    first, last = window[0], window[-1]
    if last.timestamp <= first.timestamp or last.offset <= first.offset:
        return None
    rate = (last.offset - first.offset) / ((last.timestamp - first.timestamp) / 1000.0)
    return lag / rate
