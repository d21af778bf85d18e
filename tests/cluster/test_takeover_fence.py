"""Coordinator takeover fencing: a node that becomes leader of a
__consumer_offsets partition replays its whole local log, which may end
with records above the high watermark (never acknowledged, possibly
truncated later).  Its shard serves nothing (COORDINATOR_LOAD_IN_PROGRESS)
until the high watermark has reached the end of what it replayed, as
Kafka's runtime serves a shard at its last committed offset.

The real ReplicaManager, Replica state machine, ReplicatedDurability,
shard_ownership and CoordinatorRuntime on a tmp data dir, in one event loop;
the follower is played by hand through the leader's serve_follower_fetch
(no sockets, no etcd)."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from kcoord.broker.catalogue import Catalogue
from kcoord.broker.producer_ids import ProducerIds
from kcoord.cluster.replica import ReplicationConfig
from kcoord.cluster.durability import ReplicatedDurability
from kcoord.cluster.replica_manager import ReplicaManager
from kcoord.log.fsync_batcher import FsyncBatcher
from kcoord.cluster.shard_ownership import shard_ownership
from kcoord.cluster.state import PartitionState
from kcoord.coordinator.shard import CoordinatorShard
from kcoord.protocol.errors import Err
from kcoord.server.config import Config
from kcoord.coordinator.result import Result
from kcoord.server.coordinator_runtime import ACTIVE, LOADING, NOT_OWNED, CoordinatorRuntime
from kcoord.server.group_handlers import GroupHandlers
from kcoord.server.shard_batches import build_shard_batches
from kcoord.server.txn_handlers import TxnHandlers
from kcoord.server.txn_runtime import TxnRuntime
from kcoord.protocol.internal_topics import TXN_TOPIC
from kcoord.txn.records import COMPLETE_ABORT

from tests.server.runtime_harness import answer, ctx

OFFSETS = "__consumer_offsets"
ME, PEER = 1, 2


class Store:
    """The control plane's ISR store: every change accepted."""

    async def alter_isr(self, proposed: PartitionState) -> PartitionState:
        return PartitionState(proposed.topic, proposed.partition, proposed.leader,
                              proposed.leader_epoch, proposed.isr, proposed.replicas,
                              proposed.version + 1)


class ClusterNode:
    """Node ME's coordinator runtime and replica manager, wired as
    the server builds and starts them (ownership first)."""

    def __init__(self, data_dir, min_isr: int = 1) -> None:
        self.config = Config(data_dir=data_dir)
        self.config.update({"offsets.topic.num.partitions": 1,
                            "group.initial.rebalance.delay.ms": 0})
        self.catalogue = Catalogue(data_dir, self.config.values)
        if self.catalogue.get("t") is None:
            self.catalogue.create("t", 1, {})  # (the commits' topic; never replicated here)
        self.manager = ReplicaManager(ME, self.catalogue, Store(), lambda node: None,
                                      replication=ReplicationConfig(30000, min_isr),
                                      coordinated=True)
        self.durability = ReplicatedDurability(self.manager, FsyncBatcher())
        self.runtime = CoordinatorRuntime(self.catalogue, self.config, durability=self.durability)
        self.groups = GroupHandlers(self.runtime, self.catalogue, self.config)
        self.ownership = shard_ownership(self.runtime, ME)
        self.shard = self.runtime.shards[0]
        self.plog = self.shard.plog

    def state(self, leader: int, epoch: int, version: int, isr=(ME, PEER)) -> None:
        """A partition state from the control plane, to both listeners in order."""
        state = PartitionState(OFFSETS, 0, leader, epoch, tuple(isr), (ME, PEER), version)
        self.ownership.on_partition_state(state)
        self.manager.on_partition_state(state)

    def follower_fetched(self, offset: int, epoch: int, topic: str = OFFSETS) -> None:
        """The peer fetches from `offset` in `epoch` (so it holds everything before)."""
        replica = self.manager.replica(topic, 0)
        _, outs = replica.serve_follower_fetch(PEER, offset, epoch, 0)
        self.manager.handle((topic, 0), outs)

    def close(self) -> None:
        self.runtime.stop()
        self.catalogue.close()


def commit_records(group: str, offset: int, now: int = 1000):
    core = CoordinatorShard(0)
    req = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
           "group_instance_id": None, "retention_time_ms": -1, "topics": [
               {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                             "committed_leader_epoch": -1,
                                             "committed_metadata": ""}]}]}
    result = core.offset_commit(req, 8, now)
    assert result.records
    return result.records


