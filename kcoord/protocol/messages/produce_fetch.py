"""The record data plane: Produce (0) v3-11, Fetch (1) v4-16, ListOffsets (2) v1-9.

Produce: flexible from v9; v5 log start offset; v8 per-batch record errors
and an error message; v10 tagged current leader and node endpoints (KIP-951).
Fetch: flexible from v12; v5 log start offset; v7 fetch sessions (KIP-227)
and forgotten topics; v9 current leader epoch; v11 rack id and preferred read
replica; v12 last fetched epoch and the tagged diverging epoch, current leader
and snapshot id; v13 topic ids replace names; v15 the replica id moves into a
tagged replica state; v16 tagged node endpoints.
ListOffsets: flexible from v6; v2 isolation level; v4 leader epochs.
"""
from ..schema import api, f

PRODUCE = api(0, "Produce", "3-11", "9+", request=[
    f("transactional_id", "string", "3+", null="3+", default=None),
    f("acks", "int16"),
    f("timeout_ms", "int32"),
    f("topic_data", "[]", fields=[
        f("name", "string", "0-12"),
        f("partition_data", "[]", fields=[
            f("index", "int32"),
            f("records", "records", null="0+"),
        ]),
    ]),
], response=[
    f("responses", "[]", fields=[
        f("name", "string", "0-12"),
        f("partition_responses", "[]", fields=[
            f("index", "int32"),
            f("error_code", "int16"),
            f("base_offset", "int64"),
            f("log_append_time_ms", "int64", "2+", default=-1),
            f("log_start_offset", "int64", "5+", default=-1),
            f("record_errors", "[]", "8+", fields=[
                f("batch_index", "int32", "8+"),
                f("batch_index_error_message", "string", "8+", null="8+", default=None),
            ]),
            f("error_message", "string", "8+", null="8+", default=None),
            f("current_leader", "{}", "10+", tag=0, fields=[
                f("leader_id", "int32", "10+", default=-1),
                f("leader_epoch", "int32", "10+", default=-1),
            ]),
        ]),
    ]),
    f("throttle_time_ms", "int32", "1+"),
    f("node_endpoints", "[]", "10+", tag=0, fields=[
        f("node_id", "int32", "10+"),
        f("host", "string", "10+"),
        f("port", "int32", "10+"),
        f("rack", "string", "10+", null="10+", default=None),
    ]),
])

FETCH = api(1, "Fetch", "4-16", "12+", request=[
    f("cluster_id", "string", "12+", null="12+", tag=0, default=None),
    f("replica_id", "int32", "0-14", default=-1),
    f("replica_state", "{}", "15+", tag=1, fields=[
        f("replica_id", "int32", "15+", default=-1),
        f("replica_epoch", "int64", "15+", default=-1),
    ]),
    f("max_wait_ms", "int32"),
    f("min_bytes", "int32"),
    f("max_bytes", "int32", "3+", default=0x7FFFFFFF),
    f("isolation_level", "int8", "4+"),
    f("session_id", "int32", "7+"),
    f("session_epoch", "int32", "7+", default=-1),
    f("topics", "[]", fields=[
        f("topic", "string", "0-12"),
        f("topic_id", "uuid", "13+"),
        f("partitions", "[]", fields=[
            f("partition", "int32"),
            f("current_leader_epoch", "int32", "9+", default=-1),
            f("fetch_offset", "int64"),
            f("last_fetched_epoch", "int32", "12+", default=-1),
            f("log_start_offset", "int64", "5+", default=-1),
            f("partition_max_bytes", "int32"),
        ]),
    ]),
    f("forgotten_topics_data", "[]", "7+", fields=[
        f("topic", "string", "7-12"),
        f("topic_id", "uuid", "13+"),
        f("partitions", "[]int32", "7+"),
    ]),
    f("rack_id", "string", "11+"),
], response=[
    f("throttle_time_ms", "int32", "1+"),
    f("error_code", "int16", "7+"),
    f("session_id", "int32", "7+"),
    f("responses", "[]", fields=[
        f("topic", "string", "0-12"),
        f("topic_id", "uuid", "13+"),
        f("partitions", "[]", fields=[
            f("partition_index", "int32"),
            f("error_code", "int16"),
            f("high_watermark", "int64"),
            f("last_stable_offset", "int64", "4+", default=-1),
            f("log_start_offset", "int64", "5+", default=-1),
            f("diverging_epoch", "{}", "12+", tag=0, fields=[
                f("epoch", "int32", "12+", default=-1),
                f("end_offset", "int64", "12+", default=-1),
            ]),
            f("current_leader", "{}", "12+", tag=1, fields=[
                f("leader_id", "int32", "12+", default=-1),
                f("leader_epoch", "int32", "12+", default=-1),
            ]),
            f("snapshot_id", "{}", "12+", tag=2, fields=[
                f("end_offset", "int64", default=-1),
                f("epoch", "int32", default=-1),
            ]),
            f("aborted_transactions", "[]", "4+", null="4+", fields=[
                f("producer_id", "int64", "4+"),
                f("first_offset", "int64", "4+"),
            ]),
            f("preferred_read_replica", "int32", "11+", default=-1),
            f("records", "records", null="0+"),
        ]),
    ]),
    f("node_endpoints", "[]", "16+", tag=0, fields=[
        f("node_id", "int32", "16+"),
        f("host", "string", "16+"),
        f("port", "int32", "16+"),
        f("rack", "string", "16+", null="16+", default=None),
    ]),
])

LIST_OFFSETS = api(2, "ListOffsets", "1-9", "6+", request=[
    f("replica_id", "int32"),
    f("isolation_level", "int8", "2+"),
    f("topics", "[]", fields=[
        f("name", "string"),
        f("partitions", "[]", fields=[
            f("partition_index", "int32"),
            f("current_leader_epoch", "int32", "4+", default=-1),
            f("timestamp", "int64"),
        ]),
    ]),
], response=[
    f("throttle_time_ms", "int32", "2+"),
    f("topics", "[]", fields=[
        f("name", "string"),
        f("partitions", "[]", fields=[
            f("partition_index", "int32"),
            f("error_code", "int16"),
            f("timestamp", "int64", "1+", default=-1),
            f("offset", "int64", "1+", default=-1),
            f("leader_epoch", "int32", "4+", default=-1),
        ]),
    ]),
])
