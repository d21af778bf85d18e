"""Classic <-> consumer group interoperability in the core, with a fake clock:
classic-protocol members inside a KIP-848 consumer group (join, sync,
heartbeat, leave, session and sync expiry, offset commits), the online
upgrade of a non-empty classic group, the online downgrade when the last
consumer-protocol member leaves, and the migration policy.  After every
scenario the live shard equals the shard replayed from the log."""
from __future__ import annotations

import pytest

from kcoord.coordinator.classic_group import COMPLETING_REBALANCE, PREPARING_REBALANCE, STABLE
from kcoord.coordinator.consumer_group import (GROUP_STABLE, UNRELEASED_PARTITIONS,
                                               UNREVOKED_PARTITIONS, TopicInfo)
from kcoord.coordinator.shard import CoordinatorConfig
from kcoord.protocol.errors import Err
from kcoord.protocol.messages.consumer_protocol import (decode_assignment, decode_subscription,
                                                        encode_subscription)
from kcoord.protocol.record_codec import decode_record

from .test_classic_core import Harness as ClassicHarness
from .test_classic_core import Token, assignment

TID = bytes([0xAB]) + bytes(15)
TOPICS = {"t": TopicInfo(TID, 4)}


def sub(*topics, owned=None, version=1) -> bytes:
    owned_list = [{"topic": "t", "partitions": sorted(owned)}] if owned else []
    return encode_subscription({"topics": list(topics), "user_data": None,
                                "owned_partitions": owned_list, "generation_id": -1,
                                "rack_id": None}, version)


def parts(assignment_bytes: bytes) -> set[int]:
    _, a = decode_assignment(assignment_bytes)
    return {p for tp in a["assigned_partitions"] if tp["topic"] == "t" for p in tp["partitions"]}


class Harness(ClassicHarness):
    def __init__(self, policy: str = "bidirectional", **overrides) -> None:
        defaults = dict(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=6000,
                        group_max_session_timeout_ms=300000,
                        consumer_group_migration_policy=policy)
        defaults.update(overrides)
        super().__init__(CoordinatorConfig(**defaults))
        self.apply(self.shard.on_topics_changed(dict(TOPICS)))

    def restart(self) -> None:
        super().restart()
        self.apply(self.shard.on_topics_changed(dict(TOPICS)))

    # ---------------------------------------------------------- KIP-848 member
    def cg(self, member_id="kip848", epoch=0, owned=(), names=("t",), group="g",
           instance=None) -> dict:
        first = epoch == 0
        req = {"group_id": group, "member_id": member_id, "member_epoch": epoch,
               "instance_id": instance, "rack_id": None,
               "rebalance_timeout_ms": 30000 if first else -1,
               "subscribed_topic_names": list(names) if first else None,
               "subscribed_topic_regex": None, "server_assignor": None,
               "topic_partitions": [] if first else
               ([{"topic_id": TID, "partitions": sorted(owned)}] if owned else [])}
        result = self.shard.consumer_group_heartbeat(req, 1, "kip848", "/h", self.now,
                                                     dict(TOPICS))
        self.apply(result)
        return result.response

    # ---------------------------------------------------------- classic member
    def classic_join(self, member_id="", owned=None, *, session=10000, rebalance=30000,
                     version=7, protocol_type="consumer", name="cooperative-sticky",
                     instance=None) -> dict:
        token = self.join(member_id, version=version, session=session, rebalance=rebalance,
                          protocols=[(name, sub("t", owned=owned))], protocol_type=protocol_type,
                          client="classic", instance=instance)
        return self.reply(token)

    def classic_member(self, owned=None, **kw) -> tuple[str, int]:
        """A classic member joins (KIP-394 round trip); returns (member id, generation)."""
        first = self.classic_join("", **kw)
        assert first["error_code"] == Err.MEMBER_ID_REQUIRED, first
        reply = self.classic_join(first["member_id"], owned, **kw)
        assert reply["error_code"] == Err.NONE, reply
        return reply["member_id"], reply["generation_id"]

    def classic_sync(self, member_id, generation, name="cooperative-sticky") -> dict:
        return self.reply(self.sync(member_id, generation, protocol_name=name))

    def cgroup(self):
        return self.shard.consumer.groups.get("g")

    def check_consistency(self) -> None:
        replayed = self.replayed()
        assert replayed.snapshot() == self.shard.snapshot()


