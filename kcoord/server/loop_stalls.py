"""Reports stretches in which the event loop ran nothing, and why.

A node whose loop stops turning for seconds answers nobody (and past TTL/2
its lease is refreshed no more); after a fault heals that looks like a slow
recovery.  A
thread of its own tells two causes apart: the whole process was frozen
(SIGSTOP, the host not running it: the thread itself woke late) or the
loop was held by one callback (the thread ran on time; the loop did not),
in which case the main thread's stack at that moment says by what.  A
garbage collection holds the interpreter lock for its whole length, which
looks like either (a frozen process, when this thread waits for the lock):
a report names the collections of over SLOW_GC_S that ended meanwhile."""
from __future__ import annotations

import asyncio
import collections
import gc
import logging
import sys
import threading
import time
import traceback

log = logging.getLogger("kcoord.server.stalls")

TICK_S = 0.25        # the loop's heartbeat
REPORT_AFTER_S = 1.0  # a loop silent this long is reported
SLOW_GC_S = 0.2       # a garbage collection this long is named in a report


class LoopStallReporter:
    def __init__(self, loop: asyncio.AbstractEventLoop, report_after_s: float = REPORT_AFTER_S,
                 clock=time.monotonic) -> None:
        self.loop, self.report_after_s, self.clock = loop, report_after_s, clock
        self.loop_seen = clock()
        self._loop_thread = threading.get_ident()   # made on the loop's own thread
        self._stop = threading.Event()
        self._handle: asyncio.TimerHandle | None = None
        self._thread = threading.Thread(target=self._watch, name="kcoord-loop-stalls",
                                        daemon=True)
        self._gc_began = 0.0
        self._slow_gcs: collections.deque = collections.deque(maxlen=8)  # (end, took, gen)

    def start(self) -> "LoopStallReporter":
        self._tick()
        gc.callbacks.append(self._on_gc)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        if self._handle is not None:
            self._handle.cancel()

    def _tick(self) -> None:
        self.loop_seen = self.clock()
        self._handle = self.loop.call_later(TICK_S, self._tick)

    def _watch(self) -> None:
        stalled_since = None    # loop_seen of the stall being reported
        where = ""
        last_wake = self.clock()
        while not self._stop.wait(TICK_S):
            now = self.clock()
            frozen = now - last_wake - TICK_S   # how late this thread itself woke
            last_wake = now
            if frozen > self.report_after_s:
                log.warning("the whole process ran nothing for %.1f s (stopped, the host did "
                            "not run it, or a call held the interpreter lock)%s", frozen,
                            self._gcs_since(now - frozen - TICK_S))
            silent = now - self.loop_seen
            if stalled_since is None and silent > self.report_after_s + TICK_S and \
                    frozen < silent - TICK_S:
                stalled_since, where = self.loop_seen, self._main_stack()
            elif stalled_since is not None and self.loop_seen != stalled_since:
                log.warning("the event loop ran nothing for %.1f s%s; it was in:\n%s",
                            self.loop_seen - stalled_since - TICK_S,
                            self._gcs_since(stalled_since), where)
                stalled_since = None

    def _on_gc(self, phase: str, info: dict) -> None:
        """gc.callbacks: note a collection over SLOW_GC_S (nothing logged here:
        the collector is running)."""
        if phase == "start":
            self._gc_began = self.clock()
            return
        took = self.clock() - self._gc_began
        if took >= SLOW_GC_S:
            self._slow_gcs.append((self.clock(), took, info.get("generation")))

    def _gcs_since(self, since: float) -> str:
        found = [(took, gen) for end, took, gen in list(self._slow_gcs) if end >= since]
        if not found:
            return ""
        return " (garbage collections meanwhile: " + ", ".join(
            f"generation {gen} {took:.1f} s" for took, gen in found) + ")"

    def _main_stack(self) -> str:
        frame = sys._current_frames().get(self._loop_thread)
        if frame is None:
            return "  (no stack)"
        return "".join(traceback.format_stack(frame, limit=12)).rstrip()
