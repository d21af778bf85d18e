"""The KIP-848 consumer group core, request by request, with a fake clock.

Follows KAFKA_REFERENCE.md sections 1.5, 1.7, 1.8 and 2 (Kafka's
GroupMetadataManager consumerGroupHeartbeat path, CurrentAssignmentBuilder,
ConsumerGroup).  Every test ends by checking that replaying the emitted
records into a fresh shard gives the same snapshot().
"""
from __future__ import annotations

import pytest

from kcoord.coordinator.consumer_group import (GROUP_ASSIGNING, GROUP_EMPTY, GROUP_RECONCILING,
                                               GROUP_STABLE, STABLE, UNRELEASED_PARTITIONS,
                                               UNREVOKED_PARTITIONS, TopicInfo)
from kcoord.coordinator.classic_group import ClassicGroup
from kcoord.coordinator.offsets import OffsetValue, offset_record
from kcoord.coordinator.shard import CoordinatorConfig
from kcoord.protocol.errors import Err
from tests.coordinator.cg_harness import (GROUP, Harness, hb_request, join_request, owned_list,
                                          tid, wire_assignment)

FOO, BAR = tid(1), tid(2)
TOPICS = {"foo": TopicInfo(FOO, 6), "bar": TopicInfo(BAR, 3)}


@pytest.fixture
def h():
    harness = Harness(topics=TOPICS)
    yield harness
    assert harness.replayed().snapshot() == harness.shard.snapshot()


def ack(h, member_id, resp_or_epoch=None, owned=None, **kw):
    """A heartbeat reporting exactly what the coordinator has assigned to the member."""
    m = h.member(member_id)
    epoch = m.member_epoch if resp_or_epoch is None else resp_or_epoch
    owned = owned_list(m.assigned) if owned is None else owned
    return h.heartbeat(hb_request(GROUP, member_id, epoch, owned=owned, **kw))


# ================================================================ validation
@pytest.mark.parametrize("req, version, message", [
    (join_request(""), 1, "MemberId can't be empty."),
    (hb_request(GROUP, "", 3), 0, "MemberId can't be empty."),
    (hb_request(GROUP, "", -1), 0, "MemberId can't be empty."),
    (join_request("m", group=""), 1, "GroupId can't be empty."),
    (join_request("m", instance_id=""), 1, "InstanceId can't be empty."),
    (join_request("m", rack_id=""), 1, "RackId can't be empty."),
    # blank is empty, as Kafka's throwIfEmptyString (value.trim().isEmpty())
    (join_request("m", group="   "), 1, "GroupId can't be empty."),
    (join_request("m", group="\t\n"), 1, "GroupId can't be empty."),
    (hb_request(GROUP, "  ", 3), 0, "MemberId can't be empty."),
    (join_request(" "), 1, "MemberId can't be empty."),
    (join_request("m", instance_id="  "), 1, "InstanceId can't be empty."),
    (join_request("m", rack_id=" "), 1, "RackId can't be empty."),
    (join_request("m", rebalance_timeout_ms=-1), 1,
     "RebalanceTimeoutMs must be provided in first request."),
    ({**join_request("m"), "topic_partitions": None}, 1,
     "TopicPartitions must be empty when (re-)joining."),
    ({**join_request("m"), "topic_partitions": [{"topic_id": FOO, "partitions": [0]}]}, 1,
     "TopicPartitions must be empty when (re-)joining."),
    (join_request("m", names=None), 1,
     "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining."),
    (hb_request(GROUP, "m", -2), 1, "InstanceId can't be null."),
    (hb_request(GROUP, "m", -3), 1, "MemberEpoch is invalid."),
])
def test_invalid_requests(h, req, version, message):
    resp = h.heartbeat(req, version)
    assert resp["error_code"] == Err.INVALID_REQUEST
    assert resp["error_message"] == message
    assert h.log == []


def test_v0_join_gets_a_server_member_id(h):
    resp = h.heartbeat(join_request(""), version=0)
    assert resp["error_code"] == 0 and resp["member_id"] == "server-0"
    assert resp["member_epoch"] == 1 and resp["heartbeat_interval_ms"] == 5000