@pytest.fixture
def h():
    harness = Harness()
    yield harness
    harness.check_consistency()


def consumer_group_with_one_member(h) -> tuple[str, int]:
    reply = h.cg()
    assert reply["error_code"] == 0
    mid, epoch = reply["member_id"], reply["member_epoch"]
    assert {p for tp in reply["assignment"]["topic_partitions"] for p in tp["partitions"]} \
        == {0, 1, 2, 3}
    return mid, epoch


# ============================================================ classic member in a consumer group
def test_classic_member_joins_syncs_and_gets_released_partitions(h):
    c1, e1 = consumer_group_with_one_member(h)
    n = len(h.log)
    m, generation = h.classic_member()
    # Kafka's record order: member, epoch (same topics: no new subscription metadata),
    # targets, target epoch, current assignment
    assert [decode_record(k, v).type for k, v in h.log[n:]] == [5, 3, 7, 7, 6, 8]
    group = h.cgroup()
    member = group.members[m]
    assert member.classic_member_metadata["session_timeout_ms"] == 10000
    assert member.classic_member_metadata["supported_protocols"][0]["name"] == "cooperative-sticky"
    assert member.subscribed_topic_names == {"t"}
    assert generation == member.member_epoch == group.group_epoch  # generation = member epoch
    # nothing is free yet: the consumer member still owns all four partitions
    assert member.state == UNRELEASED_PARTITIONS
    sync = h.classic_sync(m, generation)
    assert sync["error_code"] == 0 and parts(sync["assignment"]) == set()
    assert decode_assignment(sync["assignment"])[0] == 1  # the subscription's version
    assert h.heartbeat(m, generation) == Err.NONE  # waiting on partitions still owned
    # the consumer member revokes two partitions
    r = h.cg(c1, e1, owned={0, 1, 2, 3})
    kept = {p for tp in r["assignment"]["topic_partitions"] for p in tp["partitions"]}
    assert len(kept) == 2
    r = h.cg(c1, e1, owned=kept)
    assert r["member_epoch"] == group.group_epoch
    # now the classic member's partitions are free: it is told to rejoin
    assert h.heartbeat(m, generation) == Err.REBALANCE_IN_PROGRESS
    n = len(h.log)
    again = h.classic_join(m)
    assert again["error_code"] == 0 and again["generation_id"] == h.cgroup().group_epoch
    assert again["leader"] == "" and again["members"] == [] and again["protocol_type"] == "consumer"
    # a rejoin that changes nothing but the assignment writes only the current assignment
    assert [decode_record(k, v).type for k, v in h.log[n:]] == [8]
    sync = h.classic_sync(m, again["generation_id"])
    assert parts(sync["assignment"]) == {0, 1, 2, 3} - kept
    assert h.heartbeat(m, again["generation_id"]) == Err.NONE
    assert h.cgroup().state == GROUP_STABLE
    # the member record carries the ClassicMemberMetadata (tagged field)
    meta = [decode_record(k, v) for k, v in h.log if k[:2] == b"\x00\x05" and v is not None]
    assert meta[-1].value["classic_member_metadata"]["session_timeout_ms"] == 10000


