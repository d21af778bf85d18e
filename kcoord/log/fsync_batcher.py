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
  path; its logs are fsynced in worker threads while the loop serves.  At
  most one round is under way per log, not per node: a log whose fsync is
  under way makes whoever asks for it meanwhile join its next round, which
  starts as soon as that fsync is done (group commit: under load many
  writes share one fsync per log), while a log with no fsync under way
  starts at once (a leader's write never waits behind the same node's
  follower fsync of another log).  An ask is released once each of its
  logs has been fsynced by a round started after it.
- With `inline_quiet` (a single node), a round of one log while no other
  fsync is under way is flushed on the loop itself and its waiters released
  at once: cheaper than the two thread hand-offs for a lone client's
  durable step.
- `sync_in_threads(logs, done)`: the logs fsynced in worker threads, off
  the loop, in at most FSYNC_JOBS jobs at once (a round of many logs is
  split among them, each job fsyncing its share one after the other):
  concurrent fsyncs of different files overlap, so a round costs a few
  fsyncs of wall time and the loop keeps serving; `done(errors)` runs on
  the loop once every flush has finished, errors[i] None or what flushing
  logs[i] raised (the primitive under the rounds).
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable


log = logging.getLogger("kcoord.fsync")

# a quiet round's fsync runs on the loop only while recent fsyncs took less
# (about 0.15 ms on an idle virtio disk; a loaded one takes several ms)
INLINE_MAX_S = 0.0005

# Worker-thread jobs of one round at most.  Every job is a hand-off between
# threads (a wake-up, and the GIL taken when it starts while the loop holds
# it): with a job per log, the group commit rounds of the OffsetCommit
# bench (40-odd shards each) made 0.33-0.43 context switches and 0.73-0.99
# system calls per commit, and the threads' futex calls cost half as much
# CPU as their fsyncs; with 4 jobs, 0.29-0.32 and 0.61-0.69.  Fsyncs of
# different files still overlap between the jobs; within a job they follow
# one another.
FSYNC_JOBS = 4


class _Waiter:
    """One ask: its logs not yet fsynced by a round started after it
    (`pending`), those of them no round has taken yet (`unstarted`), and
    the errors of its logs' failed fsyncs."""

    def __init__(self, callback: Callable[[dict], None], ids: set) -> None:
        self.callback = callback
        self.pending = ids
        self.unstarted = set(ids)
        self.failed: dict = {}


