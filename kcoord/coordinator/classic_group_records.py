"""A classic group and its GroupMetadata record, both ways: the record a
completed generation (or a new, empty group) writes, and the group a replayed
record rebuilds (GroupMetadataManager's replay of GroupMetadataValue)."""
from __future__ import annotations

from ..protocol.messages.coordinator_records import GROUP_METADATA
from .classic_group import EMPTY, STABLE, ClassicGroup, ClassicMember, persisted_view
from .result import Record

__all__ = ["GROUP_METADATA", "group_metadata_record", "empty_group_metadata_record",
           "group_from_metadata"]


def group_metadata_record(group: ClassicGroup, assignment: dict[str, bytes]) -> Record:
    """GroupMetadataValue v3 of the group's members with the given assignments."""
    members = []
    for m in group.members.values():
        if not group.protocol_name:
            raise ValueError("non-empty group metadata without a protocol")
        members.append({
            "member_id": m.member_id, "group_instance_id": m.group_instance_id,
            "client_id": m.client_id, "client_host": m.client_host,
            "rebalance_timeout": m.rebalance_timeout_ms, "session_timeout": m.session_timeout_ms,
            "subscription": m.metadata_for(group.protocol_name),
            "assignment": assignment[m.member_id]})
    ts = group.state_timestamp_ms
    value = {"protocol_type": group.protocol_type or "", "generation": group.generation_id,
             "protocol": group.protocol_name, "leader": group.leader_id,
             "current_state_timestamp": -1 if ts is None else ts, "members": members}
    return Record(GROUP_METADATA, {"group": group.group_id}, value, 3)


def empty_group_metadata_record(group: ClassicGroup) -> Record:
    """What Kafka writes to persist a group a JoinGroup has just created."""
    ts = group.state_timestamp_ms
    value = {"protocol_type": "", "generation": 0, "protocol": None, "leader": None,
             "current_state_timestamp": -1 if ts is None else ts, "members": []}
    return Record(GROUP_METADATA, {"group": group.group_id}, value, 3)


def group_from_metadata(group_id: str, value: dict) -> ClassicGroup:
    """The group a replayed GroupMetadata value describes (it replaces the
    live one, as in Kafka)."""
    protocol_type = value["protocol_type"] or None
    ts = value.get("current_state_timestamp", -1)
    group = ClassicGroup(group_id, state=STABLE if value["members"] else EMPTY,
                         state_timestamp_ms=None if ts == -1 else ts,
                         protocol_type=protocol_type, protocol_name=value["protocol"],
                         generation_id=value["generation"], leader_id=value["leader"])
    for m in value["members"]:
        rebalance = m.get("rebalance_timeout", -1)
        group.add(ClassicMember(
            m["member_id"], m.get("group_instance_id"), m["client_id"], m["client_host"],
            m["session_timeout"] if rebalance == -1 else rebalance, m["session_timeout"],
            value["protocol_type"] or "", [(value["protocol"] or "", bytes(m["subscription"]))],
            bytes(m["assignment"])))
    group.protocol_type = protocol_type
    group.subscribed_topics = group.compute_subscribed_topics()
    group.persisted = persisted_view(value)
    return group