def fetch(node: ClusterNode, group: str = "g"):
    req = {"groups": [{"group_id": group, "member_id": None, "member_epoch": -1,
                       "topics": None}], "require_stable": False}
    return node.groups.offset_fetch(ctx(9, 8), req)


def fetched(response) -> tuple[int, dict]:
    """An error answer leaves topics to the schema's default (empty), as the encoder writes it."""
    (g,) = response["groups"]
    return g["error_code"], {(t["name"], p["partition_index"]): p["committed_offset"]
                             for t in g.get("topics", ()) for p in t["partitions"]}


def describe_code(node: ClusterNode, group: str = "g") -> int:
    response = node.groups.describe_groups(
        ctx(15, 5), {"groups": [group], "include_authorized_operations": False})
    return response["groups"][0]["error_code"]


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


@pytest.fixture
def node(tmp_path):
    n = ClusterNode(tmp_path)
    yield n
    n.close()


def test_new_leader_serves_nothing_above_the_high_watermark(node):
    """The replayed log ends with a commit the old leader never acknowledged:
    OffsetFetch and DescribeGroups answer COORDINATOR_LOAD_IN_PROGRESS until
    the follower has it too (the high watermark passed it), then serve it."""
    async def scenario():
        node.manager.start()
        # what the old leader (epoch 2) wrote here: two commits, not yet committed
        node.plog.append(build_shard_batches(commit_records("g", 7), 1000), leader_epoch=2)
        node.plog.append(build_shard_batches(commit_records("g", 9), 1000), leader_epoch=2)
        end = node.plog.log_end_offset
        node.state(ME, 3, 1)
        await settle()
        assert node.shard.state is LOADING and node.shard.replayed_end == end
        assert node.manager.replica(OFFSETS, 0).high_watermark < end
        assert fetched(fetch(node))[0] == Err.COORDINATOR_LOAD_IN_PROGRESS
        assert describe_code(node) == Err.COORDINATOR_LOAD_IN_PROGRESS
        # the follower catches up part of the way: still loading
        node.follower_fetched(end - 1, 3)
        await settle()
        assert node.shard.state is LOADING
        assert fetched(fetch(node))[0] == Err.COORDINATOR_LOAD_IN_PROGRESS
        # ... and to the end: committed, the shard serves what it replayed
        node.follower_fetched(end, 3)
        await settle()
        assert node.shard.state is ACTIVE
        assert fetched(await answer(fetch(node))) == (Err.NONE, {("t", 0): 9})
        assert describe_code(node) == Err.NONE
        await node.manager.stop()
    asyncio.run(scenario())


def test_a_committed_log_loads_at_once_with_a_sole_in_sync_replica(node):
    """Nothing above the high watermark (the leader alone in the ISR: what it
    has on disk is committed): the shard serves at once."""
    async def scenario():
        node.manager.start()
        node.plog.append(build_shard_batches(commit_records("g", 4), 1000), leader_epoch=1)
        node.state(ME, 2, 1, isr=(ME,))
        await settle()
        assert node.shard.state is ACTIVE
        assert fetched(await answer(fetch(node))) == (Err.NONE, {("t", 0): 4})
        await node.manager.stop()
    asyncio.run(scenario())


def test_losing_the_leadership_while_fenced_unloads(node):
    """Another node is elected while this one waits for its high watermark:
    the shard unloads (NOT_COORDINATOR), the records it replayed were never
    served, and the wait ends."""
    async def scenario():
        node.manager.start()
        node.plog.append(build_shard_batches(commit_records("g", 5), 1000), leader_epoch=1)
        node.state(ME, 2, 1)
        await settle()
        assert node.shard.state is LOADING
        node.state(PEER, 3, 2)
        await settle()
        assert node.shard.state is NOT_OWNED and node.shard._load_task is None
        assert fetched(fetch(node))[0] == Err.NOT_COORDINATOR
        await node.manager.stop()
    asyncio.run(scenario())


