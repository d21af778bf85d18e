"""Rows of the group records (GroupMetadata, the KIP-848 consumer-group
records) as the pipeline's Arrow columns hold them."""
from __future__ import annotations

import base64

import numpy as np
import pyarrow as pa



def uuid_str(raw) -> str | None:
    """Kafka's Uuid.toString(): URL-safe base64 without padding."""
    if raw is None:
        return None
    return base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")


def consumer_group_row(rtype: int, msg: dict, names: dict) -> dict:
    """The `consumer_group` column of a KIP-848 record (types 3-8).

    `names` maps topic ids to names; a partition-metadata record (type 4) adds to it."""
    def tps(items):
        return [{"topic_id": uuid_str(tp["topic_id"]),
                 "topic": names.get(uuid_str(tp["topic_id"])),
                 "partitions": list(tp["partitions"])} for tp in items or []]

    if rtype == 3:
        return {"epoch": msg["epoch"]}
    if rtype == 4:
        out = []
        for t in msg["topics"]:
            tid = uuid_str(t["topic_id"])
            names.setdefault(tid, t["topic_name"])
            out.append({"topic_id": tid, "topic": t["topic_name"],
                        "num_partitions": t["num_partitions"]})
        return {"topics": out}
    if rtype == 5:
        classic = msg.get("classic_member_metadata")
        return {"instance_id": msg["instance_id"], "rack_id": msg["rack_id"],
                "client_id": msg["client_id"], "client_host": msg["client_host"],
                "subscribed_topic_names": list(msg["subscribed_topic_names"]),
                "subscribed_topic_regex": msg["subscribed_topic_regex"],
                "rebalance_timeout_ms": msg["rebalance_timeout_ms"],
                "server_assignor": msg["server_assignor"],
                "classic_session_timeout_ms": classic["session_timeout_ms"] if classic else None}
    if rtype == 6:
        return {"assignment_epoch": msg["assignment_epoch"]}
    if rtype == 7:
        return {"assigned": tps(msg["topic_partitions"])}
    if rtype == 8:
        return {"member_epoch": msg["member_epoch"],
                "previous_member_epoch": msg["previous_member_epoch"],
                "state": msg["state"],
                "assigned": tps(msg["assigned_partitions"]),
                "pending_revocation": tps(msg["partitions_pending_revocation"])}
    return {}


def _sparse(rows: dict | None, n: int, typ, convert=None):
    """A column of n rows, null except at the rows of `rows` (row -> value)."""
    if not rows:
        return pa.nulls(n, typ)
    at = sorted(rows)
    items = [rows[r] for r in at] if convert is None else [convert(rows[r]) for r in at]
    index = np.zeros(n, dtype=np.int32)
    index[at] = np.arange(len(at), dtype=np.int32)
    unset = np.ones(n, dtype=bool)
    unset[at] = False
    return pa.array(items, typ).take(pa.array(index, mask=unset))


def _metadata_array(metadata: dict | None, has_value, n: int):
    """Metadata strings: "" for every commit unless a row says otherwise."""
    validity = pa.array(has_value).buffers()[1]
    lengths = np.zeros(n + 1, dtype=np.int64)
    data = b""
    if metadata:
        at = sorted(metadata)
        texts = [metadata[r].encode() for r in at]
        lengths[np.array(at) + 1] = [len(t) for t in texts]
        data = b"".join(texts)
    if len(data) >= 1 << 31:
        raise ValueError("metadata too large for one batch")
    offsets = np.cumsum(lengths).astype(np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data), validity)


def group_metadata_row(msg: dict) -> dict:
    """The `group_metadata` column of a GroupMetadata value."""
    return {
        "protocol_type": msg["protocol_type"], "generation": msg["generation"],
        "protocol": msg["protocol"], "leader": msg["leader"],
        "current_state_timestamp": msg.get("current_state_timestamp", -1),
        "members": [{
            "member_id": m["member_id"], "group_instance_id": m.get("group_instance_id"),
            "client_id": m["client_id"], "client_host": m["client_host"],
            "rebalance_timeout": m.get("rebalance_timeout", -1),
            "session_timeout": m["session_timeout"],
            "subscription": bytes(m["subscription"]), "assignment": bytes(m["assignment"]),
        } for m in msg["members"]],
    }
