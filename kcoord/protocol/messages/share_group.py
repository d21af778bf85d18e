"""KIP-932 share-group APIs of the group coordinator: ShareGroupHeartbeat (76),
ShareGroupDescribe (77) and the share-group offset APIs (90, 91, 92), flexible
from version 0.

Written from SHARE_GROUPS_REFERENCE section 1.2 (Kafka 4.2).  Version 0 of 76
and 77 was Kafka 4.0's early-access format and is gone from 4.1 on: only v1
is served, the version librdkafka 2.15+/2.16 and the Java client send.
"""
from ..schema import api, f

_TOPIC_PARTITIONS = [
    f("topic_id", "uuid"),
    f("partitions", "[]int32"),
]

SHARE_GROUP_HEARTBEAT = api(76, "ShareGroupHeartbeat", "1", "0+", request=[
    f("group_id", "string"),
    f("member_id", "string"),
    # 0 joins or rejoins, -1 leaves
    f("member_epoch", "int32"),
    # null when unchanged since the last heartbeat
    f("rack_id", "string", null="0+", default=None),
    f("subscribed_topic_names", "[]string", null="0+", default=None),
], response=[
    f("throttle_time_ms", "int32"),
    f("error_code", "int16"),
    f("error_message", "string", null="0+", default=None),
    f("member_id", "string", null="0+", default=None),
    f("member_epoch", "int32"),
    f("heartbeat_interval_ms", "int32"),
    # null: the assignment did not change
    f("assignment", "{}", null="0+", default=None, fields=[
        f("topic_partitions", "[]", fields=_TOPIC_PARTITIONS),
    ]),
])

SHARE_GROUP_DESCRIBE = api(77, "ShareGroupDescribe", "1", "0+", request=[
    f("group_ids", "[]string"),
    f("include_authorized_operations", "bool"),
], response=[
    f("throttle_time_ms", "int32"),
    f("groups", "[]", fields=[
        f("error_code", "int16"),
        f("error_message", "string", null="0+", default=None),
        f("group_id", "string"),
        f("group_state", "string"),
        f("group_epoch", "int32"),
        f("assignment_epoch", "int32"),
        f("assignor_name", "string"),
        f("members", "[]", fields=[
            f("member_id", "string"),
            f("rack_id", "string", null="0+", default=None),
            f("member_epoch", "int32"),
            f("client_id", "string"),
            f("client_host", "string"),
            f("subscribed_topic_names", "[]string"),
            f("assignment", "{}", fields=[
                f("topic_partitions", "[]", fields=[
                    f("topic_id", "uuid"),
                    f("topic_name", "string"),
                    f("partitions", "[]int32"),
                ]),
            ]),
        ]),
        f("authorized_operations", "int32", default=-2147483648),
    ]),
])

DESCRIBE_SHARE_GROUP_OFFSETS = api(90, "DescribeShareGroupOffsets", "0-1", "0+", request=[
    f("groups", "[]", fields=[
        f("group_id", "string"),
        # null: every initialized share partition of the group
        f("topics", "[]", null="0+", fields=[
            f("topic_name", "string"),
            f("partitions", "[]int32"),
        ]),
    ]),
], response=[
    f("throttle_time_ms", "int32"),
    f("groups", "[]", fields=[
        f("group_id", "string"),
        f("topics", "[]", fields=[
            f("topic_name", "string"),
            f("topic_id", "uuid"),
            f("partitions", "[]", fields=[
                f("partition_index", "int32"),
                f("start_offset", "int64"),
                f("leader_epoch", "int32"),
                f("lag", "int64", "1+", default=-1),  # KIP-1226
                f("error_code", "int16"),
                f("error_message", "string", null="0+", default=None),
            ]),
        ]),
        f("error_code", "int16"),
        f("error_message", "string", null="0+", default=None),
    ]),
])

ALTER_SHARE_GROUP_OFFSETS = api(91, "AlterShareGroupOffsets", "0", "0+", request=[
    f("group_id", "string"),
    f("topics", "[]", fields=[
        f("topic_name", "string"),
        f("partitions", "[]", fields=[
            f("partition_index", "int32"),
            f("start_offset", "int64"),
        ]),
    ]),
], response=[
    f("throttle_time_ms", "int32"),
    f("error_code", "int16"),
    f("error_message", "string", null="0+", default=None),
    f("responses", "[]", fields=[
        f("topic_name", "string"),
        f("topic_id", "uuid"),
        f("partitions", "[]", fields=[
            f("partition_index", "int32"),
            f("error_code", "int16"),
            f("error_message", "string", null="0+", default=None),
        ]),
    ]),
])

DELETE_SHARE_GROUP_OFFSETS = api(92, "DeleteShareGroupOffsets", "0", "0+", request=[
    f("group_id", "string"),
    f("topics", "[]", fields=[
        f("topic_name", "string"),
    ]),
], response=[
    f("throttle_time_ms", "int32"),
    f("error_code", "int16"),
    f("error_message", "string", null="0+", default=None),
    f("responses", "[]", fields=[
        f("topic_name", "string"),
        f("topic_id", "uuid"),
        f("error_code", "int16"),
        f("error_message", "string", null="0+", default=None),
    ]),
])