def test_unsupported_assignor(h):
    resp = h.heartbeat(join_request("m", assignor="sticky"))
    assert resp["error_code"] == Err.UNSUPPORTED_ASSIGNOR
    assert "Supported assignors: uniform, range." in resp["error_message"]


def test_invalid_regex_writes_nothing(h):
    for bad in ("[", "(?=foo)bar", r"(a)\1"):
        resp = h.heartbeat(join_request("m", names=None, regex=bad))
        assert resp["error_code"] == Err.INVALID_REGULAR_EXPRESSION, bad
        assert bad in resp["error_message"]
    assert h.log == [] and h.group() is None


def test_unknown_group_and_member(h):
    resp = h.heartbeat(hb_request(GROUP, "m", 1))
    assert resp["error_code"] == Err.GROUP_ID_NOT_FOUND
    h.heartbeat(join_request("m1"))
    resp = h.heartbeat(hb_request(GROUP, "ghost", 1))
    assert resp["error_code"] == Err.UNKNOWN_MEMBER_ID
    resp = h.heartbeat(hb_request(GROUP, "ghost", -1))
    assert resp["error_code"] == Err.UNKNOWN_MEMBER_ID


def test_group_max_size():
    h = Harness(CoordinatorConfig(consumer_group_max_size=1), TOPICS)
    assert h.heartbeat(join_request("m1"))["error_code"] == 0
    assert h.heartbeat(join_request("m2"))["error_code"] == Err.GROUP_MAX_SIZE_REACHED
    assert h.heartbeat(hb_request(GROUP, "m1", 1, owned=[]))["error_code"] == 0


# ================================================================ join and epochs
def test_first_member_gets_everything_and_records_in_kafka_order(h):
    resp = h.heartbeat(join_request("m1", names=["foo", "bar"]))
    assert resp["member_epoch"] == 1
    assert wire_assignment(resp) == {FOO: set(range(6)), BAR: {0, 1, 2}}
    # member metadata, partition metadata, group epoch, target, target epoch, current assignment
    assert [r[0][:2] for r in h.log] == [b"\x00\x05", b"\x00\x04", b"\x00\x03", b"\x00\x07",
                                         b"\x00\x06", b"\x00\x08"]
    g = h.group()
    assert g.state == GROUP_STABLE and g.group_epoch == 1 and g.assignment_epoch == 1
    assert h.timers == {("cg-session", GROUP, "m1"): h.now + 45000}


def test_steady_heartbeat_writes_nothing_and_omits_assignment(h):
    h.heartbeat(join_request("m1"))
    before = len(h.log)
    resp = ack(h, "m1")
    assert resp["error_code"] == 0 and resp["assignment"] is None
    resp = h.heartbeat(hb_request(GROUP, "m1", 1))
    assert resp["assignment"] is None
    assert len(h.log) == before
    # a full request (rebalance timeout, names and owned) gets the assignment again
    resp = h.heartbeat(hb_request(GROUP, "m1", 1, rebalance_timeout_ms=30000, names=["foo"],
                                  owned=owned_list(h.member("m1").assigned)))
    assert wire_assignment(resp) == {FOO: set(range(6))}


def test_fenced_member_epoch(h):
    h.heartbeat(join_request("m1"))
    resp = h.heartbeat(hb_request(GROUP, "m1", 7, owned=[]))
    assert resp["error_code"] == Err.FENCED_MEMBER_EPOCH
    h.heartbeat(join_request("m2"))
    ack(h, "m1")  # m1 is told to revoke
    ack(h, "m1")  # it has: epoch 2
    assert h.member("m1").member_epoch == 2
    resp = h.heartbeat(hb_request(GROUP, "m1", 1, owned=[{"topic_id": FOO, "partitions": [5]}]))
    assert resp["error_code"] == Err.FENCED_MEMBER_EPOCH  # previous epoch, but owns a revoked one