def test_the_fence_waits_for_the_replica_to_lead(node):
    """The shard may be told to load before the replica manager has made this
    node the partition's leader: the fence waits for that role change rather
    than fail or serve."""
    async def scenario():
        node.manager.start()
        node.plog.append(build_shard_batches(commit_records("g", 6), 1000), leader_epoch=1)
        state = PartitionState(OFFSETS, 0, ME, 2, (ME,), (ME, PEER), 1)
        node.ownership.on_partition_state(state)  # the manager has not heard of it yet
        await settle()
        assert node.shard.state is LOADING
        assert fetched(fetch(node))[0] == Err.COORDINATOR_LOAD_IN_PROGRESS
        node.manager.on_partition_state(state)
        await settle()
        assert node.shard.state is ACTIVE
        assert fetched(await answer(fetch(node))) == (Err.NONE, {("t", 0): 6})
        await node.manager.stop()
    asyncio.run(scenario())


def test_single_node_durability_has_no_fence(tmp_path):
    """Single node (fsync durability): a shard loads as before, no wait."""
    from tests.server.runtime_harness import Node
    n = Node(tmp_path)
    try:
        assert not n.runtime.commit.durability.replicated  # LocalDurability: fence is a no-op

        async def scenario():
            n.shard().plog.append(build_shard_batches(commit_records("g", 3), 1000))
            await n.runtime.load(0, 0)
            assert n.shard().state is ACTIVE
        asyncio.run(scenario())
    finally:
        n.close()


def commit_req(group: str, offset: int) -> dict:
    return {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None, "retention_time_ms": -1, "topics": [
                {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                              "committed_leader_epoch": -1,
                                              "committed_metadata": ""}]}]}


def commit_code(response) -> int:
    from kcoord.protocol.api import response_codec
    if response.__class__ is bytes:
        response, _ = response_codec(8, 8)[1](response, 0)
    return response["topics"][0]["partitions"][0]["error_code"]


def test_a_commit_not_replicated_within_the_commit_timeout(tmp_path):
    """offsets.commit.timeout.ms: a commit whose high-watermark wait outlasts it
    is answered COORDINATOR_NOT_AVAILABLE (Kafka's write timeout, which its
    group coordinator answers so); the record stays in the log and commits
    once the follower has it, without a second answer or a reload."""
    node = ClusterNode(tmp_path)
    node.runtime.commit.write_timeout = 0.2  # (as offsets.commit.timeout.ms=200)
    try:
        assert ReplicatedDurability.replicated

        async def scenario():
            node.manager.start()
            node.state(ME, 1, 1)
            await settle()
            node.follower_fetched(node.plog.log_end_offset, 1)
            await asyncio.wait_for(node.shard._load_task or asyncio.sleep(0), 10)
            assert node.shard.state is ACTIVE
            core = node.shard.core
            reply = node.groups.offset_commit(ctx(8, 8), commit_req("g", 42))
            assert commit_code(await answer(reply)) == Err.COORDINATOR_NOT_AVAILABLE
            # a commit queued behind the round still in flight times out too
            # (its clock runs from its write, not from its round's start)
            queued = node.groups.offset_commit(ctx(8, 8), commit_req("g", 43))
            assert commit_code(await answer(queued)) == Err.COORDINATOR_NOT_AVAILABLE
            # the follower catches up: the writes commit, quietly (the second
            # round is appended once the first is durable: fetch until both are)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 10
            while node.shard._batches and loop.time() < deadline:
                node.follower_fetched(node.plog.log_end_offset, 1)
                await asyncio.sleep(0.01)
            assert node.shard.state is ACTIVE and node.shard.core is core
            assert not node.shard._batches
            assert fetched(await answer(fetch(node))) == (Err.NONE, {("t", 0): 43})
            await node.manager.stop()
        asyncio.run(scenario())
    finally:
        node.close()


def test_the_commit_timeout_is_read_from_the_config(tmp_path):
    config = Config(data_dir=tmp_path)
    config.update({"offsets.topic.num.partitions": 1, "offsets.commit.timeout.ms": 1234})
    catalogue = Catalogue(tmp_path, config.values)
    try:
        manager = ReplicaManager(ME, catalogue, Store(), lambda node: None,
                                 replication=ReplicationConfig(30000, 1), coordinated=True)
        replicated = CoordinatorRuntime(
            catalogue, config, durability=ReplicatedDurability(manager, FsyncBatcher()))
        assert replicated.commit.write_timeout == 1.234
        single = CoordinatorRuntime(catalogue, config)
        assert single.commit.write_timeout is None  # single node: fsync, no timeout
    finally:
        catalogue.close()