def test_classic_member_revokes_through_rebalance_in_progress(h):
    # a one-member classic group (cooperative-sticky) is upgraded by a KIP-848 member
    m = h.classic_join("")["member_id"]
    token = h.join(m, protocols=[("cooperative-sticky", sub("t"))], client="classic")
    h.advance(0)
    generation = h.reply(token)["generation_id"]
    assert "g" in h.shard.groups
    # make a consumer group with a classic member: upgrade a one-member classic group
    leader_sync = h.sync(m, generation, protocol_name="cooperative-sticky",
                         assignments={m: assignment("t", [0, 1, 2, 3])})
    assert h.code(leader_sync) == 0
    c1 = h.cg()
    assert c1["error_code"] == 0 and h.cgroup() is not None and "g" not in h.shard.groups
    assert c1["assignment"]["topic_partitions"] == []  # all owned by the classic member
    member = h.cgroup().members[m]
    assert member.member_epoch == generation and h.cgroup().group_epoch == generation + 1
    # the classic member is behind the group epoch: it must rejoin
    assert h.heartbeat(m, generation) == Err.REBALANCE_IN_PROGRESS
    assert ("cg-join", "g", m) in h.armed
    # it rejoins still owning everything (cooperative): it keeps its epoch and must revoke
    r = h.classic_join(m, owned={0, 1, 2, 3})
    assert r["generation_id"] == generation
    assert h.cgroup().members[m].state == UNREVOKED_PARTITIONS
    assert ("cg-join", "g", m) not in h.armed
    kept = parts(h.classic_sync(m, generation)["assignment"])
    assert len(kept) == 2
    assert h.heartbeat(m, generation) == Err.REBALANCE_IN_PROGRESS  # revoke, then rejoin
    r = h.classic_join(m, owned=kept)
    assert r["generation_id"] == h.cgroup().group_epoch
    assert h.cgroup().members[m].state == 0
    assert parts(h.classic_sync(m, r["generation_id"])["assignment"]) == kept
    assert h.heartbeat(m, r["generation_id"]) == Err.NONE
    # the consumer member gets the released partitions
    c = h.cg(c1["member_id"], c1["member_epoch"])
    got = {p for tp in c["assignment"]["topic_partitions"] for p in tp["partitions"]}
    assert got == {0, 1, 2, 3} - kept


def test_classic_member_errors(h):
    c1, e1 = consumer_group_with_one_member(h)
    m, generation = h.classic_member()
    assert h.heartbeat(m, generation + 7) == Err.ILLEGAL_GENERATION
    assert h.heartbeat("nobody", generation) == Err.UNKNOWN_MEMBER_ID
    assert h.heartbeat(c1, e1) == Err.UNKNOWN_MEMBER_ID  # not a classic member
    assert h.code(h.sync(m, generation + 1, protocol_name="cooperative-sticky")) == \
        Err.ILLEGAL_GENERATION
    assert h.code(h.sync(m, generation, protocol_name="range")) == Err.INCONSISTENT_GROUP_PROTOCOL
    # a protocol the classic members do not all support
    assert h.classic_join("", name="roundrobin")["error_code"] == Err.INCONSISTENT_GROUP_PROTOCOL
    assert h.classic_join("", protocol_type="connect")["error_code"] == \
        Err.INCONSISTENT_GROUP_PROTOCOL


def test_classic_member_leaves(h):
    c1, e1 = consumer_group_with_one_member(h)
    m, generation = h.classic_member()
    epoch = h.cgroup().group_epoch
    resp = h.leave([m, "nobody", c1])
    codes = {r["member_id"]: r["error_code"] for r in resp["members"]}
    assert codes == {m: 0, "nobody": Err.UNKNOWN_MEMBER_ID, c1: Err.UNKNOWN_MEMBER_ID}
    assert m not in h.cgroup().members and h.cgroup().group_epoch == epoch + 1
    assert ("classic-heartbeat", "g", m) not in h.armed
    assert not [k for k in h.armed if k[2:] == (m,)]


def test_classic_member_session_expires(h):
    consumer_group_with_one_member(h)
    m, generation = h.classic_member(session=8000)
    assert h.classic_sync(m, generation)["error_code"] == 0
    h.advance(7000)
    assert h.heartbeat(m, generation) == Err.NONE
    epoch = h.cgroup().group_epoch
    h.advance(7999)
    assert m in h.cgroup().members
    h.advance(2)
    assert m not in h.cgroup().members and h.cgroup().group_epoch == epoch + 1


