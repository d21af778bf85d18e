"""What the admin APIs ask of the share groups (ShareGroupDescribe,
ListGroups, DeleteGroups, DeleteShareGroupOffsets, the share partitions with
state): pure functions over the groups and the topic metadata;
ShareGroupManager exposes them."""
from __future__ import annotations

from typing import Any, Callable, Mapping

from ..protocol.errors import Err
from . import share_group as sg
from .assignors import simple as simple_assignor
from .consumer_group_admin import described_assignment, described_group
from .consumer_requests import HeartbeatError
from .result import Result
from .share_group import PartitionStates, ShareGroup
from .share_requests import (ADMIN_MISSING, UNKNOWN_PARTITION, ShareOffsetsDeletion,
                             deleted_topic, describe_error)


def describe(share_group: Callable[[str, str], ShareGroup], topics: Mapping[str, Any],
             group_ids: list[str], include_authorized_operations: bool = False) -> list[dict]:
    """ShareGroupDescribe's group entries; `share_group(id, missing)` finds a
    group or raises the HeartbeatError its entry carries."""
    names = {info[0]: n for n, info in topics.items()}
    out = []
    for gid in group_ids:
        if not gid:
            out.append(describe_error(gid, Err.INVALID_GROUP_ID, None))
            continue
        try:
            group = share_group(gid, ADMIN_MISSING)
        except HeartbeatError as exc:
            out.append(describe_error(gid, exc.code, exc.message))
            continue
        members = [{
            "member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.member_epoch,
            "client_id": m.client_id, "client_host": m.client_host,
            "subscribed_topic_names": sorted(m.subscribed_topic_names),
            "assignment": described_assignment(m.assigned, names)}
            for m in group.members.values()]
        out.append(described_group(group, simple_assignor.NAME, members,
                                   include_authorized_operations))
    return out


def list_groups(groups: Mapping[str, ShareGroup], states: set[str],
                types: set[str]) -> list[dict]:
    if types and "share" not in types:
        return []
    return [{"group_id": gid, "protocol_type": "share", "group_state": group.state,
             "group_type": "share"}
            for gid, group in groups.items()
            if not states or group.state.lower() in states]


def delete_group(group: ShareGroup) -> Result:
    """DeleteGroups of a share group: only an empty one; every record is
    tombstoned.  Result.response: the error code."""
    if group.members:
        return Result(response=Err.NON_EMPTY_GROUP)
    return Result(records=sg.group_tombstones(group), response=Err.NONE)


def begin_delete(group: ShareGroup | None) -> Result:
    """DeleteGroups of an empty share group, step 1 (Kafka's
    shareGroupBuildPartitionDeleteRequest): its initialized and initializing
    partitions move to deleting (no longer assignable; a heartbeat before
    the deletion ends initializes them again).  Result.response: the share
    partitions whose share state to delete, or None (nothing to delete)."""
    partitions = share_state_partitions(group)
    states = group.partition_states if group is not None else None
    if group is None or group.members or not partitions or states is None:
        return Result(response=None)
    deleting = dict(states.deleting)
    for side in (states.initialized, states.initializing):
        for t, (name, _) in side.items():
            deleting[t] = name
    return Result(records=[sg.partition_states_record(
        group.group_id, PartitionStates({}, {}, deleting))], response=partitions)


def begin_delete_offsets(group: ShareGroup, topics: Mapping[str, Any],
                         topic_names: list[str]) -> Result:
    """DeleteShareGroupOffsets, step 1 (Kafka's
    sharePartitionsEligibleForOffsetDeletion) of an empty group: the named
    topics' initialized partitions move to deleting; a topic already deleting
    is deleted again (all its partitions).  Result.response: a
    ShareOffsetsDeletion."""
    states = group.partition_states
    if states is None:
        return Result(response=ShareOffsetsDeletion([], {}))
    initialized, deleting = dict(states.initialized), dict(states.deleting)
    refused, partitions = [], {}
    for name in topic_names:
        info = topics.get(name)
        if info is None:
            refused.append(deleted_topic(name, bytes(16), Err.UNKNOWN_TOPIC_OR_PARTITION,
                                         UNKNOWN_PARTITION))
        elif info[0] in initialized:
            partitions[info[0]] = (name, initialized.pop(info[0])[1])
            deleting[info[0]] = name
        elif info[0] in deleting:
            partitions[info[0]] = (name, frozenset(range(info[1])))
        else:
            refused.append(deleted_topic(name, bytes(16), Err.UNKNOWN_TOPIC_OR_PARTITION,
                                         "There is no offset information to delete."))
    record = sg.partition_states_record(
        group.group_id, PartitionStates(dict(states.initializing), initialized, deleting))
    return Result(records=[record], response=ShareOffsetsDeletion(refused, partitions))


def complete_delete_offsets(group: ShareGroup | None, topic_ids) -> Result:
    """DeleteShareGroupOffsets, step 2 (completeDeleteShareGroupOffsets): the
    topics whose share state is gone leave deleting."""
    states = group.partition_states if group is not None else None
    if group is None or states is None:
        return Result(response=None)
    deleting = {t: n for t, n in states.deleting.items() if t not in set(topic_ids)}
    return Result(records=[sg.partition_states_record(group.group_id, PartitionStates(
        dict(states.initializing), dict(states.initialized), deleting))], response=None)


def initialized_partitions(group: ShareGroup | None) -> Result:
    """Kafka's initializedShareGroupPartitions: topic id -> the group's
    initialized share partitions (empty for an unknown group)."""
    states = group.partition_states if group is not None else None
    return Result(response={} if states is None else
                  {t: parts for t, (_, parts) in states.initialized.items()})


def share_state_partitions(group: ShareGroup | None) -> dict[bytes, frozenset]:
    """The share partitions of the group that may have share state (initialized,
    initializing or being deleted): what deleting the group deletes."""
    states = group.partition_states if group is not None else None
    if states is None:
        return {}
    out: dict[bytes, frozenset] = {}
    for side in (states.initialized, states.initializing):
        for t, (_, parts) in side.items():
            out[t] = out.get(t, frozenset()) | parts
    return out
