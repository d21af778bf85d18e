"""The one fsync batcher: many logs made durable together, many waiters
released by one fsync per log.

Two ways in, for two kinds of writer:
- `sync(logs) -> future`: every log asked for during one loop iteration
  is fsynced once, on the loop, after all the requests read in that
  iteration were appended; the futures are then released together (the
  data plane's acks=-1 Produce and transaction markers).
- `sync_in_threads(logs, done)`: each log fsynced in a worker thread, all
  at once, off the loop: concurrent fsyncs of different files overlap (the
  filesystem merges them into few journal commits), so a round of many
  logs costs about one fsync of wall time and the loop keeps serving;
  `done(errors)` runs on the loop once every flush has finished, errors[i]
  None or what flushing logs[i] raised (the coordinators' group-commit
  rounds, through their Durability).
"""
from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from .waiters import Waiters

log = logging.getLogger("kcoord.fsync")


class FsyncBatcher:
    def __init__(self, linger_ms: float = 0.0, threads: int = 16) -> None:
        self.linger = linger_ms / 1000.0
        self.threads = threads
        self._dirty: dict[int, object] = {}
        self._waiters = Waiters()
        self._scheduled = False
        self._executor: ThreadPoolExecutor | None = None
        self.closed = False

    # ------------------------------------------------ on the loop, per iteration
    def sync(self, logs) -> asyncio.Future:
        """A future that completes once every log in `logs` is on disk."""
        loop = asyncio.get_running_loop()
        for plog in logs:
            self._dirty[id(plog)] = plog
        fut = self._waiters.wait()
        if not self._scheduled:
            self._scheduled = True
            if self.linger > 0:
                loop.call_later(self.linger, self._run)
            else:
                loop.call_soon(self._run)
        return fut

    def _run(self) -> None:
        dirty, waiters = self._dirty, self._waiters
        self._dirty, self._waiters, self._scheduled = {}, Waiters(), False
        try:
            for plog in dirty.values():
                plog.flush()
        except Exception as exc:  # a failed fsync must fail every waiter, never ack
            log.exception("fsync failed")
            waiters.fail(exc)
            return
        waiters.wake()

    # ------------------------------------------------ in worker threads, all at once
    def sync_in_threads(self, logs: list, done: Callable[[list], None]) -> None:
        loop = asyncio.get_running_loop()
        errors: list = [None] * len(logs)
        remaining = [len(logs)]
        lock = threading.Lock()

        def run(i: int, plog) -> None:
            try:
                plog.flush()
            except BaseException as exc:  # reported to `done`, never swallowed
                errors[i] = exc
            with lock:
                remaining[0] -= 1
                last = remaining[0] == 0
            if last:
                try:
                    loop.call_soon_threadsafe(done, errors)
                except RuntimeError:  # the loop is closed: the server is gone
                    pass

        executor = self._executor
        if executor is None:
            executor = self._executor = ThreadPoolExecutor(self.threads,
                                                           thread_name_prefix="kcoord-fsync")
        for i, plog in enumerate(logs):
            executor.submit(run, i, plog)

    def close(self) -> None:
        """Wait for the threaded flushes under way; later syncs are the caller's to do."""
        self.closed = True
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