def test_classic_member_that_never_syncs_is_fenced(h):
    consumer_group_with_one_member(h)
    m, generation = h.classic_member(session=60000, rebalance=5000)
    h.advance(5001)
    assert m not in h.cgroup().members


def test_classic_member_commits_with_its_member_epoch(h):
    consumer_group_with_one_member(h)
    m, generation = h.classic_member()
    assert h.commit(m, generation, version=8) == Err.NONE  # below v9: a classic member
    assert h.commit(m, generation + 1, version=8) == Err.ILLEGAL_GENERATION
    assert h.commit("nobody", generation, version=8) == Err.UNKNOWN_MEMBER_ID


def test_describe_and_list(h):
    consumer_group_with_one_member(h)
    m, _ = h.classic_member()
    assert h.shard.describe_group("g")["group_state"] == "Dead"  # DescribeGroups: not classic
    listed = h.shard.list_groups([], [])
    assert listed == [{"group_id": "g", "protocol_type": "consumer",
                       "group_state": h.cgroup().state, "group_type": "consumer"}]
    described = h.shard.consumer_group_describe(["g"])[0]
    members = {d["member_id"]: d for d in described["members"]}
    assert m in members and members[m]["client_id"] == "classic"
    assert members[m]["subscribed_topic_names"] == ["t"]


def test_replay_after_restart_keeps_classic_members(h):
    consumer_group_with_one_member(h)
    m, generation = h.classic_member(session=9000)
    h.restart()
    member = h.cgroup().members[m]
    assert member.classic_member_metadata["session_timeout_ms"] == 9000
    assert h.armed[("cg-session", "g", m)] == h.now + 9000
    assert h.heartbeat(m, generation) in (Err.NONE, Err.REBALANCE_IN_PROGRESS)


# ============================================================ online upgrade


def stable_classic_group(h) -> tuple[list[str], int]:
    ids = [h.new_member(client=f"c{i}", protocols=[("range", sub("t"))]) for i in range(2)]
    tokens = [h.join(m, client=f"c{i}", protocols=[("range", sub("t"))])
              for i, m in enumerate(ids)]
    h.advance(0)
    generation = h.reply(tokens[0])["generation_id"]
    leader = h.reply(tokens[0])["leader"]
    given = {ids[0]: assignment("t", [0, 1]), ids[1]: assignment("t", [2, 3])}
    for m in ids:
        assert h.code(h.sync(m, generation, assignments=given if m == leader else None)) == 0
    assert h.group().state == STABLE
    return ids, generation


def test_online_upgrade_of_a_stable_classic_group(h):
    ids, generation = stable_classic_group(h)
    reply = h.cg()
    assert reply["error_code"] == 0
    assert "g" not in h.shard.groups
    group = h.cgroup()
    assert group.group_epoch == generation + 1  # the subscription metadata bump
    assert {mid: {p for ps in m.assigned.values() for p in ps}
            for mid, m in group.members.items() if mid in ids} == {ids[0]: {0, 1},
                                                                   ids[1]: {2, 3}}
    assert all(group.members[m].classic_member_metadata["session_timeout_ms"] == 10000
               for m in ids)
    # the first records: GroupMetadata tombstone, then the consumer group's
    upgrade = [decode_record(k, v) for k, v in h.log[-len(h.log):]]
    tomb = [i for i, r in enumerate(upgrade) if r.type == 2 and r.value is None]
    assert tomb and all(r.type in range(3, 9) for r in upgrade[tomb[-1] + 1:])
    # classic timers are gone; the members have consumer-group session timers
    assert not [k for k in h.armed if k[0].startswith("classic")]
    assert all(("cg-session", "g", m) in h.armed for m in ids)
    # classic members rejoin (eager: owning nothing) and get their target
    assert h.heartbeat(ids[0], generation) == Err.REBALANCE_IN_PROGRESS
    r = h.classic_join(ids[0], name="range")
    assert r["generation_id"] == group.group_epoch
    assert len(parts(h.classic_sync(ids[0], r["generation_id"], name="range")["assignment"])) <= 2
    h.check_consistency()
    h.restart()
    assert h.cgroup().members[ids[0]].classic_member_metadata is not None


