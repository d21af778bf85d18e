"""The one fsync batcher: many logs made durable together, many waiters
released by one fsync per log.

Two ways in:
- `sync(logs) -> future` / `sync_then(logs, done)`: adaptive rounds, shared
  by every writer (the data plane's acks=-1 Produce, transaction markers, a
  follower's fetched records, and the coordinators' writes through their
  Durability: `__consumer_offsets`, `__transaction_state`,
  `__share_group_state`).  A round starts once the loop has run the work
  already queued on it (every
  request read in that iteration has appended), with no linger on an idle
  path; its logs are fsynced in worker threads while the loop serves, and
  at most one round is under way: whatever asks meanwhile joins the next
  one, which starts as soon as it is done (group commit: under load many
  writes share one fsync per log).  The futures of a round are released
  together.
- `sync_in_threads(logs, done)`: each log fsynced in a worker thread, all
  at once, off the loop: concurrent fsyncs of different files overlap (the
  filesystem merges them into few journal commits), so a round of many
  logs costs about one fsync of wall time and the loop keeps serving;
  `done(errors)` runs on the loop once every flush has finished, errors[i]
  None or what flushing logs[i] raised (the primitive under the rounds).
"""
from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable


log = logging.getLogger("kcoord.fsync")


class FsyncBatcher:
    def __init__(self, linger_ms: float = 0.0, threads: int = 16) -> None:
        self.linger = linger_ms / 1000.0
        self.threads = threads
        self._dirty: dict[int, object] = {}
        self._callbacks: list = []  # of the next round: callback(failed: id(log) -> error)
        self._scheduled = False
        self._in_flight = False  # a round's fsyncs are under way in worker threads
        self._executor: ThreadPoolExecutor | None = None
        self.closed = False

    # ------------------------------------------------ adaptive rounds
    def sync(self, logs) -> asyncio.Future:
        """A future that completes once every log in `logs` is on disk (or
        fails with the error of the first of them whose fsync failed)."""
        logs = list(logs)
        fut = asyncio.get_running_loop().create_future()

        def settle(failed: dict) -> None:
            if fut.done():
                return
            error = next((failed[id(p)] for p in logs if id(p) in failed), None)
            if error is None:
                fut.set_result(None)
            else:  # a failed fsync never acknowledges what it covered
                fut.set_exception(error)

        self._join(logs, settle)
        return fut

    def sync_then(self, logs: list, done: Callable[[list], None]) -> None:
        """`done(errors)` on the loop once `logs` are on disk: errors[i] None
        or what flushing logs[i] raised.  The caller (a coordinator's group
        commit) has coalesced its writes already: with no round under way
        its round starts now, not one loop iteration later (under load an
        iteration serves many requests: waiting for it halved the rounds);
        with one under way it joins the next, shared with everyone's."""
        self._join(logs, lambda failed: done([failed.get(id(p)) for p in logs]))
        if not self._in_flight:
            self._run()

    def _join(self, logs, callback: Callable[[dict], None]) -> None:
        for plog in logs:
            self._dirty[id(plog)] = plog
        self._callbacks.append(callback)
        if not self._scheduled and not self._in_flight:
            self._scheduled = True
            loop = asyncio.get_running_loop()
            if self.linger > 0:
                loop.call_later(self.linger, self._run)
            else:
                loop.call_soon(self._run)   # behind the work already queued: the queue drained

    def _run(self) -> None:
        self._scheduled = False
        if self._in_flight:
            return
        dirty, callbacks = list(self._dirty.values()), self._callbacks
        self._dirty, self._callbacks = {}, []
        if not dirty:
            self._release(callbacks, dirty, [])
            return
        if self.closed:  # stopping: no worker threads any more, fsync right here
            self._release(callbacks, dirty, self._flush_here(dirty))
            return
        self._in_flight = True
        self.sync_in_threads(dirty, lambda errors: self._round_done(callbacks, dirty, errors))

    @staticmethod
    def _flush_here(logs: list) -> list:
        errors: list = [None] * len(logs)
        for i, plog in enumerate(logs):
            try:
                plog.flush()
            except Exception as exc:
                errors[i] = exc
        return errors

    def _round_done(self, callbacks: list, logs: list, errors: list) -> None:
        self._in_flight = False
        if self._callbacks and not self._scheduled:
            self._run()     # what asked meanwhile has waited long enough: its fsyncs start now
        self._release(callbacks, logs, errors)

    @staticmethod
    def _release(callbacks: list, logs: list, errors: list) -> None:
        failed = {id(plog): e for plog, e in zip(logs, errors) if e is not None}
        for error in failed.values():
            log.error("fsync failed: %r", error)
        for callback in callbacks:
            try:
                callback(failed)
            except Exception:  # one writer's failure leaves the others answered
                log.exception("an fsync round's callback failed")

    # ------------------------------------------------ in worker threads, all at once
    def sync_in_threads(self, logs: list, done: Callable[[list], None]) -> None:
        loop = asyncio.get_running_loop()
        if not logs:
            loop.call_soon(done, [])
            return
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
