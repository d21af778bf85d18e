"""The single node's SharePersister over the share coordinator's runtime,
in one event loop: the topic made on first use, a write returned only once
durable, a failed fsync returned as an error (and not kept), state read back
after a restart."""
import asyncio

from kcoord.broker.catalogue import Catalogue
from kcoord.protocol.errors import Err
from kcoord.server.config import Config
from kcoord.server.share_persister import LocalSharePersister
from kcoord.server.share_runtime import ShareCoordinatorRuntime
from kcoord.share.persister import ShareKey, StateBatch as B
from tests.server.runtime_harness import GatedSync


class Node:
    def __init__(self, data_dir) -> None:
        self.config = Config(data_dir=data_dir)
        self.config.update({"share.coordinator.state.topic.num.partitions": 2})
        self.catalogue = Catalogue(data_dir, self.config.values)
        if self.catalogue.get("t") is None:
            self.catalogue.create("t", 2, {})
        self.sync = GatedSync()
        self.runtime = ShareCoordinatorRuntime(self.catalogue, self.config, durability=self.sync)
        self.runtime.start()
        self.persister = LocalSharePersister(self.runtime)

    @property
    def key(self) -> ShareKey:
        return ShareKey("g", self.catalogue.get("t").topic_id, 1)

    def close(self) -> None:
        self.runtime.stop()
        self.catalogue.close()


def test_persister_round_trip_durability_and_restart(tmp_path):
    async def first() -> bytes:
        node = Node(tmp_path)
        p, key = node.persister, node.key
        assert not node.runtime.ready  # created on first use
        assert await p.initialize(key, 0, 5) == 0
        assert node.catalogue.get("__share_group_state").configs["cleanup.policy"] == "delete"
        assert await p.write(key, 0, 0, -1, [B(5, 9, 0, 1)]) == 0
        # not returned before the write is durable
        node.sync.hold = True
        pending = asyncio.ensure_future(p.write(key, 0, 0, 7, [B(7, 8, 2, 1)], 2))
        await asyncio.sleep(0.05)
        assert not pending.done()
        node.sync.release()
        assert await asyncio.wait_for(pending, 10) == 0
        # a failed fsync: the caller hears it and the shard reloads from its log
        # (which may or may not hold the write: the caller must not count on it)
        node.sync.fail = True
        assert await p.write(key, 0, 0, -1, [B(9, 9, 4, 5)]) == Err.COORDINATOR_NOT_AVAILABLE
        node.sync.fail = False
        state = await p.read(key, 0)
        assert (state.error_code, state.start_offset) == (0, 7)
        assert state.batches[0] == B(7, 8, 2, 1)
        assert state.batches[1] in (B(9, 9, 0, 1), B(9, 9, 4, 5))
        assert await p.write(key, 0, 0, -1, [B(9, 9, 0, 1)], 2) == 0
        summary = await p.summary(key)
        assert (summary.start_offset, summary.delivery_complete_count) == (7, 2)
        assert await p.initialize(ShareKey("g", b"\x05" * 16, 0), 0, 0) == \
            Err.UNKNOWN_TOPIC_OR_PARTITION
        node.close()
        return key

    key = asyncio.run(first())

    async def second() -> None:
        node = Node(tmp_path)  # the topic exists: its shards load at start
        assert node.runtime.ready
        p = node.persister
        state = await p.read(key, 1)  # a new leader epoch
        assert state.batches == [B(7, 8, 2, 1), B(9, 9, 0, 1)] and state.start_offset == 7
        assert await p.write(key, 0, 0, -1, []) == Err.FENCED_LEADER_EPOCH
        assert await p.delete(key) == 0
        assert (await p.read(key, 1)).error_code == Err.INVALID_REQUEST
        assert (await p.summary(key)).start_offset == -1
        node.close()

    asyncio.run(second())


def test_pruning_keeps_what_a_reload_needs(tmp_path):
    """The log is cut below the oldest latest-snapshot of the live keys (an
    idle key holds its shard's log back); a reload of what is left gives
    the same state."""
    async def run() -> None:
        node = Node(tmp_path)
        node.runtime.core_config.snapshot_update_records_per_snapshot = 2
        p, t = node.persister, node.catalogue.get("t").topic_id
        keys = [ShareKey("g", t, 0), ShareKey("g", t, 1), ShareKey("h", t, 1)]
        for k in keys:
            assert await p.initialize(k, 0, 0) == 0
        for i in range(12):
            for k in keys[:2]:  # the third key stays at its first snapshot
                assert await p.write(k, 0, 0, i, [B(i, i + 3, 2, 1)]) == 0
        for s in node.runtime.shards:
            oldest = min((s.core.snapshot_offsets[k] for k in s.core.states), default=None)
            if oldest:   # a cluster's high watermark below it holds the cut there
                assert s.prune(committed=oldest - 1) == oldest - 1
            start = s.prune()
            assert oldest is None or start == oldest
        assert any(s.plog.log_start_offset > 0 for s in node.runtime.shards)
        assert await p.delete(keys[2]) == 0
        for s in node.runtime.shards:
            s.prune()
        after = {s.index: s.core.snapshot()["states"] for s in node.runtime.shards}
        node.close()
        node = Node(tmp_path)
        await node.runtime.wait_loaded()
        assert {s.index: s.core.snapshot()["states"] for s in node.runtime.shards} == after
        node.close()

    asyncio.run(run())


def test_a_cluster_node_does_not_create_the_topic_locally(tmp_path):
    """Replicated durability (a cluster): __share_group_state is not made in
    one node's catalogue; the persister hears COORDINATOR_NOT_AVAILABLE."""
    class Replicated(GatedSync):
        replicated = True

    async def run() -> None:
        config = Config(data_dir=tmp_path)
        catalogue = Catalogue(tmp_path, config.values)
        catalogue.create("t", 1, {})
        runtime = ShareCoordinatorRuntime(catalogue, config, durability=Replicated())
        runtime.start(load_all=False)
        key = ShareKey("g", catalogue.get("t").topic_id, 0)
        assert await LocalSharePersister(runtime).initialize(key, 0, 0) == \
            Err.COORDINATOR_NOT_AVAILABLE
        assert catalogue.get("__share_group_state") is None
        runtime.stop()
        catalogue.close()

    asyncio.run(run())
