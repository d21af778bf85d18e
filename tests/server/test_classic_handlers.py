"""GroupHandlers' classic membership APIs on a real coordinator runtime (tmp
data dir, one event loop): the paths a real server rarely shows (a loading
shard, a failed write, a shard reloaded under a parked request)."""
from __future__ import annotations

import asyncio

import pytest

from kcoord.protocol.errors import Err

from tests.coordinator.test_classic_core import sub
from tests.server.runtime_harness import Node, answer, ctx


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path)
    yield n
    n.close()


def join_req(member_id: str = "", group: str = "g") -> dict:
    return {"group_id": group, "session_timeout_ms": 10000, "rebalance_timeout_ms": 30000,
            "member_id": member_id, "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": sub("t")}], "reason": None}


def test_loading_shard(node):
    async def scenario():
        node.runtime.load(0, 0)  # loading until the loop runs its task
        h = node.groups
        assert h.join_group(ctx(11, 7), join_req())["error_code"] == \
            Err.COORDINATOR_LOAD_IN_PROGRESS
        sync = {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None,
                "protocol_type": "consumer", "protocol_name": "range", "assignments": []}
        assert h.sync_group(ctx(14, 5), sync)["error_code"] == Err.COORDINATOR_LOAD_IN_PROGRESS
        leave = {"group_id": "g", "member_id": "", "members": [
            {"member_id": "m", "group_instance_id": None, "reason": None}]}
        assert h.leave_group(ctx(13, 5), leave)["error_code"] == Err.COORDINATOR_LOAD_IN_PROGRESS
        # a heartbeat to a loading coordinator is answered NONE (Kafka does the same)
        hb = {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None}
        assert h.heartbeat(ctx(12, 4), hb)["error_code"] == Err.NONE
        await node.runtime.wait_loaded()
        assert h.heartbeat(ctx(12, 4), hb)["error_code"] == Err.UNKNOWN_MEMBER_ID

    asyncio.run(scenario())


def test_join_protocol_name_shape_by_version(node):
    h = node.groups
    bad = dict(join_req(), group_id="")
    assert h.join_group(ctx(11, 5), bad)["protocol_name"] == ""
    assert h.join_group(ctx(11, 7), bad)["protocol_name"] is None
    assert h.join_group(ctx(11, 7), bad)["error_code"] == Err.INVALID_GROUP_ID


def test_failed_write_answers_coordinator_not_available(node):
    async def scenario():
        node.runtime.start()
        await node.runtime.wait_loaded()
        node.sync.fail = True
        old_core = node.shard().core
        # a new group: its record fails to become durable
        response = await answer(node.groups.join_group(ctx(11, 7), join_req()))
        assert response["error_code"] == Err.COORDINATOR_NOT_AVAILABLE
        assert node.shard().core is not old_core  # memory was ahead of the log: reloaded
        node.sync.fail = False
        await node.runtime.wait_loaded()
        assert node.shard().loaded  # (the record did reach the log: the reload replays it)

    asyncio.run(scenario())


def commit_req(member: str, generation: int) -> dict:
    return {"group_id": "g", "generation_id_or_member_epoch": generation, "member_id": member,
            "group_instance_id": None, "retention_time_ms": -1, "topics": [
                {"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 1,
                                              "committed_leader_epoch": -1,
                                              "committed_metadata": ""}]}]}


async def stable_group(h) -> tuple[str, int]:
    """One member joins and syncs: (member id, generation)."""
    member = (await answer(h.join_group(ctx(11, 7), join_req())))["member_id"]
    joined = await answer(h.join_group(ctx(11, 7), join_req(member)))
    assert joined["error_code"] == Err.NONE
    sync = {"group_id": "g", "generation_id": joined["generation_id"], "member_id": member,
            "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
            "assignments": [{"member_id": member, "assignment": b""}]}
    assert (await answer(h.sync_group(ctx(14, 5), sync)))["error_code"] == Err.NONE
    return member, joined["generation_id"]


async def parked_join(h):
    """A second member joins the stable group: its join waits for the first to rejoin."""
    other = (await answer(h.join_group(ctx(11, 7), join_req())))["member_id"]
    parked = h.join_group(ctx(11, 7), join_req(other))
    await asyncio.sleep(0.05)
    assert not parked.done()
    return parked


def test_parked_join_answers_not_coordinator_when_the_shard_reloads(node):
    """A failed write reloads the shard: a join parked in the old core is
    answered NOT_COORDINATOR at once (no polling)."""
    async def scenario():
        node.runtime.start()
        await node.runtime.wait_loaded()
        h = node.groups
        member, generation = await stable_group(h)
        parked = await parked_join(h)
        node.sync.fail = True
        committed = await answer(h.offset_commit(ctx(8, 8), commit_req(member, generation)))
        assert committed["topics"][0]["partitions"][0]["error_code"] == \
            Err.COORDINATOR_NOT_AVAILABLE
        assert (await answer(parked, timeout=1))["error_code"] == Err.NOT_COORDINATOR

    asyncio.run(scenario())


@pytest.mark.parametrize("version", [3, 4])
def test_heartbeat_arms_the_session_timer(node, version):
    async def scenario():
        node.runtime.start()
        await node.runtime.wait_loaded()
        h = node.groups
        member = (await answer(h.join_group(ctx(11, 7), join_req())))["member_id"]
        joined = await answer(h.join_group(ctx(11, 7), join_req(member)))
        assert joined["error_code"] == Err.NONE
        shard = node.shard()
        key = ("classic-heartbeat", "g", member)
        shard.cancel_all_timers()
        shard.core.timers.armed.clear()  # as if none were armed
        hb = {"group_id": "g", "generation_id": joined["generation_id"], "member_id": member,
              "group_instance_id": None}
        assert (await answer(h.heartbeat(ctx(12, version), hb)))["error_code"] == Err.NONE
        assert list(shard._timers) == [key]

    asyncio.run(scenario())