class FsyncBatcher:
    def __init__(self, linger_ms: float = 0.0, threads: int = 16,
                 inline_quiet: bool = False) -> None:
        self.linger = linger_ms / 1000.0
        self.threads = threads
        self.inline_quiet = inline_quiet  # a quiet round's one fsync on the loop (_run)
        self.fsync_s = 0.0  # recent fsyncs' time, seconds (a moving average)
        self._dirty: dict[int, object] = {}     # asked for, not yet in a round started since
        self._waiting: list[_Waiter] = []       # asks with logs no round has taken yet
        self._busy: set[int] = set()            # logs whose fsync is under way
        self._scheduled = False
        self._executor: ThreadPoolExecutor | None = None
        self.closed = False

    @property
    def in_flight(self) -> bool:
        """Is any log's fsync under way?"""
        return bool(self._busy)

    # ------------------------------------------------ adaptive rounds
    def sync(self, logs) -> asyncio.Future:
        """A future that completes once every log in `logs` is on disk (or
        fails with the error of the first of them whose fsync failed)."""
        fut = asyncio.get_running_loop().create_future()

        def settle(error: BaseException | None) -> None:
            if fut.done():
                return
            if error is None:
                fut.set_result(None)
            else:  # a failed fsync never acknowledges what it covered
                fut.set_exception(error)

        self.sync_call(logs, settle)
        return fut

    def sync_call(self, logs, done: Callable[[BaseException | None], None]) -> None:
        """`sync`, callback style (no future, no task to await it): done(None)
        on the loop once every log in `logs` is on disk, or done(the error of
        the first of them whose fsync failed)."""
        logs = list(logs)
        self._join(logs, lambda failed: done(
            next((failed[id(p)] for p in logs if id(p) in failed), None)))

    def sync_then(self, logs: list, done: Callable[[list], None]) -> None:
        """`done(errors)` on the loop once `logs` are on disk: errors[i] None
        or what flushing logs[i] raised.  The caller (a coordinator's group
        commit) has coalesced its writes already: its logs with no fsync
        under way start now, not one loop iteration later (under load an
        iteration serves many requests: waiting for it halved the rounds);
        a log with one under way joins its next, shared with everyone's."""
        # (_join also queues a round for the loop's next turn, which mostly
        # finds nothing to do; leaving it out cost CPU and rate in paired
        # one-node transaction runs, 7 of 8 pairs; likely because with a
        # callback queued the loop polls once more without blocking and finds
        # the client's next request there: one sleep and wake-up fewer)
        self._join(logs, lambda failed: done([failed.get(id(p)) for p in logs]))
        self._run()

    def _join(self, logs, callback: Callable[[dict], None]) -> None:
        for plog in logs:
            self._dirty[id(plog)] = plog
        self._waiting.append(_Waiter(callback, {id(p) for p in logs}))
        if not self._scheduled:
            self._scheduled = True
            loop = asyncio.get_running_loop()
            if self.linger > 0:
                loop.call_later(self.linger, self._run)
            else:
                loop.call_soon(self._run)   # behind the work already queued: the queue drained

    def _run(self) -> None:
        """Start a round of every asked-for log with no fsync under way (a
        log's own rounds never overlap: each round of it covers whatever was
        asked during the one before, so many writes share one fsync)."""
        self._scheduled = False
        start = [p for i, p in self._dirty.items() if i not in self._busy]
        ids = {id(p) for p in start}
        taken, still, ready = [], [], []
        for w in self._waiting:
            mine = w.unstarted & ids
            if mine:
                w.unstarted -= mine
                taken.append((w, mine))
            if w.unstarted:
                still.append(w)
            elif not w.pending:
                ready.append(w)     # asked with no logs: nothing to wait for
        self._waiting = still
        self._release(ready)
        if not start:
            return
        for i in ids:
            del self._dirty[i]
        if self.closed:  # stopping: no worker threads any more, fsync right here
            self._round_done(ids, taken, start, self._flush_here(start))
            return
        if (self.inline_quiet and len(start) == 1 and not self._busy
                and self.fsync_s < INLINE_MAX_S):
            # a quiet round: one log, no other fsync under way.  Handing it to
            # a worker thread costs two cross-thread wake-ups (futex, then the
            # loop's self-pipe): on a 2-vCPU host ~55 us of CPU per fsync and
            # a scheduling delay on every durable step of a lone client (a
            # transaction makes seven in a row, bench/results/transactions.md).
            # Flushed here, on the loop, it costs the fsync alone; a round of
            # several logs, or one started while another log's fsync is under
            # way, still goes to the threads so their fsyncs overlap, and so
            # does every round while recent fsyncs were slow (a busy disk:
            # then the hand-off is cheap beside the fsync, and the loop must
            # serve meanwhile; a lone client's requests also overlap, e.g. a
            # Produce beside an AddOffsetsToTxn).  Only a single node asks for
            # this (app.py): a cluster's loop must keep its lease and its
            # followers' fetches going through any fsync.
            self._round_done(ids, taken, start, self._timed_flush(start[0]))
            return
        self._busy |= ids
        self.sync_in_threads(start, lambda errors: self._round_done(ids, taken, start, errors))

    def _timed_flush(self, plog) -> list:
        """fsync one log here -> [its error or None], its time in `fsync_s`."""
        t0 = time.perf_counter()
        errors = self._flush_here([plog])
        self._note_fsync(time.perf_counter() - t0)
        return errors

    def _note_fsync(self, seconds: float) -> None:
        # a moving average over about the last eight fsyncs; a race between
        # worker threads loses an update at worst, which is harmless
        self.fsync_s += (seconds - self.fsync_s) * 0.125

    @staticmethod
    def _flush_here(logs: list) -> list:
        errors: list = [None] * len(logs)
        for i, plog in enumerate(logs):
            try:
                plog.flush()
            except Exception as exc:
                errors[i] = exc
        return errors

    def _round_done(self, ids: set, taken: list, logs: list, errors: list) -> None:
        self._busy -= ids
        failed = {id(plog): e for plog, e in zip(logs, errors) if e is not None}
        for error in failed.values():
            log.error("fsync failed: %r", error)
        if any(i not in self._busy for i in self._dirty):
            self._run()     # what asked meanwhile has waited long enough: its fsyncs start now
        done = []
        for w, mine in taken:
            w.pending -= mine
            for i in mine & failed.keys():
                w.failed[i] = failed[i]
            if not w.pending:
                done.append(w)
        self._release(done)

    @staticmethod
    def _release(waiters: list) -> None:
        for w in waiters:
            try:
                w.callback(w.failed)
            except Exception:  # one writer's failure leaves the others answered
                log.exception("an fsync round's callback failed")

    # ------------------------------------------------ in worker threads, all at once
    def sync_in_threads(self, logs: list, done: Callable[[list], None]) -> None:
        loop = asyncio.get_running_loop()
        if not logs:
            loop.call_soon(done, [])
            return
        errors: list = [None] * len(logs)
        jobs = min(len(logs), FSYNC_JOBS)
        remaining = [jobs]
        lock = threading.Lock()

        def run(first: int) -> None:
            # logs first, first + jobs, ...: the round's logs dealt out evenly
            for i in range(first, len(logs), jobs):
                t0 = time.perf_counter()
                try:
                    logs[i].flush()
                except BaseException as exc:  # reported to `done`, never swallowed
                    errors[i] = exc
                self._note_fsync(time.perf_counter() - t0)
            with lock:
                remaining[0] -= 1
                last = remaining[0] == 0
            if last:
                try:
                    loop.call_soon_threadsafe(done, errors)
                except RuntimeError:  # the loop is closed: the server is gone
                    pass

        executor = self._pool()
        for first in range(jobs):
            executor.submit(run, first)

    def call_in_thread(self, fn: Callable[[], None]) -> asyncio.Future:
        """fn() in a worker thread beside the fsyncs (a small durable write,
        such as a new leader's epoch checkpoint): the loop keeps serving."""
        return asyncio.wrap_future(self._pool().submit(fn), loop=asyncio.get_running_loop())

    def _pool(self) -> ThreadPoolExecutor:
        executor = self._executor
        if executor is None:
            executor = self._executor = ThreadPoolExecutor(self.threads,
                                                           thread_name_prefix="kcoord-fsync")
        return executor

    def close(self) -> None:
        """Wait for the threaded flushes under way; later syncs are the caller's to do."""
        self.closed = True
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
