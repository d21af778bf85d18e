"""What the admin APIs and the offsets ask of the consumer groups
(ConsumerGroupDescribe, ListGroups, DeleteGroups, OffsetCommit/Fetch
validation by member epoch, OffsetDelete, offset expiry): pure functions
over the groups and the topic metadata; ConsumerGroupManager exposes them."""
from __future__ import annotations

from typing import Any, Mapping

from ..protocol.api import AUTH_OPS_NOT_REQUESTED
from ..protocol.errors import Err
from . import consumer_group as cg
from .consumer_group import EMPTY, ConsumerGroup
from .consumer_requests import GROUP_AUTHORIZED_OPERATIONS, describe_error
from .consumer_target import preferred_assignor
from .offsets import delete_offsets, offset_tombstone
from .result import Record


def described_assignment(assignment: Mapping, names: dict[bytes, str]) -> dict:
    """An assignment as the describe APIs show it (topics by id and name)."""
    return {"topic_partitions": [
        {"topic_id": t, "topic_name": names[t], "partitions": sorted(p)}
        for t, p in sorted(assignment.items()) if p and t in names]}


def described_group(group: Any, assignor_name: str, members: list[dict],
                    include_authorized_operations: bool) -> dict:
    """A consumer or share group's describe entry (its members already described)."""
    return {"error_code": 0, "error_message": None, "group_id": group.group_id,
            "group_state": group.state, "group_epoch": group.group_epoch,
            "assignment_epoch": group.assignment_epoch, "assignor_name": assignor_name,
            "members": members,
            "authorized_operations": GROUP_AUTHORIZED_OPERATIONS
            if include_authorized_operations else AUTH_OPS_NOT_REQUESTED}


def describe(groups: Mapping[str, ConsumerGroup], topics: Mapping[str, Any],
             share_groups: Mapping[str, Any], assignor_names: list[str], group_ids: list[str],
             include_authorized_operations: bool = False) -> list[dict]:
    """ConsumerGroupDescribe's group entries."""
    out = []
    for gid in group_ids:
        if not gid:
            out.append(describe_error(gid, Err.INVALID_GROUP_ID, None))
            continue
        group = groups.get(gid)
        if group is None:
            out.append(describe_error(gid, Err.GROUP_ID_NOT_FOUND,
                                      f"Group {gid} is not a consumer group."
                                      if gid in share_groups else f"Group {gid} not found."))
            continue
        names = {info[0]: n for n, info in topics.items()}
        names.update({info[0]: n for n, info in group.subscription_metadata.items()})
        members = []
        for m in group.members.values():
            members.append({
                "member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                "member_epoch": m.member_epoch, "client_id": m.client_id,
                "client_host": m.client_host,
                "subscribed_topic_names": sorted(m.subscribed_topic_names),
                "subscribed_topic_regex": m.subscribed_topic_regex,
                "assignment": described_assignment(m.assigned, names),
                "target_assignment": described_assignment(group.target.get(m.member_id, EMPTY),
                                                          names)})
        out.append(described_group(group, preferred_assignor(group.members.values(),
                                                             assignor_names),
                                   members, include_authorized_operations))
    return out


def list_groups(groups: Mapping[str, ConsumerGroup], states: set[str],
                types: set[str]) -> list[dict]:
    if types and "consumer" not in types:
        return []
    out = []
    for gid, group in groups.items():
        state = group.state
        if states and state.lower() not in states:
            continue
        out.append({"group_id": gid, "protocol_type": "consumer", "group_state": state,
                    "group_type": "consumer"})
    return out


def delete_group(group: ConsumerGroup) -> tuple[int, list[Record]]:
    if group.members:
        return Err.NON_EMPTY_GROUP, []
    return Err.NONE, cg.group_tombstones(group)


def validate_offset_commit(group: ConsumerGroup, member_id: str, epoch: int,
                           version: int, transactional: bool = False) -> int:
    """ConsumerGroup.validateOffsetCommit."""
    if epoch < 0 and not group.members:
        return Err.NONE
    member = group.members.get(member_id)
    if member is None:
        return Err.UNKNOWN_MEMBER_ID
    if not transactional and member.classic_member_metadata is None and version < 9:
        return Err.UNSUPPORTED_VERSION
    if epoch != member.member_epoch:
        if member.classic_member_metadata is not None:
            return Err.ILLEGAL_GENERATION
        return Err.ILLEGAL_GENERATION if transactional else Err.STALE_MEMBER_EPOCH
    return Err.NONE


def validate_offset_fetch(group: ConsumerGroup, member_id: str | None, epoch: int) -> int:
    """ConsumerGroup.validateOffsetFetch."""
    if member_id is None and epoch < 0:
        return Err.NONE
    member = group.members.get(member_id)
    if member is None:
        return Err.UNKNOWN_MEMBER_ID
    if epoch != member.member_epoch:
        if member.classic_member_metadata is not None:
            return Err.ILLEGAL_GENERATION
        return Err.STALE_MEMBER_EPOCH
    return Err.NONE


def offset_delete(group: ConsumerGroup, topics: Mapping[str, Any], req: dict,
                  committed: Mapping[tuple[str, int], Any]) -> tuple[dict, list[Record]]:
    """OffsetDelete on a consumer group: subscribed topics are refused per partition."""
    subscribed = group.subscribed_topic_names(topics) if group.members else set()
    return delete_offsets(group.group_id, req["topics"], subscribed.__contains__, committed)


def cleanup(groups: Mapping[str, ConsumerGroup], topics: Mapping[str, Any], now: int, offsets,
            retention_ms: int) -> list[Record]:
    """Expire offsets of unsubscribed topics (base: commit time); delete a group
    left empty with no offsets (Kafka's cleanupGroupMetadata)."""
    records: list[Record] = []
    for gid, group in list(groups.items()):
        subscribed = group.subscribed_topic_names(topics) if group.members else None
        expired = offsets.expired(gid, now, retention_ms, None, subscribed)
        records.extend(offset_tombstone(gid, t, p) for t, p in expired)
        if not group.members and len(offsets.group_offsets(gid)) == len(expired):
            records.extend(cg.group_tombstones(group))
    return records
