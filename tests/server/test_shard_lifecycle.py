"""Shard lifecycle on a real coordinator runtime: load(partition, epoch) and
unload(partition, epoch) as Kafka's onElection / onResignation.  A shard
this node has not loaded answers NOT_COORDINATOR; unload cancels its
timers, answers its parked and queued requests NOT_COORDINATOR at once and
drops its state; loading again (same or newer epoch) restores the durable
state from the log and re-arms the members' sessions."""
from __future__ import annotations

import asyncio

import pytest

from kcoord.log.durability import NotReplicated
from kcoord.protocol.api import response_codec
from kcoord.protocol.errors import Err
from kcoord.server.coordinator_runtime import ACTIVE, LOADING, NOT_OWNED

from tests.server.runtime_harness import Node, answer, ctx
from tests.server.test_classic_handlers import commit_req, join_req, parked_join, stable_group


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path)
    yield n
    n.close()


def fetch_req(group: str = "g") -> dict:
    return {"groups": [{"group_id": group, "member_id": None, "member_epoch": -1,
                        "topics": None}], "require_stable": False}


def fetched(response: dict) -> tuple[int, dict]:
    (g,) = response["groups"]  # an error answer leaves its topics to the schema default ([])
    return g["error_code"], {(t["name"], p["partition_index"]): p["committed_offset"]
                             for t in g.get("topics", ()) for p in t["partitions"]}


def commit_code(response) -> int:
    if response.__class__ is bytes:  # the encoded all-NONE answer (hot_ops.commit_body)
        response, _ = response_codec(8, 8)[1](response, 0)
    return response["topics"][0]["partitions"][0]["error_code"]


def test_a_shard_not_loaded_answers_not_coordinator(node):
    async def scenario():
        h = node.groups
        assert node.shard().state is NOT_OWNED and not node.runtime.owns(0)
        assert h.join_group(ctx(11, 7), join_req())["error_code"] == Err.NOT_COORDINATOR
        hb = {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None}
        assert h.heartbeat(ctx(12, 4), hb)["error_code"] == Err.NOT_COORDINATOR
        assert commit_code(h.offset_commit(ctx(8, 8), commit_req("", -1))) == Err.NOT_COORDINATOR
        assert fetched(h.offset_fetch(ctx(9, 8), fetch_req()))[0] == Err.NOT_COORDINATOR
        described = h.describe_groups(ctx(15, 5), {"groups": ["g"],
                                                   "include_authorized_operations": False})
        assert described["groups"][0]["error_code"] == Err.NOT_COORDINATOR
        listed = h.list_groups(ctx(16, 4), {"states_filter": []})
        assert listed["error_code"] == Err.NONE and listed["groups"] == []

    asyncio.run(scenario())


@pytest.mark.parametrize("second_epoch", [1, 2])
def test_load_serve_unload_load_again(node, second_epoch):
    async def scenario():
        h, runtime = node.groups, node.runtime
        await runtime.load(0, 1)
        assert node.shard().state is ACTIVE and runtime.owns(0)
        member, generation = await stable_group(h)
        committed = await answer(h.offset_commit(ctx(8, 8), commit_req(member, generation)))
        assert commit_code(committed) == Err.NONE
        shard = node.shard()
        session = ("classic-heartbeat", "g", member)
        assert session in shard._timers

        assert runtime.unload(0, second_epoch if second_epoch > 1 else None)
        assert shard.state is NOT_OWNED and shard.core is None
        assert shard._timers == {}  # every timer of the shard cancelled
        assert fetched(h.offset_fetch(ctx(9, 8), fetch_req()))[0] == Err.NOT_COORDINATOR
        hb = {"group_id": "g", "generation_id": generation, "member_id": member,
              "group_instance_id": None}
        assert h.heartbeat(ctx(12, 4), hb)["error_code"] == Err.NOT_COORDINATOR

        await runtime.load(0, second_epoch)
        assert shard.state is ACTIVE and shard.epoch == second_epoch
        # durable state is back from the log; the member's session runs again
        assert fetched(await answer(h.offset_fetch(ctx(9, 8), fetch_req()))) == \
            (Err.NONE, {("t", 0): 1})
        group = shard.core.groups["g"]
        assert group.state == "Stable" and list(group.members) == [member]
        assert session in shard._timers
        assert (await answer(h.heartbeat(ctx(12, 4), hb)))["error_code"] == Err.NONE

    asyncio.run(scenario())


def test_unload_answers_parked_and_queued_requests_at_once(node):
    async def scenario():
        h, runtime = node.groups, node.runtime
        await runtime.load(0, 0)
        member, generation = await stable_group(h)
        parked = await parked_join(h)
        node.sync.hold = True  # the next write stays in flight
        commit = h.offset_commit(ctx(8, 8), commit_req(member, generation))
        read = asyncio.ensure_future(answer(h.offset_fetch(ctx(9, 8), fetch_req())))  # behind it
        await asyncio.sleep(0.05)
        assert not commit.done() and not read.done() and not parked.done()
        assert runtime.unload(0)
        # answered at once, without waiting for the write or polling
        assert parked.done() and (await answer(parked))["error_code"] == Err.NOT_COORDINATOR
        assert commit_code(await answer(commit)) == Err.NOT_COORDINATOR
        assert fetched(await read)[0] == Err.NOT_COORDINATOR
        node.sync.release()  # the write's fsync completes: nothing is answered twice
        await asyncio.sleep(0.1)
        await runtime.load(0, 1)
        # the commit reached the log before the unload: loading replays it
        assert fetched(await answer(h.offset_fetch(ctx(9, 8), fetch_req())))[0] == Err.NONE

    asyncio.run(scenario())