def test_lost_response_previous_epoch_is_accepted(h):
    h.heartbeat(join_request("m1"))
    h.heartbeat(join_request("m2"))
    ack(h, "m1")  # told to revoke
    ack(h, "m1")  # revoked: m1 -> epoch 2
    m1 = h.member("m1")
    assert (m1.member_epoch, m1.previous_member_epoch) == (2, 1)
    # the response was lost: m1 retries with epoch 1 and what it owns (a subset)
    resp = h.heartbeat(hb_request(GROUP, "m1", 1, rebalance_timeout_ms=30000, names=["foo"],
                                  owned=owned_list(m1.assigned)))
    assert resp["error_code"] == 0 and resp["member_epoch"] == 2
    assert wire_assignment(resp) == {t: set(p) for t, p in m1.assigned.items()}


def test_fenced_member_rejoins_with_epoch_zero(h):
    """KAFKA-19233: a member told FENCED_MEMBER_EPOCH rejoins with epoch 0 and its id."""
    h.heartbeat(join_request("m1"))
    resp = h.heartbeat(join_request("m1"))
    assert resp["error_code"] == 0 and resp["member_epoch"] == 1
    assert wire_assignment(resp) == {FOO: set(range(6))}


# ================================================================ reconciliation
def test_partition_moves_only_after_revocation(h):
    h.heartbeat(join_request("m1"))
    resp = h.heartbeat(join_request("m2"))
    g = h.group()
    assert g.group_epoch == 2 and g.assignment_epoch == 2
    # m2 is at the target epoch but its partitions are still held by m1
    assert resp["member_epoch"] == 2 and wire_assignment(resp) == {}
    assert h.member("m2").state == UNRELEASED_PARTITIONS
    target_m2 = g.target["m2"][FOO]

    # m1 heartbeats, still owning everything: it must revoke, epoch unchanged
    resp = h.heartbeat(hb_request(GROUP, "m1", 1, owned=[{"topic_id": FOO, "partitions": list(range(6))}]))
    m1 = h.member("m1")
    assert m1.state == UNREVOKED_PARTITIONS and resp["member_epoch"] == 1
    assert m1.pending_revocation == {FOO: target_m2}
    assert wire_assignment(resp) == {FOO: set(range(6)) - target_m2}
    assert ("cg-rebalance", GROUP, "m1") in h.timers

    # m2 still gets nothing while m1 owns them
    resp = h.heartbeat(hb_request(GROUP, "m2", 2, owned=[]))
    assert resp["assignment"] is None and h.member("m2").state == UNRELEASED_PARTITIONS

    # m1 acknowledges: epoch 2, STABLE; the rebalance timer is cancelled
    resp = ack(h, "m1", 1)
    assert resp["member_epoch"] == 2 and h.member("m1").state == STABLE
    assert ("cg-rebalance", GROUP, "m1") not in h.timers

    # now m2 gets them
    resp = h.heartbeat(hb_request(GROUP, "m2", 2, owned=[]))
    assert wire_assignment(resp) == {FOO: set(target_m2)}
    assert h.member("m2").state == STABLE and g.state == GROUP_STABLE


def test_null_owned_partitions_count_as_still_owned(h):
    h.heartbeat(join_request("m1"))
    h.heartbeat(join_request("m2"))
    h.heartbeat(hb_request(GROUP, "m1", 1))  # TopicPartitions null
    assert h.member("m1").state == UNREVOKED_PARTITIONS


def test_rebalance_timeout_fences_a_member_that_does_not_revoke(h):
    h.heartbeat(join_request("m1", rebalance_timeout_ms=10000))
    h.heartbeat(join_request("m2"))
    h.heartbeat(hb_request(GROUP, "m1", 1, owned=owned_list(h.member("m1").assigned)))
    assert h.member("m1").state == UNREVOKED_PARTITIONS
    h.heartbeat(hb_request(GROUP, "m2", 2, owned=[]))
    h.advance(10000)
    assert "m1" not in h.group().members
    assert h.group().group_epoch == 3
    resp = h.heartbeat(hb_request(GROUP, "m2", 2, owned=[]))
    assert wire_assignment(resp) == {FOO: set(range(6))}
    assert h.heartbeat(hb_request(GROUP, "m1", 1, owned=[]))["error_code"] == Err.UNKNOWN_MEMBER_ID