def test_upgrade_refused_while_a_member_has_no_assignment(h):
    ids, generation = stable_classic_group(h)
    newcomer = h.new_member(client="late", protocols=[("range", sub("t"))])
    h.join(newcomer, client="late", protocols=[("range", sub("t"))])  # a rebalance starts
    assert h.group().state == PREPARING_REBALANCE
    assert h.cg()["error_code"] == Err.GROUP_ID_NOT_FOUND  # its assignment does not parse
    assert h.cgroup() is None and h.group().state == PREPARING_REBALANCE


def test_upgrade_answers_parked_requests(h):
    ids, generation = stable_classic_group(h)
    parked = h.join(ids[0], protocols=[("range", sub("t", "u"))])  # starts a rebalance
    assert h.group().state == PREPARING_REBALANCE and h.reply(parked) is None
    assert h.cg()["error_code"] == 0
    assert h.code(parked) == Err.REBALANCE_IN_PROGRESS


def test_upgrade_refused_when_policy_disallows():
    for policy in ("disabled", "downgrade"):
        h = Harness(policy)
        stable_classic_group(h)
        assert h.cg()["error_code"] == Err.GROUP_ID_NOT_FOUND
        assert h.group().state == STABLE and h.cgroup() is None
        h.check_consistency()


def test_upgrade_refused_for_other_protocol_types_and_sizes():
    h = Harness(consumer_group_max_size=1)
    stable_classic_group(h)
    assert h.cg()["error_code"] == Err.GROUP_ID_NOT_FOUND  # two members > max size 1
    h = Harness()
    ids = [h.new_member(client="x", protocol_type="connect", protocols=[("v1", b"x")])]
    h.join(ids[0], protocol_type="connect", protocols=[("v1", b"x")])
    h.advance(0)
    assert h.cg()["error_code"] == Err.GROUP_ID_NOT_FOUND
    h.check_consistency()


# ============================================================ online downgrade
def upgraded(h) -> tuple[list[str], int, dict]:
    ids, generation = stable_classic_group(h)
    reply = h.cg()
    return ids, generation, reply


def test_downgrade_when_the_last_consumer_member_leaves(h):
    ids, generation, c = upgraded(h)
    epoch = h.cgroup().group_epoch
    targets = {m: {p for ps in h.cgroup().target[m].values() for p in ps} for m in ids}
    left = h.cg(c["member_id"], -1)
    assert left["error_code"] == 0 and left["member_epoch"] == -1
    assert h.cgroup() is None
    group = h.group()
    assert group.protocol_type == "consumer" and group.generation_id == epoch
    assert group.state == PREPARING_REBALANCE  # the remaining classic members rebalance
    assert set(group.members) == set(ids)
    # a GroupMetadata v3 record carries the members and their target assignments
    record = decode_record(*h.log[-1])
    assert record.type == 2 and record.value_version == 3
    assigned = {m["member_id"]: parts(m["assignment"]) for m in record.value["members"]}
    assert assigned == targets  # the consumer group's target assignment
    assert not [k for k in h.armed if k[0].startswith("cg")]
    h.check_consistency()
    # the classic members are told to rejoin and form a new generation
    assert h.heartbeat(ids[0], epoch) == Err.REBALANCE_IN_PROGRESS
    tokens = [h.join(m, protocols=[("range", sub("t"))]) for m in ids]
    assert all(h.code(t) == 0 for t in tokens)
    assert h.group().state == COMPLETING_REBALANCE
    generation = h.reply(tokens[0])["generation_id"]
    assert generation == epoch + 1
    leader = h.reply(tokens[0])["leader"]
    given = {ids[0]: assignment("t", [0, 1]), ids[1]: assignment("t", [2, 3])}
    for m in ids:
        assert h.code(h.sync(m, generation, assignments=given if m == leader else None)) == 0
    assert h.group().state == STABLE
    h.restart()
    assert h.group().state == STABLE and h.group().generation_id == generation


