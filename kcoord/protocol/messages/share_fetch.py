"""Share partitions on the leader: ShareFetch (78) and ShareAcknowledge (79), v1-2.

Both are flexible in every version.  v0 (Kafka 4.0's early access, with
PartitionMaxBytes and no MaxRecords) was removed in 4.1 and is not served.
v2 (Kafka 4.2) adds ShareAcquireMode (ShareFetch) and IsRenewAck, and the
acquisition lock timeout in ShareAcknowledge's response.  CurrentLeader is a
plain struct here, not a tagged field as in Fetch.
"""
from ..schema import api, f

ACK_BATCH = [
    f("first_offset", "int64"),
    f("last_offset", "int64"),
    f("acknowledge_types", "[]int8"),
]

CURRENT_LEADER = [
    f("leader_id", "int32", default=-1),
    f("leader_epoch", "int32", default=-1),
]

# the request's Topics: the partitions named and their acknowledgements
ACK_TOPICS = [
    f("topic_id", "uuid"),
    f("partitions", "[]", fields=[
        f("partition_index", "int32"),
        f("acknowledgement_batches", "[]", fields=ACK_BATCH),
    ]),
]

PARTITION_HEAD = [   # each response partition's first fields
    f("partition_index", "int32"),
    f("error_code", "int16"),
    f("error_message", "string", null="0+", default=None),
]


def response_head(lock_versions: str) -> list:
    """Both responses' top-level fields before Responses."""
    return [
        f("throttle_time_ms", "int32"),
        f("error_code", "int16"),
        f("error_message", "string", null="0+", default=None),
        f("acquisition_lock_timeout_ms", "int32", lock_versions),
    ]


NODE_ENDPOINTS = [
    f("node_id", "int32"),
    f("host", "string"),
    f("port", "int32"),
    f("rack", "string", null="0+", default=None),
]

SHARE_FETCH = api(78, "ShareFetch", "1-2", "0+", request=[
    f("group_id", "string", null="0+", default=None),
    f("member_id", "string", null="0+", default=None),
    f("share_session_epoch", "int32"),
    f("max_wait_ms", "int32"),
    f("min_bytes", "int32"),
    f("max_bytes", "int32", default=0x7FFFFFFF),
    f("max_records", "int32", "1+"),
    f("batch_size", "int32", "1+"),
    f("share_acquire_mode", "int8", "2+"),
    f("is_renew_ack", "bool", "2+"),
    f("topics", "[]", fields=ACK_TOPICS),
    f("forgotten_topics_data", "[]", fields=[
        f("topic_id", "uuid"),
        f("partitions", "[]int32"),
    ]),
], response=[
    *response_head("1+"),
    f("responses", "[]", fields=[
        f("topic_id", "uuid"),
        f("partitions", "[]", fields=[
            *PARTITION_HEAD,
            f("acknowledge_error_code", "int16"),
            f("acknowledge_error_message", "string", null="0+", default=None),
            f("current_leader", "{}", fields=CURRENT_LEADER),
            f("records", "records"),
            f("acquired_records", "[]", fields=[
                f("first_offset", "int64"),
                f("last_offset", "int64"),
                f("delivery_count", "int16"),
            ]),
        ]),
    ]),
    f("node_endpoints", "[]", fields=NODE_ENDPOINTS),
])

SHARE_ACKNOWLEDGE = api(79, "ShareAcknowledge", "1-2", "0+", request=[
    f("group_id", "string", null="0+", default=None),
    f("member_id", "string", null="0+", default=None),
    f("share_session_epoch", "int32"),
    f("is_renew_ack", "bool", "2+"),
    f("topics", "[]", fields=ACK_TOPICS),
], response=[
    *response_head("2+"),
    f("responses", "[]", fields=[
        f("topic_id", "uuid"),
        f("partitions", "[]", fields=[
            *PARTITION_HEAD,
            f("current_leader", "{}", fields=CURRENT_LEADER),
        ]),
    ]),
    f("node_endpoints", "[]", fields=NODE_ENDPOINTS),
])
