"""The KIP-848 consumer group model (Kafka's ConsumerGroup, ConsumerGroupMember,
CurrentAssignmentBuilder) and its __consumer_offsets records, types 3-8.

Durable state changes only through `replay_*`; handlers build records with the
`*_record` helpers below and compute with the pure `reconcile` function.
An assignment is a dict topic id (16 bytes) -> frozenset of partitions and is
never mutated once built.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Mapping, NamedTuple

from ..protocol.messages.coordinator_records import (  # the record types, one copy
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, CONSUMER_GROUP_MEMBER_METADATA,
    CONSUMER_GROUP_METADATA, CONSUMER_GROUP_PARTITION_METADATA,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA)
from .result import Record
from .compiled import mypyc_attr

# ------------------------------------------------------------------ constants
RECORD_TYPES = frozenset(range(CONSUMER_GROUP_METADATA, CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT + 1))

# member states (MemberState.java)
STABLE = 0
UNREVOKED_PARTITIONS = 1
UNRELEASED_PARTITIONS = 2
UNKNOWN = 127

# group states (ConsumerGroup.ConsumerGroupState)
GROUP_EMPTY = "Empty"
GROUP_ASSIGNING = "Assigning"
GROUP_RECONCILING = "Reconciling"
GROUP_STABLE = "Stable"
GROUP_DEAD = "Dead"

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

TopicId = bytes
Assignment = dict  # TopicId -> frozenset[int]
EMPTY: dict = {}


class TopicInfo(NamedTuple):
    """What the coordinator knows of a topic: its id and partition count."""
    topic_id: bytes
    partitions: int


#: topic name -> TopicInfo (or any (topic_id, partitions) pair); supplied by the runtime
TopicMetadata = Mapping[str, tuple]


# ------------------------------------------------------------------ regular expressions
class InvalidRegex(ValueError):
    pass


# Constructs RE2/J (the engine Kafka compiles SubscribedTopicRegex with) rejects.
_RE2_UNSUPPORTED_OPS = {"ASSERT": "lookaround", "ASSERT_NOT": "lookaround",
                        "GROUPREF": "backreference", "GROUPREF_EXISTS": "conditional",
                        "ATOMIC_GROUP": "atomic group", "POSSESSIVE_REPEAT": "possessive repeat"}


def _children(av):
    if hasattr(av, "data"):  # a sub-pattern
        yield av
    elif isinstance(av, (list, tuple)):
        for item in av:
            yield from _children(item)


def _walk(parsed) -> None:
    for op, av in parsed:
        name = str(op)
        if name in _RE2_UNSUPPORTED_OPS:
            raise InvalidRegex(f"{_RE2_UNSUPPORTED_OPS[name]} is not supported")
        for child in _children(av):
            _walk(child)


_regex_cache: dict[str, re.Pattern] = {}


def compile_regex(pattern: str) -> re.Pattern:
    """Compile a SubscribedTopicRegex, rejecting what RE2/J would reject."""
    cached = _regex_cache.get(pattern)
    if cached is not None:
        return cached
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise InvalidRegex(str(exc)) from None
    try:
        import re._parser as sre_parse  # Python 3.11+
    except ImportError:  # pragma: no cover
        import sre_parse  # type: ignore
    _walk(sre_parse.parse(pattern))
    if len(_regex_cache) > 1024:
        _regex_cache.clear()
    _regex_cache[pattern] = compiled
    return compiled


def regex_matches(pattern: str | None, names: Iterable[str]) -> list[str]:
    """Topic names the regex matches as a whole (RE2/J `matches()`)."""
    if not pattern:
        return []
    try:
        compiled = compile_regex(pattern)
    except InvalidRegex:
        return []
    return [n for n in names if compiled.fullmatch(n)]


# ------------------------------------------------------------------ assignments
def assignment_from_wire(topic_partitions: Iterable[dict] | None) -> Assignment:
    out: dict[bytes, frozenset[int]] = {}
    for tp in topic_partitions or ():
        parts = tp["partitions"]
        if parts:
            prev = out.get(tp["topic_id"])
            out[tp["topic_id"]] = frozenset(parts) if prev is None else prev | frozenset(parts)
    return out


def assignment_to_wire(assignment: Mapping[bytes, Iterable[int]]) -> list[dict]:
    return [{"topic_id": t, "partitions": sorted(p)} for t, p in sorted(assignment.items()) if p]


def normalize(assignment: Mapping[bytes, Iterable[int]]) -> Assignment:
    return {t: p if isinstance(p, frozenset) else frozenset(p)
            for t, p in assignment.items() if p}


def assignment_equal(a: Mapping, b: Mapping) -> bool:
    if a is b:
        return True
    if len(a) != len(b):
        return False
    for t, p in a.items():
        q = b.get(t)
        if q is None or len(p) != len(q) or p != q:
            return False
    return True


def is_subset(owned: list[dict] | None, assigned: Mapping[bytes, frozenset[int]]) -> bool:
    """The owned partitions (from a request) are all in `assigned` (Kafka's isSubset)."""
    if owned is None:
        return False
    for tp in owned:
        parts = assigned.get(tp["topic_id"])
        if parts is None:
            if tp["partitions"]:
                return False
            continue
        for p in tp["partitions"]:
            if p not in parts:
                return False
    return True


# ------------------------------------------------------------------ the model
# pickled with the core (snapshot.py) and patched by tests: an ordinary class, its methods compiled
@mypyc_attr(native_class=False)
@dataclass(slots=True)
class ConsumerMember:
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: int = STABLE
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset = frozenset()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    classic_member_metadata: dict | None = None
    assigned: dict = field(default_factory=dict)            # TopicId -> frozenset
    pending_revocation: dict = field(default_factory=dict)  # TopicId -> frozenset

    def copy(self, **changes) -> "ConsumerMember":
        return replace(self, **changes)

    @property
    def classic(self) -> dict:
        """The ClassicMemberMetadata of a member that joined with the classic protocol."""
        meta = self.classic_member_metadata
        if meta is None:
            raise ValueError(f"member {self.member_id} did not join with the classic protocol")
        return meta

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state == STABLE and self.member_epoch == epoch

    def subscription_equal(self, other: "ConsumerMember") -> bool:
        return (self.subscribed_topic_names == other.subscribed_topic_names
                and self.subscribed_topic_regex == other.subscribed_topic_regex)

    def assignment_state_equal(self, other: "ConsumerMember") -> bool:
        """Equal in every field of the ConsumerGroupCurrentMemberAssignment record."""
        return (self.member_epoch == other.member_epoch
                and self.previous_member_epoch == other.previous_member_epoch
                and self.state == other.state
                and assignment_equal(self.assigned, other.assigned)
                and assignment_equal(self.pending_revocation, other.pending_revocation))

    def snapshot(self) -> tuple:
        return (self.member_id, self.member_epoch, self.previous_member_epoch, self.state,
                self.instance_id, self.rack_id, self.rebalance_timeout_ms, self.client_id,
                self.client_host, tuple(sorted(self.subscribed_topic_names)),
                self.subscribed_topic_regex, self.server_assignor,
                _assignment_snapshot(self.assigned), _assignment_snapshot(self.pending_revocation),
                _classic_snapshot(self.classic_member_metadata))


def _classic_snapshot(meta: dict | None) -> tuple | None:
    if meta is None:
        return None
    return (meta["session_timeout_ms"],
            tuple((p["name"], bytes(p["metadata"])) for p in meta["supported_protocols"]))


def classic_metadata_from_record(meta: dict | None) -> dict | None:
    """ClassicMemberMetadata as the model holds it (plain bytes, plain dicts), so a
    replayed member compares equal to the live one."""
    if meta is None:
        return None
    return {"session_timeout_ms": meta["session_timeout_ms"],
            "supported_protocols": [{"name": p["name"], "metadata": bytes(p["metadata"])}
                                    for p in meta["supported_protocols"]]}


def _assignment_snapshot(a: Mapping) -> tuple:
    return tuple((t, tuple(sorted(p))) for t, p in sorted(a.items()) if p)


# pickled with the core (snapshot.py) and patched by tests: an ordinary class, its methods compiled
@mypyc_attr(native_class=False)
@dataclass
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    subscription_metadata: dict = field(default_factory=dict)  # name -> TopicInfo
    members: dict = field(default_factory=dict)                # member id -> ConsumerMember
    static_members: dict = field(default_factory=dict)         # instance id -> member id
    target: dict = field(default_factory=dict)                 # member id -> Assignment
    # topic id -> {partition: epoch of the member that holds it (assigned or pending revocation)}
    partition_epochs: dict = field(default_factory=dict)
    # in-memory only: recompute the subscription metadata at the next opportunity
    metadata_refresh: bool = True

    # ------------------------------------------------------------ queries
    @property
    def state(self) -> str:
        if not self.members:
            return GROUP_EMPTY
        if self.group_epoch > self.assignment_epoch:
            return GROUP_ASSIGNING
        epoch = self.assignment_epoch
        for m in self.members.values():
            if not m.is_reconciled_to(epoch):
                return GROUP_RECONCILING
        return GROUP_STABLE

    @property
    def is_empty(self) -> bool:
        return not self.members

    def current_partition_epoch(self, topic_id: bytes, partition: int) -> int:
        parts = self.partition_epochs.get(topic_id)
        if parts is None:
            return -1
        return parts.get(partition, -1)

    def static_member(self, instance_id: str | None) -> ConsumerMember | None:
        if instance_id is None:
            return None
        member_id = self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    def target_of(self, member_id: str, instance_id: str | None) -> Assignment:
        """The target of the member, or of the static member it replaces."""
        if instance_id is not None:
            previous = self.static_members.get(instance_id)
            if previous is not None:
                return self.target.get(previous, EMPTY)
            return EMPTY
        return self.target.get(member_id, EMPTY)

    def subscribed_topic_names(self, topics: TopicMetadata | None = None) -> set[str]:
        """Names the members subscribe to (explicitly, or by regex among the known topics)."""
        names: set[str] = set()
        regexes: set[str] = set()
        for m in self.members.values():
            names.update(m.subscribed_topic_names)
            if m.subscribed_topic_regex:
                regexes.add(m.subscribed_topic_regex)
        if regexes:
            candidates = set(self.subscription_metadata)
            if topics is not None:
                candidates.update(topics)
            for rx in regexes:
                names.update(regex_matches(rx, candidates))
        return names

    def snapshot(self) -> dict:
        return {
            "group_epoch": self.group_epoch,
            "assignment_epoch": self.assignment_epoch,
            "subscription_metadata": sorted((n, tuple(i)) for n, i in self.subscription_metadata.items()),
            "members": sorted(m.snapshot() for m in self.members.values()),
            "static_members": sorted(self.static_members.items()),
            "target": sorted((m, _assignment_snapshot(a)) for m, a in self.target.items()),
            "partition_epochs": sorted((t, tuple(sorted(p.items())))
                                       for t, p in self.partition_epochs.items() if p),
        }

    # ------------------------------------------------------------ replay
    def update_member(self, new: ConsumerMember) -> None:
        old = self.members.get(new.member_id)
        if old is not None:
            self._remove_epochs(old)
            if old.instance_id is not None and old.instance_id != new.instance_id \
                    and self.static_members.get(old.instance_id) == old.member_id:
                del self.static_members[old.instance_id]
        self.members[new.member_id] = new
        self._add_epochs(new)
        if new.instance_id is not None:
            self.static_members[new.instance_id] = new.member_id

    def remove_member(self, member_id: str) -> None:
        old = self.members.pop(member_id, None)
        if old is None:
            return
        self._remove_epochs(old)
        if old.instance_id is not None and self.static_members.get(old.instance_id) == member_id:
            del self.static_members[old.instance_id]

    def _add_epochs(self, m: ConsumerMember) -> None:
        for a in (m.assigned, m.pending_revocation):
            for t, parts in a.items():
                epochs = self.partition_epochs.get(t)
                if epochs is None:
                    epochs = self.partition_epochs[t] = {}
                for p in parts:
                    epochs[p] = m.member_epoch

    def _remove_epochs(self, m: ConsumerMember) -> None:
        for a in (m.assigned, m.pending_revocation):
            for t, parts in a.items():
                epochs = self.partition_epochs.get(t)
                if epochs is None:
                    continue
                for p in parts:
                    if epochs.get(p) == m.member_epoch:
                        del epochs[p]
                if not epochs:
                    del self.partition_epochs[t]


# ------------------------------------------------------------------ records
def _key(group_id: str) -> dict:
    return {"group_id": group_id}


def _member_key(group_id: str, member_id: str) -> dict:
    return {"group_id": group_id, "member_id": member_id}


def group_epoch_record(group_id: str, epoch: int) -> Record:
    return Record(CONSUMER_GROUP_METADATA, _key(group_id), {"epoch": epoch})


def group_epoch_tombstone(group_id: str) -> Record:
    return Record(CONSUMER_GROUP_METADATA, _key(group_id), None)


def subscription_metadata_record(group_id: str, metadata: Mapping[str, TopicInfo]) -> Record:
    topics = [{"topic_id": info[0], "topic_name": name, "num_partitions": info[1],
               "partition_metadata": []} for name, info in sorted(metadata.items())]
    return Record(CONSUMER_GROUP_PARTITION_METADATA, _key(group_id), {"topics": topics})


def subscription_metadata_tombstone(group_id: str) -> Record:
    return Record(CONSUMER_GROUP_PARTITION_METADATA, _key(group_id), None)


def member_metadata_record(group_id: str, m: ConsumerMember) -> Record:
    return Record(CONSUMER_GROUP_MEMBER_METADATA, _member_key(group_id, m.member_id), {
        "instance_id": m.instance_id, "rack_id": m.rack_id, "client_id": m.client_id,
        "client_host": m.client_host, "subscribed_topic_names": sorted(m.subscribed_topic_names),
        "subscribed_topic_regex": m.subscribed_topic_regex,
        "rebalance_timeout_ms": m.rebalance_timeout_ms, "server_assignor": m.server_assignor,
        "classic_member_metadata": m.classic_member_metadata})


def member_metadata_tombstone(group_id: str, member_id: str) -> Record:
    return Record(CONSUMER_GROUP_MEMBER_METADATA, _member_key(group_id, member_id), None)


def target_epoch_record(group_id: str, epoch: int) -> Record:
    return Record(CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, _key(group_id),
                  {"assignment_epoch": epoch})


def target_epoch_tombstone(group_id: str) -> Record:
    return Record(CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, _key(group_id), None)


def target_member_record(group_id: str, member_id: str, assignment: Mapping) -> Record:
    return Record(CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, _member_key(group_id, member_id),
                  {"topic_partitions": assignment_to_wire(assignment)})


def target_member_tombstone(group_id: str, member_id: str) -> Record:
    return Record(CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, _member_key(group_id, member_id), None)


def current_assignment_record(group_id: str, m: ConsumerMember) -> Record:
    return Record(CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, _member_key(group_id, m.member_id), {
        "member_epoch": m.member_epoch, "previous_member_epoch": m.previous_member_epoch,
        "state": m.state, "assigned_partitions": assignment_to_wire(m.assigned),
        "partitions_pending_revocation": assignment_to_wire(m.pending_revocation)})


def current_assignment_tombstone(group_id: str, member_id: str) -> Record:
    return Record(CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, _member_key(group_id, member_id), None)


def member_tombstones(group_id: str, member_id: str) -> list[Record]:
    """Kafka's removeMember: current assignment, target, then member metadata (order matters)."""
    return [current_assignment_tombstone(group_id, member_id),
            target_member_tombstone(group_id, member_id),
            member_metadata_tombstone(group_id, member_id)]


def group_tombstones(group: ConsumerGroup) -> list[Record]:
    """Kafka's createGroupTombstoneRecords for a consumer group."""
    gid = group.group_id
    records = [current_assignment_tombstone(gid, m) for m in group.members]
    records += [target_member_tombstone(gid, m) for m in group.members]
    records.append(target_epoch_tombstone(gid))
    records += [member_metadata_tombstone(gid, m) for m in group.members]
    records.append(subscription_metadata_tombstone(gid))
    records.append(group_epoch_tombstone(gid))
    return records


# ------------------------------------------------------------------ replay
def replay(groups: dict[str, ConsumerGroup], record: Record,
           on_create: Callable[[str], None] | None = None) -> None:
    """Apply one consumer group record (types 3-8) to `groups`."""
    rtype, key, value = record.type, record.key, record.value
    gid = key["group_id"]
    group = groups.get(gid)
    if group is None:
        if value is None:
            return  # a tombstone for a group we do not have
        group = groups[gid] = ConsumerGroup(gid)
        if on_create is not None:
            on_create(gid)

    if rtype == CONSUMER_GROUP_METADATA:
        if value is None:
            del groups[gid]
        else:
            group.group_epoch = value["epoch"]
    elif rtype == CONSUMER_GROUP_PARTITION_METADATA:
        group.subscription_metadata = {} if value is None else {
            t["topic_name"]: TopicInfo(t["topic_id"], t["num_partitions"]) for t in value["topics"]}
    elif rtype == CONSUMER_GROUP_MEMBER_METADATA:
        mid = key["member_id"]
        if value is None:
            group.remove_member(mid)
            return
        old = group.members.get(mid) or ConsumerMember(mid)
        group.update_member(old.copy(
            instance_id=value["instance_id"], rack_id=value["rack_id"],
            client_id=value["client_id"], client_host=value["client_host"],
            subscribed_topic_names=frozenset(value["subscribed_topic_names"] or ()),
            subscribed_topic_regex=value["subscribed_topic_regex"],
            rebalance_timeout_ms=value["rebalance_timeout_ms"],
            server_assignor=value["server_assignor"],
            classic_member_metadata=classic_metadata_from_record(
                value.get("classic_member_metadata"))))
    elif rtype == CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
        group.assignment_epoch = -1 if value is None else value["assignment_epoch"]
    elif rtype == CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
        mid = key["member_id"]
        if value is None:
            group.target.pop(mid, None)
        else:
            group.target[mid] = assignment_from_wire(value["topic_partitions"])
    elif rtype == CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT:
        mid = key["member_id"]
        old = group.members.get(mid)
        if value is None:
            if old is not None:
                group.update_member(old.copy(
                    member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                    previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                    assigned={}, pending_revocation={}))
            return
        group.update_member((old or ConsumerMember(mid)).copy(
            member_epoch=value["member_epoch"],
            previous_member_epoch=value["previous_member_epoch"],
            state=value["state"],
            assigned=assignment_from_wire(value["assigned_partitions"]),
            pending_revocation=assignment_from_wire(value["partitions_pending_revocation"])))


# ------------------------------------------------------------------ reconciliation
def _owns_any(owned: list[dict] | None, partitions: Mapping[bytes, frozenset[int]]) -> bool:
    """The member still reports one of `partitions` (null owned counts as yes)."""
    if owned is None:
        return True
    for tp in owned:
        pending = partitions.get(tp["topic_id"])
        if pending:
            for p in tp["partitions"]:
                if p in pending:
                    return True
    return False


def reconcile(member: ConsumerMember, target_epoch: int, target: Mapping[bytes, frozenset[int]],
              partition_epoch: Callable[[bytes, int], int],
              owned: list[dict] | None) -> ConsumerMember:
    """Kafka's CurrentAssignmentBuilder: the member's next assignment state.

    A partition is handed to the member only when no other member holds it
    (partition_epoch == -1); a member with partitions to revoke keeps its
    epoch until it stops reporting them.  Returns `member` itself when
    nothing changes."""
    state = member.state
    if state == STABLE:
        if member.member_epoch != target_epoch:
            return _next_assignment(member, member.member_epoch, target_epoch, target,
                                    partition_epoch, owned)
        return member
    if state == UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return member
        return _next_assignment(member, member.member_epoch + 1, target_epoch, target,
                                partition_epoch, owned)
    if state == UNRELEASED_PARTITIONS:
        return _next_assignment(member, member.member_epoch, target_epoch, target,
                                partition_epoch, owned)
    # UNKNOWN: only a member that owns nothing can start over
    if owned is None or any(tp["partitions"] for tp in owned):
        raise FencedError("The consumer group member is in a unknown state. "
                          "The member must abandon all its partitions and rejoin.")
    return _next_assignment(member, target_epoch, target_epoch, target, partition_epoch, owned)


class FencedError(Exception):
    pass


def _next_assignment(member: ConsumerMember, member_epoch: int, target_epoch: int,
                     target: Mapping[bytes, frozenset[int]],
                     partition_epoch: Callable[[bytes, int], int],
                     owned: list[dict] | None) -> ConsumerMember:
    current = member.assigned
    unreleased = False
    new_assigned: dict[bytes, frozenset[int]] = {}
    new_revoke: dict[bytes, frozenset[int]] = {}
    new_pending: dict[bytes, frozenset[int]] = {}
    for t in set(target) | set(current):
        tgt = target.get(t, frozenset())
        cur = current.get(t, frozenset())
        assigned = cur & tgt
        revoke = cur - assigned
        pending = tgt - assigned
        if pending:
            free = frozenset(p for p in pending if partition_epoch(t, p) == -1)
            if len(free) != len(pending):
                unreleased = True
            pending = free
        if assigned:
            new_assigned[t] = assigned
        if revoke:
            new_revoke[t] = revoke
        if pending:
            new_pending[t] = pending

    if new_revoke and _owns_any(owned, new_revoke):
        return _with(member, UNREVOKED_PARTITIONS, member_epoch, new_assigned, new_revoke)
    if new_pending:
        for t, parts in new_pending.items():
            cur = new_assigned.get(t)
            new_assigned[t] = parts if cur is None else cur | parts
        return _with(member, UNRELEASED_PARTITIONS if unreleased else STABLE, target_epoch,
                     new_assigned, {})
    return _with(member, UNRELEASED_PARTITIONS if unreleased else STABLE, target_epoch,
                 new_assigned, {})


def _with(member: ConsumerMember, state: int, epoch: int, assigned: dict, pending: dict
          ) -> ConsumerMember:
    """Kafka's Builder.updateMemberEpoch: previous epoch = the epoch before this update."""
    new = member.copy(state=state, member_epoch=epoch, previous_member_epoch=member.member_epoch,
                      assigned=assigned, pending_revocation=pending)
    if new.assignment_state_equal(member):
        return member
    return new
