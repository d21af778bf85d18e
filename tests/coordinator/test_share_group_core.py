"""ShareGroupHeartbeat in the core with a fake clock, after Kafka's
GroupMetadataManagerTest share-group cases (SHARE_GROUPS_REFERENCE section 2);
every test ends by checking that the state replayed from the log equals the
live state, and a seeded simulation checks it after every step."""
from __future__ import annotations

import random

import pytest

from kcoord.coordinator.consumer_group import TopicInfo
from kcoord.coordinator.share_group import GROUP_EMPTY, GROUP_STABLE
from kcoord.coordinator.share_requests import ShareHeartbeatAnswer
from kcoord.coordinator.shard import CoordinatorConfig
from kcoord.protocol.errors import Err
from kcoord.protocol.record_codec import decode_record
from tests.coordinator.cg_harness import Harness, tid

GROUP = "sg"
FOO, BAR = tid(1), tid(2)
TOPICS = {"foo": TopicInfo(FOO, 3), "bar": TopicInfo(BAR, 2)}


def req(member_id="m1", epoch=0, names=("foo",), group=GROUP, rack_id=None) -> dict:
    return {"group_id": group, "member_id": member_id, "member_epoch": epoch,
            "rack_id": rack_id, "subscribed_topic_names": None if names is None else list(names)}


def parts(response) -> dict[bytes, list[int]] | None:
    a = response["assignment"]
    return None if a is None else {tp["topic_id"]: tp["partitions"] for tp in a["topic_partitions"]}


class ShareHarness(Harness):
    def __init__(self, config=None, topics=TOPICS) -> None:
        super().__init__(config, topics)
        self.pending = []  # initializations asked for, in order

    def hb(self, **kw) -> dict:
        result = self.shard.share_group_heartbeat(req(**kw), "client", "/127.0.0.1", self.now,
                                                  self.topics)
        self.apply(result)
        response = result.response
        if response.__class__ is ShareHeartbeatAnswer:
            self.pending.append(response.initialize)
            response = response.response
        return response

    def initialize(self, ok: bool = True) -> None:
        """The share coordinator answers every pending initialization."""
        pending, self.pending = self.pending, []
        for init in pending:
            self.apply(self.shard.share.initialize_done(init.group_id, init.partitions, ok))

    def join(self, member_id: str, names=("foo",)) -> int:
        """A member joins and, once the partitions are initialized, holds them; -> its epoch."""
        resp = self.hb(member_id=member_id, names=names)
        self.initialize()
        return resp["member_epoch"]

    def share_group(self, group_id: str = GROUP):
        return self.shard.share.groups.get(group_id)

    def record_types(self) -> list[tuple[int, bool]]:
        return [(r.type, r.value is not None) for r in (decode_record(k, v) for k, v in self.log)]

    def check_replay(self) -> None:
        # values first: pytest's message for a failing assert of a compiled
        # method's call raises AttributeError (the method has no __name__)
        replayed, live = self.replayed().snapshot(), self.shard.snapshot()
        assert replayed == live


@pytest.fixture
def h():
    harness = ShareHarness()
    yield harness
    harness.check_replay()


def test_first_heartbeat_of_a_new_group_assigns_nothing(h):
    resp = h.hb()
    assert resp["error_code"] == 0 and resp["member_id"] == "m1" and resp["member_epoch"] == 1
    assert resp["heartbeat_interval_ms"] == 5000 and parts(resp) == {}
    # member metadata, group epoch, target member + epoch, current assignment, partition states
    assert [t for t, _ in h.record_types()] == [10, 11, 13, 12, 14, 15]
    [init] = h.pending
    assert (init.group_id, init.state_epoch, init.start_offset) == (GROUP, 1, -1)
    assert init.partitions == {FOO: frozenset({0, 1, 2})}
    states = h.share_group().partition_states
    assert states.initializing == {FOO: ("foo", frozenset({0, 1, 2}))} and not states.initialized


