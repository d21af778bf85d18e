"""The classic group core with a fake clock: every rule of KAFKA_REFERENCE 1.4,
every JoinGroup/SyncGroup/Heartbeat/LeaveGroup error code of 1.8, the commit
rules of 1.6, restart, and a seeded simulation with invariants after each step.

The Harness is a fake runtime: a fake clock, the log as encoded records, the
armed timers as the runtime would hold them, and the replies delivered to
request tokens."""
from __future__ import annotations

import itertools

from kcoord.coordinator.classic_group import (COMPLETING_REBALANCE, DEAD, EMPTY,
                                              PREPARING_REBALANCE, STABLE)
from kcoord.coordinator.result import AppliedRecord, Result
from kcoord.coordinator.shard import CoordinatorConfig, CoordinatorShard
from kcoord.protocol.messages.consumer_protocol import encode_assignment, encode_subscription
from kcoord.protocol.record_codec import encode_record
from kcoord.protocol.record_codec import decode_record

T0 = 1_700_000_000_000


def sub(*topics: str, user_data: bytes | None = None) -> bytes:
    return encode_subscription({"topics": list(topics), "user_data": user_data,
                                "owned_partitions": [], "generation_id": -1, "rack_id": None})


def assignment(topic: str, partitions: list[int]) -> bytes:
    return encode_assignment({"assigned_partitions": [{"topic": topic, "partitions": partitions}],
                              "user_data": None})


class Token:
    """Stands in for the runtime's future: what a parked request is answered through."""
    _ids = itertools.count()

    def __init__(self, label: str = "") -> None:
        self.id = next(self._ids)
        self.label = label

    def __repr__(self) -> str:
        return f"Token({self.id}{', ' + self.label if self.label else ''})"


class Harness:
    def __init__(self, config: CoordinatorConfig | None = None, **overrides) -> None:
        if config is None:
            defaults = dict(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=6000,
                            group_max_session_timeout_ms=300000)
            defaults.update(overrides)
            config = CoordinatorConfig(**defaults)
        self.config = config
        self.now = T0
        self._uuids = itertools.count()
        self.shard = CoordinatorShard(0, config, new_uuid=self._uuid)
        self.log: list[tuple[bytes, bytes | None]] = []
        self.armed: dict[tuple, int] = {}        # the runtime's view of the timers
        self.replies: dict[Token, dict] = {}
        self.records_written = 0
        # a shard fed only from the decoded log, kept up to date incrementally
        self._mirror = CoordinatorShard(0, config, new_uuid=self._uuid)
        self._mirrored = 0
        self.flat_commits = False  # commit() through CoordinatorShard.plain_commit first
        self.flat_taken = 0

    def _uuid(self) -> str:
        return f"uuid{next(self._uuids)}"

    # ------------------------------------------------------------ runtime
    def apply(self, res: Result) -> Result:
        # memory gets what the runtime replays (not the AppliedRecords); the log
        # gets every record, and replayed() / the mirror replay all of it
        self.shard.replay_emitted(res.records)
        for record in res.records:
            self.log.append(encode_record(record))
            self.records_written += 1
        for key, deadline in res.timers:
            if deadline is None:
                self.armed.pop(key, None)
            else:
                self.armed[key] = deadline
        for token, response in res.replies:
            assert token not in self.replies, f"{token} answered twice"
            self.replies[token] = response
        return res

    def advance(self, ms: int) -> None:
        """Move the clock, firing due timers in deadline order, as the runtime does."""
        target = self.now + ms
        while True:
            due = [(d, k) for k, d in self.armed.items() if d <= target]
            if not due:
                break
            deadline, key = min(due, key=lambda x: (x[0], repr(x[1])))
            self.now = max(self.now, deadline)
            del self.armed[key]
            self.apply(self.shard.on_timer(key, self.now))
        self.now = target

    def restart(self) -> None:
        """A new shard loaded from the log, as after a process restart."""
        self.shard = self.replayed()
        self.armed.clear()
        self.apply(self.shard.on_loaded(self.now))

    def replayed(self) -> CoordinatorShard:
        fresh = CoordinatorShard(0, self.config, new_uuid=self._uuid)
        for key, value in self.log:
            fresh.replay(decode_record(key, value))
        return fresh

    # ------------------------------------------------------------ requests
    def join(self, member_id: str = "", *, group: str = "g", version: int = 7,
             protocols=None, protocol_type: str = "consumer", session: int = 10000,
             rebalance: int = 30000, instance: str | None = None, client: str = "c",
             reason: str | None = None) -> Token:
        if protocols is None:
            protocols = [("range", sub("t"))]
        req = {"group_id": group, "session_timeout_ms": session, "rebalance_timeout_ms": rebalance,
               "member_id": member_id, "group_instance_id": instance,
               "protocol_type": protocol_type,
               "protocols": [{"name": n, "metadata": m} for n, m in protocols], "reason": reason}
        token = Token(f"join {member_id or client}")
        self.apply(self.shard.join_group(req, version, client, "/127.0.0.1", token, self.now))
        return token

    def sync(self, member_id: str, generation: int, *, group: str = "g", version: int = 5,
             assignments: dict[str, bytes] | None = None, instance: str | None = None,
             protocol_type: str | None = "consumer", protocol_name: str | None = "range") -> Token:
        req = {"group_id": group, "generation_id": generation, "member_id": member_id,
               "group_instance_id": instance, "protocol_type": protocol_type,
               "protocol_name": protocol_name,
               "assignments": [{"member_id": m, "assignment": a}
                               for m, a in (assignments or {}).items()]}
        token = Token(f"sync {member_id}")
        self.apply(self.shard.sync_group(req, version, token, self.now))
        return token

    def heartbeat(self, member_id: str, generation: int, *, group: str = "g", version: int = 4,
                  instance: str | None = None) -> int:
        req = {"group_id": group, "generation_id": generation, "member_id": member_id,
               "group_instance_id": instance}
        res = self.shard.heartbeat(req, version, self.now)
        if res.__class__ is not Result:  # the answer alone: nothing else to apply
            return res["error_code"]
        self.apply(res)
        return res.response["error_code"]

    def leave(self, members, *, group: str = "g", version: int = 5) -> dict:
        """members: list of member ids or (member_id, instance_id) pairs."""
        pairs = [(m, None) if isinstance(m, str) else m for m in members]
        if version >= 3:
            req = {"group_id": group, "member_id": "",
                   "members": [{"member_id": m, "group_instance_id": i, "reason": "bye"}
                               for m, i in pairs]}
        else:
            assert len(pairs) == 1
            req = {"group_id": group, "member_id": pairs[0][0], "members": []}
        res = self.shard.leave_group(req, version, self.now)
        self.apply(res)
        return res.response

    def commit(self, member_id: str, generation: int, *, group: str = "g", version: int = 8,
               instance: str | None = None, topic: str = "t", partition: int = 0,
               offset: int = 1) -> int:
        if self.flat_commits:  # protocol/commit_request.py's form, as the server's v8-v9
            res = self.shard.plain_commit(group, generation, member_id, instance,
                                          [(topic, [(partition, offset, -1, "")])], version,
                                          self.now)
            if res is not None:  # taken: the answer all NONE
                if res.__class__ is list:  # a simple group's: the records alone
                    res = Result(records=res)
                assert res.response is None and res.records
                self.flat_taken += 1
                self.apply(res)
                return Err.NONE
        req = {"group_id": group, "generation_id_or_member_epoch": generation,
               "member_id": member_id, "group_instance_id": instance, "retention_time_ms": -1,
               "topics": [{"name": topic, "partitions": [
                   {"partition_index": partition, "committed_offset": offset,
                    "committed_leader_epoch": -1, "committed_metadata": ""}]}]}
        res = self.shard.offset_commit(req, version, self.now)
        self.apply(res)
        return res.response["topics"][0]["partitions"][0]["error_code"]

    # ------------------------------------------------------------ helpers
    def reply(self, token: Token) -> dict | None:
        return self.replies.get(token)

    def code(self, token: Token) -> int | None:
        reply = self.replies.get(token)
        return None if reply is None else reply["error_code"]

    def group(self, group_id: str = "g"):
        return self.shard.groups.get(group_id)

    def new_member(self, *, group: str = "g", client: str = "c", **kw) -> str:
        """KIP-394 first join: returns the member id the coordinator hands out."""
        token = self.join("", group=group, client=client, **kw)
        reply = self.reply(token)
        assert reply["error_code"] == 79, reply
        return reply["member_id"]

    def form_group(self, n: int, *, group: str = "g", assign=None, **kw) -> tuple[list[str], int]:
        """n members join and sync; returns (member ids, generation)."""
        ids = [self.new_member(group=group, client=f"c{i}", **kw) for i in range(n)]
        tokens = [self.join(m, group=group, client=f"c{i}", **kw) for i, m in enumerate(ids)]
        self.advance(0)  # the initial delay (0) fires
        replies = [self.reply(t) for t in tokens]
        assert all(r is not None and r["error_code"] == 0 for r in replies), replies
        generation = replies[0]["generation_id"]
        leader = replies[0]["leader"]
        if assign is None:
            assign = {m: assignment("t", [i]) for i, m in enumerate(ids)}
        syncs = [self.sync(m, generation, group=group,
                           assignments=assign if m == leader else None) for m in ids]
        assert all(self.code(s) == 0 for s in syncs)
        assert self.group(group).state == STABLE
        return ids, generation

    def check_consistency(self) -> None:
        """Structural invariants of every classic group, and live == replayed."""
        for g in self.shard.groups.values():
            check_group(g)
        # what the fake runtime holds is what the core's timer service thinks is
        # armed, and every pending timer fires no later than its deadline (lazy re-arm)
        timers = self.shard.timers
        assert self.armed == timers.armed, (self.armed, timers.armed)
        assert all(self.armed.get(k, d + 1) <= d for k, d in timers.deadlines.items()), \
            (self.armed, timers.deadlines)
        for key, value in self.log[self._mirrored:]:
            self._mirror.replay(decode_record(key, value))
        self._mirrored = len(self.log)
        assert self._mirror.snapshot() == self.shard.snapshot()