def test_rebalance_timer_ignored_when_member_moved_on(h):
    h.heartbeat(join_request("m1", rebalance_timeout_ms=10000))
    h.heartbeat(join_request("m2"))
    h.heartbeat(hb_request(GROUP, "m1", 1, owned=owned_list(h.member("m1").assigned)))
    timer = ("cg-rebalance", GROUP, "m1")
    deadline = h.timers[timer]
    ack(h, "m1", 1)
    assert timer not in h.timers
    # a stale firing of the old timer does nothing
    h.apply(h.shard.on_timer(timer, deadline))
    assert "m1" in h.group().members


def test_session_expiry_fences_and_bumps(h):
    h.heartbeat(join_request("m1"))
    h.heartbeat(join_request("m2"))
    h.advance(30000)
    ack(h, "m2")
    h.advance(20000)  # m1 silent for 50 s
    g = h.group()
    assert list(g.members) == ["m2"] and g.group_epoch == 3 and g.state == GROUP_ASSIGNING
    resp = ack(h, "m2")
    assert wire_assignment(resp) == {FOO: set(range(6))}
    assert g.state == GROUP_STABLE


def test_leave_minus_one(h):
    h.heartbeat(join_request("m1", names=["foo", "bar"]))
    h.heartbeat(join_request("m2", names=["bar"]))
    resp = h.heartbeat(hb_request(GROUP, "m1", 1, owned=[]))
    resp = h.heartbeat(hb_request(GROUP, "m1", -1))
    assert resp == {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                    "member_id": "m1", "member_epoch": -1, "heartbeat_interval_ms": 0,
                    "assignment": None}
    g = h.group()
    assert list(g.members) == ["m2"] and "m1" not in g.target
    assert set(g.subscription_metadata) == {"bar"}  # foo no longer subscribed
    assert ("cg-session", GROUP, "m1") not in h.timers
    resp = h.heartbeat(hb_request(GROUP, "m2", h.member("m2").member_epoch, owned=[]))
    assert wire_assignment(resp) == {BAR: {0, 1, 2}}


def test_last_member_leaves_group_empty_then_deleted(h):
    h.heartbeat(join_request("m1"))
    h.heartbeat(hb_request(GROUP, "m1", -1))
    assert h.group().state == GROUP_EMPTY
    assert h.shard.list_groups(["empty"], ["consumer"])[0]["group_state"] == "Empty"
    deleted = h.shard.delete_group(GROUP)
    error, records = deleted.response["error_code"], deleted.records
    assert error == Err.NONE
    h.apply(type("R", (), {"records": records, "timers": [], "replies": []})())
    assert h.group() is None


def test_delete_non_empty_group(h):
    h.heartbeat(join_request("m1"))
    refused = h.shard.delete_group(GROUP)
    assert (refused.response["error_code"], refused.records) == (Err.NON_EMPTY_GROUP, [])


# ================================================================ static members
def test_static_member_leave_and_rejoin_keeps_assignment(h):
    h.heartbeat(join_request("a1", instance_id="i-a"))
    h.heartbeat(join_request("b1", instance_id="i-b"))
    ack(h, "a1", 1)
    ack(h, "b1")
    a_assigned = h.member("a1").assigned
    epoch_before = h.group().group_epoch

    resp = h.heartbeat(hb_request(GROUP, "a1", -2, instance_id="i-a"))
    assert resp["member_epoch"] == -2 and resp["member_id"] == "a1"
    g = h.group()
    assert g.group_epoch == epoch_before and g.members["a1"].member_epoch == -2
    assert ("cg-session", GROUP, "a1") in h.timers  # the session keeps running

    # another instance id cannot take it; the same id with a new member id can
    resp = h.heartbeat(join_request("a2", instance_id="i-a"))
    assert resp["error_code"] == 0 and resp["member_id"] == "a2"
    assert wire_assignment(resp) == {t: set(p) for t, p in a_assigned.items()}
    assert g.group_epoch == epoch_before
    assert "a1" not in g.members and g.static_members["i-a"] == "a2"
    assert g.members["a2"].member_epoch == g.assignment_epoch


