"""The core's observer (coordinator/observer.py) over KIP-848 groups, driven
with a fake clock: a rebalance starts at each epoch bump that leaves members
(with the reason the handler gave), completes when the group is Stable
again, and a group that empties is not a rebalance; replaying the log
without the observer reports nothing."""
from __future__ import annotations

from kcoord.coordinator.consumer_group import TopicInfo
from kcoord.coordinator.observer import CoordinatorObserver

from .cg_harness import Harness, join_request, owned_list, tid, wire_assignment, hb_request


class Recorder(CoordinatorObserver):
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def rebalance_started(self, group_id, protocol, epoch, members, reason):
        self.events.append(("started", group_id, protocol, epoch, members, reason))

    def rebalance_completed(self, group_id, protocol, epoch, members):
        self.events.append(("completed", group_id, protocol, epoch, members))

    def member_expired(self, group_id, member_id, protocol):
        self.events.append(("expired", group_id, member_id, protocol))


def _ack(h: Harness, member: str, resp: dict) -> dict:
    """Heartbeat back the assignment the member was given (it owns it now)."""
    a = wire_assignment(resp) or {}
    return h.heartbeat(hb_request(member_id=member, epoch=resp["member_epoch"],
                                  owned=owned_list(a)))


def test_consumer_group_rebalances_as_the_observer_sees_them():
    h = Harness(topics={"foo": TopicInfo(tid(1), 4)})
    rec = Recorder()
    h.shard.set_observer(rec)
    r1 = h.heartbeat(join_request("m1"))
    # alone, the member gets everything at once: started and completed in one go
    assert rec.events == [("started", "g", "consumer", 1, 1, "member m1 joined"),
                          ("completed", "g", "consumer", 1, 1)]
    r1 = _ack(h, "m1", r1)

    # a second member: epoch 2; complete once both hold their partitions
    r2 = h.heartbeat(join_request("m2"))
    assert rec.events[-1] == ("started", "g", "consumer", 2, 2, "member m2 joined")
    for _ in range(4):  # revoke on m1, then both acknowledge what they hold
        r1 = _ack(h, "m1", h.heartbeat(hb_request(member_id="m1", epoch=r1["member_epoch"],
                                                  owned=owned_list(wire_assignment(r1) or {}))))
        r2 = _ack(h, "m2", r2)
        if rec.events[-1][0] == "completed":
            break
    assert rec.events[-1] == ("completed", "g", "consumer", 2, 2)

    assert [e[0] for e in rec.events].count("started") == 2

    # m1 keeps heartbeating, m2 falls silent: its expiry is reported and
    # starts a rebalance whose reason names it
    session = h.config.consumer_group_session_timeout_ms
    for _ in range(3):
        h.advance(session // 3)
        r1 = h.heartbeat(hb_request(member_id="m1", epoch=r1["member_epoch"]))
    h.advance(session // 3)
    assert ("expired", "g", "m2", "consumer") in rec.events
    assert ("started", "g", "consumer", 3, 1, "member m2's session expired") in rec.events


def test_an_emptied_group_is_not_a_rebalance_and_replay_reports_nothing():
    h = Harness(topics={"foo": TopicInfo(tid(1), 2)})
    rec = Recorder()
    h.shard.set_observer(rec)
    r = h.heartbeat(join_request("m1"))
    _ack(h, "m1", r)
    n = len(rec.events)
    h.heartbeat(hb_request(member_id="m1", epoch=-1))  # leaves: the group empties
    assert rec.events[n:] == []
    # the same log replayed into a shard without an observer reports nothing,
    # and a shard given one afterwards starts from the loaded state
    again = Recorder()
    replayed = h.replayed()
    replayed.set_observer(again)
    assert again.events == []