def check_group(g) -> None:
    assert g.state in (EMPTY, PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE, DEAD)
    members = g.members
    if members:
        assert g.leader_id in members, (g.leader_id, list(members))
        assert g.protocol_type
    if g.state == EMPTY:
        assert not members
    if g.state in (COMPLETING_REBALANCE, STABLE):
        assert members and g.protocol_name
        assert all(g.protocol_name in m.protocol_names() for m in members.values())
    assert g.num_awaiting_join == sum(1 for m in members.values() if m.awaiting_join)
    assert not (set(g.pending_join_members) & set(members))
    # (a static member replaced before it synced stays pending under its old id,
    # as in Kafka: the pending-sync timeout then rebalances)
    assert all(m in members or m.split("-")[0].startswith("inst") or "-" in m
               for m in g.pending_sync_members)
    assert {i: m for i, m in g.static_members.items()} == \
        {m.group_instance_id: mid for mid, m in members.items() if m.group_instance_id is not None}
    for name, count in g.supported_protocols.items():
        assert count == sum(1 for m in members.values() for n, _ in m.protocols if n == name)
    if g.state in (COMPLETING_REBALANCE, PREPARING_REBALANCE):
        assert all(m.sync_token is None for m in members.values()) or \
            g.state == COMPLETING_REBALANCE
    if g.state in (STABLE, EMPTY) and g.persisted is not None:
        view = dict(g.persisted)
        view.pop("timestamp")
        assert g.durable_view() == view, (g.durable_view(), view)


# ====================================================================== tests
import random  # noqa: E402

import pytest  # noqa: E402

from kcoord.coordinator.classic_group import VALID_PREVIOUS, ClassicGroup  # noqa: E402
from kcoord.protocol.errors import Err  # noqa: E402

HB = "classic-heartbeat"


@pytest.fixture
def h():
    harness = Harness()
    yield harness
    harness.check_consistency()


# ----------------------------------------------------------------- KIP-394
def test_first_join_v4_requires_member_id(h):
    token = h.join("", version=4, client="app")
    reply = h.reply(token)
    assert reply["error_code"] == Err.MEMBER_ID_REQUIRED
    assert reply["member_id"] == "app-uuid0"
    g = h.group()
    assert g.is_pending("app-uuid0") and not g.members and g.state == EMPTY
    # the new group is persisted (Kafka's empty GroupMetadata record)
    assert h.records_written == 1
    # joining again with the id adds the member
    token = h.join("app-uuid0", version=4)
    h.advance(0)
    assert h.code(token) == Err.NONE
    assert h.reply(token)["leader"] == "app-uuid0"


def test_join_below_v4_adds_the_member_directly(h):
    token = h.join("", version=3, client="old")
    h.advance(0)
    reply = h.reply(token)
    assert reply["error_code"] == Err.NONE and reply["member_id"] == "old-uuid0"
    assert reply["generation_id"] == 1


def test_pending_member_expires_after_session_timeout(h):
    member = h.new_member(session=7000)
    assert h.armed[(HB, "g", member)] == h.now + 7000
    h.advance(6999)
    assert h.group().is_pending(member)
    h.advance(1)
    assert not h.group().is_pending(member)
    token = h.join(member)
    assert h.code(token) == Err.UNKNOWN_MEMBER_ID


def test_static_member_never_gets_member_id_required(h):
    token = h.join("", version=5, instance="inst-1")
    h.advance(0)
    reply = h.reply(token)
    assert reply["error_code"] == Err.NONE and reply["member_id"] == "inst-1-uuid0"


def test_join_with_member_id_to_unknown_group_is_unknown_member(h):
    assert h.code(h.join("someone")) == Err.UNKNOWN_MEMBER_ID
    assert h.group() is None


# ------------------------------------------------------------ JoinGroup errors
def test_join_invalid_group_id(h):
    assert h.code(h.join("", group="")) == Err.INVALID_GROUP_ID
    assert h.shard.groups == {}


@pytest.mark.parametrize("session", [5999, 300001])
def test_join_invalid_session_timeout(h, session):
    token = h.join("", session=session)
    assert h.code(token) == Err.INVALID_SESSION_TIMEOUT
    assert h.shard.groups == {}


@pytest.mark.parametrize("protocol_type,protocols", [
    ("", [("range", b"x")]),        # empty protocol type
    ("consumer", []),                # empty protocol list
])
def test_join_inconsistent_protocol_on_empty_group(h, protocol_type, protocols):
    token = h.join("", protocol_type=protocol_type, protocols=protocols)
    assert h.code(token) == Err.INCONSISTENT_GROUP_PROTOCOL


def test_join_inconsistent_protocol_type_or_no_shared_protocol(h):
    h.form_group(1)
    token = h.join("", protocol_type="connect", protocols=[("range", b"x")])
    assert h.code(token) == Err.INCONSISTENT_GROUP_PROTOCOL
    token = h.join("", protocols=[("roundrobin", sub("t"))])
    assert h.code(token) == Err.INCONSISTENT_GROUP_PROTOCOL
    assert h.reply(token)["member_id"] == ""
    # a known member switching to an unsupported protocol
    member = next(iter(h.group().members))
    token = h.join(member, protocols=[("roundrobin", sub("t"))])
    assert h.code(token) == Err.INCONSISTENT_GROUP_PROTOCOL
    assert h.reply(token)["member_id"] == member


def test_join_unknown_member_of_existing_group(h):
    h.form_group(1)
    token = h.join("not-a-member")
    assert h.code(token) == Err.UNKNOWN_MEMBER_ID
    assert h.reply(token)["member_id"] == "not-a-member"


def test_join_fenced_instance(h):
    token = h.join("", version=5, instance="i1")
    h.advance(0)
    member = h.reply(token)["member_id"]
    token = h.join("other-id", version=5, instance="i1")
    assert h.code(token) == Err.FENCED_INSTANCE_ID
    token = h.join(member, version=5, instance="unknown-instance")
    assert h.code(token) == Err.UNKNOWN_MEMBER_ID


def test_join_dead_group_is_coordinator_not_available(h):
    h.form_group(1)
    g = h.group()
    g.transition("Dead", h.now)
    assert h.code(h.join("")) == Err.COORDINATOR_NOT_AVAILABLE
    assert h.code(h.join(next(iter(g.members)))) == Err.COORDINATOR_NOT_AVAILABLE
    del h.shard.groups["g"]  # leave a consistent shard for the fixture's checks
    h.log.clear()
    h.armed.clear()
    h.shard.timers.deadlines.clear()
    h.shard.timers.armed.clear()


def test_group_max_size():
    h = Harness(group_max_size=2)
    ids, generation = h.form_group(2)
    # Stable: a third member is refused, the existing ones are accepted
    token = h.join("", version=3)
    assert h.code(token) == Err.GROUP_MAX_SIZE_REACHED and h.reply(token)["member_id"] == ""
    token = h.join("", version=7)  # checked before KIP-394 hands out an id
    assert h.code(token) == Err.GROUP_MAX_SIZE_REACHED and not h.group().pending_join_members
    assert h.code(h.join(ids[1])) == Err.NONE  # a member rejoining in Stable is accepted
    # PreparingRebalance: accepted while fewer than max are awaiting
    t1 = h.join(ids[0], protocols=[("range", sub("t", "u"))])  # changed metadata: rebalance
    assert h.group().state == PREPARING_REBALANCE
    t3 = h.join("", version=3)  # 1 awaiting < 2: accepted
    assert h.reply(t3) is None
    t4 = h.join("", version=3)  # 2 awaiting: refused
    assert h.code(t4) == Err.GROUP_MAX_SIZE_REACHED
    t2 = h.join(ids[1])  # an existing member is refused too once max are awaiting ...
    assert h.code(t2) == Err.GROUP_MAX_SIZE_REACHED
    assert ids[1] not in h.group().members  # ... and removed
    h.advance(30000)
    assert h.code(t1) == Err.NONE and h.code(t3) == Err.NONE
    h.check_consistency()


