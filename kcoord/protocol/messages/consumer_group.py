"""KIP-848 consumer group APIs: ConsumerGroupHeartbeat (68) and
ConsumerGroupDescribe (69), both flexible from version 0.

Field versions, nullability and defaults follow Kafka's message schemas
(clients/src/main/resources/common/message/*.json, trunk: v1 of the
heartbeat adds SubscribedTopicRegex).
"""
from ..schema import api, f

CONSUMER_GROUP_HEARTBEAT = api(68, "ConsumerGroupHeartbeat", "0-1", "0+", request=[
    f("group_id", "string"),
    f("member_id", "string"),
    # 0 joins, -1 leaves, -2 leaves temporarily (a static member)
    f("member_epoch", "int32"),
    # the nullable fields below are null when unchanged since the last heartbeat
    f("instance_id", "string", null="0+", default=None),
    f("rack_id", "string", null="0+", default=None),
    f("rebalance_timeout_ms", "int32", default=-1),
    f("subscribed_topic_names", "[]string", null="0+", default=None),
    f("subscribed_topic_regex", "string", "1+", null="1+", default=None),
    f("server_assignor", "string", null="0+", default=None),
    f("topic_partitions", "[]", null="0+", default=None, fields=[
        f("topic_id", "uuid"),
        f("partitions", "[]int32"),
    ]),
], response=[
    f("throttle_time_ms", "int32"),
    f("error_code", "int16"),
    f("error_message", "string", null="0+", default=None),
    f("member_id", "string", null="0+", default=None),
    f("member_epoch", "int32"),
    f("heartbeat_interval_ms", "int32"),
    f("assignment", "{}", null="0+", default=None, fields=[
        f("topic_partitions", "[]", fields=[
            f("topic_id", "uuid"),
            f("partitions", "[]int32"),
        ]),
    ]),
])

# The Assignment struct of ConsumerGroupDescribeResponse (used twice per member).
_DESCRIBED_ASSIGNMENT = [
    f("topic_partitions", "[]", fields=[
        f("topic_id", "uuid"),
        f("topic_name", "string"),
        f("partitions", "[]int32"),
    ]),
]

CONSUMER_GROUP_DESCRIBE = api(69, "ConsumerGroupDescribe", "0", "0+", request=[
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
            f("instance_id", "string", null="0+", default=None),
            f("rack_id", "string", null="0+", default=None),
            f("member_epoch", "int32"),
            f("client_id", "string"),
            f("client_host", "string"),
            f("subscribed_topic_names", "[]string"),
            f("subscribed_topic_regex", "string", null="0+", default=None),
            f("assignment", "{}", fields=_DESCRIBED_ASSIGNMENT),
            f("target_assignment", "{}", fields=_DESCRIBED_ASSIGNMENT),
        ]),
        f("authorized_operations", "int32", default=-2147483648),
    ]),
])
