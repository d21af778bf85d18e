"""Consumer-group operations on the admin client, as Kafka's Admin client
does them: ListGroups on every broker, ConsumerGroupDescribe with a
DescribeGroups fallback, OffsetFetch, admin-style OffsetCommit (generation
-1, no member id), DeleteGroups and OffsetDelete."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..protocol.errors import Err, ProtocolError
from ..protocol.messages.consumer_protocol import decode_assignment
from .client import AdminClient, AdminError, error_name

CONSUMER_PROTOCOL = "consumer"
STATES = ("Unknown", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty",
          "Assigning", "Reconciling")
TYPES = ("classic", "consumer")

MESSAGES = {  # Kafka's Errors messages for the errors the tool prints
    Err.GROUP_ID_NOT_FOUND: "The group id does not exist.",
    Err.NON_EMPTY_GROUP: "The group is not empty.",
    Err.INVALID_GROUP_ID: "The configured groupId is invalid.",
    Err.GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
    Err.GROUP_SUBSCRIBED_TO_TOPIC: "Deleting offsets of a topic is forbidden while the consumer "
                                   "group is actively subscribed to it.",
    Err.UNKNOWN_TOPIC_OR_PARTITION: "This server does not host this topic-partition.",
    Err.UNKNOWN_MEMBER_ID: "The coordinator is not aware of this member.",
}


def message(code: int) -> str:
    return MESSAGES.get(code, error_name(code))


@dataclass
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    assignment: list[tuple[str, int]]
    target: list[tuple[str, int]] | None = None  # KIP-848 groups only
    epoch: int | None = None


@dataclass
class Group:
    group_id: str
    state: str
    type: str                         # "classic" or "consumer"
    coordinator: tuple[int, str, int]  # (id, host, port)
    assignor: str
    group_epoch: int | None = None
    assignment_epoch: int | None = None
    members: list[Member] = field(default_factory=list)


def list_groups(admin: AdminClient, states: list[str] | None = None,
                types: list[str] | None = None) -> list[dict]:
    """[{group_id, state, type}] from every broker, consumer groups only."""
    out: dict[str, dict] = {}
    for node_id in sorted(admin.brokers()):
        conn = admin.node(node_id)
        low = 5 if types else (4 if states else 0)
        _, response = conn.call(16, {"states_filter": list(states or []),
                                     "types_filter": list(types or [])}, low=low)
        if response["error_code"] != Err.NONE:
            raise AdminError(f"ListGroups: {error_name(response['error_code'])}")
        for g in response["groups"]:
            if g["protocol_type"] not in (CONSUMER_PROTOCOL, ""):
                continue
            out[g["group_id"]] = {"group_id": g["group_id"], "state": g.get("group_state") or
                                  "Unknown", "type": (g.get("group_type") or "classic").lower()}
    return [out[k] for k in sorted(out)]


def _decode_assignment(data: bytes) -> list[tuple[str, int]]:
    if not data:
        return []
    try:
        _, decoded = decode_assignment(data)
    except ProtocolError:
        return []  # not the consumer protocol's embedded format
    return [(t["topic"], p) for t in decoded["assigned_partitions"] for p in t["partitions"]]


def describe_group(admin: AdminClient, group_id: str) -> Group:
    conn = admin.coordinator(group_id)
    coordinator = (-1, conn.host, conn.port)
    for node_id, address in admin.brokers().items():
        if address == (conn.host, conn.port):
            coordinator = (node_id, conn.host, conn.port)
    not_consumer = None  # ConsumerGroupDescribe's "Group g is not a consumer group."
    if conn.supports(69):
        _, response = admin.group_request(group_id, 69, {"group_ids": [group_id],
                                                         "include_authorized_operations": False},
                                          lambda r: r["groups"][0]["error_code"])
        [g] = response["groups"]
        if g["error_code"] == Err.GROUP_ID_NOT_FOUND and "is not a consumer group" in (
                g["error_message"] or ""):
            not_consumer = g["error_message"]
        if g["error_code"] == Err.NONE:
            def pairs(assignment):
                return sorted((t["topic_name"], p) for t in (assignment or {}).get(
                    "topic_partitions", []) for p in t["partitions"])
            members = [Member(m["member_id"], m["instance_id"], m["client_id"], m["client_host"],
                              pairs(m["assignment"]), pairs(m["target_assignment"]),
                              m["member_epoch"]) for m in g["members"]]
            return Group(group_id, g["group_state"], "consumer", coordinator, g["assignor_name"],
                         g["group_epoch"], g["assignment_epoch"], members)
        if g["error_code"] not in (Err.GROUP_ID_NOT_FOUND, Err.UNSUPPORTED_VERSION):
            raise AdminError(f"describe group '{group_id}': {message(g['error_code'])}")
    _, response = admin.group_request(group_id, 15, {"groups": [group_id],
                                                     "include_authorized_operations": False},
                                      lambda r: r["groups"][0]["error_code"], high=5)
    [g] = response["groups"]
    if not_consumer and (g["error_code"] == Err.GROUP_ID_NOT_FOUND or g["group_state"] == "Dead"):
        # a share group's id: Kafka's Admin client fails with ConsumerGroupDescribe's message
        raise AdminError(not_consumer)
    if g["error_code"] == Err.GROUP_ID_NOT_FOUND:
        return Group(group_id, "Dead", "classic", coordinator, "")
    if g["error_code"] != Err.NONE:
        raise AdminError(f"describe group '{group_id}': {message(g['error_code'])}")
    members = [Member(m["member_id"], m.get("group_instance_id"), m["client_id"],
                      m["client_host"], sorted(_decode_assignment(bytes(m["member_assignment"]))))
               for m in g["members"]]
    return Group(group_id, g["group_state"], "classic", coordinator, g["protocol_data"],
                 members=members)


def committed_offsets(admin: AdminClient, group_id: str) -> dict[tuple[str, int], int]:
    return {tp: offset for tp, (offset, _) in committed_with_epochs(admin, group_id).items()}


def committed_with_epochs(admin: AdminClient,
                          group_id: str) -> dict[tuple[str, int], tuple[int, int]]:
    """{(topic, partition): (committed offset, its leader epoch or -1)}"""
    conn = admin.coordinator(group_id)
    version = conn.version(9, 1)
    if version >= 8:
        body = {"groups": [{"group_id": group_id, "member_id": None, "member_epoch": -1,
                            "topics": None}], "require_stable": False}
        _, response = admin.group_request(group_id, 9, body,
                                          lambda r: r["groups"][0]["error_code"], low=8)
        [g] = response["groups"]
        code, topics = g["error_code"], g["topics"]
    else:
        body = {"group_id": group_id, "topics": None, "require_stable": False}
        _, response = admin.group_request(group_id, 9, body, lambda r: r.get("error_code", 0),
                                          low=2, high=7)
        code, topics = response.get("error_code", 0), response["topics"]
    if code not in (Err.NONE, Err.GROUP_ID_NOT_FOUND):
        raise AdminError(f"fetching offsets of group '{group_id}': {message(code)}")
    return {(t["name"], p["partition_index"]): (p["committed_offset"],
                                                p.get("committed_leader_epoch", -1))
            for t in topics for p in t["partitions"]
            if p["error_code"] == Err.NONE and p["committed_offset"] >= 0}


def commit_offsets(admin: AdminClient, group_id: str,
                   offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    """Admin-style commit (as AlterConsumerGroupOffsets) -> {tp: error code}."""
    topics: dict[str, list[dict]] = {}
    for (t, p), offset in sorted(offsets.items()):
        topics.setdefault(t, []).append({"partition_index": p, "committed_offset": offset,
                                         "committed_leader_epoch": -1, "commit_timestamp": -1,
                                         "committed_metadata": ""})
    body = {"group_id": group_id, "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None, "retention_time_ms": -1,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}

    def first_error(r):
        codes = [p["error_code"] for t in r["topics"] for p in t["partitions"]]
        return next((c for c in codes if c in (14, 15, 16)), 0)

    _, response = admin.group_request(group_id, 8, body, first_error, low=2)
    return {(t["name"], p["partition_index"]): p["error_code"]
            for t in response["topics"] for p in t["partitions"]}


def delete_groups(admin: AdminClient, group_ids: list[str]) -> dict[str, int]:
    out = {}
    for group_id in group_ids:
        _, response = admin.group_request(group_id, 42, {"groups_names": [group_id]},
                                          lambda r: r["results"][0]["error_code"])
        out[group_id] = response["results"][0]["error_code"]
    return out


def delete_offsets(admin: AdminClient, group_id: str,
                   partitions: list[tuple[str, int]]) -> tuple[int, dict[tuple[str, int], int]]:
    topics: dict[str, list[int]] = {}
    for t, p in partitions:
        topics.setdefault(t, []).append(p)
    body = {"group_id": group_id, "topics": [
        {"name": t, "partitions": [{"partition_index": p} for p in sorted(ps)]}
        for t, ps in topics.items()]}
    _, response = admin.group_request(group_id, 47, body, lambda r: r["error_code"])
    per_partition = {(t["name"], p["partition_index"]): p["error_code"]
                     for t in response["topics"] for p in t["partitions"]}
    return response["error_code"], per_partition
