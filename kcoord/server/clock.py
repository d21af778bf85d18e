"""The server's one clock: what the coordinator runtime, its timers, the
transaction coordinator and log retention read as "now" and arm timers on.

`WallClock` is the default (wall time, timers on the running event loop).
`VirtualClock` stands still until `advance(seconds)` (kcoord.testing's
virtual time): its timers fire in deadline order, each at its own time.
Compiled (native/build.py): the write path reads the time once per
request (a commit's timestamp), about a microsecond interpreted.
Timers that are I/O mechanics (the group commit's linger, a replicated
write's timeout, long-poll fetches) stay on the event loop: they are not
application time and must run while the virtual clock stands still.
"""
from __future__ import annotations

import asyncio
import heapq
import logging
import time as _time_module
from itertools import count
from typing import Callable

log = logging.getLogger("kcoord.clock")


# How fast the server's clock closes a gap to the wall clock: 100 ms a
# second.  A step of the wall clock (an NTP step, an operator, a VM resumed,
# a clock fault) is not taken at once: member sessions (10 s, heartbeats
# every 1-3 s), rebalance, transaction and share-lock deadlines and the
# ISR's lag timing are times on this clock, so a step of 30 s would expire
# every session armed before it (forward) or after it (backward, at the step
# back) although no member missed a heartbeat.  At 10% a deadline moves by
# at most 10% of its length; a 2-minute step is closed in 20 minutes.
SLEW = 0.1
# A gap this large (s) is taken at once (a clock set at boot, hours off):
# slewing it would leave timestamps wrong for days; sessions may expire.
STEP_AT_ONCE_S = 600.0
NOTICE_S = 1.0  # a gap logged when the slewing starts


class WallClock:
    """Wall time as the server's timers may use it; timers on the running loop.

    It runs at the monotonic clock's rate and follows the wall clock: when
    the two agree within the slew of the time elapsed since the last read it
    is the wall clock exactly; after a step it closes the gap at SLEW (as
    adjtime slews), so it neither jumps nor runs backwards (but for a step
    over STEP_AT_ONCE_S).  Timestamps (commit times, log retention) so stay
    wall time, and deadlines keep their lengths across clock faults
    (Jepsen's clock nemesis steps the wall clock only; so does tests/faults'
    libfaketime)."""

    virtual = False

    def __init__(self, wall: Callable[[], float] = _time_module.time,
                 mono: Callable[[], float] = _time_module.monotonic,
                 slew: float = SLEW) -> None:
        self._wall, self._mono, self._slew = wall, mono, slew
        # one tuple, replaced whole: a read from another thread sees a
        # consistent pair (at worst a read slightly behind the newest)
        self._last = (mono(), wall())
        self._slewing = False

    def time(self) -> float:
        """Seconds since the epoch, as said above."""
        mono = self._mono()
        wall = self._wall()
        last_mono, last_now = self._last
        elapsed = mono - last_mono
        now = last_now + elapsed
        limit = elapsed * self._slew
        gap = wall - now
        if -limit <= gap <= limit:
            now = wall
            self._slewing = False
        else:
            now = self._close(now, gap, limit)
        self._last = (mono, now)
        return now

    def _close(self, now: float, gap: float, limit: float) -> float:
        if abs(gap) >= STEP_AT_ONCE_S:
            log.warning("the wall clock stepped by %+.1f s: taken at once (over %.0f s); "
                        "deadlines armed before it moved with it", gap, STEP_AT_ONCE_S)
            return now + gap
        if not self._slewing and abs(gap) >= NOTICE_S:
            self._slewing = True
            log.info("the wall clock stepped by %+.1f s: slewing to it at %.0f%%",
                     gap, self._slew * 100)
        return now + limit if gap > 0 else now - limit

    def ms(self) -> int:
        return int(self.time() * 1000)

    def call_later(self, delay_s: float, fn: Callable, *args):
        """A handle with .cancel()."""
        return asyncio.get_running_loop().call_later(delay_s, fn, *args)


class LoopClock(WallClock):
    """The running loop's clock as wall time (a simulation's virtual loop)."""

    def __init__(self, ms: Callable[[], int]) -> None:
        self._ms = ms

    def time(self) -> float:
        return self._ms() / 1000.0

    def ms(self) -> int:
        return self._ms()


class _Timer:
    __slots__ = ("when", "fn", "args", "cancelled")

    def __init__(self, when: int, fn: Callable, args: tuple) -> None:
        self.when = when
        self.fn = fn
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class VirtualClock(WallClock):
    """Time that moves only by advance(); used from the server's loop thread."""

    virtual = True

    def __init__(self, start_ms: int | None = None) -> None:
        self.now_ms = int(_time_module.time() * 1000) if start_ms is None else start_ms
        self._heap: list[tuple[int, int, _Timer]] = []
        self._seq = count()

    def time(self) -> float:  # type: ignore[override]
        # +0.25 ms: int(time() * 1000) gives now_ms back despite float rounding
        return (self.now_ms + 0.25) / 1000.0

    def ms(self) -> int:
        return self.now_ms

    def call_later(self, delay_s: float, fn: Callable, *args) -> _Timer:
        timer = _Timer(self.now_ms + max(0, int(delay_s * 1000 + 0.5)), fn, args)
        heapq.heappush(self._heap, (timer.when, next(self._seq), timer))
        return timer

    def pending(self) -> list[int]:
        """The deadlines (ms) of the timers armed, soonest first."""
        return sorted(when for when, _, t in self._heap if not t.cancelled)

    def stall(self, seconds: float) -> None:
        """The process stops for `seconds` (SIGSTOP, a VM pause): time moves
        and nothing runs; the timers due meanwhile fire late, at the next
        advance() (advance(0): at once, before any request sent meanwhile)."""
        self.now_ms += int(round(seconds * 1000))

    def advance(self, seconds: float) -> int:
        """Move the clock by `seconds`, firing every timer due on the way in
        deadline order, each with the clock at its deadline (a timer armed by
        one that fires is fired too if due).  -> how many fired."""
        target = self.now_ms + int(round(seconds * 1000))
        fired = 0
        heap = self._heap
        while heap and heap[0][0] <= target:
            when, _, timer = heapq.heappop(heap)
            if timer.cancelled:
                continue
            self.now_ms = max(self.now_ms, when)
            fired += 1
            try:
                timer.fn(*timer.args)
            except Exception:  # as the event loop: one timer's failure stops no other
                log.exception("timer %r failed", timer.fn)
        self.now_ms = max(self.now_ms, target)
        return fired