def test_partitions_arrive_on_a_later_heartbeat(h):
    h.hb()
    h.initialize()
    assert h.share_group().partition_states.initialized == {FOO: ("foo", frozenset({0, 1, 2}))}
    resp = h.hb(epoch=1, names=None)
    assert resp["member_epoch"] == 2 and parts(resp) == {FOO: [0, 1, 2]}
    # steady: nothing to write, the assignment is not repeated
    before = len(h.log)
    resp = h.hb(epoch=2, names=None)
    assert resp["member_epoch"] == 2 and resp["assignment"] is None and len(h.log) == before


def test_members_share_partitions(h):
    e1 = h.join("m1")
    h.hb(member_id="m1", epoch=e1, names=None)
    for m in ("m2", "m3", "m4"):
        h.hb(member_id=m)
    epochs = {}
    for m in ("m1", "m2", "m3", "m4"):
        member = h.share_group().members[m]
        resp = h.hb(member_id=m, epoch=member.member_epoch, names=None)
        epochs[m] = resp["member_epoch"]
    group = h.share_group()
    assert set(epochs.values()) == {group.group_epoch}
    held = sorted(len(group.members[m].assigned.get(FOO, ())) for m in epochs)
    assert held == [1, 1, 2, 2]  # 3 partitions, 4 members: each partition held by two
    assert group.state == GROUP_STABLE


def test_full_request_repeats_the_assignment(h):
    e = h.join("m1")
    e = h.hb(epoch=e, names=None)["member_epoch"]
    resp = h.hb(epoch=e, names=("foo",))  # SubscribedTopicNames set: a full request
    assert parts(resp) == {FOO: [0, 1, 2]}


@pytest.mark.parametrize("body, message", [
    (req(member_id=""), "Invalid member id in the request."),
    (req(member_id="x" * 37), "Invalid member id in the request."),
    (req(member_id=" "), "MemberId can't be empty."),
    (req(group=""), "GroupId can't be empty."),
    (req(rack_id=""), "RackId can't be empty."),
    (req(names=None), "SubscribedTopicNames must be set in first request."),
    (req(names=()), "SubscribedTopicNames must be set in first request."),
    (req(epoch=-2, names=None), "MemberEpoch is invalid."),
])
def test_invalid_requests(h, body, message):
    result = h.shard.share_group_heartbeat(body, "c", "/h", h.now, h.topics)
    assert result.records == [] and result.response["error_code"] == Err.INVALID_REQUEST
    assert result.response["error_message"] == message


def test_unknown_group_and_member(h):
    assert h.hb(epoch=1, names=None)["error_code"] == Err.GROUP_ID_NOT_FOUND
    assert h.hb(epoch=-1, names=None)["error_code"] == Err.GROUP_ID_NOT_FOUND
    h.hb()
    assert h.hb(member_id="m2", epoch=1, names=None)["error_code"] == Err.UNKNOWN_MEMBER_ID
    assert h.hb(member_id="m2", epoch=-1, names=None)["error_code"] == Err.UNKNOWN_MEMBER_ID


def test_member_epoch_fencing(h):
    e = h.join("m1")
    assert e == 1
    assert h.hb(epoch=1, names=None)["member_epoch"] == 2  # bumped: partitions assigned
    assert h.share_group().members["m1"].previous_member_epoch == 1
    # the response with the bump was lost: the previous epoch is accepted
    assert h.hb(epoch=1, names=None)["error_code"] == 0
    assert h.hb(epoch=3, names=None)["error_code"] == Err.FENCED_MEMBER_EPOCH
    h.hb(member_id="m2")
    h.hb(epoch=2, names=None)  # m1 moves to epoch 3, previous 2
    assert h.share_group().members["m1"].member_epoch == 3
    assert h.hb(epoch=1, names=None)["error_code"] == Err.FENCED_MEMBER_EPOCH
    # epoch 0 rejoins with the same id
    assert h.hb(epoch=0)["error_code"] == 0