def test_unreleased_and_fenced_instance_id(h):
    h.heartbeat(join_request("a1", instance_id="i-a"))
    resp = h.heartbeat(join_request("a2", instance_id="i-a"))
    assert resp["error_code"] == Err.UNRELEASED_INSTANCE_ID
    resp = h.heartbeat(hb_request(GROUP, "a2", 1, instance_id="i-a", owned=[]))
    assert resp["error_code"] == Err.FENCED_INSTANCE_ID
    resp = h.heartbeat(hb_request(GROUP, "a2", -2, instance_id="i-a"))
    assert resp["error_code"] == Err.FENCED_INSTANCE_ID
    resp = h.heartbeat(hb_request(GROUP, "x", -2, instance_id="i-unknown"))
    assert resp["error_code"] == Err.UNKNOWN_MEMBER_ID


def test_static_member_left_is_fenced_after_session(h):
    h.heartbeat(join_request("a1", instance_id="i-a"))
    h.heartbeat(hb_request(GROUP, "a1", -2, instance_id="i-a"))
    h.advance(45000)
    assert h.group().members == {}


# ================================================================ subscriptions and topics
def test_subscription_change_bumps_epoch(h):
    h.heartbeat(join_request("m1", names=["foo"]))
    resp = h.heartbeat(hb_request(GROUP, "m1", 1, names=["foo", "bar"], owned=owned_list(h.member("m1").assigned)))
    assert resp["member_epoch"] == 2
    assert wire_assignment(resp) == {FOO: set(range(6)), BAR: {0, 1, 2}}


def test_regex_is_a_whole_name_match(h):
    topics = dict(TOPICS, **{"foo-eu": TopicInfo(tid(3), 2), "xfoo": TopicInfo(tid(4), 1)})
    h.topics = topics
    resp = h.heartbeat(join_request("m1", names=None, regex="foo.*"))
    assert wire_assignment(resp) == {FOO: set(range(6)), tid(3): {0, 1}}
    assert set(h.group().subscription_metadata) == {"foo", "foo-eu"}


def test_regex_picks_up_new_topics(h):
    h.heartbeat(join_request("m1", names=None, regex="foo.*"))
    ack(h, "m1")
    h.set_topics(dict(TOPICS, **{"foo-new": TopicInfo(tid(5), 2)}))
    g = h.group()
    assert g.group_epoch == 2 and g.assignment_epoch == 2
    resp = ack(h, "m1")
    assert wire_assignment(resp) == {FOO: set(range(6)), tid(5): {0, 1}}


def test_topic_created_after_subscription(h):
    h.heartbeat(join_request("m1", names=["later"]))
    assert h.group().subscription_metadata == {}
    h.set_topics(dict(TOPICS, later=TopicInfo(tid(6), 4)))
    resp = ack(h, "m1")
    assert wire_assignment(resp) == {tid(6): {0, 1, 2, 3}}


def test_partition_growth_and_topic_deletion(h):
    h.heartbeat(join_request("m1", names=["foo", "bar"]))
    h.heartbeat(join_request("m2", names=["foo", "bar"]))
    ack(h, "m1", 1)
    ack(h, "m2")
    h.set_topics({"foo": TopicInfo(FOO, 10), "bar": TopicInfo(BAR, 3)})
    for m in ("m1", "m2"):
        ack(h, m)
    for m in ("m1", "m2"):
        ack(h, m)
    g = h.group()
    assert g.state == GROUP_STABLE
    assert set().union(*(g.members[m].assigned.get(FOO, set()) for m in g.members)) == set(range(10))
    # bar is deleted: its partitions are revoked
    h.set_topics({"foo": TopicInfo(FOO, 10)})
    for m in ("m1", "m2"):
        ack(h, m)
    for m in ("m1", "m2"):
        ack(h, m, owned=owned_list({t: p for t, p in g.members[m].assigned.items() if t != BAR}))
    assert all(BAR not in g.members[m].assigned for m in g.members)


def test_topic_metadata_given_only_through_heartbeats(h):
    h.heartbeat(join_request("m1", names=["foo"]))
    ack(h, "m1")
    h.topics = {"foo": TopicInfo(FOO, 8)}  # the runtime did not push it
    resp = ack(h, "m1")
    assert wire_assignment(resp) == {FOO: set(range(8))}


