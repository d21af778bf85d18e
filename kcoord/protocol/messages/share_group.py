"""KIP-932 share-group membership APIs: ShareGroupHeartbeat (76) and
ShareGroupDescribe (77), flexible from version 0.

Written from SHARE_GROUPS_REFERENCE section 1.2 (Kafka 4.2).  Version 0 was
Kafka 4.0's early-access format and is gone from 4.1 on: only v1 is served,
the version librdkafka 2.15+/2.16 and the Java client send.
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
