"""Share-group operations on the admin client, as Kafka's Admin client does
them (KIP-932): ListGroups with TypesFilter ["share"] on every broker,
ShareGroupDescribe, DescribeShareGroupOffsets (every initialized share
partition), AlterShareGroupOffsets and DeleteShareGroupOffsets, each sent to
the group's coordinator."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..protocol.errors import Err
from .client import AdminClient, AdminError, error_name
from .groups import message

SHARE_STATES = ("Empty", "Stable", "Dead")  # GroupState.groupStatesForType(SHARE)


class ShareGroupError(AdminError):
    """An error answer for a group, with Kafka's code and the broker's message."""

    def __init__(self, code: int, text: str | None) -> None:
        super().__init__(text or message(code))
        self.code = code


@dataclass
class ShareMember:
    member_id: str
    client_id: str
    host: str
    epoch: int
    assignment: list[tuple[str, int]]


@dataclass
class ShareGroup:
    group_id: str
    state: str
    coordinator: tuple[int, str, int]  # (id, host, port)
    group_epoch: int
    assignment_epoch: int
    members: list[ShareMember] = field(default_factory=list)


@dataclass
class ShareOffset:
    """One share partition's row: None where Kafka's tool prints "-"."""
    start: int | None
    leader_epoch: int | None
    lag: int | None


def list_share_groups(admin: AdminClient, states: list[str] | None = None) -> list[dict]:
    """[{group_id, state}] of the share groups on every broker, by group id."""
    out: dict[str, dict] = {}
    for node_id in sorted(admin.brokers()):
        _, response = admin.node(node_id).call(16, {"states_filter": list(states or []),
                                                    "types_filter": ["share"]}, low=5)
        if response["error_code"] != Err.NONE:
            raise AdminError(f"ListGroups: {error_name(response['error_code'])}")
        for g in response["groups"]:
            if (g.get("group_type") or "").lower() == "share":
                out[g["group_id"]] = {"group_id": g["group_id"],
                                      "state": g.get("group_state") or "Unknown"}
    return [out[k] for k in sorted(out)]


def describe_share_group(admin: AdminClient, group_id: str) -> ShareGroup:
    """ShareGroupDescribe; ShareGroupError for a group it refuses (not found,
    not a share group, not authorized)."""
    node_id, conn = admin.coordinator_of(group_id)
    _, response = admin.group_request(group_id, 77, {"group_ids": [group_id],
                                                     "include_authorized_operations": False},
                                      lambda r: r["groups"][0]["error_code"], low=1)
    [g] = response["groups"]
    if g["error_code"] != Err.NONE:
        raise ShareGroupError(g["error_code"], g["error_message"])
    members = [ShareMember(m["member_id"], m["client_id"], m["client_host"], m["member_epoch"],
                           sorted((t["topic_name"], p) for t in m["assignment"]["topic_partitions"]
                                  for p in t["partitions"]))
               for m in g["members"]]
    return ShareGroup(group_id, g["group_state"], (node_id, conn.host, conn.port),
                      g["group_epoch"], g["assignment_epoch"], members)


def share_offsets(admin: AdminClient, group_id: str) -> dict[tuple[str, int], ShareOffset]:
    """DescribeShareGroupOffsets of every initialized share partition, read as
    Kafka's Admin client reads it: a partition with an error is left out, a
    negative start offset is no offset, a negative epoch or lag is unknown."""
    _, response = admin.group_request(group_id, 90, {"groups": [{"group_id": group_id,
                                                                 "topics": None}]},
                                      lambda r: r["groups"][0]["error_code"])
    [g] = response["groups"]
    if g["error_code"] != Err.NONE:
        raise ShareGroupError(g["error_code"], g["error_message"])
    out = {}
    for t in g["topics"]:
        for p in t["partitions"]:
            if p["error_code"] != Err.NONE:
                continue
            start = p["start_offset"]
            out[(t["topic_name"], p["partition_index"])] = ShareOffset(
                start if start >= 0 else None,
                p["leader_epoch"] if start >= 0 and p["leader_epoch"] >= 0 else None,
                p.get("lag", -1) if start >= 0 and p.get("lag", -1) >= 0 else None)
    return out


def alter_share_offsets(admin: AdminClient, group_id: str, plan: dict[tuple[str, int], int]
                        ) -> dict[tuple[str, int], int]:
    """AlterShareGroupOffsets -> {tp: error code}; ShareGroupError for a
    top-level refusal (a group with members, not a share group)."""
    topics: dict[str, list[dict]] = {}
    for (t, p), offset in sorted(plan.items()):
        topics.setdefault(t, []).append({"partition_index": p, "start_offset": offset})
    _, response = admin.group_request(group_id, 91, {"group_id": group_id, "topics": [
        {"topic_name": t, "partitions": ps} for t, ps in topics.items()]},
        lambda r: r["error_code"])
    if response["error_code"] != Err.NONE:
        raise ShareGroupError(response["error_code"], response["error_message"])
    return {(t["topic_name"], p["partition_index"]): p["error_code"]
            for t in response["responses"] for p in t["partitions"]}


def delete_share_offsets(admin: AdminClient, group_id: str, topics: list[str]
                         ) -> tuple[int, str | None, dict[str, tuple[int, str | None]]]:
    """DeleteShareGroupOffsets -> (top-level code, its message,
    {topic: (code, message)})."""
    _, response = admin.group_request(group_id, 92, {"group_id": group_id, "topics": [
        {"topic_name": t} for t in topics]}, lambda r: r["error_code"])
    return (response["error_code"], response["error_message"],
            {t["topic_name"]: (t["error_code"], t["error_message"])
             for t in response["responses"]})
