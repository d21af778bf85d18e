"""What a classic group request (JoinGroup, SyncGroup, Heartbeat, LeaveGroup)
carries and how it is answered: the readings done before any group is looked
at, and the answers (errors from the schema's defaults, as Kafka's
getErrorResponse; the core is version-free, the handler fits the version)."""
from __future__ import annotations

from ..protocol.api import API_KEYS, response_defaults
from ..protocol.errors import Err

JOIN_GROUP, SYNC_GROUP = API_KEYS["JoinGroup"], API_KEYS["SyncGroup"]
HEARTBEAT, LEAVE_GROUP = API_KEYS["Heartbeat"], API_KEYS["LeaveGroup"]


def join_error(code: int, member_id: str = "") -> dict:
    """A JoinGroup answer carrying only an error (the handler fits
    protocol_name to the request's version)."""
    return {**response_defaults(JOIN_GROUP), "error_code": code, "member_id": member_id}


def sync_error(code: int) -> dict:
    """A SyncGroup answer carrying only an error."""
    return {**response_defaults(SYNC_GROUP), "error_code": code}


def sync_response(code: int, assignment: bytes, protocol_type: str | None,
                  protocol_name: str | None) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "protocol_type": protocol_type,
            "protocol_name": protocol_name, "assignment": assignment}


def heartbeat_answer(code: int) -> dict:
    return {**response_defaults(HEARTBEAT), "error_code": code}


# shared heartbeat answers of the hot path: never mutated (the codec only reads them)
HEARTBEAT_OK = heartbeat_answer(Err.NONE)
HEARTBEAT_REBALANCING = heartbeat_answer(Err.REBALANCE_IN_PROGRESS)


def protocols(req: dict) -> list[tuple[str, bytes]]:
    """A JoinGroup's (protocol name, metadata) pairs in the member's order."""
    return [(p["name"], bytes(p["metadata"])) for p in req["protocols"]]


def leaving_members(req: dict, version: int) -> list[tuple[str, str | None]]:
    """The (member id, group instance id) pairs a LeaveGroup names."""
    if version >= 3:
        return [(m["member_id"], m.get("group_instance_id")) for m in req["members"]]
    return [(req["member_id"], None)]


def left_member(member_id: str, instance_id: str | None, code: int) -> dict:
    """One member's entry of a LeaveGroup answer."""
    return {"member_id": member_id, "group_instance_id": instance_id, "error_code": code}


def sync_request_error(req: dict, version: int) -> int:
    """The error a SyncGroup gets before any group is looked at (0: none)."""
    if version >= 5 and (req.get("protocol_type") is None or req.get("protocol_name") is None):
        return Err.INCONSISTENT_GROUP_PROTOCOL
    if not req["group_id"]:
        return Err.INVALID_GROUP_ID
    return Err.NONE


def leave_response(version: int, code: int, members: list[dict]) -> dict:
    if version >= 3:
        return {**response_defaults(LEAVE_GROUP), "error_code": code, "members": members}
    # v0-2 carry one member: its error is the top-level error
    if code == Err.NONE:
        code = next((m["error_code"] for m in members if m["error_code"]), Err.NONE)
    return {**response_defaults(LEAVE_GROUP), "error_code": code}