def test_downgrade_after_session_expiry_of_the_consumer_member(h):
    ids, generation, c = upgraded(h)
    generations = dict.fromkeys(ids, generation)
    for _ in range(12):  # the classic members keep up; the KIP-848 member goes silent
        h.advance(5000)
        if h.cgroup() is None:
            break
        for m in ids:
            if h.heartbeat(m, generations[m]) == Err.REBALANCE_IN_PROGRESS:
                generations[m] = h.classic_join(m, name="range")["generation_id"]
                assert h.classic_sync(m, generations[m], name="range")["error_code"] in (
                    Err.NONE, Err.REBALANCE_IN_PROGRESS)
    assert h.cgroup() is None and h.group().state == PREPARING_REBALANCE
    assert set(h.group().members) == set(ids)


def test_no_downgrade_when_policy_is_upgrade_only():
    h = Harness("upgrade")
    ids, generation, c = upgraded(h)
    h.cg(c["member_id"], -1)
    group = h.cgroup()
    assert group is not None and set(group.members) == set(ids) and "g" not in h.shard.groups
    assert h.heartbeat(ids[0], generation) == Err.REBALANCE_IN_PROGRESS
    h.check_consistency()


def test_classic_leave_never_downgrades(h):
    ids, generation, c = upgraded(h)
    h.leave([ids[0]])
    assert h.cgroup() is not None and ids[0] not in h.cgroup().members
    h.cg(c["member_id"], -1)  # now the last consumer member leaves: one classic member left
    assert h.cgroup() is None and set(h.group().members) == {ids[1]}


def test_downgrade_when_a_classic_static_member_replaces_the_last_consumer_member(h):
    r = h.cg("static-848", instance="inst")
    assert r["error_code"] == 0
    m, generation = h.classic_member()
    epoch = h.cgroup().group_epoch
    target = {p for ps in h.cgroup().target["static-848"].values() for p in ps}
    # the instance comes back with the classic protocol: no rebalance, a classic group
    joined = h.classic_join("", instance="inst")
    assert joined["error_code"] == 0
    new_id = joined["member_id"]
    assert h.cgroup() is None
    group = h.group()
    assert group.state == STABLE and group.generation_id == epoch
    assert set(group.members) == {m, new_id} and group.static_members == {"inst": new_id}
    assert parts(group.members[new_id].assignment) == target  # the replaced member's target
    assert not [k for k in h.armed if k[0].startswith("cg")]
    assert h.code(h.sync(new_id, group.generation_id, protocol_name="cooperative-sticky",
                         instance="inst")) == Err.NONE
    h.check_consistency()
    h.restart()
    assert set(h.group().members) == {m, new_id}


def test_classic_static_member_replacing_one_of_several_consumer_members(h):
    assert h.cg("static-848", instance="inst")["error_code"] == 0
    assert h.cg("other-848")["error_code"] == 0
    joined = h.classic_join("", instance="inst")
    assert joined["error_code"] == 0
    group = h.cgroup()
    assert group is not None and "static-848" not in group.members
    assert group.static_members == {"inst": joined["member_id"]}
    assert group.members[joined["member_id"]].classic_member_metadata is not None


def test_subscription_bytes_decode_for_the_downgraded_group(h):
    ids, generation, c = upgraded(h)
    h.cg(c["member_id"], -1)
    group = h.group()
    for m in group.members.values():
        assert decode_subscription(m.metadata_for(group.protocol_name))[1]["topics"] == ["t"]


# ============================================================ configuration
def test_policy_config_key():
    from kcoord.server.config import Config
    cfg = Config()
    assert cfg["group.consumer.migration.policy"] == "bidirectional"
    cfg.set("group.consumer.migration.policy", "Upgrade")
    assert cfg["group.consumer.migration.policy"] == "upgrade"
    assert CoordinatorConfig.from_values(cfg.values).consumer_group_migration_policy == "upgrade"
    with pytest.raises(ValueError, match="group.consumer.migration.policy"):
        cfg.set("group.consumer.migration.policy", "sideways")


