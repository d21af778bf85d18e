"""Classic group membership APIs: FindCoordinator (10), JoinGroup (11),
Heartbeat (12), LeaveGroup (13), SyncGroup (14).

Field versions, nullability and defaults follow Kafka's message schemas
(clients/src/main/resources/common/message/*.json).
"""
from ..schema import api, f

FIND_COORDINATOR = api(10, "FindCoordinator", "0-6", "3+", request=[
    f("key", "string", "0-3"),
    f("key_type", "int8", "1+"),                 # 0 group, 1 transaction, 2 share
    f("coordinator_keys", "[]string", "4+"),     # v4+: batched lookups (KIP-699)
], response=[
    f("throttle_time_ms", "int32", "1+"),
    f("error_code", "int16", "0-3"),
    f("error_message", "string", "1-3", null="1-3"),
    f("node_id", "int32", "0-3"),
    f("host", "string", "0-3"),
    f("port", "int32", "0-3"),
    f("coordinators", "[]", "4+", fields=[
        f("key", "string", "4+"),
        f("node_id", "int32", "4+"),
        f("host", "string", "4+"),
        f("port", "int32", "4+"),
        f("error_code", "int16", "4+"),
        f("error_message", "string", "4+", null="4+"),
    ]),
])

JOIN_GROUP = api(11, "JoinGroup", "0-9", "6+", request=[
    f("group_id", "string"),
    f("session_timeout_ms", "int32"),
    f("rebalance_timeout_ms", "int32", "1+", default=-1),
    f("member_id", "string"),
    f("group_instance_id", "string", "5+", null="5+", default=None),
    f("protocol_type", "string"),
    f("protocols", "[]", fields=[
        f("name", "string"),
        f("metadata", "bytes"),
    ]),
    f("reason", "string", "8+", null="8+", default=None),
], response=[
    f("throttle_time_ms", "int32", "2+"),
    f("error_code", "int16"),
    f("generation_id", "int32", default=-1),
    f("protocol_type", "string", "7+", null="7+", default=None),
    f("protocol_name", "string", null="7+"),
    f("leader", "string"),
    f("skip_assignment", "bool", "9+"),
    f("member_id", "string"),
    f("members", "[]", fields=[
        f("member_id", "string"),
        f("group_instance_id", "string", "5+", null="5+", default=None),
        f("metadata", "bytes"),
    ]),
])

HEARTBEAT = api(12, "Heartbeat", "0-4", "4+", request=[
    f("group_id", "string"),
    f("generation_id", "int32"),
    f("member_id", "string"),
    f("group_instance_id", "string", "3+", null="3+", default=None),
], response=[
    f("throttle_time_ms", "int32", "1+"),
    f("error_code", "int16"),
])

LEAVE_GROUP = api(13, "LeaveGroup", "0-5", "4+", request=[
    f("group_id", "string"),
    f("member_id", "string", "0-2"),
    f("members", "[]", "3+", fields=[
        f("member_id", "string", "3+"),
        f("group_instance_id", "string", "3+", null="3+", default=None),
        f("reason", "string", "5+", null="5+", default=None),
    ]),
], response=[
    f("throttle_time_ms", "int32", "1+"),
    f("error_code", "int16"),
    f("members", "[]", "3+", fields=[
        f("member_id", "string", "3+"),
        f("group_instance_id", "string", "3+", null="3+"),
        f("error_code", "int16", "3+"),
    ]),
])

SYNC_GROUP = api(14, "SyncGroup", "0-5", "4+", request=[
    f("group_id", "string"),
    f("generation_id", "int32"),
    f("member_id", "string"),
    f("group_instance_id", "string", "3+", null="3+", default=None),
    f("protocol_type", "string", "5+", null="5+", default=None),
    f("protocol_name", "string", "5+", null="5+", default=None),
    f("assignments", "[]", fields=[
        f("member_id", "string"),
        f("assignment", "bytes"),
    ]),
], response=[
    f("throttle_time_ms", "int32", "1+"),
    f("error_code", "int16"),
    f("protocol_type", "string", "5+", null="5+", default=None),
    f("protocol_name", "string", "5+", null="5+", default=None),
    f("assignment", "bytes"),
])
