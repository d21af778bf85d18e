"""What a share group request carries and how it is answered:
ShareGroupHeartbeat's validation (KafkaApis and GroupCoordinatorService), the
error answers of the share group APIs (from the schema), and the data the
core hands the runtime beside an answer (share partitions to initialize,
offsets to delete)."""
from __future__ import annotations

from dataclasses import dataclass

from ..protocol.error_response import error_item, error_response
from ..protocol.errors import Err
from .consumer_requests import HeartbeatError, is_blank
from .share_group import LEAVE_GROUP_MEMBER_EPOCH

MEMBER_ID_MAX_LENGTH = 36  # KafkaApis isMemberIdValid
ADMIN_MISSING = "Group {} not found."  # GroupMetadataManager.group()'s message
NOT_EMPTY = "The group is not empty."
UNKNOWN_PARTITION = "This server does not host this topic-partition."


@dataclass(slots=True)
class ShareInitialization:
    """Initialize these share partitions (InitializeShareGroupState with
    StateEpoch = the group epoch and StartOffset -1, or the offsets an
    AlterShareGroupOffsets asked for): data the core emits."""
    group_id: str
    state_epoch: int
    partitions: dict  # topic id -> frozenset of partitions
    start_offset: int = -1
    offsets: dict | None = None  # (topic id, partition) -> start offset, when given

    def start_of(self, topic_id: bytes, partition: int) -> int:
        if self.offsets is None:
            return self.start_offset
        return self.offsets.get((topic_id, partition), self.start_offset)


@dataclass(slots=True)
class ShareHeartbeatAnswer:
    """An answer (a heartbeat's, an AlterShareGroupOffsets') that also asks for
    share partitions to be initialized."""
    response: dict
    initialize: ShareInitialization


def heartbeat_error(code: int, message: str | None = None) -> dict:
    return error_response(76, 1, {}, int(code), message)


def describe_error(gid: str, code: int, message: str | None) -> dict:
    """A ShareGroupDescribe group entry that only carries an error."""
    return error_item(77, 1, ("group_ids",), gid, int(code), message)


def alter_offsets_error(code: int, message: str | None = None) -> dict:
    return error_response(91, 0, {}, int(code), message)


@dataclass(slots=True)
class ShareOffsetsDeletion:
    """DeleteShareGroupOffsets, step 1's answer: the topics refused, and the
    share partitions (topic id -> (name, partitions)) whose state to delete."""
    refused: list
    partitions: dict


def deleted_topic(name: str, topic_id: bytes, code: int = 0, message: str | None = None) -> dict:
    return {"topic_name": name, "topic_id": topic_id, "error_code": int(code),
            "error_message": message}


def delete_offsets_error(code: int, message: str | None = None) -> dict:
    return error_response(92, 0, {}, int(code), message)


def validate_heartbeat(req: dict) -> HeartbeatError | None:
    """KafkaApis' member id check, then GroupCoordinatorService's
    throwIfShareGroupHeartbeatRequestIsInvalid."""
    member_id = req.get("member_id")
    if member_id is None or member_id == "" or len(member_id) > MEMBER_ID_MAX_LENGTH:
        return HeartbeatError(Err.INVALID_REQUEST, "Invalid member id in the request.")
    if is_blank(member_id):
        return HeartbeatError(Err.INVALID_REQUEST, "MemberId can't be empty.")
    if req.get("group_id") is None or is_blank(req["group_id"]):
        return HeartbeatError(Err.INVALID_REQUEST, "GroupId can't be empty.")
    if req.get("rack_id") is not None and is_blank(req["rack_id"]):
        return HeartbeatError(Err.INVALID_REQUEST, "RackId can't be empty.")
    epoch = req["member_epoch"]
    if epoch == 0:
        if not req.get("subscribed_topic_names"):
            return HeartbeatError(Err.INVALID_REQUEST,
                                  "SubscribedTopicNames must be set in first request.")
    elif epoch < LEAVE_GROUP_MEMBER_EPOCH:
        return HeartbeatError(Err.INVALID_REQUEST, "MemberEpoch is invalid.")
    return None
