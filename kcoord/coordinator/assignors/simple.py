"""Kafka's `simple` share-group assignor (SimpleAssignor with its homogeneous
and heterogeneous builders, Kafka 4.2; SHARE_GROUPS_REFERENCE section 2.9).

Share groups only: a partition may go to several members.  With T assignable
partitions and M members, each partition is held by `ceil(M / T)` members
(`sharing`) and member i (0-based, in the group spec's order) should hold
`ceil(p * (i + 1)) - ceil(p * i)` partitions, p = sharing * T / M.  The steps
keep what members hold where they can: drop unsubscribed topics, trim
over-filled members, trim over-shared partitions, then fill the under-filled
members round-robin over the partitions that lack holders.  Heterogeneous
subscriptions run the same steps per topic over that topic's subscribers.

Where Kafka iterates a hash set of small integers (member indexes, partition
numbers) the order is ascending, and so it is here; where it iterates a hash
set of topic-partitions its order is the hash's, here topic id then partition.
A member whose assignment did not change keeps the very same object.
"""
from __future__ import annotations

import math
from typing import AbstractSet, Any, Callable, Mapping

from .spec import Assignment, AssignorError, GroupSpec, TopicId

NAME = "simple"

Assignable = Callable[[TopicId, int], bool]


def assign(spec: GroupSpec, partitions: Mapping[TopicId, int],
           assignable: Assignable | None = None) -> dict[str, Assignment]:
    """member id -> target assignment.  `partitions`: topic id -> partition
    count of the subscribed topics; `assignable(topic, partition)`: may it be
    assigned (a share group: is its share state initialized)."""
    if not spec.members:
        return {}
    ok = assignable or (lambda _t, _p: True)
    if spec.homogeneous:
        return _Homogeneous(spec, partitions, ok).build()
    return _Heterogeneous(spec, partitions, ok).build()


def _target_partitions(topic: TopicId, partitions: Mapping[TopicId, int],
                       assignable: Assignable) -> list[tuple[TopicId, int]]:
    count = partitions.get(topic)
    if count is None:
        raise AssignorError(f"Members are subscribed to topic {topic.hex()} which doesn't "
                            f"exist in the topic metadata.")
    return [(topic, p) for p in range(count) if assignable(topic, p)]


def _desired_counts(sharing: int, targets: int, members: int) -> list[int]:
    precise = sharing * targets / members  # a double, as Kafka computes it
    return [math.ceil(precise * (i + 1)) - math.ceil(precise * i) for i in range(members)]


def _copy(assignment: Assignment) -> dict[TopicId, set[int]]:
    return {t: set(p) for t, p in assignment.items()}


def _fill(by_partition: dict, order, unfilled: list[int], sharing: int, held: Callable[[int], int],
          desired: Callable[[int], int], give: Callable[[int, Any], None]) -> None:
    """Kafka's assignRemainingPartitions: one pass over the partitions, cycling
    over the under-filled members (ascending) for each partition that has
    fewer than `sharing` holders.  As in Kafka, a member given the partition
    is not added to its holders, so a second cycle may pick it again (a
    no-op but counted)."""
    pos = 0
    assigned_this_cycle = False
    for tp in order:
        holders = by_partition[tp]
        if len(holders) < sharing:
            to_make = sharing - len(holders)
            while to_make > 0:
                if pos >= len(unfilled):
                    if not assigned_this_cycle or not unfilled:
                        break
                    pos = 0
                    assigned_this_cycle = False
                i = unfilled[pos]
                pos += 1
                if i not in holders:
                    give(i, tp)
                    to_make -= 1
                    assigned_this_cycle = True
                    if held(i) >= desired(i):
                        pos -= 1
                        del unfilled[pos]
        if not unfilled:
            break


class _Builder:
    """What both builders share: the members in order, their current
    assignments, and the members' new ones, copied on first change."""

    def __init__(self, spec: GroupSpec) -> None:
        self.member_ids = list(spec.members)
        self.old = [spec.members[m].assignment for m in self.member_ids]
        self.new: dict[int, dict[TopicId, set[int]]] = {}

    def _new_of(self, i: int) -> dict[TopicId, set[int]]:
        new = self.new.get(i)
        if new is None:
            new = self.new[i] = _copy(self.old[i])
        return new


