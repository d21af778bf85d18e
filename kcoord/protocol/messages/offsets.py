"""Offset APIs: OffsetCommit (8), OffsetFetch (9), TxnOffsetCommit (28),
OffsetDelete (47).

Field versions, nullability and defaults follow Kafka's message schemas
(clients/src/main/resources/common/message/*.json).
"""
from ..schema import api, f

OFFSET_COMMIT = api(8, "OffsetCommit", "0-9", "8+", request=[
    f("group_id", "string"),
    # the classic generation, or the member epoch of a KIP-848 member (v9)
    f("generation_id_or_member_epoch", "int32", "1+", default=-1),
    f("member_id", "string", "1+"),
    f("group_instance_id", "string", "7+", null="7+", default=None),
    f("retention_time_ms", "int64", "2-4", default=-1),
    f("topics", "[]", fields=[
        f("name", "string"),
        f("partitions", "[]", fields=[
            f("partition_index", "int32"),
            f("committed_offset", "int64"),
            f("committed_leader_epoch", "int32", "6+", default=-1),
            f("commit_timestamp", "int64", "1", default=-1),
            f("committed_metadata", "string", null="0+"),
        ]),
    ]),
], response=[
    f("throttle_time_ms", "int32", "3+"),
    f("topics", "[]", fields=[
        f("name", "string"),
        f("partitions", "[]", fields=[
            f("partition_index", "int32"),
            f("error_code", "int16"),
        ]),
    ]),
])

OFFSET_FETCH = api(9, "OffsetFetch", "0-9", "6+", request=[
    f("group_id", "string", "0-7"),
    # null (v2-7) fetches every topic of the group
    f("topics", "[]", "0-7", null="2-7", fields=[
        f("name", "string", "0-7"),
        f("partition_indexes", "[]int32", "0-7"),
    ]),
    f("groups", "[]", "8+", fields=[
        f("group_id", "string", "8+"),
        f("member_id", "string", "9+", null="9+", default=None),
        f("member_epoch", "int32", "9+", default=-1),
        f("topics", "[]", "8+", null="8+", fields=[
            f("name", "string", "8+"),
            f("partition_indexes", "[]int32", "8+"),
        ]),
    ]),
    f("require_stable", "bool", "7+"),
], response=[
    f("throttle_time_ms", "int32", "3+"),
    f("topics", "[]", "0-7", fields=[
        f("name", "string", "0-7"),
        f("partitions", "[]", "0-7", fields=[
            f("partition_index", "int32", "0-7"),
            f("committed_offset", "int64", "0-7"),
            f("committed_leader_epoch", "int32", "5-7", default=-1),
            f("metadata", "string", "0-7", null="0-7"),
            f("error_code", "int16", "0-7"),
        ]),
    ]),
    f("error_code", "int16", "2-7"),
    f("groups", "[]", "8+", fields=[
        f("group_id", "string", "8+"),
        f("topics", "[]", "8+", fields=[
            f("name", "string", "8+"),
            f("partitions", "[]", "8+", fields=[
                f("partition_index", "int32", "8+"),
                f("committed_offset", "int64", "8+"),
                f("committed_leader_epoch", "int32", "8+", default=-1),
                f("metadata", "string", "8+", null="8+"),
                f("error_code", "int16", "8+"),
            ]),
        ]),
        f("error_code", "int16", "8+"),
    ]),
])

TXN_OFFSET_COMMIT = api(28, "TxnOffsetCommit", "0-4", "3+", request=[
    f("transactional_id", "string"),
    f("group_id", "string"),
    f("producer_id", "int64"),
    f("producer_epoch", "int16"),
    f("generation_id", "int32", "3+", default=-1),
    f("member_id", "string", "3+"),
    f("group_instance_id", "string", "3+", null="3+", default=None),
    f("topics", "[]", fields=[
        f("name", "string"),
        f("partitions", "[]", fields=[
            f("partition_index", "int32"),
            f("committed_offset", "int64"),
            f("committed_leader_epoch", "int32", "2+", default=-1),
            f("committed_metadata", "string", null="0+"),
        ]),
    ]),
], response=[
    f("throttle_time_ms", "int32"),
    f("topics", "[]", fields=[
        f("name", "string"),
        f("partitions", "[]", fields=[
            f("partition_index", "int32"),
            f("error_code", "int16"),
        ]),
    ]),
])

OFFSET_DELETE = api(47, "OffsetDelete", "0", "none", request=[
    f("group_id", "string"),
    f("topics", "[]", fields=[
        f("name", "string"),
        f("partitions", "[]", fields=[
            f("partition_index", "int32"),
        ]),
    ]),
], response=[
    f("error_code", "int16"),
    f("throttle_time_ms", "int32"),
    f("topics", "[]", fields=[
        f("name", "string"),
        f("partitions", "[]", fields=[
            f("partition_index", "int32"),
            f("error_code", "int16"),
        ]),
    ]),
])
