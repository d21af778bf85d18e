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
