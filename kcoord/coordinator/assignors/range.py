"""The range assignor: contiguous partition ranges, co-partitioned across topics.

Members are ordered static members first (by instance id), then the others
(by member id).  On each topic, the i-th subscriber gets a contiguous range
of partitions/subscribers partitions, one more for the first
partitions%subscribers of them.  Members with identical subscriptions get
the same partition numbers of every topic, which is what joins across
co-partitioned topics need.  Deterministic and not sticky (Kafka's
RangeAssignor).
"""
from __future__ import annotations

from typing import Mapping

from .spec import Assignment, AssignorError, GroupSpec, MemberSpec, TopicId

NAME = "range"


def _sort_key(item: tuple[str, MemberSpec]):
    member_id, spec = item
    if spec.instance_id is not None:
        return (0, spec.instance_id, "")
    return (1, "", member_id)


def assign(spec: GroupSpec, partitions: Mapping[TopicId, int]) -> Mapping[str, Assignment]:
    if not spec.members:
        return {}
    ordered = [m for m, _ in sorted(spec.members.items(), key=_sort_key)]
    # topic -> its subscribers, in the sorted member order
    subscribers: dict[TopicId, list[str]] = {}
    if spec.homogeneous:  # every member subscribes to every topic: share one list
        for t in spec.members[ordered[0]].subscribed_topic_ids:
            if partitions.get(t, -1) < 0:
                raise AssignorError(f"member subscribed to topic {t.hex()} which has no metadata")
            subscribers[t] = ordered
    for member_id in (() if spec.homogeneous else ordered):
        for t in spec.members[member_id].subscribed_topic_ids:
            subs = subscribers.get(t)
            if subs is None:
                if partitions.get(t, -1) < 0:
                    raise AssignorError(f"member subscribed to topic {t.hex()} which has no metadata")
                subs = subscribers[t] = []
            subs.append(member_id)

    result: dict[str, dict[TopicId, frozenset[int]]] = {m: {} for m in spec.members}
    for t in sorted(subscribers):
        subs = subscribers[t]
        n = partitions[t]
        quota, extra = divmod(n, len(subs))
        # the i-th subscriber gets quota+1 partitions if i < extra, else quota;
        # with quota 0 only the first `extra` subscribers get anything
        start = 0
        for i in range(len(subs) if quota else extra):
            size = quota + 1 if i < extra else quota
            result[subs[i]][t] = frozenset(range(start, start + size))
            start += size
    return result
