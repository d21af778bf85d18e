"""What an operator sees of groups: one log line per rebalance start and end,
per member removed by session expiry, per shard load; and, when the HTTP
endpoint is on, the counters behind /metrics (ServerMetrics).

The coordinator core calls these through its observer (coordinator/
observer.py); the runtime and the network layer call the few others
(request_done, appended, synced, shard_loaded, offsets_committed,
offsets_expired).  Hot-path calls only bump plain ints and a bucket of a
plain histogram: prometheus_client objects are built at scrape time only.
"""
from __future__ import annotations

import logging
import time
from bisect import bisect_left
from collections import deque

from ..coordinator.observer import CoordinatorObserver
from ..protocol.api import APIS

log = logging.getLogger("kcoord.groups")

# seconds; Kafka's rebalance times run from milliseconds to minutes
REBALANCE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
# request, append and fsync latencies
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                   0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
LOAD_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0)
RECENT_REBALANCES = 50


class Histogram:
    """Counts per bucket (v <= bound; the last one is +Inf) and a sum.
    observe() is one bisect and two additions."""
    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float, n: int = 1) -> None:
        self.counts[bisect_left(self.bounds, value)] += n
        self.sum += value * n

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        """[(le, cumulative count)] as Prometheus wants them, ending with +Inf."""
        out, total = [], 0
        for bound, n in zip(self.bounds, self.counts):
            total += n
            out.append((repr(float(bound)), total))
        out.append(("+Inf", total + self.counts[-1]))
        return out


class GroupEventLog(CoordinatorObserver):
    """Logs what an operator needs; remembers open rebalances for their duration."""

    def __init__(self, clock=time.monotonic) -> None:
        self.clock = clock
        self.open: dict[str, tuple[float, str, int, str]] = {}  # group -> (start, protocol, epoch, reason)

    def rebalance_started(self, group_id: str, protocol: str, epoch: int, members: int,
                          reason: str) -> None:
        previous = self.open.get(group_id)
        start = previous[0] if previous is not None else self.clock()
        self.open[group_id] = (start, protocol, epoch, reason)
        log.info("group %s (%s): rebalance started at %s %d with %d members; reason: %s",
                 group_id, protocol, "generation" if protocol == "classic" else "epoch", epoch,
                 members, reason or "unknown")

    def rebalance_completed(self, group_id: str, protocol: str, epoch: int,
                            members: int) -> float | None:
        started = self.open.pop(group_id, None)
        took = None if started is None else self.clock() - started[0]
        log.info("group %s (%s): rebalance completed at %s %d with %d members%s", group_id,
                 protocol, "generation" if protocol == "classic" else "epoch", epoch, members,
                 "" if took is None else f" in {took:.3f}s")
        return took

    def member_expired(self, group_id: str, member_id: str, protocol: str) -> None:
        log.info("group %s (%s): member %s removed: its session expired", group_id, protocol,
                 member_id)

    def shard_loaded(self, index: int, records: int, seconds: float) -> None:
        log.info("loaded shard %d: %d records in %.2fs", index, records, seconds)

    # only counted by ServerMetrics
    def offsets_committed(self, count: int) -> None:
        pass

    def offsets_expired(self, count: int) -> None:
        pass


class ServerMetrics(GroupEventLog):
    """GroupEventLog plus the counters and histograms /metrics publishes."""

    def __init__(self, clock=time.monotonic) -> None:
        super().__init__(clock)
        self.rebalances_started: dict[str, int] = {"classic": 0, "consumer": 0}
        self.rebalances_completed: dict[str, int] = {"classic": 0, "consumer": 0}
        self.rebalance_seconds = {p: Histogram(REBALANCE_BUCKETS) for p in ("classic", "consumer")}
        self.session_expirations: dict[str, int] = {"classic": 0, "consumer": 0}
        self.recent: deque = deque(maxlen=RECENT_REBALANCES)  # for the status page
        self.offset_commits = 0
        self.offset_expirations = 0
        self.shard_load_seconds = Histogram(LOAD_BUCKETS)
        self.shard_load_max = 0.0
        # requests per api key (the network layer adds one per request: a
        # list indexed by the key), and a Histogram of seconds per api key
        # from the requests it times (1 in 16, network.TIMING_MASK)
        self.request_counts = [0] * (max(APIS) + 1)  # every served key is in APIS
        self.requests: dict[int, Histogram] = {}
        self.append_seconds = Histogram(LATENCY_BUCKETS)
        self.fsync_seconds = Histogram(LATENCY_BUCKETS)

    # -------------------------------------------------------------- core events
    def rebalance_started(self, group_id, protocol, epoch, members, reason) -> None:
        super().rebalance_started(group_id, protocol, epoch, members, reason)
        self.rebalances_started[protocol] = self.rebalances_started.get(protocol, 0) + 1

    def rebalance_completed(self, group_id, protocol, epoch, members) -> float | None:
        reason = self.open.get(group_id, (0, "", 0, ""))[3]
        took = super().rebalance_completed(group_id, protocol, epoch, members)
        self.rebalances_completed[protocol] = self.rebalances_completed.get(protocol, 0) + 1
        if took is not None:
            self.rebalance_seconds[protocol].observe(took)
        self.recent.append({"group": group_id, "protocol": protocol, "epoch": epoch,
                            "members": members, "reason": reason, "seconds": took,
                            "at": time.time()})  # wall time: when a person saw it happen
        return took

    def member_expired(self, group_id, member_id, protocol) -> None:
        super().member_expired(group_id, member_id, protocol)
        self.session_expirations[protocol] = self.session_expirations.get(protocol, 0) + 1

    # -------------------------------------------------------------- runtime events
    def shard_loaded(self, index: int, records: int, seconds: float) -> None:
        super().shard_loaded(index, records, seconds)
        self.shard_load_seconds.observe(seconds)
        self.shard_load_max = max(self.shard_load_max, seconds)

    def offsets_committed(self, count: int) -> None:
        self.offset_commits += count

    def offsets_expired(self, count: int) -> None:
        self.offset_expirations += count

    def request_done(self, api_key: int, seconds: float) -> None:
        hist = self.requests.get(api_key)
        if hist is None:
            hist = self.requests[api_key] = Histogram(LATENCY_BUCKETS)
        hist.counts[bisect_left(hist.bounds, seconds)] += 1
        hist.sum += seconds

    def appended(self, seconds: float) -> None:
        self.append_seconds.observe(seconds)

    def synced(self, seconds: float) -> None:
        self.fsync_seconds.observe(seconds)
