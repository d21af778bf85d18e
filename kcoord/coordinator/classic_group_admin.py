"""What the admin APIs and the offsets ask of the classic groups (ListGroups,
DescribeGroups, OffsetCommit validation by generation, the base offsets
expire from): pure functions over the groups; ClassicGroupManager exposes
them."""
from __future__ import annotations

from typing import Any, Mapping

from ..protocol.api import AUTH_OPS_NOT_REQUESTED
from ..protocol.errors import Err
from .classic_group import COMPLETING_REBALANCE, DEAD, EMPTY, STABLE, ClassicGroup


def list_groups(groups: Mapping[str, ClassicGroup], states: set[str],
                types: set[str]) -> list[dict]:
    """ListGroups' entries of the classic groups in `states` (lower case; all if empty)."""
    if types and "classic" not in types:
        return []
    out = []
    for group in groups.values():
        if group.state == DEAD:
            continue
        if states and group.state.lower() not in states:
            continue
        out.append({"group_id": group.group_id, "protocol_type": group.protocol_type or "",
                    "group_state": group.state, "group_type": "classic"})
    return out


def describe_group(groups: Mapping[str, ClassicGroup], group_id: str) -> dict:
    """DescribeGroups' entry of one group (Dead when there is none)."""
    group = groups.get(group_id)
    base: dict[str, Any] = {"error_code": Err.NONE, "group_id": group_id, "group_state": DEAD,
                            "protocol_type": "", "protocol_data": "", "members": [],
                            "authorized_operations": AUTH_OPS_NOT_REQUESTED}
    if not group_id:
        base["error_code"] = Err.INVALID_GROUP_ID
        return base
    if group is None:
        return base
    base.update(group_state=group.state, protocol_type=group.protocol_type or "")
    stable = group.state == STABLE
    if stable:
        base["protocol_data"] = group.protocol_name or ""
    for m in group.members.values():
        base["members"].append({
            "member_id": m.member_id, "group_instance_id": m.group_instance_id,
            "client_id": m.client_id, "client_host": m.client_host,
            "member_metadata": m.metadata_for(group.protocol_name) if stable else b"",
            "member_assignment": m.assignment})
    return base


def validate_offset_commit(group: ClassicGroup, member_id: str, instance_id: str | None,
                           generation: int, transactional: bool = False) -> int:
    """ClassicGroup.validateOffsetCommit."""
    if group.state == DEAD:
        return Err.COORDINATOR_NOT_AVAILABLE
    if generation < 0 and group.state == EMPTY:
        return Err.NONE  # admin client or a consumer without group management
    if generation >= 0 or member_id or instance_id is not None:
        error = group.validate_member(member_id, instance_id)
        if error:
            return error
        if generation != group.generation_id:
            return Err.ILLEGAL_GENERATION
    elif not transactional and group.state != EMPTY:
        # no member id and no generation: only an empty group takes the commit
        return Err.UNKNOWN_MEMBER_ID
    if not transactional and group.state == COMPLETING_REBALANCE:
        return Err.REBALANCE_IN_PROGRESS
    return Err.NONE


def offsets_expiry_base(group: ClassicGroup):
    """The base timestamp the group's offsets expire from (None: each offset's
    commit time); False: nothing expires now."""
    if group.protocol_type is None:
        return None  # simple group: each offset's commit time
    if group.state == EMPTY:
        return group.state_timestamp_ms if group.state_timestamp_ms is not None else None
    if (group.state == STABLE and group.protocol_type == "consumer"
            and group.subscribed_topics is not None):
        return None
    return False