# ------------------------------------------------------- join phase, delays
def test_initial_delay_extended_by_late_joiners_and_capped_by_rebalance_timeout():
    h = Harness(group_initial_rebalance_delay_ms=3000)
    start = h.now
    tokens = [h.join("", version=3, rebalance=10000, client="c0")]
    for i in range(1, 6):  # a new member every 2 s
        h.advance(2000)
        if h.reply(tokens[0]) is None:
            tokens.append(h.join("", version=3, rebalance=10000, client=f"c{i}"))
    # 3000 -> 6000 -> 9000 -> 10000: never beyond the rebalance timeout
    while h.reply(tokens[0]) is None:
        h.advance(1)
    assert h.now - start == 10000
    assert all(h.code(t) == Err.NONE for t in tokens)
    assert len(h.group().members) == len(tokens) == 5


def test_initial_delay_without_late_joiners():
    h = Harness(group_initial_rebalance_delay_ms=3000)
    token = h.join("", version=3)
    h.advance(2999)
    assert h.reply(token) is None
    h.advance(1)
    assert h.code(token) == Err.NONE


def test_initial_rebalance_waits_for_its_timer_even_if_all_joined():
    h = Harness(group_initial_rebalance_delay_ms=3000)
    t1 = h.join("", version=3)
    assert h.group().has_all_members_joined()
    assert h.reply(t1) is None


def test_rebalance_completes_when_all_members_rejoin(h):
    ids, generation = h.form_group(3)
    token = h.join("", version=3)  # a new member in Stable: rebalance
    assert h.group().state == PREPARING_REBALANCE
    assert all(h.heartbeat(m, generation) == Err.REBALANCE_IN_PROGRESS for m in ids)
    tokens = [h.join(m) for m in ids[:2]]
    assert h.reply(token) is None
    tokens.append(h.join(ids[2]))  # the last one completes the join phase at once
    replies = [h.reply(t) for t in [token] + tokens]
    assert all(r["error_code"] == Err.NONE and r["generation_id"] == generation + 1
               for r in replies)
    assert h.group().state == COMPLETING_REBALANCE


def test_rebalance_timeout_removes_non_rejoined_dynamic_members_but_keeps_static(h):
    ids, generation = h.form_group(2, rebalance=20000, session=60000)
    static = h.join("", version=5, instance="s1", rebalance=20000, session=60000)
    assert h.group().state == PREPARING_REBALANCE
    h.advance(20000)  # nobody else rejoins: the join phase completes at the rebalance timeout
    reply = h.reply(static)
    assert reply["error_code"] == Err.NONE and reply["generation_id"] == generation + 1
    assert set(h.group().members) == {reply["member_id"]}
    assert reply["leader"] == reply["member_id"]  # the old leader did not rejoin


def test_static_member_not_rejoined_is_kept():
    h = Harness()
    t = h.join("", version=5, instance="s1", rebalance=20000, session=60000)
    h.advance(0)
    s1 = h.reply(t)["member_id"]
    h.sync(s1, 1, assignments={s1: b"a"})
    t2 = h.join("", version=3, rebalance=20000, session=60000)
    h.advance(20000)
    assert h.code(t2) == Err.NONE
    assert set(h.group().members) == {s1, h.reply(t2)["member_id"]}
    assert h.reply(t2)["leader"] == h.reply(t2)["member_id"]  # the joined member leads
    h.check_consistency()


def test_no_member_rejoined_waits_another_rebalance_timeout(h):
    t = h.join("", version=5, instance="s1", rebalance=20000, session=60000)
    h.advance(0)
    s1 = h.reply(t)["member_id"]
    h.sync(s1, 1, instance="s1", assignments={s1: b"a"})
    d = h.join("", version=3, rebalance=20000, session=60000)
    h.leave([list(h.group().members)[1]])  # the dynamic member leaves again
    assert h.code(d) == Err.UNKNOWN_MEMBER_ID
    h.advance(20000)  # nobody rejoined: wait another rebalance timeout
    assert h.group().state == PREPARING_REBALANCE and h.armed[("classic-join", "g")] == h.now + 20000
    h.advance(10000)
    t = h.join(s1, version=5, instance="s1")  # the static member comes back: done at once
    assert h.code(t) == Err.NONE and h.reply(t)["generation_id"] == 2


# ------------------------------------------------------ leader and protocol
def test_leader_is_first_member_and_only_leader_gets_members(h):
    ids = [h.new_member(client=f"c{i}") for i in range(3)]
    tokens = [h.join(m) for m in ids]
    h.advance(0)
    replies = [h.reply(t) for t in tokens]
    assert {r["leader"] for r in replies} == {ids[0]}
    assert [m["member_id"] for m in replies[0]["members"]] == ids
    assert all(m["metadata"] == sub("t") for m in replies[0]["members"])
    assert replies[1]["members"] == [] and replies[2]["members"] == []


def test_leader_leaving_passes_leadership_on(h):
    ids, generation = h.form_group(3)
    h.leave([ids[0]])
    assert h.group().leader_id == ids[1]


def test_protocol_selected_by_vote(h):
    protos = [
        [("range", sub("t")), ("roundrobin", sub("t")), ("sticky", sub("t"))],
        [("roundrobin", sub("t")), ("range", sub("t"))],
        [("roundrobin", sub("t")), ("range", sub("t"))],
    ]
    ids = [h.new_member(client=f"c{i}", protocols=p) for i, p in enumerate(protos)]
    tokens = [h.join(m, protocols=p) for m, p in zip(ids, protos)]
    h.advance(0)
    assert {h.reply(t)["protocol_name"] for t in tokens} == {"roundrobin"}
    assert h.group().candidate_protocols() == {"range", "roundrobin"}


# ---------------------------------------------------------------- SyncGroup
def test_followers_wait_for_leader_sync_and_get_their_bytes(h):
    ids = [h.new_member(client=f"c{i}") for i in range(3)]
    tokens = [h.join(m) for m in ids]
    h.advance(0)
    generation = h.reply(tokens[0])["generation_id"]
    f1 = h.sync(ids[1], generation)
    assert h.reply(f1) is None
    records = h.records_written
    leader = h.sync(ids[0], generation, assignments={ids[0]: b"A", ids[1]: b"B"})
    # the leader's assignment is persisted with the replies (the runtime sends them
    # once the record is durable)
    assert h.records_written == records + 1
    assert h.reply(leader)["assignment"] == b"A"
    assert h.reply(f1)["assignment"] == b"B" and h.code(f1) == Err.NONE
    assert h.reply(f1)["protocol_type"] == "consumer" and h.reply(f1)["protocol_name"] == "range"
    f2 = h.sync(ids[2], generation)  # absent from the assignment: empty bytes
    assert h.code(f2) == Err.NONE and h.reply(f2)["assignment"] == b""
    assert h.group().state == STABLE
    value = h.group().persisted
    assert value["generation"] == generation and value["leader"] == ids[0]
    assert [m[7] for m in value["members"]] == [b"A", b"B", b""]


def test_group_metadata_record_is_value_v3_with_everything(h):
    ids, generation = h.form_group(2)
    key, value = h.log[-1]
    from kcoord.protocol.record_codec import decode_record
    record = decode_record(key, value)
    assert record.type == 2 and record.value_version == 3
    v = record.value
    assert v["protocol_type"] == "consumer" and v["protocol"] == "range"
    assert v["generation"] == generation and v["leader"] == ids[0]
    assert [(m["member_id"], m["client_id"], m["client_host"], m["session_timeout"],
             m["rebalance_timeout"], m["subscription"], m["assignment"]) for m in v["members"]] == \
        [(ids[0], "c0", "/127.0.0.1", 10000, 30000, sub("t"), assignment("t", [0])),
         (ids[1], "c1", "/127.0.0.1", 10000, 30000, sub("t"), assignment("t", [1]))]


def test_sync_errors(h):
    assert h.code(h.sync("m", 1, group="")) == Err.INVALID_GROUP_ID
    assert h.code(h.sync("m", 1, group="nope")) == Err.UNKNOWN_MEMBER_ID
    h.new_member()  # the group exists but is Empty
    assert h.code(h.sync("m", 0)) == Err.UNKNOWN_MEMBER_ID
    ids, generation = h.form_group(2, group="g2")
    assert h.code(h.sync("stranger", generation, group="g2")) == Err.UNKNOWN_MEMBER_ID
    assert h.code(h.sync(ids[1], generation + 1, group="g2")) == Err.ILLEGAL_GENERATION
    assert h.code(h.sync(ids[1], generation, group="g2",
                         protocol_name="roundrobin")) == Err.INCONSISTENT_GROUP_PROTOCOL
    assert h.code(h.sync(ids[1], generation, group="g2",
                         protocol_type="connect")) == Err.INCONSISTENT_GROUP_PROTOCOL
    # v5 requires both; below v5 they are not sent
    assert h.code(h.sync(ids[1], generation, group="g2",
                         protocol_type=None)) == Err.INCONSISTENT_GROUP_PROTOCOL
    assert h.code(h.sync(ids[1], generation, group="g2", version=4, protocol_type=None,
                         protocol_name=None)) == Err.NONE
    assert h.code(h.sync(ids[1], generation, group="g2", version=3,
                         instance="i")) == Err.UNKNOWN_MEMBER_ID
    h.join("", group="g2", version=3)  # rebalance
    assert h.code(h.sync(ids[1], generation, group="g2")) == Err.REBALANCE_IN_PROGRESS