def test_range_assignor_chosen_by_members(h):
    h.heartbeat(join_request("m1", names=["foo", "bar"], assignor="range"))
    h.heartbeat(join_request("m2", names=["foo", "bar"], assignor="range"))
    g = h.group()
    assert g.target["m1"] == {FOO: frozenset({0, 1, 2}), BAR: frozenset({0, 1})}
    assert g.target["m2"] == {FOO: frozenset({3, 4, 5}), BAR: frozenset({2})}
    assert h.shard.consumer_group_describe([GROUP])[0]["assignor_name"] == "range"


# ================================================================ describe, list, classic
def test_describe(h):
    h.heartbeat(join_request("m1", names=["foo"], instance_id="i1", rack_id="r1"))
    [d] = h.shard.consumer_group_describe([GROUP], include_authorized_operations=True)
    assert d["error_code"] == 0 and d["group_state"] == "Stable"
    assert d["group_epoch"] == 1 and d["assignment_epoch"] == 1 and d["assignor_name"] == "uniform"
    [m] = d["members"]
    assert m["member_id"] == "m1" and m["instance_id"] == "i1" and m["rack_id"] == "r1"
    assert m["client_id"] == "client" and m["client_host"] == "/127.0.0.1"
    assert m["assignment"] == m["target_assignment"] == {
        "topic_partitions": [{"topic_id": FOO, "topic_name": "foo", "partitions": list(range(6))}]}
    assert d["authorized_operations"] == 3400
    [missing, empty] = h.shard.consumer_group_describe(["nope", ""])
    assert missing["error_code"] == Err.GROUP_ID_NOT_FOUND
    assert empty["error_code"] == Err.INVALID_GROUP_ID


def test_list_and_describe_groups(h):
    h.heartbeat(join_request("m1"))
    assert h.shard.list_groups([], []) == [
        {"group_id": GROUP, "protocol_type": "consumer", "group_state": "Stable",
         "group_type": "consumer"}]
    assert h.shard.list_groups([], ["classic"]) == []
    assert h.shard.list_groups(["stable"], ["Consumer"])[0]["group_id"] == GROUP
    assert h.shard.list_groups(["empty"], []) == []
    h.heartbeat(join_request("m2"))
    assert h.shard.list_groups([], [])[0]["group_state"] == GROUP_RECONCILING
    # DescribeGroups (classic API): a consumer group is reported Dead
    assert h.shard.describe_group(GROUP)["group_state"] == "Dead"


def test_empty_classic_group_is_replaced(h):
    h.shard.groups[GROUP] = ClassicGroup(GROUP, protocol_type="consumer")
    resp = h.heartbeat(join_request("m1"))
    assert resp["error_code"] == 0
    assert GROUP not in h.shard.groups and h.group() is not None
    assert h.log[0][0][:2] == b"\x00\x02" and h.log[0][1] is None  # GroupMetadata tombstone first


def test_non_empty_classic_group_is_not_a_consumer_group():
    from kcoord.coordinator.classic_group import ClassicMember
    h = Harness(topics=TOPICS)
    classic = ClassicGroup(GROUP, protocol_type="consumer")
    classic.members["x"] = ClassicMember("x", None, "c", "h", 1000, 1000, "consumer", [("range", b"")])
    h.shard.groups[GROUP] = classic
    resp = h.heartbeat(join_request("m1"))
    assert resp["error_code"] == Err.GROUP_ID_NOT_FOUND


# ================================================================ offsets
def commit(h, member_id, epoch, version=9, group=GROUP):
    req = {"group_id": group, "generation_id_or_member_epoch": epoch, "member_id": member_id,
           "group_instance_id": None, "topics": [{"name": "foo", "partitions": [
               {"partition_index": 0, "committed_offset": 10, "committed_leader_epoch": -1,
                "committed_metadata": ""}]}]}
    committed = h.shard.offset_commit(req, version, h.now)
    response, records = committed.response, committed.records
    h.apply(type("R", (), {"records": records, "timers": [], "replies": []})())
    return response["topics"][0]["partitions"][0]["error_code"]


