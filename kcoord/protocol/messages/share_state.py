"""The share coordinator's messages: the inter-broker share-state APIs
InitializeShareGroupState (83), ReadShareGroupState (84),
WriteShareGroupState (85), DeleteShareGroupState (86) and
ReadShareGroupStateSummary (87), and the records of __share_group_state,
ShareSnapshot (type 0) and ShareUpdate (type 1).

Written from the protocol facts of Kafka 4.2's message schemas: every API is
flexible from v0 and carries one group id with its (topic id, partitions);
Write and ReadSummary v1 add DeliveryCompleteCount (KIP-1226).  A record key
is an int16 record type then the key fields (key version 0); a value is an
int16 version then the flexible value fields; a ShareSnapshot key with a
null value is the tombstone of a share partition's state.
"""
from ..schema import api, f, schema

_RESULT = [  # Partition, ErrorCode, ErrorMessage: every response's per-partition head
    f("partition", "int32"),
    f("error_code", "int16"),
    f("error_message", "string", null="0+", default=None),
]


def _state_batches(v: str = "0+"):
    return f("state_batches", "[]", v, fields=[
        f("first_offset", "int64"),
        f("last_offset", "int64"),
        f("delivery_state", "int8"),   # 0 Available, 2 Acknowledged, 4 Archived
        f("delivery_count", "int16"),
    ])


def _results(extra: list) -> list:
    return [f("results", "[]", fields=[
        f("topic_id", "uuid"),
        f("partitions", "[]", fields=_RESULT + extra),
    ])]


INITIALIZE_SHARE_GROUP_STATE = api(83, "InitializeShareGroupState", "0", "0+", request=[
    f("group_id", "string"),
    f("topics", "[]", fields=[
        f("topic_id", "uuid"),
        f("partitions", "[]", fields=[
            f("partition", "int32"),
            f("state_epoch", "int32"),
            f("start_offset", "int64"),   # -1: not decided yet (share.auto.offset.reset)
        ]),
    ]),
], response=_results([]))

READ_SHARE_GROUP_STATE = api(84, "ReadShareGroupState", "0", "0+", request=[
    f("group_id", "string"),
    f("topics", "[]", fields=[
        f("topic_id", "uuid"),
        f("partitions", "[]", fields=[
            f("partition", "int32"),
            f("leader_epoch", "int32"),
        ]),
    ]),
], response=_results([
    f("state_epoch", "int32"),
    f("start_offset", "int64"),
    _state_batches(),
]))

WRITE_SHARE_GROUP_STATE = api(85, "WriteShareGroupState", "0-1", "0+", request=[
    f("group_id", "string"),
    f("topics", "[]", fields=[
        f("topic_id", "uuid"),
        f("partitions", "[]", fields=[
            f("partition", "int32"),
            f("state_epoch", "int32"),
            f("leader_epoch", "int32"),
            f("start_offset", "int64"),   # -1: unchanged
            f("delivery_complete_count", "int32", "1+", default=-1),
            _state_batches(),
        ]),
    ]),
], response=_results([]))

DELETE_SHARE_GROUP_STATE = api(86, "DeleteShareGroupState", "0", "0+", request=[
    f("group_id", "string"),
    f("topics", "[]", fields=[
        f("topic_id", "uuid"),
        f("partitions", "[]", fields=[f("partition", "int32")]),
    ]),
], response=_results([]))

READ_SHARE_GROUP_STATE_SUMMARY = api(87, "ReadShareGroupStateSummary", "0-1", "0+", request=[
    f("group_id", "string"),
    f("topics", "[]", fields=[
        f("topic_id", "uuid"),
        f("partitions", "[]", fields=[
            f("partition", "int32"),
            f("leader_epoch", "int32"),
        ]),
    ]),
], response=_results([
    f("state_epoch", "int32"),
    f("leader_epoch", "int32"),
    f("start_offset", "int64"),
    f("delivery_complete_count", "int32", "1+", default=-1),
]))

# ---------------------------------------------------------------- __share_group_state records

SHARE_SNAPSHOT = 0
SHARE_UPDATE = 1

_KEY = [
    f("group_id", "string"),
    f("topic_id", "uuid"),
    f("partition", "int32"),
]

SHARE_SNAPSHOT_KEY = schema("ShareSnapshotKey", "0", "none", _KEY)
SHARE_UPDATE_KEY = schema("ShareUpdateKey", "0", "none", _KEY)

SHARE_SNAPSHOT_VALUE = schema("ShareSnapshotValue", "0", "0+", [
    f("snapshot_epoch", "int32"),
    f("state_epoch", "int32"),
    f("leader_epoch", "int32"),
    f("start_offset", "int64"),
    f("delivery_complete_count", "int32", "0+", tag=0, default=-1),  # Kafka 4.2 (KIP-1226)
    f("create_timestamp", "int64"),
    f("write_timestamp", "int64"),
    _state_batches(),
])

SHARE_UPDATE_VALUE = schema("ShareUpdateValue", "0", "0+", [
    f("snapshot_epoch", "int32"),
    f("leader_epoch", "int32"),
    f("start_offset", "int64"),   # -1: unchanged
    f("delivery_complete_count", "int32", "0+", tag=0, default=-1),
    _state_batches(),             # only the ranges this write changed
])

# record type -> (key schema, value schema)
SHARE_RECORD_TYPES = {
    SHARE_SNAPSHOT: ("ShareSnapshotKey", "ShareSnapshotValue"),
    SHARE_UPDATE: ("ShareUpdateKey", "ShareUpdateValue"),
}