def test_sync_fenced_instance(h):
    t = h.join("", version=5, instance="i1")
    h.advance(0)
    member = h.reply(t)["member_id"]
    assert h.code(h.sync("other", 1, instance="i1")) == Err.FENCED_INSTANCE_ID
    assert h.code(h.sync(member, 1, instance="i1", assignments={member: b"x"})) == Err.NONE


def test_sync_dead_group(h):
    ids, generation = h.form_group(1)
    h.group().transition("Dead", h.now)
    assert h.code(h.sync(ids[0], generation)) == Err.COORDINATOR_NOT_AVAILABLE
    h.shard.groups.pop("g")
    h.log.clear()
    h.armed.clear()
    h.shard.timers.deadlines.clear()
    h.shard.timers.armed.clear()


def test_pending_sync_timeout_removes_non_syncers_and_rebalances(h):
    ids = [h.new_member(client=f"c{i}", rebalance=15000, session=60000) for i in range(3)]
    tokens = [h.join(m, rebalance=15000, session=60000) for m in ids]
    h.advance(0)
    generation = h.reply(tokens[0])["generation_id"]
    h.sync(ids[0], generation, assignments={m: b"x" for m in ids})
    h.sync(ids[1], generation)
    assert h.group().state == STABLE and set(h.group().pending_sync_members) == {ids[2]}
    h.advance(14999)
    assert ids[2] in h.group().members
    h.advance(1)
    assert ids[2] not in h.group().members
    assert h.group().state == PREPARING_REBALANCE
    assert h.heartbeat(ids[0], generation) == Err.REBALANCE_IN_PROGRESS


def test_all_synced_cancels_the_pending_sync_timer(h):
    ids, generation = h.form_group(2)
    assert ("classic-sync", "g") not in h.armed


def test_rebalance_during_completing_answers_parked_syncs(h):
    ids = [h.new_member(client=f"c{i}") for i in range(2)]
    tokens = [h.join(m) for m in ids]
    h.advance(0)
    generation = h.reply(tokens[0])["generation_id"]
    follower = h.sync(ids[1], generation)
    h.join("", version=3)  # a new member: the follower's sync is told to rejoin
    assert h.code(follower) == Err.REBALANCE_IN_PROGRESS
    assert h.reply(follower)["protocol_name"] is None


# ---------------------------------------------------------------- Heartbeat
def test_heartbeat_errors_and_success(h):
    assert h.heartbeat("m", 0, group="") == Err.INVALID_GROUP_ID
    assert h.heartbeat("m", 0, group="nope") == Err.UNKNOWN_MEMBER_ID
    ids, generation = h.form_group(2)
    assert h.heartbeat(ids[0], generation) == Err.NONE
    assert h.heartbeat("stranger", generation) == Err.UNKNOWN_MEMBER_ID
    assert h.heartbeat(ids[0], generation - 1) == Err.ILLEGAL_GENERATION
    assert h.heartbeat(ids[0], generation, instance="i") == Err.UNKNOWN_MEMBER_ID
    assert h.heartbeat(ids[0], generation, version=2, instance="i") == Err.NONE  # no field <v3
    h.join("", version=3)
    assert h.heartbeat(ids[0], generation) == Err.REBALANCE_IN_PROGRESS


def test_heartbeat_in_completing_rebalance_is_fine(h):
    ids = [h.new_member()]
    t = h.join(ids[0])
    h.advance(0)
    assert h.group().state == COMPLETING_REBALANCE
    assert h.heartbeat(ids[0], h.reply(t)["generation_id"]) == Err.NONE


def test_heartbeat_fenced_instance_and_dead_group(h):
    t = h.join("", version=5, instance="i1")
    h.advance(0)
    member = h.reply(t)["member_id"]
    h.sync(member, 1, assignments={member: b"x"}, instance="i1")
    assert h.heartbeat("old", 1, instance="i1") == Err.FENCED_INSTANCE_ID
    assert h.heartbeat(member, 1, instance="i1") == Err.NONE
    h.group().transition("Dead", h.now)
    assert h.heartbeat(member, 1, instance="i1") == Err.COORDINATOR_NOT_AVAILABLE
    h.shard.groups.pop("g")
    h.log.clear()
    h.armed.clear()
    h.shard.timers.deadlines.clear()
    h.shard.timers.armed.clear()


def test_heartbeat_refreshes_the_session_and_expiry_rebalances(h):
    ids, generation = h.form_group(2, session=10000)
    h.advance(9000)
    assert h.heartbeat(ids[0], generation) == Err.NONE
    h.advance(9000)  # ids[1] silent for 18 s: gone; ids[0] heartbeated 9 s ago
    assert ids[1] not in h.group().members and ids[0] in h.group().members
    assert h.group().state == PREPARING_REBALANCE
    assert h.heartbeat(ids[0], generation) == Err.REBALANCE_IN_PROGRESS
    t = h.join(ids[0])  # the last member rejoins: generation + 1 at once
    assert h.reply(t)["generation_id"] == generation + 1


def test_members_parked_in_a_rebalance_do_not_expire(h):
    ids, generation = h.form_group(2, session=10000, rebalance=60000)
    h.advance(5000)  # ids[1] expires 10 s after its sync, ids[0] is parked from 5 s
    t = h.join(ids[0])  # the leader rejoins: rebalance, waiting for ids[1]
    h.advance(4999)
    assert set(h.group().members) == set(ids) and h.reply(t) is None
    h.advance(1)  # ids[1] expires, and with it the wait: the join phase completes
    assert set(h.group().members) == {ids[0]}
    assert h.code(t) == Err.NONE


def test_new_member_join_times_out_after_300s():
    h = Harness()
    ids, generation = h.form_group(1, rebalance=600000, session=300000)
    t = h.join("", version=3, rebalance=600000, session=300000)  # new member, parked
    member = h.group().leader_id
    for _ in range(3):  # the old member keeps its session, but never rejoins
        h.advance(100000)
        h.heartbeat(member, generation)
    assert h.code(t) == Err.UNKNOWN_MEMBER_ID and h.reply(t)["member_id"] == ""
    assert len(h.group().members) == 1
    h.check_consistency()


# --------------------------------------------------------------- LeaveGroup
def test_leave_v0_single_member(h):
    ids, generation = h.form_group(2)
    response = h.leave([ids[1]], version=0)
    assert response["error_code"] == Err.NONE
    assert h.group().state == PREPARING_REBALANCE
    assert h.leave(["stranger"], version=1)["error_code"] == Err.UNKNOWN_MEMBER_ID


def test_leave_batch_with_per_member_errors(h):
    ids, generation = h.form_group(3)
    t = h.join("", version=5, instance="s1")
    tokens = [h.join(ids[0])]
    s1 = h.group().static_members["s1"]
    response = h.leave([ids[0], "stranger", (ids[1], "s1"), ("", "s1"), ("", "nobody")])
    assert response["error_code"] == Err.NONE
    assert [(m["member_id"], m["group_instance_id"], m["error_code"])
            for m in response["members"]] == [
        (ids[0], None, Err.NONE), ("stranger", None, Err.UNKNOWN_MEMBER_ID),
        (ids[1], "s1", Err.FENCED_INSTANCE_ID), ("", "s1", Err.NONE),
        ("", "nobody", Err.UNKNOWN_MEMBER_ID)]
    assert set(h.group().members) == {ids[1], ids[2]}
    assert s1 not in h.group().members
    # the leaving member's parked join is told it is unknown
    assert h.code(tokens[0]) == Err.UNKNOWN_MEMBER_ID


def test_leave_unknown_group_and_invalid_group(h):
    response = h.leave(["a", ("b", "i")], group="nope")
    assert response["error_code"] == Err.NONE
    assert [m["error_code"] for m in response["members"]] == [Err.UNKNOWN_MEMBER_ID] * 2
    assert h.leave(["a"], group="nope", version=2)["error_code"] == Err.UNKNOWN_MEMBER_ID
    assert h.leave(["a"], group="")["error_code"] == Err.INVALID_GROUP_ID


def test_leave_dead_group(h):
    ids, generation = h.form_group(1)
    h.group().transition("Dead", h.now)
    assert h.leave([ids[0]])["error_code"] == Err.COORDINATOR_NOT_AVAILABLE
    h.shard.groups.pop("g")
    h.log.clear()
    h.armed.clear()
    h.shard.timers.deadlines.clear()
    h.shard.timers.armed.clear()


def test_leave_triggers_an_immediate_rebalance(h):
    ids, generation = h.form_group(3)
    h.leave([ids[2]])
    assert h.group().state == PREPARING_REBALANCE
    assert h.heartbeat(ids[0], generation) == Err.REBALANCE_IN_PROGRESS
    tokens = [h.join(m) for m in ids[:2]]
    assert all(h.reply(t)["generation_id"] == generation + 1 for t in tokens)