def commit(node: ClusterNode, offset: int, group: str = "g"):
    return node.groups.offset_commit(ctx(8, 8), commit_req(group, offset))


def test_writes_below_min_insync_replicas_are_refused_before_appending(tmp_path):
    """min.insync.replicas 2, the ISR the leader alone: Kafka's replica manager
    refuses the acks=all append (NOT_ENOUGH_REPLICAS) and the group
    coordinator answers COORDINATOR_NOT_AVAILABLE.  Nothing is appended (a
    write answered as failed must never show up later), an offset commit
    leaves the shard loaded, an internal write reverts memory by a reload;
    with the ISR back, commits go through."""
    node = ClusterNode(tmp_path, min_isr=2)

    async def scenario():
        node.manager.start()
        node.state(ME, 1, 1, isr=(ME,))
        await settle()
        assert node.shard.state is ACTIVE
        end = node.plog.log_end_offset
        assert commit_code(await answer(commit(node, 5))) == Err.COORDINATOR_NOT_AVAILABLE
        assert node.plog.log_end_offset == end, "a refused commit was appended"
        assert node.shard.state is ACTIVE, "the refused commit reloaded the shard"
        # a write the runtime makes by itself (as a session expiry's) is
        # refused by the group commit before it appends; memory reloads
        node.shard.apply(Result(records=commit_records("g", 6)))
        await settle()
        assert node.plog.log_end_offset == end, "a refused internal write was appended"
        await node.runtime.wait_loaded()
        assert fetched(await answer(fetch(node))) == (Err.NONE, {})
        # the follower back in the ISR: the commit is appended and acknowledged
        node.state(ME, 1, 2, isr=(ME, PEER))
        node.follower_fetched(end, 1)
        reply = commit(node, 7)
        for _ in range(200):
            await settle()
            if node.plog.flushed_offset > end:
                break
        node.follower_fetched(node.plog.log_end_offset, 1)
        assert commit_code(await answer(reply)) == Err.NONE
        assert fetched(await answer(fetch(node))) == (Err.NONE, {("t", 0): 7})
        await node.manager.stop()
    try:
        asyncio.run(scenario())
    finally:
        node.close()


async def replicated(node: ClusterNode, answer_of, plog, epoch: int, topic: str = OFFSETS):
    """The answer of a write once the peer fetched all it appended."""
    task = asyncio.ensure_future(answer(answer_of))
    for _ in range(500):
        await asyncio.sleep(0.01)
        node.follower_fetched(plog.log_end_offset, epoch, topic)
        if task.done():
            break
    return await task


def txn_node(tmp_path):
    """Node ME with min.insync.replicas 2 and a transaction runtime on one
    __transaction_state partition: (node, runtime, handlers)."""
    node = ClusterNode(tmp_path, min_isr=2)
    node.config.update({"transaction.state.log.num.partitions": 1})
    ids = ProducerIds(None)
    txn = TxnRuntime(node.catalogue, node.config, SimpleNamespace(), node.runtime,
                     FsyncBatcher(), ids, node.durability)  # (the data plane is not used here)
    return node, txn, TxnHandlers(txn, ids, node.groups)


def txn_state(node: ClusterNode, isr: tuple, version: int) -> None:
    """Node ME leads __transaction_state-0 (replicas ME and PEER) with `isr`."""
    node.manager.on_partition_state(PartitionState(TXN_TOPIC, 0, ME, 1, isr, (ME, PEER), version))


async def load_txn_partition(node: ClusterNode, txn: TxnRuntime, isr: tuple = (ME, PEER)) -> None:
    """ME leads __transaction_state-0 with `isr`; the runtime has loaded it."""
    txn_state(node, isr, 1)
    txn.load(0, 1)
    await txn.wait_loaded()
    await settle()


def init_request(transactional_id: str = "tx") -> dict:
    """InitProducerId for a new producer of `transactional_id`."""
    return {"transactional_id": transactional_id, "transaction_timeout_ms": 60000,
            "producer_id": -1, "producer_epoch": -1}