class _Homogeneous(_Builder):
    """SimpleHomogeneousAssignmentBuilder: every member subscribes to the same topics."""

    def __init__(self, spec: GroupSpec, partitions: Mapping[TopicId, int],
                 assignable: Assignable) -> None:
        super().__init__(spec)
        first = spec.members[self.member_ids[0]]
        self.subscribed: AbstractSet[TopicId] = first.subscribed_topic_ids
        self.targets = [tp for t in sorted(self.subscribed)
                        for tp in _target_partitions(t, partitions, assignable)]
        members, targets = len(self.member_ids), len(self.targets)
        self.sharing = 0 if targets == 0 else (members + targets - 1) // targets
        self.desired = _desired_counts(self.sharing, targets, members)
        self.by_partition: dict[tuple, set[int]] = {}
        self.by_member: dict[int, dict[tuple, None]] = {}  # an ordered set per member
        self.unfilled: set[int] = set()
        self.overfilled: set[int] = set()

    def build(self) -> dict[str, Assignment]:
        if not self.subscribed:
            return {}
        self._drop_unsubscribed()
        self._trim_overfilled()
        self._trim_overshared()
        for tp in self.targets:
            self.by_partition.setdefault(tp, set())
        unfilled = sorted(self.unfilled)
        by_member = self.by_member

        def give(i: int, tp: tuple) -> None:
            self._new_of(i).setdefault(tp[0], set()).add(tp[1])
            by_member.setdefault(i, {})[tp] = None

        _fill(self.by_partition, sorted(self.by_partition), unfilled, self.sharing,
              lambda i: len(by_member.get(i, ())), self.desired.__getitem__, give)
        return _result(self.member_ids, self.old, self.new)

    def _drop_unsubscribed(self) -> None:
        for i, old in enumerate(self.old):
            new = None
            held = 0
            desired = self.desired[i]
            for topic in sorted(old):
                if topic in self.subscribed:
                    for p in sorted(old[topic]):
                        tp = (topic, p)
                        held += 1
                        self.by_partition.setdefault(tp, set()).add(i)
                        self.by_member.setdefault(i, {})[tp] = None
                        if held >= desired and new is None:
                            new = _copy(old)
                else:
                    if new is None:
                        new = _copy(old)
                    del new[topic]
            if new is not None:
                self.new[i] = new
            if held < desired:
                self.unfilled.add(i)
            elif held > desired:
                self.overfilled.add(i)

    def _trim_overfilled(self) -> None:
        for i in sorted(self.overfilled):
            held = self.by_member[i]
            desired = self.desired[i]
            for tp in sorted(held):
                if len(held) <= desired:
                    break
                self.new[i][tp[0]].discard(tp[1])
                self.by_partition[tp].discard(i)
                del held[tp]

    def _trim_overshared(self) -> None:
        for tp in sorted(self.by_partition):
            holders = self.by_partition[tp]
            count = len(holders)
            if count <= self.sharing:
                continue
            for i in sorted(holders):
                parts = self._new_of(i).get(tp[0])
                if parts is not None and tp[1] in parts:
                    parts.discard(tp[1])
                    count -= 1
                    holders.discard(i)
                    self.by_member[i].pop(tp, None)
                    self.unfilled.add(i)
                if count <= self.sharing:
                    break


class _Heterogeneous(_Builder):
    """SimpleHeterogeneousAssignmentBuilder: the homogeneous steps per topic,
    over the members subscribed to it (the others' desired count is 0)."""

    def __init__(self, spec: GroupSpec, partitions: Mapping[TopicId, int],
                 assignable: Assignable) -> None:
        super().__init__(spec)
        self.subscribed: set[TopicId] = set()
        self.subscribers: dict[TopicId, list[int]] = {}
        for i, m in enumerate(self.member_ids):
            for t in spec.members[m].subscribed_topic_ids:
                self.subscribed.add(t)
                self.subscribers.setdefault(t, []).append(i)
        self.targets = {t: _target_partitions(t, partitions, assignable) for t in self.subscribed}

    def build(self) -> dict[str, Assignment]:
        if not self.subscribed:
            return {}
        for topic in sorted(self.subscribed):
            self._topic(topic, self.targets[topic], self.subscribers[topic])
        return _result(self.member_ids, self.old, self.new)

    def _topic(self, topic: TopicId, targets: list, subscribers: list[int]) -> None:
        n_targets, n_subscribers = len(targets), len(subscribers)
        sharing = 0 if n_targets == 0 else (n_subscribers + n_targets - 1) // n_targets
        desired = [0] * len(self.member_ids)
        for k, count in enumerate(_desired_counts(sharing, n_targets, n_subscribers)):
            desired[subscribers[k]] = count
        by_partition: dict[int, set[int]] = {}
        by_member: dict[int, set[int]] = {}
        # what members hold of the topic (every holder: the topic is subscribed)
        for i, old in enumerate(self.old):
            for p in old.get(topic, ()):
                by_partition.setdefault(p, set()).add(i)
                by_member.setdefault(i, set()).add(p)
        # trim over-filled members
        for i in sorted(by_member):
            held = by_member[i]
            for p in sorted(held):
                if len(held) <= desired[i]:
                    break
                by_partition[p].discard(i)
                held.discard(p)
                self._new_of(i)[topic].discard(p)
        # trim over-shared partitions
        for p in sorted(by_partition):
            holders = by_partition[p]
            count = len(holders)
            if count <= sharing:
                continue
            for i in sorted(holders):
                parts = self._new_of(i).get(topic)
                if parts is not None and p in parts:
                    parts.discard(p)
                    count -= 1
                    holders.discard(i)
                    by_member[i].discard(p)
                if count <= sharing:
                    break
        for _, p in targets:
            by_partition.setdefault(p, set())
        unfilled = sorted(i for i in subscribers if len(by_member.get(i, ())) < desired[i])

        def give(i: int, p: int) -> None:
            self._new_of(i).setdefault(topic, set()).add(p)
            by_member.setdefault(i, set()).add(p)

        _fill(by_partition, sorted(by_partition), unfilled, sharing,
              lambda i: len(by_member.get(i, ())), desired.__getitem__, give)


def _result(member_ids: list[str], old: list[Assignment],
            new: dict[int, dict[TopicId, set[int]]]) -> dict[str, Assignment]:
    out: dict[str, Assignment] = {}
    for i, member_id in enumerate(member_ids):
        changed = new.get(i)
        if changed is None:
            out[member_id] = old[i]
        else:
            out[member_id] = {t: frozenset(p) for t, p in changed.items() if p}
    return out
