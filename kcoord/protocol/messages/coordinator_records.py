"""The __consumer_offsets record formats (Kafka's group-coordinator
records, group-coordinator/src/main/resources/common/message/*.json).

A record key is an int16 record type followed by the key fields; the key
schema's only version *is* the record type.  A record value is an int16
version followed by the value fields; a null value is a tombstone.

    type 0/1  OffsetCommit (Kafka writes 1)     type 5  ConsumerGroupMemberMetadata
    type 2    GroupMetadata                      type 6  ConsumerGroupTargetAssignmentMetadata
    type 3    ConsumerGroupMetadata              type 7  ConsumerGroupTargetAssignmentMember
    type 4    ConsumerGroupPartitionMetadata     type 8  ConsumerGroupCurrentMemberAssignment

    type 10   ShareGroupMemberMetadata           type 13 ShareGroupTargetAssignmentMember
    type 11   ShareGroupMetadata                 type 14 ShareGroupCurrentMemberAssignment
    type 12   ShareGroupTargetAssignmentMetadata type 15 ShareGroupStatePartitionMetadata

Type 9 (Kafka 4.0's early-access ShareGroupPartitionMetadata, gone from 4.1)
and the streams types are not known here; decoding one raises
UnknownRecordTypeError, which a loader skips as Kafka's does.
"""
from __future__ import annotations

import struct

from ..errors import ProtocolError
from ..schema import Schema, f, schema

# ---------------------------------------------------------------- classic records

OFFSET_COMMIT_KEY = schema("OffsetCommitKey", "0-1", "none", [
    f("group", "string", "0-1"),
    f("topic", "string", "0-1"),
    f("partition", "int32", "0-1"),
])

OFFSET_COMMIT_VALUE = schema("OffsetCommitValue", "0-4", "4+", [
    f("offset", "int64"),
    f("leader_epoch", "int32", "3+", default=-1),
    f("metadata", "string"),
    f("commit_timestamp", "int64"),
    f("expire_timestamp", "int64", "1", default=-1),
])

GROUP_METADATA_KEY = schema("GroupMetadataKey", "2", "none", [
    f("group", "string", "2"),
])

GROUP_METADATA_VALUE = schema("GroupMetadataValue", "0-4", "4+", [
    f("protocol_type", "string"),
    f("generation", "int32"),
    f("protocol", "string", null="0+"),
    f("leader", "string", null="0+"),
    f("current_state_timestamp", "int64", "2+", default=-1),
    f("members", "[]", fields=[
        f("member_id", "string"),
        f("group_instance_id", "string", "3+", null="3+", default=None),
        f("client_id", "string"),
        f("client_host", "string"),
        f("rebalance_timeout", "int32", "1+", default=-1),
        f("session_timeout", "int32"),
        f("subscription", "bytes"),
        f("assignment", "bytes"),
    ]),
])

# ---------------------------------------------------------------- KIP-848 records

CONSUMER_GROUP_METADATA_KEY = schema("ConsumerGroupMetadataKey", "3", "none", [
    f("group_id", "string", "3"),
])

CONSUMER_GROUP_METADATA_VALUE = schema("ConsumerGroupMetadataValue", "0", "0+", [
    f("epoch", "int32"),
])

CONSUMER_GROUP_PARTITION_METADATA_KEY = schema("ConsumerGroupPartitionMetadataKey", "4", "none", [
    f("group_id", "string", "4"),
])

CONSUMER_GROUP_PARTITION_METADATA_VALUE = schema(
    "ConsumerGroupPartitionMetadataValue", "0", "0+", [
        f("topics", "[]", fields=[
            f("topic_id", "uuid"),
            f("topic_name", "string"),
            f("num_partitions", "int32"),
            f("partition_metadata", "[]", fields=[
                f("partition", "int32"),
                f("racks", "[]string"),
            ]),
        ]),
    ])

