"""Metadata (key 3), v0-12, flexible from v9.

v1 makes the request's topic list nullable (null = all topics) and adds the
broker rack, controller id and is_internal; v2 cluster_id; v3 throttle time;
v4 allow_auto_topic_creation; v5 offline replicas; v7 leader epoch; v8
authorized operations (cluster ones dropped again after v10); v10 topic ids;
v12 lets the response's topic name be null (topic queried by id).
"""
from ..schema import api, f

METADATA = api(3, "Metadata", "0-12", "9+", request=[
    f("topics", "[]", null="1+", fields=[
        f("topic_id", "uuid", "10+"),
        f("name", "string", null="10+"),
    ]),
    f("allow_auto_topic_creation", "bool", "4+", default=True),
    f("include_cluster_authorized_operations", "bool", "8-10"),
    f("include_topic_authorized_operations", "bool", "8+"),
], response=[
    f("throttle_time_ms", "int32", "3+"),
    f("brokers", "[]", fields=[
        f("node_id", "int32"),
        f("host", "string"),
        f("port", "int32"),
        f("rack", "string", "1+", null="1+", default=None),
    ]),
    f("cluster_id", "string", "2+", null="2+", default=None),
    f("controller_id", "int32", "1+", default=-1),
    f("topics", "[]", fields=[
        f("error_code", "int16"),
        f("name", "string", null="12+"),
        f("topic_id", "uuid", "10+"),
        f("is_internal", "bool", "1+"),
        f("partitions", "[]", fields=[
            f("error_code", "int16"),
            f("partition_index", "int32"),
            f("leader_id", "int32"),
            f("leader_epoch", "int32", "7+", default=-1),
            f("replica_nodes", "[]int32"),
            f("isr_nodes", "[]int32"),
            f("offline_replicas", "[]int32", "5+"),
        ]),
        f("topic_authorized_operations", "int32", "8+", default=-2147483648),
    ]),
    f("cluster_authorized_operations", "int32", "8-10", default=-2147483648),
])
