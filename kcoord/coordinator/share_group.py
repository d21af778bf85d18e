"""The KIP-932 share group model (Kafka's ShareGroup, ShareGroupMember and the
share-partition state metadata) and its __consumer_offsets records, types 10-15.

Durable state changes only through `replay`; handlers build records with the
`*_record` helpers.  An assignment is a dict topic id (16 bytes) -> frozenset
of partitions and is never mutated once built.  A share member has no
revocation phase (its state is always STABLE, 0): at its next heartbeat after
a new target it jumps to the target epoch and partitions, and a partition may
be assigned to several members at once.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import Mapping

from ..protocol.messages.coordinator_records import (  # the record types, one copy
    SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT, SHARE_GROUP_MEMBER_METADATA, SHARE_GROUP_METADATA,
    SHARE_GROUP_STATE_PARTITION_METADATA, SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER,
    SHARE_GROUP_TARGET_ASSIGNMENT_METADATA)
from .consumer_group import assignment_from_wire, assignment_to_wire
from .result import Record

RECORD_TYPES = frozenset(range(SHARE_GROUP_MEMBER_METADATA, SHARE_GROUP_STATE_PARTITION_METADATA + 1))

GROUP_EMPTY = "Empty"
GROUP_STABLE = "Stable"
LEAVE_GROUP_MEMBER_EPOCH = -1
MEMBER_STABLE = 0
EMPTY: dict = {}


@dataclass(slots=True)
class ShareMember:
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = 0
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset = frozenset()
    assigned: dict = field(default_factory=dict)  # TopicId -> frozenset

    def copy(self, **changes) -> "ShareMember":
        return replace(self, **changes)

    def metadata_equal(self, other: "ShareMember") -> bool:
        """Equal in every field of the ShareGroupMemberMetadata record."""
        return (self.rack_id == other.rack_id and self.client_id == other.client_id
                and self.client_host == other.client_host
                and self.subscribed_topic_names == other.subscribed_topic_names)

    def snapshot(self) -> tuple:
        return (self.member_epoch, self.previous_member_epoch, self.rack_id, self.client_id,
                self.client_host, tuple(sorted(self.subscribed_topic_names)),
                _assignment_snapshot(self.assigned))


def _assignment_snapshot(a: Mapping) -> tuple:
    return tuple(sorted((t, tuple(sorted(p))) for t, p in a.items() if p))


@dataclass(slots=True)
class PartitionStates:
    """Kafka's ShareGroupStatePartitionMetadataInfo: which share partitions of
    the group have durable share state (initialized: assignable), are being
    initialized, or are being deleted.  topic id -> (name, partitions)."""
    initializing: dict = field(default_factory=dict)
    initialized: dict = field(default_factory=dict)
    deleting: dict = field(default_factory=dict)  # topic id -> name

    def initialized_partitions(self, topic_id: bytes) -> frozenset:
        entry = self.initialized.get(topic_id)
        return entry[1] if entry is not None else frozenset()

    def is_initialized(self, topic_id: bytes, partition: int) -> bool:
        """May the share partition be assigned (the simple assignor's `assignable`)."""
        return partition in self.initialized_partitions(topic_id)

    def snapshot(self) -> tuple:
        def side(d):
            return tuple(sorted((t, n, tuple(sorted(p))) for t, (n, p) in d.items()))
        return side(self.initializing), side(self.initialized), tuple(sorted(self.deleting.items()))


class ShareGroup:
    __slots__ = ("group_id", "group_epoch", "metadata_hash", "assignment_epoch", "members",
                 "target", "partition_states", "metadata_refresh")

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.metadata_hash = 0
        self.assignment_epoch = 0
        self.members: dict[str, ShareMember] = {}
        self.target: dict[str, dict] = {}  # member id -> target assignment
        self.partition_states: PartitionStates | None = None
        # in memory: the topics changed since the hash was computed (recompute it)
        self.metadata_refresh = False

    @property
    def state(self) -> str:
        return GROUP_STABLE if self.members else GROUP_EMPTY

    def subscribed_topic_names(self) -> set[str]:
        names: set[str] = set()
        for m in self.members.values():
            names.update(m.subscribed_topic_names)
        return names

    def snapshot(self) -> dict:
        return {"epoch": self.group_epoch, "hash": self.metadata_hash,
                "assignment_epoch": self.assignment_epoch,
                "members": {mid: m.snapshot() for mid, m in sorted(self.members.items())},
                "target": {mid: _assignment_snapshot(a) for mid, a in sorted(self.target.items())},
                "partitions": self.partition_states.snapshot()
                if self.partition_states is not None else None}


def metadata_hash(names, topics: Mapping[str, tuple]) -> int:
    """A 64-bit hash of the subscribed topics that exist (name, id, partition
    count): it changes when one is created, deleted or grows.  kcoord's own
    (Kafka hashes its metadata image with Murmur3); only compared with itself."""
    h = hashlib.blake2b(digest_size=8)
    for name in sorted(names):
        info = topics.get(name)
        if info is not None:
            h.update(name.encode() + b"\0" + bytes(info[0]) + int(info[1]).to_bytes(4, "big"))
    value = int.from_bytes(h.digest(), "big", signed=True)
    return value


# ------------------------------------------------------------------ records
def _key(group_id: str) -> dict:
    return {"group_id": group_id}


def _member_key(group_id: str, member_id: str) -> dict:
    return {"group_id": group_id, "member_id": member_id}


def member_metadata_record(group_id: str, m: ShareMember) -> Record:
    return Record(SHARE_GROUP_MEMBER_METADATA, _member_key(group_id, m.member_id), {
        "rack_id": m.rack_id, "client_id": m.client_id, "client_host": m.client_host,
        "subscribed_topic_names": sorted(m.subscribed_topic_names)})


def group_epoch_record(group_id: str, epoch: int, hash_: int) -> Record:
    return Record(SHARE_GROUP_METADATA, _key(group_id), {"epoch": epoch, "metadata_hash": hash_})


def target_epoch_record(group_id: str, epoch: int) -> Record:
    return Record(SHARE_GROUP_TARGET_ASSIGNMENT_METADATA, _key(group_id),
                  {"assignment_epoch": epoch})


def target_member_record(group_id: str, member_id: str, assignment: Mapping) -> Record:
    return Record(SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER, _member_key(group_id, member_id),
                  {"topic_partitions": assignment_to_wire(assignment)})


def current_assignment_record(group_id: str, m: ShareMember) -> Record:
    return Record(SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT, _member_key(group_id, m.member_id), {
        "member_epoch": m.member_epoch, "previous_member_epoch": m.previous_member_epoch,
        "state": MEMBER_STABLE, "assigned_partitions": assignment_to_wire(m.assigned)})


def partition_states_record(group_id: str, states: PartitionStates) -> Record:
    def side(d):
        return [{"topic_id": t, "topic_name": n, "partitions": sorted(p)}
                for t, (n, p) in sorted(d.items())]
    return Record(SHARE_GROUP_STATE_PARTITION_METADATA, _key(group_id), {
        "initializing_topics": side(states.initializing),
        "initialized_topics": side(states.initialized),
        "deleting_topics": [{"topic_id": t, "topic_name": n}
                            for t, n in sorted(states.deleting.items())]})


def member_tombstones(group_id: str, member_id: str) -> list[Record]:
    """What fencing a member writes, in Kafka's order (current, target, metadata)."""
    key = _member_key(group_id, member_id)
    return [Record(SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT, key, None),
            Record(SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER, key, None),
            Record(SHARE_GROUP_MEMBER_METADATA, key, None)]


def group_tombstones(group: ShareGroup) -> list[Record]:
    """Deleting the group, in Kafka's order (ShareGroup.createGroupTombstoneRecords):
    current assignments, targets, target epoch, member metadata, partition
    states, group epoch."""
    gid = group.group_id
    members = sorted(group.members)
    out = [Record(SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT, _member_key(gid, m), None) for m in members]
    out += [Record(SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER, _member_key(gid, m), None)
            for m in sorted(group.target)]
    out.append(Record(SHARE_GROUP_TARGET_ASSIGNMENT_METADATA, _key(gid), None))
    out += [Record(SHARE_GROUP_MEMBER_METADATA, _member_key(gid, m), None) for m in members]
    out.append(Record(SHARE_GROUP_STATE_PARTITION_METADATA, _key(gid), None))
    out.append(Record(SHARE_GROUP_METADATA, _key(gid), None))
    return out


# ------------------------------------------------------------------ replay
def replay(groups: dict[str, ShareGroup], record: Record) -> None:
    """Apply one share-group record (the only way durable share state changes)."""
    rtype, key, value = record.type, record.key, record.value
    gid = key["group_id"]
    group = groups.get(gid)
    if group is None:
        if value is None:
            return  # a tombstone of a group already gone
        group = groups[gid] = ShareGroup(gid)
    if rtype == SHARE_GROUP_MEMBER_METADATA:
        mid = key["member_id"]
        if value is None:
            group.members.pop(mid, None)
            return
        old = group.members.get(mid) or ShareMember(mid)
        group.members[mid] = old.copy(
            rack_id=value["rack_id"], client_id=value["client_id"],
            client_host=value["client_host"],
            subscribed_topic_names=frozenset(value["subscribed_topic_names"]))
    elif rtype == SHARE_GROUP_METADATA:
        if value is None:
            del groups[gid]
            return
        group.group_epoch = value["epoch"]
        group.metadata_hash = value["metadata_hash"]
    elif rtype == SHARE_GROUP_TARGET_ASSIGNMENT_METADATA:
        group.assignment_epoch = 0 if value is None else value["assignment_epoch"]
    elif rtype == SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER:
        mid = key["member_id"]
        if value is None:
            group.target.pop(mid, None)
        else:
            group.target[mid] = assignment_from_wire(value["topic_partitions"])
    elif rtype == SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT:
        mid = key["member_id"]
        member = group.members.get(mid)
        if value is None:
            if member is not None:  # Kafka: the member stays, at epoch -1, until its metadata goes
                group.members[mid] = member.copy(member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                                                 previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                                                 assigned={})
            return
        member = member or ShareMember(mid)
        group.members[mid] = member.copy(
            member_epoch=value["member_epoch"], previous_member_epoch=value["previous_member_epoch"],
            assigned=assignment_from_wire(value["assigned_partitions"]))
    elif rtype == SHARE_GROUP_STATE_PARTITION_METADATA:
        if value is None:
            group.partition_states = None
            return
        def side(entries):
            return {e["topic_id"]: (e["topic_name"], frozenset(e["partitions"])) for e in entries}
        group.partition_states = PartitionStates(
            side(value["initializing_topics"]), side(value["initialized_topics"]),
            {e["topic_id"]: e["topic_name"] for e in value["deleting_topics"]})