def test_group_max_size():
    h = ShareHarness(CoordinatorConfig(share_group_max_size=2))
    h.hb(member_id="m1")
    h.hb(member_id="m2")
    resp = h.hb(member_id="m3")
    assert resp["error_code"] == Err.GROUP_MAX_SIZE_REACHED
    assert resp["error_message"] == "The share group has reached its maximum capacity of 2 members."
    assert h.hb(member_id="m2", epoch=0)["error_code"] == 0  # a member already in
    h.check_replay()


def test_leave_fences_and_bumps_the_epoch(h):
    e1 = h.join("m1")
    h.hb(member_id="m2")
    epoch = h.share_group().group_epoch
    resp = h.hb(member_id="m1", epoch=e1, names=None)
    resp = h.hb(member_id="m1", epoch=resp["member_epoch"], names=None)
    resp = h.hb(member_id="m1", epoch=-1, names=None)
    assert resp == {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                    "member_id": "m1", "member_epoch": -1, "heartbeat_interval_ms": 0,
                    "assignment": None}
    assert h.record_types()[-4:] == [(14, False), (13, False), (10, False), (11, True)]
    group = h.share_group()
    assert "m1" not in group.members and group.group_epoch > epoch
    assert ("sg-session", GROUP, "m1") not in h.timers


def test_session_expiry(h):
    h.hb(member_id="m1")
    h.hb(member_id="m2")
    h.advance(30_000)
    h.hb(member_id="m2", epoch=h.share_group().members["m2"].member_epoch, names=None)
    h.advance(20_000)  # m1: 45 s without a heartbeat
    assert set(h.share_group().members) == {"m2"}
    assert ("sg-session", GROUP, "m1") in h.fired
    h.advance(30_000)
    assert h.share_group().members == {} and h.share_group().state == GROUP_EMPTY


def test_group_overrides_of_session_and_interval():
    config = CoordinatorConfig()
    config.group_overrides.set(GROUP, {"share.session.timeout.ms": 50_000,
                                       "share.heartbeat.interval.ms": 7_000})
    h = ShareHarness(config)
    assert h.hb()["heartbeat_interval_ms"] == 7_000
    assert h.timers[("sg-session", GROUP, "m1")] == h.now + 50_000
    h.check_replay()


def test_failed_initialization_is_asked_again(h):
    h.hb()
    h.initialize(ok=False)
    states = h.share_group().partition_states
    assert not states.initializing and not states.initialized
    resp = h.hb(epoch=1, names=None)
    assert resp["member_epoch"] == 1 and parts(resp) is None
    [init] = h.pending  # asked again at once: nothing is initializing
    assert init.partitions == {FOO: frozenset({0, 1, 2})}


def test_initialization_in_flight_is_retried_after_the_interval(h):
    h.hb()
    h.pending.clear()  # the answer never comes (the share coordinator moved)
    h.hb(epoch=1, names=None)
    assert h.pending == []
    h.advance(30_000)
    h.hb(epoch=1, names=None)
    assert len(h.pending) == 1
    h.initialize()
    assert parts(h.hb(epoch=1, names=None)) == {FOO: [0, 1, 2]}


def test_new_partitions_are_initialized_and_assigned(h):
    e = h.join("m1")
    e = h.hb(epoch=e, names=None)["member_epoch"]
    h.topics = {**TOPICS, "foo": TopicInfo(FOO, 5)}  # foo grows
    h.apply(h.shard.on_topics_changed(h.topics))
    resp = h.hb(epoch=e, names=None)
    assert resp["member_epoch"] == e + 1  # the metadata hash changed
    [init] = h.pending
    assert init.partitions == {FOO: frozenset({3, 4})}
    h.initialize()
    resp = h.hb(epoch=resp["member_epoch"], names=None)
    assert parts(resp) == {FOO: [0, 1, 2, 3, 4]}