def test_last_member_leaving_empties_the_group_and_writes_metadata(h):
    ids, generation = h.form_group(1)
    before = h.records_written
    h.leave([ids[0]])
    g = h.group()
    assert g.state == EMPTY and g.generation_id == generation + 1
    assert h.records_written == before + 1
    assert g.persisted["members"] == [] and g.persisted["protocol"] is None
    assert g.persisted["timestamp"] == h.now


def test_pending_member_can_leave(h):
    member = h.new_member()
    response = h.leave([member])
    assert response["members"][0]["error_code"] == Err.NONE
    assert not h.group().is_pending(member)
    assert (HB, "g", member) not in h.armed


def test_leave_with_reason_v5_and_members_v3(h):
    ids, generation = h.form_group(1)
    response = h.leave([ids[0]], version=3)
    assert response["members"] == [{"member_id": ids[0], "group_instance_id": None,
                                    "error_code": Err.NONE}]


# ------------------------------------------------------- static membership
def static_group(h, n=2, version=5, **kw):
    tokens = [h.join("", version=version, instance=f"i{k}", client=f"c{k}", **kw)
              for k in range(n)]
    h.advance(0)
    ids = [h.reply(t)["member_id"] for t in tokens]
    generation = h.reply(tokens[0])["generation_id"]
    leader = h.reply(tokens[0])["leader"]
    for k, m in enumerate(ids):
        h.sync(m, generation, instance=f"i{k}",
               assignments={x: f"A{j}".encode() for j, x in enumerate(ids)} if m == leader else None)
    assert h.group().state == STABLE
    return ids, generation


def test_static_replacement_without_rebalance(h):
    ids, generation = static_group(h)
    before = h.records_written
    t = h.join("", version=5, instance="i1", client="c1-restarted")
    reply = h.reply(t)
    new_id = reply["member_id"]
    assert reply["error_code"] == Err.NONE and new_id != ids[1]
    assert reply["generation_id"] == generation and reply["leader"] == ids[0]
    assert reply["members"] == [] and reply["skip_assignment"] is False
    assert h.group().state == STABLE and h.records_written == before + 1
    # the assignment is inherited; the old member id is fenced
    s = h.sync(new_id, generation, instance="i1")
    assert h.reply(s)["assignment"] == b"A1"
    assert h.heartbeat(ids[1], generation, instance="i1") == Err.FENCED_INSTANCE_ID
    assert h.heartbeat(new_id, generation, instance="i1") == Err.NONE
    assert h.heartbeat(ids[0], generation, instance="i0") == Err.NONE
    assert h.commit(ids[1], generation, instance="i1") == Err.FENCED_INSTANCE_ID


def test_static_leader_replacement_v9_skips_assignment(h):
    ids, generation = static_group(h, version=9)
    t = h.join("", version=9, instance="i0")
    reply = h.reply(t)
    assert reply["skip_assignment"] is True and reply["leader"] == reply["member_id"]
    assert {m["member_id"] for m in reply["members"]} == {reply["member_id"], ids[1]}
    assert reply["generation_id"] == generation


def test_static_leader_replacement_below_v9_keeps_the_old_leader_id(h):
    ids, generation = static_group(h, version=5)
    t = h.join("", version=5, instance="i0")
    reply = h.reply(t)
    assert reply["leader"] == ids[0] and reply["member_id"] != ids[0]
    assert reply["members"] == [] and reply["skip_assignment"] is False
    assert h.group().leader_id == reply["member_id"]


def test_static_replacement_with_protocol_change_rebalances(h):
    ids, generation = static_group(h)
    t = h.join("", version=5, instance="i1", protocols=[("roundrobin", sub("t")),
                                                          ("range", sub("t"))])
    # the group's choice stays range (i0 only supports range): no rebalance
    assert h.code(t) == Err.NONE and h.group().state == STABLE
    h2 = Harness()
    ids, generation = static_group(h2, n=1)
    t = h2.join("", version=5, instance="i0", protocols=[("roundrobin", sub("t")),
                                                          ("range", sub("t"))])
    # the group's choice would change: a rebalance (all members are in: it completes)
    assert h2.reply(t)["generation_id"] == generation + 1
    assert h2.reply(t)["protocol_name"] == "roundrobin"
    assert h2.group().state == COMPLETING_REBALANCE
    h2.check_consistency()


def test_static_replacement_fences_parked_requests_of_the_old_id(h):
    tokens = [h.join("", version=5, instance=f"i{k}") for k in range(2)]
    h.advance(0)
    ids = [h.reply(t)["member_id"] for t in tokens]
    generation = h.reply(tokens[0])["generation_id"]
    parked = h.sync(ids[1], generation, instance="i1")  # waits for the leader
    t = h.join("", version=5, instance="i1")  # CompletingRebalance: rebalance
    assert h.code(parked) == Err.FENCED_INSTANCE_ID
    assert h.group().state == PREPARING_REBALANCE
    h.advance(30000)
    assert h.reply(t) is not None


def test_static_replacement_fences_a_parked_join_of_the_old_id(h):
    ids, generation = static_group(h, n=3)
    parked = h.join(ids[1], version=5, instance="i1", protocols=[("range", sub("t", "u"))])
    assert h.reply(parked) is None and h.group().state == PREPARING_REBALANCE
    t = h.join("", version=5, instance="i1")
    assert h.code(parked) == Err.FENCED_INSTANCE_ID
    assert h.reply(parked)["member_id"] == ids[1] and h.reply(parked)["leader"] == ""
    assert h.reply(t) is None  # the new id waits in the rebalance like the old one did
    for k in (0, 2):
        h.join(ids[k], version=5, instance=f"i{k}")
    assert h.code(t) == Err.NONE and h.reply(t)["generation_id"] == generation + 1


def test_static_member_removed_by_instance_id_alone(h):
    ids, generation = static_group(h)
    response = h.leave([("", "i1")])
    assert response["members"][0]["error_code"] == Err.NONE
    assert ids[1] not in h.group().members


# ------------------------------------------------------- rejoin in Stable
def test_follower_rejoin_with_same_metadata_in_stable_keeps_the_generation(h):
    ids, generation = h.form_group(2)
    t = h.join(ids[1])
    reply = h.reply(t)
    assert reply["generation_id"] == generation and reply["members"] == []
    assert h.group().state == STABLE


def test_follower_rejoin_with_changed_metadata_rebalances(h):
    ids, generation = h.form_group(2)
    t = h.join(ids[1], protocols=[("range", sub("t", "u"))])
    assert h.reply(t) is None and h.group().state == PREPARING_REBALANCE
    t0 = h.join(ids[0])
    assert h.reply(t)["generation_id"] == generation + 1
    members = {m["member_id"]: m["metadata"] for m in h.reply(t0)["members"]}
    assert members[ids[1]] == sub("t", "u")


def test_leader_rejoin_with_same_metadata_rebalances(h):
    ids, generation = h.form_group(2)
    t = h.join(ids[0])
    assert h.reply(t) is None and h.group().state == PREPARING_REBALANCE


def test_cooperative_rejoin_relays_owned_partitions(h):
    """KIP-429: the coordinator only relays; a follower's changed metadata (owned
    partitions) rebalances, and the leader sees the new metadata."""
    meta = lambda owned: encode_subscription({  # noqa: E731
        "topics": ["t"], "user_data": None, "owned_partitions": [{"topic": "t", "partitions": owned}],
        "generation_id": 1, "rack_id": None})
    ids = [h.new_member(client=f"c{i}", protocols=[("cooperative-sticky", meta([]))])
           for i in range(2)]
    tokens = [h.join(m, protocols=[("cooperative-sticky", meta([]))]) for m in ids]
    h.advance(0)
    generation = h.reply(tokens[0])["generation_id"]
    for m in ids:
        h.sync(m, generation, protocol_name="cooperative-sticky",
               assignments={ids[0]: b"p0", ids[1]: b"p1"} if m == ids[0] else None)
    t1 = h.join(ids[1], protocols=[("cooperative-sticky", meta([1]))])
    t0 = h.join(ids[0], protocols=[("cooperative-sticky", meta([0]))])
    members = {m["member_id"]: m["metadata"] for m in h.reply(t0)["members"]}
    assert members == {ids[0]: meta([0]), ids[1]: meta([1])}
    assert h.reply(t1)["generation_id"] == generation + 1


def test_rejoin_in_completing_rebalance_with_same_metadata_returns_generation(h):
    ids = [h.new_member(client=f"c{i}") for i in range(2)]
    tokens = [h.join(m) for m in ids]
    h.advance(0)
    again = h.join(ids[0])
    reply = h.reply(again)
    assert reply["generation_id"] == h.reply(tokens[0])["generation_id"]
    assert [m["member_id"] for m in reply["members"]] == ids  # the leader gets the members
    assert h.group().state == COMPLETING_REBALANCE
    changed = h.join(ids[1], protocols=[("range", sub("u"))])
    assert h.reply(changed) is None and h.group().state == PREPARING_REBALANCE