async def open_txn_with_offsets(node: ClusterNode, txn: TxnRuntime, handlers) -> dict:
    """Lead the transaction partition, then InitProducerId and AddOffsetsToTxn
    (group g) for "tx", each replicated; the producer's ids."""
    txn_log = txn.logs[0]
    node.state(ME, 1, 1)
    await load_txn_partition(node, txn)
    got = await replicated(node, handlers.init_producer_id(ctx(22, 4), init_request()),
                           txn_log, 1, TXN_TOPIC)
    ids_ = {"transactional_id": "tx", "producer_id": got["producer_id"],
            "producer_epoch": got["producer_epoch"]}
    got = await replicated(node, handlers.add_offsets_to_txn(ctx(25, 3), dict(
        ids_, group_id="g")), txn_log, 1, TXN_TOPIC)
    assert got["error_code"] == Err.NONE
    return ids_


def run_txn(node: ClusterNode, txn: TxnRuntime, scenario) -> None:
    """Run `scenario` with the replica manager started; stop all after."""
    async def whole():
        node.manager.start()
        try:
            await scenario()
        finally:
            txn.stop()
            await node.manager.stop()
    try:
        asyncio.run(whole())
    finally:
        node.close()


def test_transaction_writes_below_min_insync_replicas_are_refused_before_appending(tmp_path):
    """The same refusal for __transaction_state (InitProducerId answers
    COORDINATOR_NOT_AVAILABLE, nothing appended) and for a transaction's
    writes to __consumer_offsets (TxnOffsetCommit before its op runs; its
    marker answers NOT_ENOUGH_REPLICAS, which the marker's sender retries)."""
    node, txn, handlers = txn_node(tmp_path)
    txn_log = txn.logs[0]

    async def scenario():
        node.state(ME, 1, 1, isr=(ME,))
        await load_txn_partition(node, txn, isr=(ME,))
        end = txn_log.log_end_offset
        answer_ = await handlers.init_producer_id(ctx(22, 4), init_request())
        assert answer_["error_code"] == Err.COORDINATOR_NOT_AVAILABLE
        assert txn_log.log_end_offset == end, "a refused transaction state write was appended"
        assert node.runtime.write_txn("g", 5, 0, lambda *_: pytest.fail("the op ran"),
                                      lambda code: code) == Err.COORDINATOR_NOT_AVAILABLE
        assert await node.runtime.complete_txn(0, 5, 0, True) == Err.NOT_ENOUGH_REPLICAS
        assert node.plog.log_end_offset == 0, "a refused marker was appended"
        # the ISR back: InitProducerId is appended and answered
        txn_state(node, (ME, PEER), 2)
        answer_ = await replicated(node, handlers.init_producer_id(ctx(22, 4), init_request()),
                                   txn_log, 1, TXN_TOPIC)
        assert answer_["error_code"] == Err.NONE and answer_["producer_id"] >= 0
        assert txn_log.log_end_offset > end
    run_txn(node, txn, scenario)


def test_a_prepare_committed_with_the_isr_shrunk_is_still_completed(tmp_path):
    """EndTxn's PrepareAbort is appended with the ISR full, then the ISR
    shrinks below min.insync.replicas before the follower has it: the high
    watermark passes it on the leader alone (NOT_ENOUGH_REPLICAS_AFTER_APPEND),
    EndTxn answers an error, but the record is committed and in memory.  Its
    markers and CompleteAbort must still follow (seed 117's fault run: the
    transaction stayed PrepareAbort until the next leadership change, every
    retry CONCURRENT_TRANSACTIONS, txn-group's offsets never stable)."""
    node, txn, handlers = txn_node(tmp_path)
    txn_log = txn.logs[0]

    async def scenario():
        ids_ = await open_txn_with_offsets(node, txn, handlers)
        end = txn_log.log_end_offset
        ending = asyncio.ensure_future(answer(handlers.end_txn(ctx(26, 3), dict(
            ids_, committed=False))))
        for _ in range(500):  # PrepareAbort appended and fsynced here, not fetched
            await asyncio.sleep(0.01)
            if txn_log.flushed_offset > end:
                break
        txn_state(node, (ME,), 2)
        assert (await ending)["error_code"] != Err.NONE
        # the ISR whole again: the transaction completes without a new request
        txn_state(node, (ME, PEER), 3)
        for _ in range(500):
            await asyncio.sleep(0.01)
            node.follower_fetched(txn_log.log_end_offset, 1, TXN_TOPIC)
            node.follower_fetched(node.plog.log_end_offset, 1)
            if txn.core.txns["tx"].state == COMPLETE_ABORT:
                break
        assert txn.core.txns["tx"].state == COMPLETE_ABORT, "the PrepareAbort never completed"
    run_txn(node, txn, scenario)


