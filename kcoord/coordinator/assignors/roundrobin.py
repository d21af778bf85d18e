"""The round-robin assignor: every subscribed partition, sorted (by topic
id, then partition), dealt to the sorted members in turn.

Members are ordered as the range assignor orders them (static members by
instance id first, then the others by member id).  A partition goes to the
next member in the cycle that subscribes to its topic, so heterogeneous
subscriptions work as Kafka's client-side RoundRobinAssignor does.
Deterministic and not sticky.
"""
from __future__ import annotations

from typing import Mapping

from .range import _sort_key
from .spec import Assignment, AssignorError, GroupSpec, TopicId

NAME = "roundrobin"


def assign(spec: GroupSpec, partitions: Mapping[TopicId, int]) -> dict[str, Assignment]:
    if not spec.members:
        return {}
    ordered = [(m, s.subscribed_topic_ids) for m, s in sorted(spec.members.items(), key=_sort_key)]
    topics = sorted(set().union(*(s for _, s in ordered)))
    for t in topics:
        if partitions.get(t, -1) < 0:
            raise AssignorError(f"member subscribed to topic {t.hex()} which has no metadata")
    result: dict[str, dict[TopicId, set[int]]] = {m: {} for m in spec.members}
    n, turn = len(ordered), 0
    for t in topics:
        for p in range(partitions[t]):
            for _ in range(n):  # the next member in the cycle that subscribes to t
                member, subscribed = ordered[turn % n]
                turn += 1
                if t in subscribed:
                    result[member].setdefault(t, set()).add(p)
                    break
    return {m: {t: frozenset(ps) for t, ps in a.items()} for m, a in result.items()}