# ============================================================ seeded simulation
class SimClient:
    def __init__(self, name: str, kind: str, now: int) -> None:
        self.name, self.kind = name, kind
        self.member_id = "" if kind == "classic" else f"{name}-id"
        self.generation = -1   # classic: the generation (= member epoch in a consumer group)
        self.epoch = 0         # KIP-848: the member epoch
        self.owned: set[int] = set()
        self.alive = True
        self.next_at = now
        self.phase = "join"    # classic: join, joining, syncing, stable
        self.token = None


class Simulation:
    """Classic and KIP-848 clients on one 4-partition topic; the group flips
    between classic and consumer as KIP-848 members come and go.  The classic
    clients are all eager (range: they revoke everything before rejoining) or
    all cooperative (cooperative-sticky: they keep what they own, revoke what
    an assignment takes away, then rejoin; their leader never moves a
    partition its owner has not revoked yet).  After every step no partition
    is owned by two live clients; the live shard equals the replayed log
    every few steps and at the end."""

    HB_CLASSIC, HB_KIP848 = 3000, 5000

    def __init__(self, seed: int, protocol: str = "range") -> None:
        import random
        self.rng = random.Random(seed)
        self.seed = seed
        self.protocol = protocol
        self.coop = protocol == "cooperative-sticky"
        self.h = Harness()
        self.clients: list[SimClient] = []
        self.counter = 0

    def add(self, kind: str) -> None:
        self.counter += 1
        self.clients.append(SimClient(f"s{self.counter}", kind, self.h.now))

    def alive(self) -> list[SimClient]:
        return [c for c in self.clients if c.alive]

    # ------------------------------------------------------------ classic client
    def classic_step(self, c: SimClient) -> None:
        h = self.h
        if c.phase == "join":
            if not self.coop:
                c.owned.clear()  # eager: everything is revoked before joining
            metadata = sub("t", owned=c.owned if self.coop else None)
            c.token = h.join(c.member_id, protocols=[(self.protocol, metadata)], session=10000,
                             rebalance=20000, client=c.name)
            c.phase = "joining"
        if c.phase == "joining":
            reply = h.reply(c.token)
            if reply is None:
                c.next_at = h.now + 100
                return
            code = reply["error_code"]
            if code == Err.NONE:
                c.member_id, c.generation = reply["member_id"], reply["generation_id"]
                assignments = None
                if reply["members"]:  # the leader of a classic group assigns
                    assignments = self.leader_assignment(reply["members"])
                c.token = self.h.sync(c.member_id, c.generation, protocol_name=self.protocol,
                                      assignments=assignments)
                c.phase = "syncing"
            else:
                self._classic_reset(c, code, reply)
                return
        if c.phase == "syncing":
            reply = h.reply(c.token)
            if reply is None:
                c.next_at = h.now + 100
                return
            if reply["error_code"] == Err.NONE:
                assigned = parts(reply["assignment"])
                revoked = c.owned - assigned
                c.owned = assigned
                if revoked:  # cooperative: revoke, then rejoin at once for the rest
                    c.phase, c.next_at = "join", h.now
                else:
                    c.phase, c.next_at = "stable", h.now + self.HB_CLASSIC
            else:
                self._classic_reset(c, reply["error_code"], reply)
            return
        if c.phase == "stable":
            code = h.heartbeat(c.member_id, c.generation)
            if code == Err.NONE:
                c.next_at = h.now + self.HB_CLASSIC
            else:
                self._classic_reset(c, code, {})

    def leader_assignment(self, members: list[dict]) -> dict[str, bytes]:
        """Range over the members; cooperative: a partition another member still
        owns goes to nobody this round (its owner revokes it and rejoins)."""
        ids = sorted(m["member_id"] for m in members)
        target = {m: {p for p in range(4) if p % len(ids) == i} for i, m in enumerate(ids)}
        if self.coop:
            owner = {}
            for m in members:
                for tp in decode_subscription(m["metadata"])[1]["owned_partitions"]:
                    owner.update({p: m["member_id"] for p in tp["partitions"]})
            target = {m: {p for p in ps if owner.get(p, m) == m} for m, ps in target.items()}
        return {m: assignment("t", sorted(ps)) for m, ps in target.items()}

    def _classic_reset(self, c: SimClient, code: int, reply: dict) -> None:
        assert code in (Err.MEMBER_ID_REQUIRED, Err.REBALANCE_IN_PROGRESS, Err.UNKNOWN_MEMBER_ID,
                        Err.ILLEGAL_GENERATION), (self.seed, c.name, code, reply)
        if code != Err.REBALANCE_IN_PROGRESS or not self.coop:
            c.owned.clear()  # eager revokes everything; a fenced member has lost its partitions
        if code == Err.MEMBER_ID_REQUIRED:
            c.member_id = reply["member_id"]
        elif code == Err.UNKNOWN_MEMBER_ID:
            c.member_id = ""
        c.phase = "join"
        c.next_at = self.h.now + (0 if code == Err.MEMBER_ID_REQUIRED else 50)

    # ------------------------------------------------------------ KIP-848 client
    def kip848_step(self, c: SimClient) -> None:
        resp = self.h.cg(c.member_id, c.epoch, owned=c.owned)
        code = resp["error_code"]
        c.next_at = self.h.now + self.HB_KIP848
        if code != Err.NONE:
            assert code in (Err.FENCED_MEMBER_EPOCH, Err.UNKNOWN_MEMBER_ID,
                            Err.GROUP_ID_NOT_FOUND), (self.seed, c.name, resp)
            c.owned.clear()
            c.epoch = 0
            c.next_at = self.h.now + 500
            return
        c.epoch = resp["member_epoch"]
        if resp["assignment"] is not None:
            c.owned = {p for tp in resp["assignment"]["topic_partitions"] for p in tp["partitions"]}

    # ------------------------------------------------------------ events
    def leave(self, c: SimClient) -> None:
        c.alive = False
        c.owned.clear()
        if c.kind == "classic":
            if c.member_id:
                self.h.leave([c.member_id])
        elif c.epoch > 0:
            self.h.cg(c.member_id, -1)

    def step(self, events: bool) -> None:
        rng, h = self.rng, self.h
        if events:
            r = rng.random()
            if r < 0.04 and len(self.alive()) < 6:
                self.add(rng.choice(["classic", "classic", "kip848"]))
            elif r < 0.06 and self.alive():
                self.leave(rng.choice(self.alive()))
            elif r < 0.07 and self.alive():
                crashed = rng.choice(self.alive())
                crashed.alive = False
                crashed.owned.clear()
        h.advance(rng.randint(50, 1500))
        for c in list(self.alive()):
            if c.next_at <= h.now:
                (self.classic_step if c.kind == "classic" else self.kip848_step)(c)
        self.check_ownership()

    def check_ownership(self) -> None:
        seen: dict[int, str] = {}
        for c in self.alive():
            for p in c.owned:
                assert p not in seen, (self.seed, p, seen[p], c.name)
                seen[p] = c.name

    def run(self, steps: int) -> None:
        self.add("classic")
        self.add("classic")
        for i in range(steps):
            self.step(events=True)
            if i % 50 == 49:
                self.h.check_consistency()
        for _ in range(400):  # quiesce: no more events
            self.step(events=False)
        self.h.check_consistency()
        alive = self.alive()
        if alive:
            owned = set().union(*(c.owned for c in alive))
            assert owned == {0, 1, 2, 3}, (self.seed, [(c.name, c.kind, c.owned) for c in alive])


@pytest.mark.parametrize("protocol", ["range", "cooperative-sticky"])
@pytest.mark.parametrize("seed", range(40))
def test_simulation(seed, protocol):
    Simulation(seed, protocol).run(400)