def test_subscription_change(h):
    e = h.join("m1")
    e = h.hb(epoch=e, names=None)["member_epoch"]
    resp = h.hb(epoch=e, names=("foo", "bar"))
    assert resp["member_epoch"] == e + 1 and parts(resp) == {FOO: [0, 1, 2]}
    [init] = h.pending
    assert init.partitions == {BAR: frozenset({0, 1})}
    h.initialize()
    resp = h.hb(epoch=resp["member_epoch"], names=None)
    assert parts(resp) == {FOO: [0, 1, 2], BAR: [0, 1]}
    resp = h.hb(epoch=resp["member_epoch"], names=("bar",))
    assert parts(resp) == {BAR: [0, 1]}


def test_describe_and_list(h):
    e = h.join("m1")
    h.hb(epoch=e, names=None)
    [group] = h.shard.share_group_describe([GROUP, "nope", ""]).response[:1]
    assert group["group_state"] == "Stable" and group["assignor_name"] == "simple"
    [member] = group["members"]
    assert member["assignment"] == {"topic_partitions": [
        {"topic_id": FOO, "topic_name": "foo", "partitions": [0, 1, 2]}]}
    _, nope, empty = h.shard.share_group_describe([GROUP, "nope", ""]).response
    assert nope["error_code"] == Err.GROUP_ID_NOT_FOUND and empty["error_code"] == Err.INVALID_GROUP_ID
    assert h.shard.list_groups([], ["share"]) == [
        {"group_id": GROUP, "protocol_type": "share", "group_state": "Stable",
         "group_type": "share"}]
    assert h.shard.list_groups(["empty"], []) == []


def test_delete_group(h):
    h.hb()
    assert h.shard.delete_group(GROUP).response["error_code"] == Err.NON_EMPTY_GROUP
    h.hb(epoch=-1, names=None)
    begin = h.shard.share.begin_delete(GROUP)
    assert begin.response == {FOO: frozenset({0, 1, 2})}
    h.apply(begin)  # its partitions are deleting now: nothing assigns them
    states = h.share_group().partition_states
    assert (states.initializing, states.initialized, states.deleting) == ({}, {}, {FOO: "foo"})
    h.hb(member_id="m2")  # a member joins meanwhile: they are initialized again
    states = h.share_group().partition_states
    assert states.deleting == {} and FOO in states.initializing
    assert h.shard.share.begin_delete(GROUP).response is None  # not empty
    h.hb(member_id="m2", epoch=-1, names=None)
    h.apply(h.shard.share.begin_delete(GROUP))
    deleted = h.shard.delete_group(GROUP)
    code, records = deleted.response["error_code"], deleted.records
    assert code == Err.NONE
    assert [(r.type, r.value) for r in records] == [(12, None), (15, None), (11, None)]
    h.apply(type(h.shard.on_loaded(h.now))(records=records))
    assert h.share_group() is None


def test_every_record_type_replays(h):
    """Each of the share records (types 10-15), value and tombstone, reaches the log."""
    e = h.join("m1")
    h.hb(epoch=e, names=None)
    h.hb(member_id="m2")
    h.hb(member_id="m2", epoch=-1, names=None)
    h.hb(member_id="m1", epoch=-1, names=None)
    records = h.shard.delete_group(GROUP).records
    h.apply(type(h.shard.on_loaded(h.now))(records=records))
    seen = set(h.record_types())
    assert {(t, v) for t in range(10, 16) for v in (True, False)} <= seen


def test_reload_restores_sessions(h):
    h.hb(member_id="m1")
    h.reload()
    assert ("sg-session", GROUP, "m1") in h.timers
    h.advance(45_000)
    assert h.share_group().members == {}


@pytest.mark.parametrize("seed", range(25))
def test_random_schedules_replay_equals_live(seed):
    """Random joins, heartbeats (some with a stale epoch), leaves, expiries,
    initialization answers, topic growth and reloads: after every step the
    state replayed from the log equals the live state, members hold only
    initialized partitions of topics they subscribe to, and no member is
    ahead of its group."""
    run_schedule(seed)