CONSUMER_GROUP_MEMBER_METADATA_KEY = schema("ConsumerGroupMemberMetadataKey", "5", "none", [
    f("group_id", "string", "5"),
    f("member_id", "string", "5"),
])

CONSUMER_GROUP_MEMBER_METADATA_VALUE = schema("ConsumerGroupMemberMetadataValue", "0", "0+", [
    f("instance_id", "string", null="0+"),
    f("rack_id", "string", null="0+"),
    f("client_id", "string"),
    f("client_host", "string"),
    f("subscribed_topic_names", "[]string"),
    f("subscribed_topic_regex", "string", null="0+"),
    f("rebalance_timeout_ms", "int32", default=-1),
    f("server_assignor", "string", null="0+"),
    # set (tag 0) only for a member that joined with the classic protocol
    f("classic_member_metadata", "{}", "0+", null="0+", tag=0, default=None, fields=[
        f("session_timeout_ms", "int32"),
        f("supported_protocols", "[]", fields=[
            f("name", "string"),
            f("metadata", "bytes"),
        ]),
    ]),
])

CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY = schema(
    "ConsumerGroupTargetAssignmentMetadataKey", "6", "none", [
        f("group_id", "string", "6"),
    ])

CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE = schema(
    "ConsumerGroupTargetAssignmentMetadataValue", "0", "0+", [
        f("assignment_epoch", "int32"),
    ])

CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY = schema(
    "ConsumerGroupTargetAssignmentMemberKey", "7", "none", [
        f("group_id", "string", "7"),
        f("member_id", "string", "7"),
    ])

CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE = schema(
    "ConsumerGroupTargetAssignmentMemberValue", "0", "0+", [
        f("topic_partitions", "[]", fields=[
            f("topic_id", "uuid"),
            f("partitions", "[]int32"),
        ]),
    ])

CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY = schema(
    "ConsumerGroupCurrentMemberAssignmentKey", "8", "none", [
        f("group_id", "string", "8"),
        f("member_id", "string", "8"),
    ])

_TOPIC_PARTITIONS = [
    f("topic_id", "uuid"),
    f("partitions", "[]int32"),
]

CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE = schema(
    "ConsumerGroupCurrentMemberAssignmentValue", "0", "0+", [
        f("member_epoch", "int32"),
        f("previous_member_epoch", "int32"),
        f("state", "int8"),  # MemberState value
        f("assigned_partitions", "[]", fields=_TOPIC_PARTITIONS),
        f("partitions_pending_revocation", "[]", fields=_TOPIC_PARTITIONS),
    ])

# ---------------------------------------------------------------- share-group records (KIP-932)
# Written from SHARE_GROUPS_REFERENCE section 2.10 (Kafka 4.2): keys at the
# record type's version, every value version 0 and flexible.

SHARE_GROUP_MEMBER_METADATA_KEY = schema("ShareGroupMemberMetadataKey", "10", "none", [
    f("group_id", "string", "10"),
    f("member_id", "string", "10"),
])

SHARE_GROUP_MEMBER_METADATA_VALUE = schema("ShareGroupMemberMetadataValue", "0", "0+", [
    f("rack_id", "string", null="0+"),
    f("client_id", "string"),
    f("client_host", "string"),
    f("subscribed_topic_names", "[]string"),
])

SHARE_GROUP_METADATA_KEY = schema("ShareGroupMetadataKey", "11", "none", [
    f("group_id", "string", "11"),
])

SHARE_GROUP_METADATA_VALUE = schema("ShareGroupMetadataValue", "0", "0+", [
    f("epoch", "int32"),
    f("metadata_hash", "int64"),
])

SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_KEY = schema(
    "ShareGroupTargetAssignmentMetadataKey", "12", "none", [
        f("group_id", "string", "12"),
    ])

SHARE_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE = schema(
    "ShareGroupTargetAssignmentMetadataValue", "0", "0+", [
        f("assignment_epoch", "int32"),
    ])

SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY = schema(
    "ShareGroupTargetAssignmentMemberKey", "13", "none", [
        f("group_id", "string", "13"),
        f("member_id", "string", "13"),
    ])

SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE = schema(
    "ShareGroupTargetAssignmentMemberValue", "0", "0+", [
        f("topic_partitions", "[]", fields=_TOPIC_PARTITIONS),
    ])

SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY = schema(
    "ShareGroupCurrentMemberAssignmentKey", "14", "none", [
        f("group_id", "string", "14"),
        f("member_id", "string", "14"),
    ])

SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE = schema(
    "ShareGroupCurrentMemberAssignmentValue", "0", "0+", [
        f("member_epoch", "int32"),
        f("previous_member_epoch", "int32"),
        f("state", "int8"),  # always 0 (STABLE): share members do not revoke
        f("assigned_partitions", "[]", fields=_TOPIC_PARTITIONS),
    ])

SHARE_GROUP_STATE_PARTITION_METADATA_KEY = schema(
    "ShareGroupStatePartitionMetadataKey", "15", "none", [
        f("group_id", "string", "15"),
    ])

_SHARE_TOPIC_PARTITIONS = [
    f("topic_id", "uuid"),
    f("topic_name", "string"),
    f("partitions", "[]int32"),
]

SHARE_GROUP_STATE_PARTITION_METADATA_VALUE = schema(
    "ShareGroupStatePartitionMetadataValue", "0", "0+", [
        f("initializing_topics", "[]", fields=_SHARE_TOPIC_PARTITIONS),
        f("initialized_topics", "[]", fields=_SHARE_TOPIC_PARTITIONS),
        f("deleting_topics", "[]", fields=[
            f("topic_id", "uuid"),
            f("topic_name", "string"),
        ]),
    ])

# ---------------------------------------------------------------- record types

#: record type -> (key schema name, value schema name)
RECORD_TYPES: dict[int, tuple[str, str]] = {
    0: ("OffsetCommitKey", "OffsetCommitValue"),
    1: ("OffsetCommitKey", "OffsetCommitValue"),
    2: ("GroupMetadataKey", "GroupMetadataValue"),
    3: ("ConsumerGroupMetadataKey", "ConsumerGroupMetadataValue"),
    4: ("ConsumerGroupPartitionMetadataKey", "ConsumerGroupPartitionMetadataValue"),
    5: ("ConsumerGroupMemberMetadataKey", "ConsumerGroupMemberMetadataValue"),
    6: ("ConsumerGroupTargetAssignmentMetadataKey", "ConsumerGroupTargetAssignmentMetadataValue"),
    7: ("ConsumerGroupTargetAssignmentMemberKey", "ConsumerGroupTargetAssignmentMemberValue"),
    8: ("ConsumerGroupCurrentMemberAssignmentKey", "ConsumerGroupCurrentMemberAssignmentValue"),
    10: ("ShareGroupMemberMetadataKey", "ShareGroupMemberMetadataValue"),
    11: ("ShareGroupMetadataKey", "ShareGroupMetadataValue"),
    12: ("ShareGroupTargetAssignmentMetadataKey", "ShareGroupTargetAssignmentMetadataValue"),
    13: ("ShareGroupTargetAssignmentMemberKey", "ShareGroupTargetAssignmentMemberValue"),
    14: ("ShareGroupCurrentMemberAssignmentKey", "ShareGroupCurrentMemberAssignmentValue"),
    15: ("ShareGroupStatePartitionMetadataKey", "ShareGroupStatePartitionMetadataValue"),
}

#: the record type Kafka writes for each record (OffsetCommit is written as 1;
#: 0 is the legacy OffsetCommit type, still read)
LEGACY_OFFSET_COMMIT = 0
OFFSET_COMMIT = 1
GROUP_METADATA = 2
CONSUMER_GROUP_METADATA = 3
CONSUMER_GROUP_PARTITION_METADATA = 4
CONSUMER_GROUP_MEMBER_METADATA = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
SHARE_GROUP_MEMBER_METADATA = 10
SHARE_GROUP_METADATA = 11
SHARE_GROUP_TARGET_ASSIGNMENT_METADATA = 12
SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER = 13
SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT = 14
SHARE_GROUP_STATE_PARTITION_METADATA = 15