def test_offset_commit_validated_by_member_epoch(h):
    h.heartbeat(join_request("m1"))
    assert commit(h, "m1", 1) == Err.NONE
    assert commit(h, "m1", 0) == Err.STALE_MEMBER_EPOCH
    assert commit(h, "ghost", 1) == Err.UNKNOWN_MEMBER_ID
    assert commit(h, "m1", 1, version=8) == Err.UNSUPPORTED_VERSION
    assert commit(h, "", -1) == Err.UNKNOWN_MEMBER_ID  # a non-empty group
    h.heartbeat(hb_request(GROUP, "m1", -1))
    assert commit(h, "", -1) == Err.NONE  # an empty group takes admin commits
    assert GROUP not in h.shard.groups  # and no simple classic group appears beside it


def test_offset_fetch_validated_by_member_epoch(h):
    h.heartbeat(join_request("m1"))
    commit(h, "m1", 1)
    code, topics = h.shard.offset_fetch(GROUP, None, "m1", 1)
    assert code == 0 and topics[0]["partitions"][0]["committed_offset"] == 10
    assert h.shard.offset_fetch(GROUP, None, "m1", 5)[0] == Err.STALE_MEMBER_EPOCH
    assert h.shard.offset_fetch(GROUP, None, "ghost", 1)[0] == Err.UNKNOWN_MEMBER_ID
    assert h.shard.offset_fetch(GROUP, None)[0] == Err.NONE  # no member id: admin


def test_offset_delete_refuses_subscribed_topics(h):
    h.heartbeat(join_request("m1"))
    commit(h, "m1", 1)
    req = {"group_id": GROUP, "topics": [{"name": "foo", "partitions": [{"partition_index": 0}]},
                                          {"name": "bar", "partitions": [{"partition_index": 0}]}]}
    deleted = h.shard.offset_delete(req)
    response, records = deleted.response, deleted.records
    assert [t["partitions"][0]["error_code"] for t in response["topics"]] == [
        Err.GROUP_SUBSCRIBED_TO_TOPIC, Err.NONE]
    assert records == []


def test_offsets_expire_and_empty_group_is_deleted(h):
    h.heartbeat(join_request("m1"))
    commit(h, "m1", 1)
    h.heartbeat(hb_request(GROUP, "m1", -1))
    h.now += h.config.offsets_retention_ms
    records = h.shard.cleanup(h.now)
    h.apply(type("R", (), {"records": records, "timers": [], "replies": []})())
    assert h.group() is None and not h.shard.offsets.has_offsets(GROUP)


def test_consumer_group_replayed_after_simple_group_offsets():
    """Offsets committed before the group existed make a simple group; the consumer
    group's records replace it on load, as Kafka's replay does."""
    h = Harness(topics=TOPICS)
    h.apply(type("R", (), {"records": [offset_record(GROUP, "foo", 0, OffsetValue(1, -1, "", 0, None))],
                           "timers": [], "replies": []})())
    assert GROUP in h.shard.groups
    h.heartbeat(join_request("m1"))
    fresh = h.replayed()
    assert GROUP not in fresh.groups and GROUP in fresh.consumer.groups
    assert fresh.snapshot() == h.shard.snapshot()


# ================================================================ load
def test_loaded_shard_rearms_timers(h):
    h.heartbeat(join_request("m1", rebalance_timeout_ms=10000))
    h.heartbeat(join_request("m2"))
    h.heartbeat(hb_request(GROUP, "m1", 1, owned=owned_list(h.member("m1").assigned)))
    fresh = h.replayed()
    result = fresh.on_loaded(h.now)
    keys = {k for k, _ in result.timers}
    assert keys == {("cg-session", GROUP, "m1"), ("cg-session", GROUP, "m2"),
                    ("cg-rebalance", GROUP, "m1")}
    # the reloaded rebalance timer still fences m1
    fired = fresh.on_timer(("cg-rebalance", GROUP, "m1"), h.now + 10000)
    assert any(r.type == 8 and r.value is None for r in fired.records)


def test_a_group_id_with_inner_or_non_ascii_space_is_a_group_id(h):
    """Java's trim() strips only characters up to U+0020: a group id such as
    "\u00a0" or "a b" is not empty."""
    for group in ("\u00a0", "a b", " g "):
        resp = h.heartbeat(join_request("m", group=group))
        assert resp["error_code"] == Err.NONE, (group, resp)