def test_a_request_waiting_for_a_completion_answers_not_coordinator_once_unloaded(tmp_path):
    """AddOffsetsToTxn right after a commit waits for that commit's markers;
    the partition is unloaded meanwhile (a new leader elsewhere).  The answer
    must be NOT_COORDINATOR (the client finds the new coordinator), not
    INVALID_PRODUCER_ID_MAPPING because the unloaded core no longer knows the
    producer: librdkafka aborts on that, the abort meets INVALID_TXN_STATE at
    the new coordinator and the producer is fatal (a bounded fault run's
    processor lost its producer this way with every lease churning)."""
    node, txn, handlers = txn_node(tmp_path)
    txn_log = txn.logs[0]

    async def scenario():
        node.state(ME, 1, 1)
        await load_txn_partition(node, txn)
        got = await replicated(node, handlers.init_producer_id(ctx(22, 4), init_request()),
                               txn_log, 1, TXN_TOPIC)
        ids_ = {"transactional_id": "tx", "producer_id": got["producer_id"],
                "producer_epoch": got["producer_epoch"], "group_id": "g"}
        got = await replicated(node, handlers.add_offsets_to_txn(ctx(25, 3), dict(ids_)),
                               txn_log, 1, TXN_TOPIC)
        assert got["error_code"] == Err.NONE
        # the commit is answered once PrepareCommit is durable; its marker to
        # __consumer_offsets is not replicated (the peer never fetches it)
        got = await replicated(node, handlers.end_txn(ctx(26, 3), dict(ids_, committed=True)),
                               txn_log, 1, TXN_TOPIC)
        assert got["error_code"] == Err.NONE
        waiting = asyncio.ensure_future(answer(handlers.add_offsets_to_txn(ctx(25, 3),
                                                                           dict(ids_))))
        await settle()
        assert not waiting.done(), "AddOffsetsToTxn did not wait for the commit's markers"
        assert txn.unload(0, 2)
        assert (await waiting)["error_code"] == Err.NOT_COORDINATOR
    run_txn(node, txn, scenario)


class HeldMarkers:
    """The cluster's marker sender, its first round held until `go` is set (a
    retry's sleep, a peer's timeout): epoch of each write() and what it said."""

    def __init__(self) -> None:
        self.go = asyncio.Event()
        self.calls: list[tuple[int, bool]] = []

    async def write(self, c, coordinator_epoch: int, still_coordinator) -> bool:
        if not self.calls:
            self.calls.append((coordinator_epoch, False))
            await self.go.wait()
            return False if not still_coordinator() else True
        self.calls.append((coordinator_epoch, True))
        return True


def test_a_completion_under_way_in_an_older_epoch_does_not_stand_for_the_new_one(tmp_path):
    """An abort's markers are being sent (their first round held) when the
    partition's coordinator epoch moves on (led again here: a reload, or a
    newer epoch while active).  The old completion stops once it sees it is no
    longer the coordinator of its epoch and leaves the Prepare* to the next one:
    the new epoch must start its own, not wait on the old (seed 190's rerun:
    kfx-txn-1's PrepareAbort stood until the run ended, so txn-group's
    offsets never became stable again)."""
    node, txn, handlers = txn_node(tmp_path)
    txn_log = txn.logs[0]
    markers = txn.markers = HeldMarkers()

    async def scenario():
        ids_ = await open_txn_with_offsets(node, txn, handlers)
        got = await replicated(node, handlers.end_txn(ctx(26, 3), dict(ids_, committed=False)),
                               txn_log, 1, TXN_TOPIC)
        assert got["error_code"] == Err.NONE
        await settle()
        assert markers.calls == [(1, False)], "the abort's markers did not start"
        txn.load(0, 2)      # led here in a newer epoch
        await settle()
        markers.go.set()
        for _ in range(500):
            await asyncio.sleep(0.01)
            node.follower_fetched(txn_log.log_end_offset, 1, TXN_TOPIC)
            if txn.core.txns["tx"].state == COMPLETE_ABORT:
                break
        assert (2, True) in markers.calls, "the new epoch never sent the markers"
        assert txn.core.txns["tx"].state == COMPLETE_ABORT, "the PrepareAbort never completed"
    run_txn(node, txn, scenario)