def test_broken_variants_are_caught(monkeypatch):
    """The schedule's checks fail on a deliberately broken core: an assignor
    that ignores initialization, and a heartbeat that bumps a member's epoch
    in memory without a record (live no longer equals replayed)."""
    from kcoord.coordinator import share_group_manager as sph
    real_assign = sph.simple_assignor.assign
    monkeypatch.setattr(sph.simple_assignor, "assign",
                        lambda spec, partitions, assignable=None: real_assign(spec, partitions))
    with pytest.raises(AssertionError):
        for seed in range(25):
            run_schedule(seed)
    monkeypatch.setattr(sph.simple_assignor, "assign", real_assign)
    real_reconcile = sph.ShareGroupManager._reconcile

    def unrecorded(self, member, *args):
        group = self.groups.get(GROUP)
        if group is not None and member.member_id in group.members:
            group.members[member.member_id].previous_member_epoch = -7  # memory only
        return real_reconcile(self, member, *args)
    monkeypatch.setattr(sph.ShareGroupManager, "_reconcile", unrecorded)
    with pytest.raises(AssertionError):
        for seed in range(25):
            run_schedule(seed)


def run_schedule(seed: int) -> None:
    rng = random.Random(seed)
    h = ShareHarness()
    members = [f"m{i}" for i in range(5)]
    for _ in range(60):
        op = rng.random()
        group = h.share_group()
        m = rng.choice(members)
        member = group.members.get(m) if group else None
        if op < 0.35:
            if member is None:
                h.hb(member_id=m, names=rng.choice([("foo",), ("bar",), ("foo", "bar")]))
            else:
                epoch = member.member_epoch if rng.random() < 0.9 else member.member_epoch + 1
                h.hb(member_id=m, epoch=epoch, names=None)
        elif op < 0.5 and h.pending:
            h.initialize(ok=rng.random() < 0.8)
        elif op < 0.6 and member is not None:
            h.hb(member_id=m, epoch=-1, names=None)
        elif op < 0.75:
            h.advance(rng.choice([1_000, 10_000, 46_000]))
        elif op < 0.8:
            name = rng.choice(["foo", "bar"])
            info = h.topics[name]
            h.topics = {**h.topics, name: TopicInfo(info.topic_id, info.partitions + 1)}
            h.apply(h.shard.on_topics_changed(h.topics))
        elif op < 0.85:
            h.reload()
        h.check_replay()
        group = h.share_group()
        if group is None:
            continue
        states = group.partition_states
        for mm in group.members.values():
            assert mm.member_epoch <= group.group_epoch
            subscribed = {h.topics[n].topic_id for n in mm.subscribed_topic_names}
            for t, ps in mm.assigned.items():
                assert t in subscribed
                assert ps <= states.initialized_partitions(t)


def test_share_groups_in_the_metrics(h):
    """/metrics counts share groups per state and their members (Kafka's
    group-count{protocol=share} and share-group-count{state})."""
    from types import SimpleNamespace

    from kcoord.observe.events import ServerMetrics
    from kcoord.observe.prometheus import KcoordCollector
    h.hb(member_id="m1")
    h.hb(member_id="m2")
    h.hb(group="other", member_id="m3")
    h.hb(group="other", member_id="m3", epoch=-1, names=None)
    # the runtime's read path over this one loaded core
    runtime = SimpleNamespace(shards=[SimpleNamespace(state="active")],
                              read_all=lambda op: ([op(h.shard, 0)], 0))
    families = {f.name: f for f in KcoordCollector(runtime, None, ServerMetrics())._groups()}
    samples = {(f, tuple(s.labels.items())): s.value for f, fam in families.items()
               for s in fam.samples}
    assert samples[("kcoord_group_coordinator_groups", (("protocol", "share"),))] == 2
    assert samples[("kcoord_group_coordinator_share_groups", (("state", "Stable"),))] == 1
    assert samples[("kcoord_group_coordinator_share_groups", (("state", "Empty"),))] == 1
    assert samples[("kcoord_group_coordinator_members", (("protocol", "share"),))] == 2


