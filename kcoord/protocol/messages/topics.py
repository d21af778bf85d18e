"""Topic administration: CreateTopics (19) v2-7, DeleteTopics (20) v1-6,
CreatePartitions (37) v0-3.

CreateTopics: flexible from v5, which also returns the created topic's
configs, partition count and replication factor; v7 returns its topic id.
DeleteTopics: flexible from v4; v5 adds a per-topic error message; v6 names
topics by name or id (`topics` replaces `topic_names`).
CreatePartitions: flexible from v2.
"""
from ..schema import api, f

CREATE_TOPICS = api(19, "CreateTopics", "2-7", "5+", request=[
    f("topics", "[]", fields=[
        f("name", "string"),
        f("num_partitions", "int32"),
        f("replication_factor", "int16"),
        f("assignments", "[]", fields=[
            f("partition_index", "int32"),
            f("broker_ids", "[]int32"),
        ]),
        f("configs", "[]", fields=[
            f("name", "string"),
            f("value", "string", null="0+"),
        ]),
    ]),
    f("timeout_ms", "int32", default=60000),
    f("validate_only", "bool", "1+"),
], response=[
    f("throttle_time_ms", "int32", "2+"),
    f("topics", "[]", fields=[
        f("name", "string"),
        f("topic_id", "uuid", "7+"),
        f("error_code", "int16"),
        f("error_message", "string", "1+", null="0+"),
        f("topic_config_error_code", "int16", "5+", tag=0),
        f("num_partitions", "int32", "5+", default=-1),
        f("replication_factor", "int16", "5+", default=-1),
        f("configs", "[]", "5+", null="5+", fields=[
            f("name", "string", "5+"),
            f("value", "string", "5+", null="5+"),
            f("read_only", "bool", "5+"),
            f("config_source", "int8", "5+", default=-1),
            f("is_sensitive", "bool", "5+"),
        ]),
    ]),
])

DELETE_TOPICS = api(20, "DeleteTopics", "1-6", "4+", request=[
    f("topics", "[]", "6+", fields=[
        f("name", "string", "6+", null="6+", default=None),
        f("topic_id", "uuid", "6+"),
    ]),
    f("topic_names", "[]string", "0-5"),
    f("timeout_ms", "int32"),
], response=[
    f("throttle_time_ms", "int32", "1+"),
    f("responses", "[]", fields=[
        f("name", "string", null="6+"),
        f("topic_id", "uuid", "6+"),
        f("error_code", "int16"),
        f("error_message", "string", "5+", null="5+", default=None),
    ]),
])

CREATE_PARTITIONS = api(37, "CreatePartitions", "0-3", "2+", request=[
    f("topics", "[]", fields=[
        f("name", "string"),
        f("count", "int32"),
        f("assignments", "[]", null="0+", fields=[
            f("broker_ids", "[]int32"),
        ]),
    ]),
    f("timeout_ms", "int32"),
    f("validate_only", "bool"),
], response=[
    f("throttle_time_ms", "int32"),
    f("results", "[]", fields=[
        f("name", "string"),
        f("error_code", "int16"),
        f("error_message", "string", null="0+", default=None),
    ]),
])
