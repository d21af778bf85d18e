"""The coordinator's group commit across shards (FsyncRounds): one round
appends a batch per shard and fsyncs them together off the loop; a write
is released only after its shard's fsync; writes made during a round join
the next one; a failed fsync fails that shard's writes and reloads it."""
from __future__ import annotations

import asyncio
import threading

import pytest

from kcoord.coordinator.offsets import OffsetValue, offset_record
from kcoord.coordinator.shard import CoordinatorConfig
from kcoord.log import PartitionLog
from kcoord.protocol.records import iter_batches, decode_batch
from kcoord.server.coordinator_runtime import ShardRuntime
from kcoord.server.fsync_rounds import FsyncRounds
from kcoord.protocol.record_codec import decode_record


def commit(group: str, partition: int, offset: int):
    return offset_record(group, "t", partition, OffsetValue(offset, -1, "", 1, None))


def logged(plog: PartitionLog) -> list:
    data = plog.read(plog.log_start_offset, 1 << 20) if plog.log_end_offset else b""
    out = []
    for pos, _ in iter_batches(data):
        for r in decode_batch(data, pos)[1]:
            rec = decode_record(r.key, r.value)
            out.append((rec.key["group"], rec.key["partition"], rec.value["offset"]))
    return out


class FlakyLog:
    """A PartitionLog whose flush fails while `fail` is set."""

    def __init__(self, plog: PartitionLog) -> None:
        self.plog, self.fail, self.flushes = plog, False, 0
        self.gate: threading.Event | None = None  # set: flush waits for it
        self.flushed_ends: list[int] = []

    def __getattr__(self, name):
        return getattr(self.plog, name)

    def flush(self) -> None:
        self.flushes += 1
        if self.gate is not None:
            assert self.gate.wait(60), "the test never opened the gate"
        self.flushed_ends.append(self.plog.log_end_offset)
        if self.fail:
            raise OSError("fsync failed (test)")
        self.plog.flush()


@pytest.fixture
def shards(tmp_path):
    commit_ = FsyncRounds(0)
    logs = [FlakyLog(PartitionLog(tmp_path / f"__consumer_offsets-{i}")) for i in range(3)]
    runtimes = [ShardRuntime(i, plog, CoordinatorConfig(), 0, commit_)
                for i, plog in enumerate(logs)]
    yield commit_, runtimes, logs
    commit_.durability.close()
    for plog in logs:
        plog.plog.close()


async def load(runtimes) -> None:
    await asyncio.gather(*(shard.load(0) for shard in runtimes))


def test_one_round_for_every_shard_and_replies_after_the_fsync(shards):
    commit_, runtimes, logs = shards

    async def main():
        await load(runtimes)
        futs = [shard.write_records([commit(f"g{i}", 0, 10 + i), commit(f"g{i}", 1, 20 + i)],
                                    f"reply{i}") for i, shard in enumerate(runtimes)]
        futs.append(runtimes[0].write_records([commit("g0", 2, 30)], "again"))
        behind = runtimes[0].write_records([], "behind")  # a reply without records waits
        assert not behind.done()
        assert [await f for f in futs] == ["reply0", "reply1", "reply2", "again"]
        assert behind.done() and behind.result() == "behind"
        assert all(plog.flushes == 1 for plog in logs)
        assert commit_.rounds == 1
        assert runtimes[0].write_records([]) is None

    asyncio.run(main())
    assert logged(logs[0].plog) == [("g0", 0, 10), ("g0", 1, 20), ("g0", 2, 30)]
    assert logged(logs[2].plog) == [("g2", 0, 12), ("g2", 1, 22)]
    # the records were replayed when written
    assert runtimes[1].core.offsets.by_group["g1"][("t", 1)].offset == 21


def test_writes_during_a_round_join_the_next(shards):
    commit_, runtimes, logs = shards

    async def main():
        await load(runtimes)
        logs[0].gate = gate = threading.Event()  # holds the first round's fsync
        first = runtimes[0].write_records([commit("g", 0, 1)], 1)
        await asyncio.sleep(0)  # the round has started: its fsync is under way
        assert commit_.rounds == 1 and not first.done()
        second = runtimes[0].write_records([commit("g", 0, 2)], 2)
        third = runtimes[1].write_records([commit("h", 0, 3)], 3)
        for _ in range(5):
            await asyncio.sleep(0)
        # nothing of the writes made during the round reached a log or a reply
        assert (logs[0].log_end_offset, logs[1].log_end_offset) == (1, 0)
        assert not (first.done() or second.done() or third.done())
        gate.set()
        assert await first == 1
        assert (await second, await third) == (2, 3)
        assert commit_.rounds == 2
        assert logs[0].flushed_ends == [1, 2]  # the second write had a round of its own

    asyncio.run(main())
    assert logged(logs[0].plog) == [("g", 0, 1), ("g", 0, 2)]


def test_failed_fsync_fails_the_shards_writes_and_reloads_it(shards):
    commit_, runtimes, logs = shards

    async def main():
        await load(runtimes)
        logs[1].fail = True
        ok = runtimes[0].write_records([commit("g", 0, 1)], "ok")
        bad = runtimes[1].write_records([commit("h", 0, 1)], "bad")
        old_core = runtimes[1].core
        assert await ok == "ok"
        with pytest.raises(OSError):
            await bad
        assert runtimes[1].core is not old_core  # memory was ahead of the log: reloaded
        logs[1].fail = False
        while not runtimes[1].loaded:
            await asyncio.sleep(0)
        # the reload replays what reached the log (the page cache still holds it)
        assert runtimes[1].core.offsets.by_group["h"][("t", 0)].offset == 1
        assert await runtimes[1].write_records([commit("h", 0, 2)], "later") == "later"

    asyncio.run(main())


def test_close_writes_what_is_pending(shards):
    commit_, runtimes, logs = shards

    async def main():
        await load(runtimes)
        fut = runtimes[2].write_records([commit("g", 5, 7)], "done")
        commit_.close()  # before any round ran
        assert fut.done() and fut.result() == "done"

    asyncio.run(main())
    assert logged(logs[2].plog) == [("g", 5, 7)]
