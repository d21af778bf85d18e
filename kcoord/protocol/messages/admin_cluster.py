"""Cluster and partition admin APIs: DeleteRecords (21) v0-2,
DescribeLogDirs (35) v1-4, ElectLeaders (43) v0-2, ListPartitionReassignments
(46) v0, DescribeClientQuotas (48) v0-1, DescribeCluster (60) v0-2,
DescribeTopicPartitions (75) v0.

DeleteRecords is flexible from v2; DescribeLogDirs from v2 (v3 adds a
top-level error code, v4 the dir's total and usable bytes); ElectLeaders
from v2 (v1 adds the election type and a top-level error code);
DescribeClientQuotas from v1; DescribeCluster and DescribeTopicPartitions
always (DescribeCluster v1 adds the endpoint type, v2 fenced brokers).
"""
from ..schema import api, f

DELETE_RECORDS = api(21, "DeleteRecords", "0-2", "2+", request=[
    f("topics", "[]", fields=[
        f("name", "string"),
        f("partitions", "[]", fields=[
            f("partition_index", "int32"),
            f("offset", "int64"),
        ]),
    ]),
    f("timeout_ms", "int32"),
], response=[
    f("throttle_time_ms", "int32"),
    f("topics", "[]", fields=[
        f("name", "string"),
        f("partitions", "[]", fields=[
            f("partition_index", "int32"),
            f("low_watermark", "int64"),
            f("error_code", "int16"),
        ]),
    ]),
])

DESCRIBE_LOG_DIRS = api(35, "DescribeLogDirs", "1-4", "2+", request=[
    f("topics", "[]", null="0+", fields=[
        f("topic", "string"),
        f("partitions", "[]int32"),
    ]),
], response=[
    f("throttle_time_ms", "int32"),
    f("error_code", "int16", "3+"),
    f("results", "[]", fields=[
        f("error_code", "int16"),
        f("log_dir", "string"),
        f("topics", "[]", fields=[
            f("name", "string"),
            f("partitions", "[]", fields=[
                f("partition_index", "int32"),
                f("partition_size", "int64"),
                f("offset_lag", "int64"),
                f("is_future_key", "bool"),
            ]),
        ]),
        f("total_bytes", "int64", "4+", default=-1),
        f("usable_bytes", "int64", "4+", default=-1),
    ]),
])

ELECT_LEADERS = api(43, "ElectLeaders", "0-2", "2+", request=[
    f("election_type", "int8", "1+"),
    f("topic_partitions", "[]", null="0+", fields=[
        f("topic", "string"),
        f("partitions", "[]int32"),
    ]),
    f("timeout_ms", "int32", default=60000),
], response=[
    f("throttle_time_ms", "int32"),
    f("error_code", "int16", "1+"),
    f("replica_election_results", "[]", fields=[
        f("topic", "string"),
        f("partition_result", "[]", fields=[
            f("partition_id", "int32"),
            f("error_code", "int16"),
            f("error_message", "string", null="0+", default=None),
        ]),
    ]),
])

LIST_PARTITION_REASSIGNMENTS = api(46, "ListPartitionReassignments", "0", "0+", request=[
    f("timeout_ms", "int32", default=60000),
    f("topics", "[]", null="0+", default=None, fields=[
        f("name", "string"),
        f("partition_indexes", "[]int32"),
    ]),
], response=[
    f("throttle_time_ms", "int32"),
    f("error_code", "int16"),
    f("error_message", "string", null="0+", default=None),
    f("topics", "[]", fields=[
        f("name", "string"),
        f("partitions", "[]", fields=[
            f("partition_index", "int32"),
            f("replicas", "[]int32"),
            f("adding_replicas", "[]int32"),
            f("removing_replicas", "[]int32"),
        ]),
    ]),
])

DESCRIBE_CLIENT_QUOTAS = api(48, "DescribeClientQuotas", "0-1", "1+", request=[
    f("components", "[]", fields=[
        f("entity_type", "string"),
        f("match_type", "int8"),
        f("match", "string", null="0+"),
    ]),
    f("strict", "bool"),
], response=[
    f("throttle_time_ms", "int32"),
    f("error_code", "int16"),
    f("error_message", "string", null="0+", default=None),
    f("entries", "[]", null="0+", fields=[
        f("entity", "[]", fields=[
            f("entity_type", "string"),
            f("entity_name", "string", null="0+"),
        ]),
        f("values", "[]", fields=[
            f("key", "string"),
            f("value", "float64"),
        ]),
    ]),
])

DESCRIBE_CLUSTER = api(60, "DescribeCluster", "0-2", "0+", request=[
    f("include_cluster_authorized_operations", "bool"),
    f("endpoint_type", "int8", "1+", default=1),
    f("include_fenced_brokers", "bool", "2+"),
], response=[
    f("throttle_time_ms", "int32"),
    f("error_code", "int16"),
    f("error_message", "string", null="0+", default=None),
    f("endpoint_type", "int8", "1+", default=1),
    f("cluster_id", "string"),
    f("controller_id", "int32", default=-1),
    f("brokers", "[]", fields=[
        f("broker_id", "int32"),
        f("host", "string"),
        f("port", "int32"),
        f("rack", "string", null="0+", default=None),
        f("is_fenced", "bool", "2+"),
    ]),
    f("cluster_authorized_operations", "int32", default=-(2**31)),
])

_CURSOR = [
    f("topic_name", "string"),
    f("partition_index", "int32"),
]

DESCRIBE_TOPIC_PARTITIONS = api(75, "DescribeTopicPartitions", "0", "0+", request=[
    f("topics", "[]", fields=[
        f("name", "string"),
    ]),
    f("response_partition_limit", "int32", default=2000),
    f("cursor", "{}", null="0+", default=None, fields=_CURSOR),
], response=[
    f("throttle_time_ms", "int32"),
    f("topics", "[]", fields=[
        f("error_code", "int16"),
        f("name", "string", null="0+"),
        f("topic_id", "uuid"),
        f("is_internal", "bool"),
        f("partitions", "[]", fields=[
            f("error_code", "int16"),
            f("partition_index", "int32"),
            f("leader_id", "int32"),
            f("leader_epoch", "int32", default=-1),
            f("replica_nodes", "[]int32"),
            f("isr_nodes", "[]int32"),
            f("eligible_leader_replicas", "[]int32", null="0+", default=None),
            f("last_known_elr", "[]int32", null="0+", default=None),
            f("offline_replicas", "[]int32"),
        ]),
        f("topic_authorized_operations", "int32", default=-(2**31)),
    ]),
    f("next_cursor", "{}", null="0+", default=None, fields=_CURSOR),
])