class UnknownRecordTypeError(ProtocolError):
    """A record type this coordinator does not know (Kafka's loader skips these)."""

    def __init__(self, record_type: int):
        super().__init__(f"unknown coordinator record type {record_type}")
        self.record_type = record_type


class UnknownRecordVersionError(ProtocolError):
    """A value version outside the known range of its record type."""


_INT16 = struct.Struct(">h")
_SCHEMAS: dict[str, Schema] = {
    s.name: s for s in globals().values() if isinstance(s, Schema)
}
# value schema name -> the record type Kafka writes for it
_VALUE_TYPES: dict[str, int] = {}
for _t, (_k, _v) in sorted(RECORD_TYPES.items(), reverse=True):
    _VALUE_TYPES[_v] = _t
    _VALUE_TYPES[_v[:-len("Value")]] = _t  # the record's own name, e.g. "GroupMetadata"


def _codec(name: str, version: int):
    from ..api import schema_codec  # the registry imports this package
    return schema_codec(name, version)


def _read_int16(buf, what: str) -> int:
    if len(buf) < 2:
        raise ProtocolError(f"record {what} shorter than its int16 prefix")
    return _INT16.unpack_from(buf, 0)[0]


def encode_record_key(record_type: int, msg: dict) -> bytes:
    """int16 record type + key fields (the key schema's version is the type)."""
    try:
        key_name, _ = RECORD_TYPES[record_type]
    except KeyError:
        raise UnknownRecordTypeError(record_type) from None
    encode, _ = _codec(key_name, record_type)
    return _INT16.pack(record_type) + encode(msg)


def decode_record_key(buf) -> tuple[int, dict]:
    """(record type, key fields) of a record key."""
    record_type = _read_int16(buf, "key")
    try:
        key_name, _ = RECORD_TYPES[record_type]
    except KeyError:
        raise UnknownRecordTypeError(record_type) from None
    _, decode = _codec(key_name, record_type)
    msg, _ = decode(buf, 2)
    return record_type, msg


def _value_schema(name_or_type: int | str) -> Schema:
    if isinstance(name_or_type, int):
        try:
            return _SCHEMAS[RECORD_TYPES[name_or_type][1]]
        except KeyError:
            raise UnknownRecordTypeError(name_or_type) from None
    if name_or_type not in _VALUE_TYPES:
        raise ProtocolError(f"unknown coordinator record {name_or_type!r}")
    return _SCHEMAS[RECORD_TYPES[_VALUE_TYPES[name_or_type]][1]]


def encode_record_value(name_or_type: int | str, version: int, msg: dict | None) -> bytes | None:
    """int16 version + value fields.  `name_or_type` is a record type, a value
    schema name ("GroupMetadataValue") or a record name ("GroupMetadata").
    A None message is a tombstone and encodes as None."""
    sch = _value_schema(name_or_type)
    if msg is None:
        return None
    if version not in sch.versions:
        raise UnknownRecordVersionError(f"{sch.name} has no version {version}")
    encode, _ = _codec(sch.name, version)
    return _INT16.pack(version) + encode(msg)


def decode_record_value(record_type: int, buf) -> tuple[int | None, dict | None]:
    """(version, value fields) of the value of a record of `record_type`;
    (None, None) for a tombstone (buf is None)."""
    sch = _value_schema(record_type)
    if buf is None:
        return None, None
    version = _read_int16(buf, "value")
    if version not in sch.versions:
        raise UnknownRecordVersionError(f"{sch.name} has no version {version}")
    _, decode = _codec(sch.name, version)
    msg, _ = decode(buf, 2)
    return version, msg
