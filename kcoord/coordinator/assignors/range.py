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

from .spec import Assignment, AssignorError, GroupSpec, MemberSpec, TopicId, without_gc

NAME = "range"


def _sort_key(item: tuple[str, MemberSpec]):
    member_id, spec = item
    if spec.instance_id is not None:
        return (0, spec.instance_id, "")
    return (1, "", member_id)


@without_gc
def assign(spec: GroupSpec, partitions: Mapping[TopicId, int]) -> Mapping[str, Assignment]:
    if not spec.members:
        return {}
    if any(ms.instance_id is not None for ms in spec.members.values()):
        ordered = [m for m, _ in sorted(spec.members.items(), key=_sort_key)]
    else:  # no static member: the same order, by member id alone
        ordered = sorted(spec.members)
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
    if spec.homogeneous:
        _assign_shared_ranges(ordered, sorted(subscribers), partitions, result)
        return result
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


def _assign_shared_ranges(ordered: list[str], topics: list[TopicId], partitions: Mapping[TopicId, int],
                          result: dict[str, dict[TopicId, frozenset[int]]]) -> None:
    """Every member subscribes to every topic: topics of the same size get the same
    ranges, so each range is built once and shared (frozensets: read-only)."""
    by_size: dict[int, list[TopicId]] = {}
    for t in topics:
        by_size.setdefault(partitions[t], []).append(t)
    if len(by_size) == 1:  # one size: each member's dict in one step, keys in topic order
        n = partitions[topics[0]]
        # from a dict, fromkeys sizes the table once and reuses the stored hashes
        keys = dict.fromkeys(topics)
        for member_id, part in _ranges(n, len(ordered), ordered):
            result[member_id] = dict.fromkeys(keys, part)
        return
    ranges = {n: _ranges(n, len(ordered), ordered) for n in by_size}
    for t in topics:
        for member_id, part in ranges[partitions[t]]:
            result[member_id][t] = part


def _ranges(n: int, subscribers: int, ordered: list[str]) -> list[tuple[str, frozenset[int]]]:
    """(member, its range) for the members that get any of n partitions."""
    quota, extra = divmod(n, subscribers)
    out: list[tuple[str, frozenset[int]]] = []
    start = 0
    for i in range(subscribers if quota else extra):
        size = quota + 1 if i < extra else quota
        out.append((ordered[i], frozenset(range(start, start + size))))
        start += size
    return out
