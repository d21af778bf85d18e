"""What a consumer-protocol request (KIP-848) may carry and how it is
refused: ConsumerGroupHeartbeat's validation (Kafka's
throwIfConsumerGroupHeartbeatRequestIsInvalid), the HeartbeatError the
manager raises, and the error answers of both APIs (from the schema)."""
from __future__ import annotations

from ..protocol.api import API_KEYS, error_item, error_response
from ..protocol.errors import Err
from .consumer_group import LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH

# Kafka's group ACL operations when authorization is not restricted:
# READ(3), DELETE(6), DESCRIBE(8), DESCRIBE_CONFIGS(10), ALTER_CONFIGS(11)
GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11)


class HeartbeatError(Exception):
    def __init__(self, code: int, message: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


_JAVA_BLANK = "".join(map(chr, range(33)))  # what Java's String.trim() strips


def is_blank(value: str) -> bool:
    """Empty, or only what Java's trim() strips (throwIfEmptyString)."""
    return not value.strip(_JAVA_BLANK)


def validate_heartbeat(req: dict, version: int, assignor_names) -> HeartbeatError | None:
    """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid (GroupCoordinatorService).
    Strings are empty when blank, as Kafka's throwIfEmptyString (value.trim().isEmpty())."""
    epoch = req["member_epoch"]
    if version >= 1 or epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH:
        if req["member_id"] is None or is_blank(req["member_id"]):
            return HeartbeatError(Err.INVALID_REQUEST, "MemberId can't be empty.")
    if req["group_id"] is None or is_blank(req["group_id"]):
        return HeartbeatError(Err.INVALID_REQUEST, "GroupId can't be empty.")
    if req.get("instance_id") is not None and is_blank(req["instance_id"]):
        return HeartbeatError(Err.INVALID_REQUEST, "InstanceId can't be empty.")
    if req.get("rack_id") is not None and is_blank(req["rack_id"]):
        return HeartbeatError(Err.INVALID_REQUEST, "RackId can't be empty.")
    if epoch == 0:
        if req.get("rebalance_timeout_ms", -1) == -1:
            return HeartbeatError(Err.INVALID_REQUEST,
                                  "RebalanceTimeoutMs must be provided in first request.")
        owned = req.get("topic_partitions")
        if owned is None or len(owned) > 0:
            return HeartbeatError(Err.INVALID_REQUEST,
                                  "TopicPartitions must be empty when (re-)joining.")
        if req.get("subscribed_topic_names") is None and req.get("subscribed_topic_regex") is None:
            return HeartbeatError(Err.INVALID_REQUEST,
                                  "Either SubscribedTopicNames or SubscribedTopicRegex must be "
                                  "non-null when (re-)joining.")
    elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if req.get("instance_id") is None:
            return HeartbeatError(Err.INVALID_REQUEST, "InstanceId can't be null.")
    elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        return HeartbeatError(Err.INVALID_REQUEST, "MemberEpoch is invalid.")
    assignor = req.get("server_assignor")
    if assignor is not None and assignor not in assignor_names:
        return HeartbeatError(Err.UNSUPPORTED_ASSIGNOR,
                              f"ServerAssignor {assignor} is not supported. Supported assignors: "
                              f"{', '.join(assignor_names)}.")
    return None


HEARTBEAT_KEY = API_KEYS["ConsumerGroupHeartbeat"]
DESCRIBE_KEY = API_KEYS["ConsumerGroupDescribe"]


def heartbeat_error(code: int, message: str | None = None) -> dict:
    """ConsumerGroupHeartbeat's error answer (the same fields in every version)."""
    return error_response(HEARTBEAT_KEY, 1, {}, code, message)


def describe_error(gid: str, code: int, message: str | None = None) -> dict:
    """A ConsumerGroupDescribe group entry that only carries an error."""
    return error_item(DESCRIBE_KEY, 0, ("group_ids",), gid, code, message)
