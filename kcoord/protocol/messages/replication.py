"""Replication APIs: OffsetForLeaderEpoch (23) v0-4.

Followers ask their leader where an epoch ends (KIP-101/279); consumers ask
it too, to validate their position after a leader change (KIP-320).
Flexible from v4; v1 leader epoch in the answer; v2 current leader epoch
(fencing) and throttle time; v3 replica id (-1 consumer, -2 debug).
"""
from ..schema import api, f

OFFSET_FOR_LEADER_EPOCH = api(23, "OffsetForLeaderEpoch", "0-4", "4+", request=[
    f("replica_id", "int32", "3+", default=-2),
    f("topics", "[]", fields=[
        f("topic", "string"),
        f("partitions", "[]", fields=[
            f("partition", "int32"),
            f("current_leader_epoch", "int32", "2+", default=-1),
            f("leader_epoch", "int32"),
        ]),
    ]),
], response=[
    f("throttle_time_ms", "int32", "2+"),
    f("topics", "[]", fields=[
        f("topic", "string"),
        f("partitions", "[]", fields=[
            f("error_code", "int16"),
            f("partition", "int32"),
            f("leader_epoch", "int32", "1+", default=-1),
            f("end_offset", "int64", default=-1),
        ]),
    ]),
])
