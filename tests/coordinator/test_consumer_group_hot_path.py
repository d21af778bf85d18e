"""The KIP-848 heartbeat hot path: the steady-heartbeat shortcut gives exactly
what the long path gives, and session timers are re-armed lazily (one timer
firing per session timeout, expiry still a session timeout after the last
heartbeat)."""
from __future__ import annotations

import pytest

from kcoord.coordinator.consumer_group import TopicInfo
from kcoord.protocol.errors import Err
from tests.coordinator.cg_harness import GROUP, Harness, hb_request, join_request, owned_list, tid
from tests.coordinator.test_consumer_group_simulation import Simulation

FOO = tid(1)
SESSION = ("cg-session", GROUP, "m1")


@pytest.fixture
def h():
    return Harness(topics={"foo": TopicInfo(FOO, 6)})


def _traced(seed: int, shortcut: bool) -> tuple[list, list, list, dict, int]:
    """Run one simulated schedule; every (request, response), the log, the
    timers fired and left, and how often the shortcut answered (the manager's
    switch and count, not a patched method: the compiled class calls its own
    methods natively)."""
    sim = Simulation(seed)
    sim.h.shard.consumer.steady_shortcut = shortcut
    trace = []
    heartbeat = sim.h.heartbeat

    def traced(req, *args, **kw):
        resp = heartbeat(req, *args, **kw)
        trace.append((req, dict(resp)))
        return resp
    sim.h.heartbeat = traced
    sim.run()
    return trace, sim.h.log, sim.h.fired, dict(sim.h.timers), sim.h.steady_answers()


@pytest.mark.parametrize("seed", range(0, 400, 7))
def test_steady_shortcut_equals_long_path(seed):
    fast = _traced(seed, True)
    slow = _traced(seed, False)
    assert fast[:4] == slow[:4]
    assert slow[4] == 0


def test_shortcut_is_taken_by_steady_heartbeats():
    assert sum(_traced(seed, True)[4] for seed in range(20)) > 100


def test_steady_heartbeat_answer(h):
    resp = h.heartbeat(join_request("m1"))
    h.heartbeat(hb_request(GROUP, "m1", 1, owned=owned_list(h.member("m1").assigned)))
    log = len(h.log)
    resp = h.heartbeat(hb_request(GROUP, "m1", 1))
    assert resp == {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                    "member_id": "m1", "member_epoch": 1, "heartbeat_interval_ms": 5000,
                    "assignment": None}
    assert len(h.log) == log
    # a stale epoch, an unknown member and another client id still take the long path
    assert h.heartbeat(hb_request(GROUP, "m1", 2))["error_code"] == Err.FENCED_MEMBER_EPOCH
    assert h.heartbeat(hb_request(GROUP, "m9", 1))["error_code"] == Err.UNKNOWN_MEMBER_ID
    resp = h.heartbeat(hb_request(GROUP, "m1", 1), client_id="other")
    assert resp["error_code"] == 0 and h.member("m1").client_id == "other"
    assert len(h.log) == log + 1  # the member metadata record of the new client id
    resp = h.heartbeat(hb_request(GROUP, "m1", 1), client_id="other", client_host="/10.0.0.9")
    assert resp["error_code"] == 0 and h.member("m1").client_host == "/10.0.0.9"
    assert len(h.log) == log + 2
    # any field set takes the long path: each of these changes the member
    for field, value, attr in (("rack_id", "r1", "rack_id"),
                               ("server_assignor", "range", "server_assignor"),
                               ("rebalance_timeout_ms", 12345, "rebalance_timeout_ms")):
        req = {**hb_request(GROUP, "m1", 1), field: value}
        assert h.heartbeat(req, client_id="other", client_host="/10.0.0.9")["error_code"] == 0
        assert getattr(h.member("m1"), attr) == value
    epoch = h.group().group_epoch
    req = {**hb_request(GROUP, "m1", 1), "subscribed_topic_names": ["foo", "bar"]}
    resp = h.heartbeat(req, client_id="other", client_host="/10.0.0.9")
    assert h.group().group_epoch == epoch + 1 and resp["member_epoch"] == epoch + 1


def test_session_timer_rearmed_lazily(h):
    t0 = h.now
    h.heartbeat(join_request("m1"))
    assert h.timers == {SESSION: t0 + 45000}
    for _ in range(8):  # heartbeats move the deadline, not the armed timer
        h.now += 5000
        result = h.shard.consumer_group_heartbeat(hb_request(GROUP, "m1", 1), 1,
                                                  "client", "/127.0.0.1", h.now, h.topics)
        assert not [t for t in result.timers if t.key == SESSION]
        h.apply(result)
    last = h.now
    assert h.timers[SESSION] == t0 + 45000
    h.advance(t0 + 45000 - h.now)  # fires early: armed again for the real deadline
    assert h.fired == [SESSION] and h.timers[SESSION] == last + 45000
    assert "m1" in h.group().members
    h.advance(last + 45000 - 1 - h.now)
    assert "m1" in h.group().members
    h.advance(1)  # a session timeout after the last heartbeat
    assert "m1" not in h.group().members and SESSION not in h.timers


def test_leave_forgets_the_session(h):
    h.heartbeat(join_request("m1"))
    h.now += 5000
    h.heartbeat(hb_request(GROUP, "m1", 1))
    h.heartbeat(hb_request(GROUP, "m1", -1))
    assert SESSION not in h.timers
    mgr = h.shard.consumer
    assert SESSION not in mgr.timers.deadlines and SESSION not in mgr.timers.armed
    # a rejoin with the same id arms a fresh timer
    h.heartbeat(join_request("m1"))
    assert h.timers[SESSION] == h.now + 45000


def test_loaded_shard_sessions_rearm_lazily(h):
    h.heartbeat(join_request("m1"))
    fresh = h.replayed()
    result = fresh.on_loaded(h.now)
    assert [t.deadline_ms for t in result.timers if t.key == SESSION] == [h.now + 45000]
    later = h.now + 10000
    again = fresh.consumer_group_heartbeat(hb_request(GROUP, "m1", 1), 1, "client",
                                           "/127.0.0.1", later, h.topics)
    assert again.response["error_code"] == 0
    assert not [t for t in again.timers if t.key == SESSION]
    fired = fresh.on_timer(SESSION, h.now + 45000)
    assert fired.records == [] and [(t.key, t.deadline_ms) for t in fired.timers] == [
        (SESSION, later + 45000)]
