"""GroupHandlers' classic membership APIs against a fake shard runtime: the
paths a real server rarely shows (a loading shard, a failed write, a shard
reloaded under a parked request)."""
from __future__ import annotations

import asyncio

import pytest

from kcoord.coordinator.shard import CoordinatorConfig, CoordinatorShard
from kcoord.protocol.errors import Err
from kcoord.server import group_handlers as gh
from kcoord.server.dispatch import RequestContext
from kcoord.server.group_handlers import GroupHandlers

from tests.coordinator.test_classic_core import sub


class FakeShard:
    def __init__(self, loaded: bool = True) -> None:
        self.loaded = loaded
        self.core = CoordinatorShard(0, CoordinatorConfig(group_initial_rebalance_delay_ms=0))
        self.fail_writes = False
        self.timers: list = []

    def write(self, records):
        for record in records:
            self.core.replay(record)
        if not records:
            return None
        fut = asyncio.get_running_loop().create_future()
        if self.fail_writes:
            fut.set_exception(OSError("disk full"))
        else:
            fut.set_result(None)
        return fut

    def arm_timers(self, timers) -> None:
        self.timers.extend(timers)


class FakeRuntime:
    def __init__(self, shard: FakeShard) -> None:
        self.shards = [shard]

    def shard_for(self, group_id: str) -> FakeShard:
        return self.shards[0]


def handlers(shard: FakeShard) -> GroupHandlers:
    return GroupHandlers(FakeRuntime(shard), catalogue=None, config=None)


def ctx(key: int, version: int) -> RequestContext:
    return RequestContext(key, version, 1, "client", "127.0.0.1")


def join_req(member_id: str = "") -> dict:
    return {"group_id": "g", "session_timeout_ms": 10000, "rebalance_timeout_ms": 30000,
            "member_id": member_id, "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": sub("t")}], "reason": None}


def run(coro_or_value):
    if asyncio.iscoroutine(coro_or_value):
        return asyncio.run(coro_or_value)
    return coro_or_value


def test_loading_shard():
    h = handlers(FakeShard(loaded=False))
    assert run(h.join_group(ctx(11, 7), join_req()))["error_code"] == \
        Err.COORDINATOR_LOAD_IN_PROGRESS
    sync = {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None,
            "protocol_type": "consumer", "protocol_name": "range", "assignments": []}
    assert run(h.sync_group(ctx(14, 5), sync))["error_code"] == Err.COORDINATOR_LOAD_IN_PROGRESS
    leave = {"group_id": "g", "member_id": "", "members": [
        {"member_id": "m", "group_instance_id": None, "reason": None}]}
    assert run(h.leave_group(ctx(13, 5), leave))["error_code"] == Err.COORDINATOR_LOAD_IN_PROGRESS
    # a heartbeat to a loading coordinator is answered NONE (Kafka does the same)
    hb = {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None}
    assert run(h.heartbeat(ctx(12, 4), hb))["error_code"] == Err.NONE


def test_join_protocol_name_shape_by_version():
    shard = FakeShard()
    h = handlers(shard)
    bad = dict(join_req(), group_id="")
    assert run(h.join_group(ctx(11, 5), bad))["protocol_name"] == ""
    assert run(h.join_group(ctx(11, 7), bad))["protocol_name"] is None


def test_failed_write_answers_coordinator_not_available():
    shard = FakeShard()
    shard.fail_writes = True
    h = handlers(shard)
    response = run(h.join_group(ctx(11, 7), join_req()))  # a new group: its record fails
    assert response["error_code"] == Err.COORDINATOR_NOT_AVAILABLE


def test_parked_join_answers_not_coordinator_when_the_shard_reloads(monkeypatch):
    monkeypatch.setattr(gh, "PARKED_CHECK_S", 0.01)
    shard = FakeShard()
    h = handlers(shard)

    async def scenario():
        first = await h.join_group(ctx(11, 7), join_req())
        member = first["member_id"]
        # a second member id, so the first join stays parked after the initial delay
        core = shard.core
        core.join_group(join_req(), 7, "other", "/h", object(), 0)
        task = asyncio.ensure_future(h.join_group(ctx(11, 7), join_req(member)))
        await asyncio.sleep(0.05)
        assert not task.done()
        shard.core = CoordinatorShard(0, core.config)  # the runtime reloaded the shard
        return await asyncio.wait_for(task, 5)

    response = run(scenario())
    assert response["error_code"] == Err.NOT_COORDINATOR


@pytest.mark.parametrize("version", [3, 4])
def test_heartbeat_arms_the_session_timer(version):
    shard = FakeShard()
    h = handlers(shard)

    async def scenario():
        member = (await h.join_group(ctx(11, 7), join_req()))["member_id"]
        task = asyncio.ensure_future(h.join_group(ctx(11, 7), join_req(member)))
        await asyncio.sleep(0)
        shard.core.on_timer(("classic-join", "g"), 2**62)  # the initial delay elapses
        return member

    member = run(scenario())
    shard.timers.clear()
    hb = {"group_id": "g", "generation_id": 1, "member_id": member, "group_instance_id": None}
    assert run(h.heartbeat(ctx(12, version), hb))["error_code"] == Err.NONE
    assert [t.key for t in shard.timers] == [("classic-heartbeat", "g", member)]