def test_duplicate_join_answers_the_displaced_request(h):
    ids, generation = h.form_group(2)
    first = h.join(ids[0])
    second = h.join(ids[0])
    assert h.code(first) == Err.REBALANCE_IN_PROGRESS
    assert h.reply(second) is None
    h.join(ids[1])
    assert h.code(second) == Err.NONE


def test_join_existing_member_in_empty_group_is_unknown(h):
    member = h.new_member()
    h.leave([member])
    assert h.code(h.join("ghost")) == Err.UNKNOWN_MEMBER_ID


# -------------------------------------------------------------- offsets 1.6
@pytest.mark.parametrize("flat", [False, True])
def test_commit_validation_against_the_classic_group(h, flat):
    h.flat_commits = flat
    ids, generation = h.form_group(2)
    assert h.commit(ids[0], generation) == Err.NONE
    assert h.commit(ids[0], generation + 1) == Err.ILLEGAL_GENERATION
    assert h.commit("stranger", generation) == Err.UNKNOWN_MEMBER_ID
    assert h.commit("", -1) == Err.UNKNOWN_MEMBER_ID  # not empty: no anonymous commits
    assert h.commit(ids[0], generation, instance="nobody") == Err.UNKNOWN_MEMBER_ID
    h.join("", version=3)
    assert h.commit(ids[0], generation) == Err.NONE  # PreparingRebalance: accepted
    for m in ids:
        h.join(m)
    assert h.group().state == COMPLETING_REBALANCE
    assert h.commit(ids[0], generation + 1) == Err.REBALANCE_IN_PROGRESS


@pytest.mark.parametrize("flat", [False, True])
def test_commit_to_empty_group_with_negative_generation(h, flat):
    h.flat_commits = flat
    member = h.new_member()
    assert h.commit("", -1) == Err.NONE
    assert h.commit(member, 0) == Err.UNKNOWN_MEMBER_ID


@pytest.mark.parametrize("flat", [False, True])
def test_commit_refreshes_the_session(h, flat):
    h.flat_commits = flat
    ids, generation = h.form_group(2, session=10000)
    h.advance(9000)
    assert h.commit(ids[1], generation) == Err.NONE
    assert h.flat_taken == flat  # (the flat commit armed the timer itself)
    assert h.heartbeat(ids[0], generation) == Err.NONE
    h.advance(9000)
    assert set(h.group().members) == set(ids)


@pytest.mark.parametrize("flat", [False, True])
def test_commit_in_completing_rebalance_does_not_refresh(h, flat):
    h.flat_commits = flat
    ids = [h.new_member()]
    t = h.join(ids[0])
    h.advance(0)
    deadline = h.armed[(HB, "g", ids[0])]
    h.advance(100)
    assert h.commit(ids[0], h.reply(t)["generation_id"]) == Err.REBALANCE_IN_PROGRESS
    assert h.armed[(HB, "g", ids[0])] == deadline


def test_subscribed_topics_protect_offsets_from_expiry_and_delete(h):
    h.shard.config.offsets_retention_ms = 1000
    ids, generation = h.form_group(1)
    h.commit(ids[0], generation, topic="t")
    h.commit(ids[0], generation, topic="other")
    assert h.group().subscribed_topics == {"t"}
    h.advance(5000)
    h.heartbeat(ids[0], generation)
    h.apply(_result(h.shard.cleanup(h.now)))
    assert set(h.shard.offsets.group_offsets("g")) == {("t", 0)}
    response = h.shard.offset_delete({"group_id": "g", "topics": [
        {"name": "t", "partitions": [{"partition_index": 0}]}]}).response
    assert response["topics"][0]["partitions"][0]["error_code"] == Err.GROUP_SUBSCRIBED_TO_TOPIC


def _result(records):
    from kcoord.coordinator.result import Result
    return Result(records=list(records))


def test_empty_group_offsets_expire_from_when_it_became_empty(h):
    h.shard.config.offsets_retention_ms = 10000
    ids, generation = h.form_group(1)
    h.commit(ids[0], generation)
    h.advance(8000)
    h.heartbeat(ids[0], generation)
    h.leave([ids[0]])
    h.advance(9000)  # 17 s after the commit, 9 s after emptying: kept
    h.apply(_result(h.shard.cleanup(h.now)))
    assert h.shard.offsets.group_offsets("g")
    h.advance(1000)
    h.apply(_result(h.shard.cleanup(h.now)))
    assert "g" not in h.shard.groups  # offsets gone, then the group


# ------------------------------------------------------------ describe/list
def test_describe_and_list_live_groups(h):
    ids, generation = h.form_group(2)
    d = h.shard.describe_group("g")
    assert d["group_state"] == STABLE and d["protocol_type"] == "consumer"
    assert d["protocol_data"] == "range"
    assert [(m["member_id"], m["client_id"], m["client_host"], m["member_metadata"],
             m["member_assignment"]) for m in d["members"]] == [
        (ids[0], "c0", "/127.0.0.1", sub("t"), assignment("t", [0])),
        (ids[1], "c1", "/127.0.0.1", sub("t"), assignment("t", [1]))]
    h.join("", version=3)
    d = h.shard.describe_group("g")
    assert d["group_state"] == PREPARING_REBALANCE and d["protocol_data"] == ""
    assert all(m["member_metadata"] == b"" for m in d["members"])
    assert d["members"][0]["member_assignment"] == assignment("t", [0])
    listed = h.shard.list_groups(["preparingrebalance"], [])
    assert [(x["group_id"], x["group_state"], x["protocol_type"]) for x in listed] == \
        [("g", PREPARING_REBALANCE, "consumer")]
    assert h.shard.list_groups(["stable"], []) == []


def test_delete_group_requires_empty(h):
    ids, generation = h.form_group(1)
    assert h.shard.delete_group("g").response["error_code"] == Err.NON_EMPTY_GROUP
    h.leave([ids[0]])
    deleted = h.shard.delete_group("g")
    code, records = deleted.response["error_code"], deleted.records
    assert code == Err.NONE
    h.apply(_result(records))
    assert "g" not in h.shard.groups


# ------------------------------------------------------------------ restart
def test_restart_brings_back_the_group_and_restarts_sessions(h):
    ids, generation = h.form_group(3, session=10000)
    t = h.join("", version=5, instance="s", session=10000)
    for m in ids:
        h.join(m, session=10000)
    s = h.reply(t)["member_id"]
    gen2 = h.reply(t)["generation_id"]
    leader = h.reply(t)["leader"]
    all_ids = ids + [s]
    for m in all_ids:
        h.sync(m, gen2, instance="s" if m == s else None,
               assignments={x: x.encode() for x in all_ids} if m == leader else None)
    before = h.group().durable_view()
    h.advance(5000)
    h.restart()
    g = h.group()
    assert g.state == STABLE and g.durable_view() == before
    assert g.static_members == {"s": s} and g.leader_id == leader
    assert g.subscribed_topics == {"t"}
    # sessions restart at load: nobody expired yet after 9 s
    h.advance(9000)
    for m in all_ids[:2]:
        assert h.heartbeat(m, gen2, instance="s" if m == s else None) == Err.NONE
    syncs = [h.sync(m, gen2) for m in all_ids[:2]]
    assert [h.reply(x)["assignment"] for x in syncs] == [x.encode() for x in all_ids[:2]]
    h.advance(1000)  # the silent two expire 10 s after the load
    assert set(h.group().members) == set(all_ids[:2])
    assert h.group().state == PREPARING_REBALANCE


def test_restart_of_an_oversized_group_rebalances():
    h = Harness()
    ids, generation = h.form_group(3)
    h.shard.config.group_max_size = 2
    h.restart()
    assert h.group().state == PREPARING_REBALANCE
    tokens = [h.join(m) for m in ids]
    assert sum(1 for t in tokens if h.code(t) == Err.GROUP_MAX_SIZE_REACHED) == 1
    h.advance(30000)
    assert len(h.group().members) == 2
    h.check_consistency()


def test_restart_of_empty_group(h):
    ids, generation = h.form_group(1)
    h.leave([ids[0]])
    h.restart()
    g = h.group()
    assert g.state == EMPTY and g.generation_id == generation + 1
    assert g.protocol_type == "consumer"
    t = h.join("", version=3)
    h.advance(0)
    assert h.reply(t)["generation_id"] == generation + 2


# ------------------------------------------------------- KIP-848 neighbours
def consumer_heartbeat(h, member_id="", epoch=0, group="g"):
    req = {"group_id": group, "member_id": member_id, "member_epoch": epoch,
           "instance_id": None, "rack_id": None, "rebalance_timeout_ms": 30000,
           "subscribed_topic_names": ["t"] if epoch == 0 else None,
           "subscribed_topic_regex": None, "server_assignor": None,
           "topic_partitions": [] if epoch == 0 else None}
    result = h.shard.consumer_group_heartbeat(req, 0, "c", "/h", h.now)
    h.apply(result)
    return result.response


