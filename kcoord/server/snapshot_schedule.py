"""When a group shard's coordinator snapshot is written
(`group.coordinator.snapshot.interval.records`; 0: never, and none is read).

- At the end of a load that replayed at least the interval's records past
  the last snapshot: the core is still pure replay state then (before
  `on_loaded` re-arms anything), so it is encoded as it is.
- Every time the log has grown by the interval past the last snapshot: a
  worker process catches a separate core up (snapshot_catchup.py), one job
  at a time per runtime, so serving never pauses for it.
- When the records past the snapshots of all shards together reach
  TAIL_BOUND_INTERVALS intervals: the shard with the longest tail is caught
  up the same way, so a restart after a crash replays about that many
  records, not up to one interval per shard (50 with Kafka's default).
- At a clean shutdown: the same catch-up in this process, for the shards
  with records past their last snapshot, longest tails first, within
  SHUTDOWN_BUDGET_S (the next load replays what is left).

A snapshot covers only durable records (fsynced here, below the high
watermark in a cluster); the load checks it against the log anyway.
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from concurrent.futures import Future, ProcessPoolExecutor
from multiprocessing import get_context

from ..coordinator.snapshot import encode_state
from .coordinator_state import ACTIVE
from .shard_snapshot import FILE_NAME, mark_of, snapshot_mark, write_snapshot_file
from .snapshot_catchup import catch_up, die_with_parent, portable_config, segments_of

log = logging.getLogger("kcoord.coordinator")

SHUTDOWN_BUDGET_S = 5.0  # the most a clean stop spends on snapshots
TAIL_BOUND_INTERVALS = 10  # the bound on the records past all shards' snapshots, in intervals


class ShardSnapshots:
    """The snapshot policy of one runtime's shards (a shard's `snapshots`);
    a shard keeps `snapshot_mark`, what its snapshot on disk covers."""

    def __init__(self, interval: int, durability) -> None:
        self.interval = interval
        self.durability = durability
        self.tail_bound = TAIL_BOUND_INTERVALS * interval
        self.pool: ProcessPoolExecutor | None = None
        self.jobs: dict[int, Future] = {}  # shard index -> its catch-up under way
        self.tails: dict[int, int] = {}    # shard index -> records past its snapshot
        self.shards: dict[int, object] = {}
        self.total_tail = 0                # the sum of `tails`

    def _note(self, shard) -> int:
        """Record the shard's tail (log end - what its snapshot covers)."""
        tail = shard.plog.log_end_offset - self.covered(shard)
        self.total_tail += tail - self.tails.get(shard.index, 0)
        self.tails[shard.index] = tail
        self.shards[shard.index] = shard
        return tail

    def _longest(self):
        """The serving shard with the longest tail, if any has one; shards
        no longer served leave the count (a load notes them again)."""
        best, most = None, 0
        for index, tail in list(self.tails.items()):
            shard = self.shards[index]
            if shard.state is not ACTIVE:
                self.total_tail -= self.tails.pop(index)
                del self.shards[index]
            elif tail > most:
                best, most = shard, tail
        return best

    def covered(self, shard) -> int:
        mark = shard.snapshot_mark
        return mark.end if mark is not None else shard.plog.log_start_offset

    def durable_end(self, plog) -> int:
        """Offsets below it may go into a snapshot: on disk, and committed
        by the replicas when replicated."""
        end = plog.flushed_offset
        committed_end = getattr(self.durability, "committed_end", None)
        return end if committed_end is None else min(end, committed_end(plog))

    async def after_load(self, shard) -> None:
        """The shard's core has replayed its log (and nothing else yet)."""
        self._note(shard)
        end = shard.replayed_end
        if end - self.covered(shard) < self.interval:
            return
        try:
            mark = mark_of(shard.plog, end)
            if mark is None:
                return
            payload = encode_state(shard.core)
            await asyncio.to_thread(write_snapshot_file, shard.plog.path, mark, payload)
        except Exception as exc:  # the log stays the truth: serve without a snapshot
            log.warning("shard %d: writing the coordinator snapshot failed: %r", shard.index, exc)
            return
        shard.snapshot_mark = mark
        self._note(shard)

    def choose(self, shard):
        """After an append to `shard`: (the shard to catch up, up to which
        offset) if one is due, else None."""
        need = self.interval
        if self._note(shard) < need:
            if self.jobs or self.total_tail < self.tail_bound:
                return None
            shard, need = self._longest(), 1
            if shard is None:
                return None
        elif self.jobs:
            return None
        upto = self.durable_end(shard.plog)
        return (shard, upto) if upto - self.covered(shard) >= need else None

    def after_append(self, shard) -> None:
        """Start a catch-up in the worker if the shard's log grew by the
        interval, or else of the longest tail if all tails reach the bound."""
        due = self.choose(shard)
        if due is None:
            return
        shard, upto = due
        if self.pool is None:
            self.pool = ProcessPoolExecutor(1, mp_context=get_context("spawn"),
                                            initializer=die_with_parent, initargs=(os.getpid(),))
        job = self.pool.submit(catch_up, str(shard.plog.path), segments_of(shard.plog),
                               shard.snapshot_mark, upto, portable_config(shard.config),
                               shard.index, os.getpid())
        self.jobs[shard.index] = job
        loop = asyncio.get_running_loop()

        def done(j: Future) -> None:
            try:
                loop.call_soon_threadsafe(self._done, shard, j)
            except RuntimeError:  # the loop closed first (shutdown took the result)
                pass
        job.add_done_callback(done)

    def _done(self, shard, job: Future) -> None:
        self.jobs.pop(shard.index, None)
        if job.cancelled():
            return
        exc = job.exception()
        if exc is not None:
            log.warning("shard %d: the snapshot catch-up failed: %r", shard.index, exc)
            return
        result = job.result()
        # the file it wrote is on disk; the log may have been cut since (a
        # follower's truncation while the shard moved): then it is no mark
        if result is not None and mark_of(shard.plog, result[0].end) == result[0]:
            shard.snapshot_mark = result[0]
            self._note(shard)

    def may_compact(self, shard) -> bool:
        """Before the shard's sealed segments are compacted: not while a
        catch-up reads them; and a snapshot below them is deleted, since
        compaction may drop a tombstone its tail still needs (the snapshot
        holds the key the tombstone removes)."""
        if shard.index in self.jobs:
            return False
        mark = snapshot_mark(shard.plog.path)
        if mark is not None and mark.end < shard.plog.active.base_offset:
            (shard.plog.path / FILE_NAME).unlink(missing_ok=True)
            shard.snapshot_mark = None
            log.info("shard %d: coordinator snapshot at offset %d deleted before compacting "
                     "the segments after it", shard.index, mark.end)
        return True

    def at_shutdown(self, shards: list) -> None:
        """Let a catch-up under way finish, then catch up the shards with
        records past their snapshot here (logs flushed first), the longest
        tails first, for at most SHUTDOWN_BUDGET_S: a stop stays bounded,
        and the next load replays what is left."""
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None
        for index, job in list(self.jobs.items()):
            if job.done() and not job.cancelled() and job.exception() is None \
                    and job.result() is not None:
                shards[index].snapshot_mark = job.result()[0]
        self.jobs.clear()
        tails = []
        for shard in shards:
            try:
                shard.plog.flush()
                upto = self.durable_end(shard.plog)
            except Exception as exc:  # a closed log: nothing to snapshot
                log.warning("shard %d: no shutdown snapshot: %r", shard.index, exc)
                continue
            if upto > self.covered(shard):
                tails.append((upto - self.covered(shard), upto, shard))
        tails.sort(key=lambda t: -t[0])
        deadline = time.monotonic() + SHUTDOWN_BUDGET_S
        for done, (_, upto, shard) in enumerate(tails):
            if time.monotonic() > deadline:
                log.info("%d shards left with records past their snapshot after %.0f s of "
                         "shutdown snapshots: their next load replays them",
                         len(tails) - done, SHUTDOWN_BUDGET_S)
                break
            try:
                result = catch_up(str(shard.plog.path), segments_of(shard.plog),
                                  shard.snapshot_mark, upto, shard.config, shard.index)
            except Exception as exc:  # a full disk: the next load replays more
                log.warning("shard %d: the shutdown snapshot failed: %r", shard.index, exc)
                continue
            if result is not None:
                shard.snapshot_mark = result[0]