def test_stale_epochs_are_ignored(node):
    async def scenario():
        runtime = node.runtime
        await runtime.load(0, 5)
        assert runtime.load(0, 3) is None and node.shard().epoch == 5
        assert runtime.load(0, 5) is None  # already loaded
        assert not runtime.unload(0, 4)  # an older epoch's resignation
        assert not runtime.unload(0, 5)
        assert node.shard().state is ACTIVE
        assert runtime.unload(0, 6)
        assert node.shard().state is NOT_OWNED and node.shard().epoch == 6
        assert runtime.load(0, 5) is None  # older than the resignation
        await runtime.load(0, 7)
        assert node.shard().state is ACTIVE

    asyncio.run(scenario())


def test_unload_while_loading(node):
    async def scenario():
        runtime = node.runtime
        task = runtime.load(0, 0)
        assert node.shard().state is LOADING
        assert node.groups.join_group(ctx(11, 7), join_req())["error_code"] == \
            Err.COORDINATOR_LOAD_IN_PROGRESS
        assert runtime.unload(0)
        await asyncio.sleep(0)
        assert task.cancelled() or task.done()
        assert node.shard().state is NOT_OWNED
        await runtime.load(0, 0)
        assert node.shard().state is ACTIVE

    asyncio.run(scenario())


def test_blank_consumer_group_id_is_invalid_whichever_shard(node):
    """ConsumerGroupHeartbeat with a group id of spaces: INVALID_REQUEST (as
    Kafka, which validates before it picks the shard), not NOT_COORDINATOR
    from the shard the blank id hashes to."""
    from kcoord.server.consumer_group_handlers import ConsumerGroupApi
    api = ConsumerGroupApi(node.runtime, node.catalogue, node.config)
    req = {"group_id": "   ", "member_id": "m", "member_epoch": 0, "instance_id": None,
           "rack_id": None, "rebalance_timeout_ms": 30000, "subscribed_topic_names": ["t"],
           "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": []}
    resp = api.consumer_group_heartbeat(ctx(68, 1), req)
    assert resp["error_code"] == Err.INVALID_REQUEST
    assert resp["error_message"] == "GroupId can't be empty."


def test_lost_leadership_at_the_durability_seam_unloads_the_shard(node):
    """A write the durability seam cannot complete because this node no longer
    leads the log: NOT_COORDINATOR for it and the parked requests, and the
    shard unloads (no reload from a log this node does not lead)."""
    async def scenario():
        h, runtime = node.groups, node.runtime
        await runtime.load(0, 3)
        member, generation = await stable_group(h)
        parked = await parked_join(h)
        node.sync.fail = NotReplicated(Err.NOT_LEADER_OR_FOLLOWER)
        commit = await answer(h.offset_commit(ctx(8, 8), commit_req(member, generation)))
        assert commit_code(commit) == Err.NOT_COORDINATOR
        assert (await answer(parked))["error_code"] == Err.NOT_COORDINATOR
        assert node.shard().state is NOT_OWNED and node.shard()._load_task is None
        node.sync.fail = False
        await runtime.load(0, 4)  # leader again
        assert fetched(await answer(h.offset_fetch(ctx(9, 8), fetch_req())))[0] == Err.NONE

    asyncio.run(scenario())


class FailingFence:
    """A durability whose takeover fence fails (as a log that cannot be read)."""
    closed = False
    replicated = False

    def __init__(self, sync) -> None:
        self.inner = sync
        self.fail = True

    def sync(self, logs, done) -> None:
        self.inner.sync(logs, done)

    def append_error(self, plog) -> int:
        return self.inner.append_error(plog)

    def serve_error(self, plog) -> int:
        return self.inner.serve_error(plog)

    async def replayed(self, plog, end_offset: int, epoch: int) -> None:
        if self.fail:
            raise OSError("cannot read the log (test)")

    def close(self) -> None:
        self.inner.close()


def test_a_failed_load_answers_not_coordinator_and_wait_loaded_returns(node):
    """Regression (found while building the runtime simulation, whose
    failed-load step covers it): a shard whose load failed kept its finished
    load task, so wait_loaded() never returned.  It answers NOT_COORDINATOR
    and loads again when told."""
    async def scenario():
        fence = node.runtime.commit.durability = FailingFence(node.sync)
        node.runtime.load(0, 1)
        await asyncio.wait_for(node.runtime.wait_loaded(), 10)
        assert node.shard().state == "failed" and not node.runtime.owns(0)
        assert node.groups.join_group(ctx(11, 7), join_req())["error_code"] == \
            Err.NOT_COORDINATOR
        fence.fail = False
        await node.runtime.load(0, 1)
        assert node.shard().state is ACTIVE
    asyncio.run(scenario())
