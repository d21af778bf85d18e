"""Replaying group records into one row per generation (classic) or epoch (KIP-848).

Input: the group records of one group in log order (dicts shaped like the
`kcoord_offsets` rows: record_type 2-8, tombstone, member_id, timestamp,
log_partition, offset, group_metadata, consumer_group).

* Classic groups (GroupMetadata, type 2): Kafka writes the group's metadata
  at every state change, so a generation can have several records (joined,
  then synced with assignments).  One row per generation, from its last
  record.  A tombstone deletes the group.
* Consumer groups (KIP-848, types 3-8): the records are replayed into the
  group's state; a row is emitted at each ConsumerGroupTargetAssignmentMetadata
  record, when the target assignment of that epoch is complete: its members
  (ConsumerGroupMemberMetadata) and their target assignments.  The protocol
  is the server assignor most members asked for.  A ConsumerGroupMetadata
  tombstone deletes the group.
"""
from __future__ import annotations

from collections import Counter

from kcoord.protocol.errors import ProtocolError
from kcoord.protocol.messages.consumer_protocol import decode_assignment

GENERATION_FIELDS = [
    ("group", "string"),
    ("group_type", "string"),
    ("generation", "int"),
    ("timestamp", "bigint"),
    ("protocol_type", "string"),
    ("protocol", "string"),
    ("leader", "string"),
    ("member_count", "int"),
    ("members", "array<struct<member_id:string,instance_id:string,client_id:string,"
                "client_host:string,assignment:array<struct<topic:string,partitions:array<int>>>>>"),
    ("log_partition", "int"),
    ("log_offset", "bigint"),
]


def _classic_assignment(protocol_type, raw):
    if protocol_type != "consumer" or not raw:
        return None
    try:
        _, msg = decode_assignment(raw)
    except ProtocolError:
        return None
    return [{"topic": a["topic"], "partitions": sorted(a["partitions"])}
            for a in msg["assigned_partitions"]]


def _classic_row(group: str, rec: dict) -> dict:
    gm = rec["group_metadata"]
    ts = gm.get("current_state_timestamp")
    members = [{
        "member_id": m["member_id"], "instance_id": m.get("group_instance_id"),
        "client_id": m["client_id"], "client_host": m["client_host"],
        "assignment": _classic_assignment(gm["protocol_type"], m["assignment"]),
    } for m in gm["members"] or []]
    return {"group": group, "group_type": "classic", "generation": gm["generation"],
            "timestamp": ts if ts is not None and ts >= 0 else rec["timestamp"],
            "protocol_type": gm["protocol_type"], "protocol": gm["protocol"],
            "leader": gm["leader"], "member_count": len(members), "members": members,
            "log_partition": rec["log_partition"], "log_offset": rec["offset"]}


def replay_group(group: str, records) -> list[dict]:
    """Generation rows of one group from its records in log order."""
    out: list[dict] = []
    pending: dict | None = None   # classic: the last record of the current generation
    members: dict[str, dict] = {}  # KIP-848 state
    target: dict[str, list] = {}
    for rec in records:
        rtype = rec["record_type"]
        if rtype == 2:
            if rec["tombstone"]:
                if pending:
                    out.append(pending)
                pending = None
                continue
            row = _classic_row(group, rec)
            if pending is not None and pending["generation"] != row["generation"]:
                out.append(pending)
            pending = row
            continue
        cg = rec["consumer_group"] or {}
        member = rec["member_id"]
        if rtype == 3 and rec["tombstone"]:
            members.clear()
            target.clear()
        elif rtype == 5:
            if rec["tombstone"]:
                members.pop(member, None)
            else:
                members[member] = cg
        elif rtype == 7:
            if rec["tombstone"]:
                target.pop(member, None)
            else:
                target[member] = [{"topic": tp["topic"] or tp["topic_id"],
                                   "partitions": sorted(tp["partitions"])}
                                  for tp in cg.get("assigned") or []]
        elif rtype == 6 and not rec["tombstone"]:
            ids = sorted(set(members) | set(target))
            assignors = Counter(members[m].get("server_assignor") for m in ids
                                if m in members and members[m].get("server_assignor"))
            out.append({
                "group": group, "group_type": "consumer",
                "generation": cg.get("assignment_epoch"), "timestamp": rec["timestamp"],
                "protocol_type": "consumer",
                "protocol": min(assignors, key=lambda a: (-assignors[a], a)) if assignors else None,
                "leader": None, "member_count": len(ids),
                "members": [{
                    "member_id": m,
                    "instance_id": members.get(m, {}).get("instance_id"),
                    "client_id": members.get(m, {}).get("client_id"),
                    "client_host": members.get(m, {}).get("client_host"),
                    "assignment": target.get(m, []),
                } for m in ids],
                "log_partition": rec["log_partition"], "log_offset": rec["offset"]})
    if pending:
        out.append(pending)
    return out


def decoded_records(rows, names: dict):
    """Group records with `raw_value` -> the same with `group_metadata` /
    `consumer_group` decoded (what replay_group reads); `names` maps topic ids to names."""
    from kcoord.protocol.messages.coordinator_records import decode_record_value

    from .group_rows import consumer_group_row, group_metadata_row
    for r in rows:
        raw = r.pop("raw_value")
        r["group_metadata"] = r["consumer_group"] = None
        if raw is not None:
            _, msg = decode_record_value(r["record_type"], raw)
            if r["record_type"] == 2:
                r["group_metadata"] = group_metadata_row(msg)
            else:
                r["consumer_group"] = consumer_group_row(r["record_type"], msg, names)
        yield r


def generation_rows(rows):
    """Rows sorted by (group, log_partition, offset) -> generation rows, group by group."""
    current = None
    buf: list[dict] = []
    for rec in rows:
        if rec["group"] != current:
            if buf:
                yield from replay_group(current, buf)
            current, buf = rec["group"], []
        buf.append(rec)
    if buf:
        yield from replay_group(current, buf)
