"""A coordinator whose lease lapsed expires no member on its own clock
(seed 261 of the fault runs): while this node cannot tell it still leads a
shard, the shard's timers wait, and when it serves again every member's
session counts from then (as after a load, Kafka's rule).

The real runtime and handlers on a virtual clock (runtime_sim's VirtualLoop):
a durability seam that, while `lapsed`, answers serve_error as a replica of a
lapsed lease does and holds its rounds (no high watermark moves)."""
from __future__ import annotations

import asyncio

import pytest

from kcoord.protocol.errors import Err
from kcoord.server.clock import LoopClock
from kcoord.server.consumer_group_handlers import ConsumerGroupApi

from tests.server.runtime_harness import Node, ctx
from tests.server.runtime_sim import VirtualLoop

SESSION_MS = 10_000


class LapsingDurability:
    """Rounds complete on the next loop turn, except while `lapsed`: then
    they wait (a lapsed leader acknowledges nothing) and serve_error says
    this node cannot tell it still leads."""
    closed = False
    replicated = True

    def __init__(self, loop: VirtualLoop) -> None:
        self.loop = loop
        self.lapsed = False
        self.held: list = []

    @staticmethod
    def append_error(_plog) -> int:
        return Err.NONE

    def serve_error(self, _plog) -> int:
        return Err.NOT_LEADER_OR_FOLLOWER if self.lapsed else Err.NONE

    def sync(self, logs, done) -> None:
        if self.lapsed:
            self.held.append((logs, done))
        else:
            self.loop.call_soon(done, [None] * len(logs))

    def restore(self) -> None:
        self.lapsed = False
        held, self.held = self.held, []
        for logs, done in held:
            self.loop.call_soon(done, [None] * len(logs))

    async def replayed(self, _plog, _end: int, _epoch: int) -> None:
        return None

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def lab(tmp_path):
    loop = VirtualLoop()
    asyncio.set_event_loop(loop)
    node = Node(tmp_path, clock=LoopClock(lambda: loop.now_ms),
                **{"group.consumer.session.timeout.ms": SESSION_MS,
                   "group.consumer.min.session.timeout.ms": 6000})
    durability = LapsingDurability(loop)
    node.runtime.commit.durability = durability
    node.runtime.commit.write_timeout = None  # the write timeout is not what is tested
    api = ConsumerGroupApi(node.runtime, node.catalogue, node.config)
    yield loop, node, durability, api
    node.close()
    asyncio.set_event_loop(None)
    loop.close()


def within(loop, fn, *args):
    """fn(*args) run by the loop (the runtime needs a running loop); its value."""
    out: list = []
    loop.call_soon(lambda: out.append(fn(*args)))
    loop.run_idle()
    return out[0]


def heartbeat(loop, api, member_id: str, epoch: int, owned=None):
    """A ConsumerGroupHeartbeat: its answer once the loop ran (None: still held)."""
    joining = epoch == 0
    req = {"group_id": "g", "member_id": member_id, "member_epoch": epoch,
           "instance_id": None, "rack_id": None,
           "rebalance_timeout_ms": 20_000 if joining else -1,
           "subscribed_topic_names": ["t"] if joining else None,
           "subscribed_topic_regex": None, "server_assignor": None,
           "topic_partitions": [] if joining else owned}
    got = within(loop, api.consumer_group_heartbeat, ctx(68, 1), req)
    if isinstance(got, dict):
        return got
    if isinstance(got, bytes):
        from kcoord.protocol.api import response_codec
        return response_codec(68, 1)[1](got, 0)[0]
    return got.result() if got.done() else None


def members(node) -> set:
    group = node.runtime.shard_for("g").core.consumer.groups.get("g")
    return set(group.members) if group is not None else set()


def stable_member(loop, node, api) -> tuple[str, int]:
    within(loop, node.runtime.load, 0, 1)
    loop.run_idle()
    member = "m-1"
    first = heartbeat(loop, api, member, 0)
    assert first["error_code"] == Err.NONE
    epoch = first["member_epoch"]
    owned = [{"topic_id": tp["topic_id"], "partitions": list(tp["partitions"])}
             for tp in first["assignment"]["topic_partitions"]]
    steady = heartbeat(loop, api, member, epoch, owned)
    assert steady["error_code"] == Err.NONE
    return member, steady["member_epoch"]


def test_no_member_expires_during_a_lapse_and_sessions_restart_after_it(lab, caplog):
    caplog.set_level("INFO", logger="kcoord.coordinator")
    loop, node, durability, api = lab
    member, epoch = stable_member(loop, node, api)
    runtime = node.runtime
    # the lease lapses; the member's next heartbeat counts in the core but its
    # answer is held behind a write that is not durable (a client that
    # waits for it sends nothing more: librdkafka keeps one in flight)
    durability.lapsed = True
    within(loop, runtime.on_lease_lapsed)
    api_answer = heartbeat(loop, api, member, epoch, None)
    assert api_answer is None or api_answer["error_code"] == Err.NONE
    # the lapse lasts three session timeouts: no expiry on this node's clock
    loop.advance(3 * SESSION_MS)
    assert members(node) == {member}
    # the lease is confirmed again: the session counts from now
    durability.restore()
    within(loop, runtime.on_lease_restored)
    said = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("lease lapsed: ") for m in said), said
    assert any(m.startswith("lease restored: 1 shards in doubt serve again") for m in said), said
    loop.advance(SESSION_MS - 500)
    assert members(node) == {member}
    # and a member that never heartbeats again still expires, a session later
    loop.advance(1_000)
    assert members(node) == set()


def test_a_lapse_ended_by_a_new_state_resumes_on_the_shards_own_check(lab, caplog):
    """The restore is not told (the lapse ended by a new state instead): the
    shard's own check finds it serving again and restarts the sessions."""
    loop, node, durability, api = lab
    member, _epoch = stable_member(loop, node, api)
    durability.lapsed = True
    within(loop, node.runtime.on_lease_lapsed)
    loop.advance(2 * SESSION_MS)
    assert members(node) == {member}
    durability.restore()  # no on_lease_restored
    caplog.set_level("INFO", logger="kcoord.coordinator")
    loop.advance(1_000)   # the check (every LAPSE_RECHECK_S) resumed the shard
    assert members(node) == {member}
    assert any("serving again after a lapse" in r.getMessage() for r in caplog.records)
    loop.advance(SESSION_MS - 1_500)
    assert members(node) == {member}
    loop.advance(1_000)
    assert members(node) == set()