def test_classic_join_to_a_consumer_group(h):
    reply = consumer_heartbeat(h)
    assert reply["error_code"] == Err.NONE and "g" in h.shard.consumer.groups
    # the consumer group has a member: a classic member joins the consumer group
    # (tests/coordinator/test_group_migration.py), if its protocol type is "consumer"
    assert h.code(h.join("", protocol_type="connect")) == Err.INCONSISTENT_GROUP_PROTOCOL
    assert h.code(h.join("")) == Err.MEMBER_ID_REQUIRED
    assert "g" not in h.shard.groups
    assert h.heartbeat(reply["member_id"], reply["member_epoch"]) == Err.UNKNOWN_MEMBER_ID
    # once it is empty, a classic join replaces it, as Kafka does
    assert consumer_heartbeat(h, reply["member_id"], -1)["error_code"] == Err.NONE
    assert h.code(h.join("someone")) == Err.UNKNOWN_MEMBER_ID
    assert "g" in h.shard.consumer.groups
    token = h.join("", version=3)
    h.advance(0)
    assert h.code(token) == Err.NONE
    assert "g" not in h.shard.consumer.groups and h.group().state == COMPLETING_REBALANCE


# ------------------------------------------------------------------- timers
def test_timer_record_is_appended_not_replayed(h):
    """The Empty record a member's expiry emits is an AppliedRecord: the
    runtime appends it without replaying it (the live group object stays),
    and the log replayed still equals the live shard, also after a delete.
    (The runtime replays each result in the call that produced it, so no
    other op can run between a result and its replay.)"""
    ids, generation = h.form_group(1, session=10000)
    group = h.group()
    h.advance(9999)
    key = (HB, "g", ids[0])
    del h.armed[key]
    h.now += 1
    pending = h.shard.on_timer(key, h.now)  # the member expires: Empty record emitted
    assert h.group().state == EMPTY
    assert [r.__class__ for r in pending.records] == [AppliedRecord]
    h.apply(pending)
    assert h.group() is group  # not rebuilt from its record
    assert h.replayed().snapshot() == h.shard.snapshot()
    deleted = h.shard.delete_group("g")
    code, records = deleted.response["error_code"], deleted.records
    assert code == Err.NONE
    h.apply(_result(records))
    assert "g" not in h.shard.groups
    assert h.replayed().snapshot() == h.shard.snapshot()


def test_duplicate_sync_answers_the_displaced_request(h):
    ids = [h.new_member(client=f"c{i}") for i in range(2)]
    tokens = [h.join(m, client=f"c{i}") for i, m in enumerate(ids)]
    h.advance(0)
    generation = h.reply(tokens[0])["generation_id"]
    first = h.sync(ids[1], generation)
    second = h.sync(ids[1], generation)
    assert h.code(first) == Err.REBALANCE_IN_PROGRESS and h.reply(second) is None
    h.sync(ids[0], generation, assignments={ids[1]: b"x"})
    assert h.reply(second)["assignment"] == b"x"


def test_stale_timer_firing_is_ignored(h):
    ids, generation = h.form_group(1)
    assert h.shard.on_timer(("classic-join", "g"), h.now).timers == []
    assert h.shard.on_timer((HB, "g", "nobody"), h.now).timers == []
    assert h.shard.on_timer((HB, "nope", "x"), h.now).replies == []


def test_early_firing_of_a_rearmed_timer_is_rearmed_not_acted_on(h):
    ids, generation = h.form_group(1, session=10000)
    key = (HB, "g", ids[0])
    h.advance(9000)
    h.heartbeat(ids[0], generation)  # re-armed for 19 s; an old runtime handle fires at 10 s
    h.now += 1000
    res = h.shard.on_timer(key, h.now)
    assert res.timers == [(key, h.now + 9000)] and ids[0] in h.group().members
    h.apply(res)


def test_transitions_are_only_kafkas():
    g = ClassicGroup("x")
    for target, previous in VALID_PREVIOUS.items():
        for state in VALID_PREVIOUS:
            g.state = state
            if state in previous:
                g.transition(target, 0)
            else:
                with pytest.raises(Exception):
                    g.transition(target, 0)


# ================================================================ simulation
from kcoord.protocol.messages.consumer_protocol import decode_assignment  # noqa: E402

PARTITIONS = 6
OK_HB = {Err.NONE, Err.REBALANCE_IN_PROGRESS, Err.UNKNOWN_MEMBER_ID, Err.ILLEGAL_GENERATION,
         Err.FENCED_INSTANCE_ID}


class SimClient:
    """A consumer following the classic protocol the way the Java client does."""

    def __init__(self, name: str, group: str, rng: random.Random, instance: str | None = None):
        self.name = name
        self.group = group
        self.instance = instance
        self.version = rng.choice([5, 7, 9]) if instance else rng.choice([0, 1, 3, 4, 5, 7, 9])
        self.sync_v = 5 if self.version >= 7 else (3 if instance else 1)
        self.hb_v = 4 if self.version >= 7 else (3 if instance else 1)
        self.leave_v = 5 if self.version >= 7 else (3 if instance else 1)
        self.session = rng.choice([6000, 10000, 30000])
        self.rebalance = rng.choice([6000, 20000, 60000])
        names = rng.choice([["range"], ["range"], ["roundrobin", "range"], ["range", "sticky"]])
        if rng.random() < 0.03:
            names = ["exotic"]  # shares nothing with the others
        self.protocols = [(n, sub("t")) for n in names]
        self.member_id = ""
        self.generation = -1
        self.state = "idle"  # idle, joining, syncing, stable, dead
        self.token: Token | None = None
        self.assignment: bytes | None = None

    @property
    def alive(self) -> bool:
        return self.state != "dead"

    def reset(self) -> None:
        self.member_id = ""
        self.generation = -1
        self.state = "idle"


