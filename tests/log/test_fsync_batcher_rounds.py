"""The fsync batcher's adaptive rounds, shared by every writer on a node:
an idle ask starts its round with no linger; at most one round is under
way per log, everything asked for it meanwhile shares its next one (one
fsync per log for all of its waiters), and another log's round does not
wait for it; a failed fsync fails only the waiters of that log."""
from __future__ import annotations

import asyncio
import threading

from kcoord.log import PartitionLog
from kcoord.log.fsync_batcher import FsyncBatcher
from kcoord.protocol.records import build_batch


class HeldLog:
    """A real log whose fsyncs wait for `gate` (a round held under way) and
    are counted; `fail` makes the next ones raise."""

    def __init__(self, plog: PartitionLog, gate: threading.Event) -> None:
        self.plog, self.gate, self.flushes, self.fail = plog, gate, 0, False

    def flush(self) -> None:
        self.gate.wait(30)
        self.flushes += 1
        if self.fail:
            raise OSError("disk gone")
        self.plog.flush()


async def _until(predicate, what: str) -> None:
    for _ in range(3000):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def test_writes_during_a_logs_round_share_its_next_one_and_other_logs_do_not_wait(tmp_path):
    async def scenario():
        held, free = threading.Event(), threading.Event()
        free.set()
        a = HeldLog(PartitionLog(tmp_path / "a-0"), held)
        b = HeldLog(PartitionLog(tmp_path / "b-0"), free)
        batcher = FsyncBatcher()
        try:
            a.plog.append(build_batch([(b"k", b"v", [], 1000)]))
            first = batcher.sync([a])
            await _until(lambda: batcher.in_flight, "the first round to start")
            # b has no fsync under way: its round runs while a's is held
            await asyncio.wait_for(batcher.sync([b]), 30)
            assert b.flushes == 1 and not first.done()
            later, done = [], []
            for ask in ([a], [a], [a, b]):     # asked in separate loop iterations
                later.append(batcher.sync(ask))
                for _ in range(5):
                    await asyncio.sleep(0)
            batcher.sync_then([b], done.append)
            await _until(lambda: done, "the callback on b alone")
            assert done == [[None]] and not first.done() and not any(f.done() for f in later)
            held.set()
            await asyncio.wait_for(asyncio.gather(first, *later), 30)
            # a: round one, then one round for the three asks made during it
            assert a.flushes == 2 and b.flushes >= 2
            assert a.plog.flushed_offset == a.plog.log_end_offset == 1
        finally:
            batcher.close()
            a.plog.close()
            b.plog.close()

    asyncio.run(scenario())


def test_a_failed_fsync_fails_only_its_own_waiters(tmp_path):
    async def scenario():
        gate = threading.Event()
        gate.set()
        a = HeldLog(PartitionLog(tmp_path / "a-0"), gate)
        b = HeldLog(PartitionLog(tmp_path / "b-0"), gate)
        b.fail = True
        batcher = FsyncBatcher()
        try:
            on_a, on_b, on_both = batcher.sync([a]), batcher.sync([b]), batcher.sync([a, b])
            errors: list = []
            batcher.sync_then([a, b], errors.append)
            results = await asyncio.wait_for(
                asyncio.gather(on_a, on_b, on_both, return_exceptions=True), 30)
            assert results[0] is None
            assert isinstance(results[1], OSError) and isinstance(results[2], OSError)
            await _until(lambda: errors, "the callback")
            assert errors[0][0] is None and isinstance(errors[0][1], OSError)
            assert (a.flushes, b.flushes) == (1, 1)     # one round for all four
        finally:
            batcher.close()
            a.plog.close()
            b.plog.close()

    asyncio.run(scenario())


class ThreadLog(HeldLog):
    """A HeldLog that notes the thread of each fsync."""

    def __init__(self, plog: PartitionLog, gate: threading.Event) -> None:
        super().__init__(plog, gate)
        self.threads: list[int] = []

    def flush(self) -> None:
        self.threads.append(threading.get_ident())
        super().flush()


def test_a_quiet_rounds_one_log_is_flushed_on_the_loop_and_busy_ones_in_threads(tmp_path):
    """inline_quiet (a single node): one log, no fsync under way and recent
    fsyncs fast -> on the loop; a round of two logs, one asked while another
    is under way, or any while fsyncs are slow -> in worker threads."""
    async def scenario():
        loop_thread = threading.get_ident()
        held, free = threading.Event(), threading.Event()
        free.set()
        a = ThreadLog(PartitionLog(tmp_path / "a-0"), free)
        b = ThreadLog(PartitionLog(tmp_path / "b-0"), held)
        c = ThreadLog(PartitionLog(tmp_path / "c-0"), free)
        batcher = FsyncBatcher(inline_quiet=True)
        try:
            a.plog.append(build_batch([(b"k", b"v", [], 1000)]))
            done: list = []
            batcher.sync_then([a], done.append)
            # quiet: one log, nothing under way, fast fsyncs so far -> flushed
            # on the loop and released at once
            assert done == [[None]] and a.threads == [loop_thread]
            assert a.plog.flushed_offset == 1 and batcher.fsync_s > 0.0
            batcher.fsync_s = 0.0   # (this disk may be slow: fast, as far as the batcher knows)
            await asyncio.wait_for(batcher.sync([a]), 30)
            assert a.threads == [loop_thread] * 2
            # recent fsyncs slow (a busy disk): a quiet round goes to a thread too
            batcher.fsync_s = 1.0
            await asyncio.wait_for(batcher.sync([a]), 30)
            assert a.threads[2] != loop_thread
            batcher.fsync_s = 0.0
            # two logs in one round overlap in threads; one asked meanwhile, too
            both = batcher.sync([a, b])
            await _until(lambda: batcher.in_flight, "the round of two logs to start")
            await asyncio.wait_for(batcher.sync([c]), 30)
            assert c.threads and c.threads[0] != loop_thread and not both.done()
            held.set()
            await asyncio.wait_for(both, 30)
            assert b.threads[0] != loop_thread and a.threads[3] != loop_thread
        finally:
            held.set()
            batcher.close()
            for held_log in (a, b, c):
                held_log.plog.close()

    asyncio.run(scenario())