def test_deleted_topic_leaves_the_partition_states(h):
    """Kafka's maybeCleanupShareGroupState: a deleted topic's share partitions
    are no longer initialized; the group is not rebalanced over and over."""
    e = h.join("m1", names=("foo", "bar"))
    e = h.hb(epoch=e, names=None)["member_epoch"]
    assert set(h.share_group().partition_states.initialized) == {FOO, BAR}
    h.topics = {"foo": TOPICS["foo"]}
    h.apply(h.shard.on_topics_changed(h.topics))
    assert set(h.share_group().partition_states.initialized) == {FOO}
    resp = h.hb(epoch=e, names=None)
    assert resp["member_epoch"] == e + 1 and parts(resp) == {FOO: [0, 1, 2]}
    epoch = resp["member_epoch"]
    assert h.hb(epoch=epoch, names=None)["member_epoch"] == epoch  # settled


def test_alter_offsets(h):
    """Kafka's alterShareGroupOffsets: the group is created if new, must be
    empty; valid partitions go initializing with their start offsets."""
    result = h.shard.share_alter_offsets(GROUP, [
        {"topic_name": "foo", "partitions": [{"partition_index": 1, "start_offset": 42},
                                             {"partition_index": 9, "start_offset": 0}]}],
        h.now, h.topics)
    h.apply(result)
    answer = result.response
    assert isinstance(answer, ShareHeartbeatAnswer)
    init = answer.initialize
    assert (init.state_epoch, init.partitions, init.start_of(FOO, 1)) == (
        0, {FOO: frozenset({1})}, 42)
    assert [(p["partition_index"], p["error_code"]) for p in answer.response["responses"][0][
        "partitions"]] == [(1, 0), (9, Err.UNKNOWN_TOPIC_OR_PARTITION)]
    assert h.share_group().partition_states.initializing == {FOO: ("foo", frozenset({1}))}
    h.apply(h.shard.share.initialize_done(GROUP, init.partitions, True))
    assert h.share_group().partition_states.initialized == {FOO: ("foo", frozenset({1}))}
    h.hb()
    refused = h.shard.share_alter_offsets(GROUP, [], h.now, h.topics).response
    assert refused["error_code"] == Err.NON_EMPTY_GROUP
    h.shard.groups["classic"] = __import__(
        "kcoord.coordinator.classic_group", fromlist=["ClassicGroup"]).ClassicGroup("classic")
    other = h.shard.share_alter_offsets("classic", [], h.now, h.topics).response
    assert other["error_code"] == Err.GROUP_ID_NOT_FOUND
    del h.shard.groups["classic"]


def test_delete_offsets(h):
    """Kafka's sharePartitionsEligibleForOffsetDeletion and
    completeDeleteShareGroupOffsets, replayed."""
    from kcoord.coordinator.share_requests import ShareOffsetsDeletion
    h.join("m1", names=("foo", "bar"))
    assert h.shard.share_delete_offsets(GROUP, ["foo"], h.topics).response["error_code"] == \
        Err.NON_EMPTY_GROUP
    h.hb(epoch=-1, names=None)
    result = h.shard.share_delete_offsets(GROUP, ["foo", "nope"], h.topics)
    h.apply(result)
    plan = result.response
    assert isinstance(plan, ShareOffsetsDeletion)
    assert plan.partitions == {FOO: ("foo", frozenset({0, 1, 2}))}
    assert [(t["topic_name"], t["error_code"]) for t in plan.refused] == [
        ("nope", Err.UNKNOWN_TOPIC_OR_PARTITION)]
    states = h.share_group().partition_states
    assert set(states.initialized) == {BAR} and states.deleting == {FOO: "foo"}
    # deleting again (the first attempt failed): every partition of the topic
    again = h.shard.share_delete_offsets(GROUP, ["foo"], h.topics)
    assert again.response.partitions == {FOO: ("foo", frozenset({0, 1, 2}))}
    h.apply(h.shard.share.complete_delete_offsets(GROUP, [FOO]))
    assert h.share_group().partition_states.deleting == {}
    assert h.shard.share_delete_offsets("none", ["foo"], h.topics).response["error_code"] == \
        Err.GROUP_ID_NOT_FOUND