class Sim:
    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = rng = random.Random(seed)
        self.h = Harness(group_initial_rebalance_delay_ms=rng.choice([0, 0, 100, 3000]),
                         group_max_size=rng.choice([2**31 - 1, 2**31 - 1, 3]))
        self.groups = ["g1", "g2"] if rng.random() < 0.3 else ["g1"]
        self.clients: list[SimClient] = []
        self.names = itertools.count()
        self.instances = itertools.count()
        # per (group, generation): the assignment the accepted leader sync carried
        self.leader_sent: dict[tuple[str, int], dict[str, bytes]] = {}
        self.instance_sent: dict[tuple[str, int], dict[str, bytes]] = {}
        self.protocol_of: dict[tuple[str, int], str] = {}
        self.transitions: list[tuple[str, str]] = []
        self.calm = False

    # ------------------------------------------------------------- clients
    def spawn(self, instance: str | None = None) -> SimClient:
        if instance is None and self.rng.random() < 0.3:
            instance = f"inst{next(self.instances)}"
        client = SimClient(f"c{next(self.names)}", self.rng.choice(self.groups), self.rng, instance)
        self.clients.append(client)
        return client

    def act(self, c: SimClient) -> None:
        h = self.h
        if c.state == "idle":
            c.token = h.join(c.member_id, group=c.group, version=c.version,
                             protocols=c.protocols, session=c.session, rebalance=c.rebalance,
                             instance=c.instance, client=c.name)
            c.state = "joining"
        elif c.state == "joining":
            reply = h.reply(c.token)
            if reply is not None:
                self.on_join(c, reply)
        elif c.state == "syncing":
            reply = h.reply(c.token)
            if reply is not None:
                self.on_sync(c, reply)
        elif c.state == "stable":
            if self.rng.random() < 0.2:
                code = h.commit(c.member_id, c.generation, group=c.group, instance=c.instance,
                                version=8 if c.instance else 6)
                assert code in OK_HB, code
                if code == Err.FENCED_INSTANCE_ID:
                    c.state = "dead"
                return
            code = h.heartbeat(c.member_id, c.generation, group=c.group, version=c.hb_v,
                               instance=c.instance)
            assert code in OK_HB, code
            if code == Err.REBALANCE_IN_PROGRESS:
                c.state = "idle"
            elif code in (Err.UNKNOWN_MEMBER_ID, Err.ILLEGAL_GENERATION):
                c.reset()
            elif code == Err.FENCED_INSTANCE_ID:
                c.state = "dead"

    def on_join(self, c: SimClient, reply: dict) -> None:
        code = reply["error_code"]
        if code == Err.MEMBER_ID_REQUIRED:
            assert c.version >= 4 and c.instance is None and c.member_id == ""
            c.member_id = reply["member_id"]
            c.state = "idle"
        elif code == Err.NONE:
            gen = reply["generation_id"]
            key = (c.group, gen)
            protocol = self.protocol_of.setdefault(key, reply["protocol_name"])
            assert reply["protocol_name"] == protocol
            assert reply["protocol_name"] in {n for n, _ in c.protocols}
            if c.instance:
                assert reply["member_id"].startswith(c.instance + "-")
            c.member_id = reply["member_id"]
            c.generation = gen
            assignments = None
            group = self.h.group(c.group)
            if reply["leader"] == c.member_id and reply["members"] and not reply["skip_assignment"]:
                ids = [m["member_id"] for m in reply["members"]]
                assert c.member_id in ids
                assignments = {m: assignment("t", [p for p in range(PARTITIONS)
                                                   if p % len(ids) == i])
                               for i, m in enumerate(ids)}
                by_instance = {m["group_instance_id"]: assignments[m["member_id"]]
                               for m in reply["members"] if m["group_instance_id"]}
            was_completing = group is not None and group.state == COMPLETING_REBALANCE
            c.token = self.h.sync(c.member_id, gen, group=c.group, version=c.sync_v,
                                  assignments=assignments, instance=c.instance,
                                  protocol_type="consumer", protocol_name=protocol)
            c.state = "syncing"
            if assignments is not None and was_completing and \
                    self.h.code(c.token) == Err.NONE:
                assert key not in self.leader_sent, "two accepted leader syncs for one generation"
                self.leader_sent[key] = assignments
                self.instance_sent[key] = by_instance
        elif code == Err.UNKNOWN_MEMBER_ID:
            c.reset()
        elif code == Err.FENCED_INSTANCE_ID:
            assert c.instance is not None
            c.state = "dead"
        elif code in (Err.REBALANCE_IN_PROGRESS, Err.GROUP_MAX_SIZE_REACHED):
            c.state = "idle"
        elif code == Err.INCONSISTENT_GROUP_PROTOCOL:
            # In the calm phase a client whose protocols the group cannot take gives up.
            # (As in Kafka, this also happens to a compatible client: members loaded
            # after a restart know only their selected protocol until they rejoin.)
            c.state = "dead" if self.calm else "idle"
        else:
            raise AssertionError(f"unexpected JoinGroup error {code}")

    def on_sync(self, c: SimClient, reply: dict) -> None:
        code = reply["error_code"]
        if code == Err.NONE:
            key = (c.group, c.generation)
            assert key in self.leader_sent, "a member got its assignment before the leader's"
            expected = self.leader_sent[key].get(c.member_id)
            if expected is None and c.instance:
                expected = self.instance_sent[key].get(c.instance)
            assert reply["assignment"] == (expected or b""), "relayed bytes differ from the leader's"
            if c.sync_v >= 5:
                assert reply["protocol_name"] == self.protocol_of[key]
            c.assignment = reply["assignment"]
            c.state = "stable"
        elif code == Err.REBALANCE_IN_PROGRESS:
            c.state = "idle"
        elif code in (Err.UNKNOWN_MEMBER_ID, Err.ILLEGAL_GENERATION):
            c.reset()
        elif code == Err.FENCED_INSTANCE_ID:
            c.state = "dead"
        else:
            raise AssertionError(f"unexpected SyncGroup error {code}")

    # ------------------------------------------------------------- chaos
    def chaos(self) -> None:
        h, rng = self.h, self.rng
        c = rng.choice(self.clients) if self.clients else None
        group = rng.choice(self.groups)
        members = list(h.group(group).members) if h.group(group) else []
        member = rng.choice(members + ["", "ghost"])
        generation = rng.choice([-1, 0, 1, 2, 3, 5])
        kind = rng.randrange(5)
        if kind == 0:
            assert h.heartbeat(member, generation, group=group) in OK_HB
        elif kind == 1:
            g = h.group(group)
            leader_sync = g is not None and g.state == COMPLETING_REBALANCE and \
                member == g.leader_id and generation == g.generation_id
            protocol = g.protocol_name if g is not None else None
            t = h.sync(member, generation, group=group, protocol_name=protocol)
            assert h.code(t) in OK_HB | {Err.INCONSISTENT_GROUP_PROTOCOL, None}
            if leader_sync and h.code(t) == Err.NONE:  # taken as the leader's (empty) sync
                self.leader_sent[(group, generation)] = {}
                self.instance_sent[(group, generation)] = {}
        elif kind == 2:
            assert h.commit(member, generation, group=group) in OK_HB
        elif kind == 3 and c is not None and c.alive and c.member_id:
            # an admin removes a member (by instance id alone for a static one)
            target = ("", c.instance) if c.instance and rng.random() < 0.5 else c.member_id
            h.leave([target], group=c.group)
        elif kind == 4:
            t = h.join("", group=group, protocol_type=rng.choice(["consumer", "connect", ""]),
                       session=rng.choice([10, 10000]))
            assert h.code(t) in {Err.INVALID_SESSION_TIMEOUT, Err.INCONSISTENT_GROUP_PROTOCOL,
                                 Err.MEMBER_ID_REQUIRED, Err.GROUP_MAX_SIZE_REACHED}

    def step(self) -> None:
        rng, h = self.rng, self.h
        alive = [c for c in self.clients if c.alive]
        r = rng.random()
        if r < 0.08 and len(alive) < 7:
            self.spawn()
        elif r < 0.60 and alive:
            self.act(rng.choice(alive))
        elif r < 0.64 and alive:  # graceful leave
            c = rng.choice(alive)
            if c.member_id:
                h.leave([(c.member_id, c.instance) if c.leave_v >= 3 else c.member_id],
                        group=c.group, version=c.leave_v)
            c.state = "dead"
        elif r < 0.68 and alive:  # crash; a static member may come back as a new process
            c = rng.choice(alive)
            c.state = "dead"
            if c.instance and rng.random() < 0.7:
                new = self.spawn(instance=c.instance)
                new.group = c.group
        elif r < 0.90:
            h.advance(rng.choice([0, 50, 300, 1000, 3000, 7000, 15000]))
        elif r < 0.92:
            self.restart()
        else:
            self.chaos()

    def restart(self) -> None:
        """A process restart, or the shard unloaded and loaded again (another
        node led it for a while): the core is rebuilt from the log and its
        timers re-armed by on_loaded; parked requests got NOT_COORDINATOR."""
        self.h.restart()
        for c in self.clients:  # parked requests were answered with an error: retry
            if c.state in ("joining", "syncing"):
                c.state = "idle"
        # a generation that never reached its leader's sync is not in the log:
        # the loaded group is back at the previous one and will number it again
        for group_id in self.groups:
            g = self.h.group(group_id)
            loaded = g.generation_id if g is not None else 0
            for key in [k for k in self.protocol_of if k[0] == group_id and k[1] > loaded]:
                del self.protocol_of[key]
                assert key not in self.leader_sent

    # ----------------------------------------------------------- checking
    def check(self) -> None:
        self.h.check_consistency()

    def converged(self) -> bool:
        h = self.h
        for group_id in self.groups:
            live = [c for c in self.clients if c.alive and c.group == group_id]
            g = h.group(group_id)
            if not live:
                if g is not None and g.members:
                    return False
                continue
            if g is None or g.state != STABLE:
                return False
            stable = {c.member_id: c for c in live
                      if c.state == "stable" and c.generation == g.generation_id}
            if set(g.members) != set(stable):
                return False
            if len(g.members) != min(len(live), h.config.group_max_size):
                return False
        return True

    def check_converged_assignment(self) -> None:
        for group_id in self.groups:
            g = self.h.group(group_id)
            if g is None or not g.members:
                continue
            owned: list[int] = []
            for c in self.clients:
                if c.alive and c.member_id in g.members:
                    _, a = decode_assignment(c.assignment)
                    owned += [p for t in a["assigned_partitions"] for p in t["partitions"]]
            assert sorted(owned) == list(range(PARTITIONS)), (group_id, owned)

    def run(self, steps: int) -> None:
        for _ in range(steps):
            self.step()
            self.check()
        # calm: no more chaos; clients sharing no protocol with the others leave;
        # every live client follows the protocol every 200 ms
        self.calm = True
        for c in self.clients:
            if c.alive and c.protocols[0][0] == "exotic":
                if c.member_id:
                    self.h.leave([(c.member_id, c.instance)], group=c.group)
                c.state = "dead"
        for _ in range(4000):
            if self.converged():
                break
            for c in [c for c in self.clients if c.alive]:
                self.act(c)
            self.h.advance(200)
            self.check()
        else:
            raise AssertionError(f"seed {self.seed}: no convergence: " + repr(
                [(c.name, c.state, c.member_id, c.generation) for c in self.clients if c.alive]))
        self.check_converged_assignment()
        self.restart()  # the converged group comes back whole
        self.check()
        for group_id in self.groups:
            g = self.h.group(group_id)
            if g is not None and g.members:
                assert g.state == STABLE


@pytest.fixture
def transitions(monkeypatch):
    """Record every state transition (ClassicGroup.transition raises on an invalid one)."""
    seen = []
    original = ClassicGroup.transition

    def recording(self, target, now_ms):
        assert self.state in VALID_PREVIOUS[target], (self.state, target)
        seen.append((self.state, target))
        original(self, target, now_ms)

    monkeypatch.setattr(ClassicGroup, "transition", recording)
    return seen


@pytest.mark.parametrize("batch", range(10))
def test_simulation(batch, transitions):
    for seed in range(batch * 25, batch * 25 + 25):
        Sim(seed).run(steps=150)
    # the schedules exercised every transition Kafka allows
    assert set(transitions) >= {
        ("Empty", "PreparingRebalance"), ("PreparingRebalance", "CompletingRebalance"),
        ("PreparingRebalance", "Empty"), ("CompletingRebalance", "Stable"),
        ("Stable", "PreparingRebalance"), ("CompletingRebalance", "PreparingRebalance")}
