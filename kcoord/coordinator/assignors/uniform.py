"""The uniform assignor: balanced first, sticky second.

Homogeneous groups (every member subscribes to the same topics) use a quota
pass: each member may hold total/members partitions, and total%members of
them one more; members keep what they already hold up to their quota and
the rest is dealt to members below quota.  The extra partitions of the
remainder go first to members that already hold more than the minimum, so
fewer partitions move than with a plain "first members iterated" rule.

Heterogeneous groups follow Kafka's UniformHeterogeneousAssignmentBuilder:
drop partitions a member no longer subscribes to, give every unassigned
partition to its least-loaded subscriber (topics ordered by partitions per
subscriber, descending; then subscriber count; then topic id), then move
partitions from the most to the least loaded subscribers of each topic, at
most 16 passes.  The result is balanced to within one partition whenever
the subscribers of each topic share identical subscriptions.

Both are pure functions over plain data and deterministic: the order of a
hash set never decides anything.
"""
from __future__ import annotations

import heapq
from typing import AbstractSet, Mapping, cast

from .spec import Assignment, AssignorError, GroupSpec, MemberSpec, TopicId, without_gc

NAME = "uniform"
MAX_BALANCE_PASSES = 16


@without_gc
def assign(spec: GroupSpec, partitions: Mapping[TopicId, int]) -> dict[str, Assignment]:
    if not spec.members:
        return {}
    if spec.homogeneous:
        return assign_homogeneous(spec, partitions)
    return HeterogeneousBuilder(spec, partitions).build()


# =================================================================== homogeneous
def assign_homogeneous(spec: GroupSpec, partitions: Mapping[TopicId, int]) -> dict[str, Assignment]:
    members = spec.members
    topics = next(iter(members.values())).subscribed_topic_ids
    if not topics:
        return {m: {} for m in members}
    ordered_topics = sorted(topics)
    counts: dict[TopicId, int] = {}
    total = 0
    for t in ordered_topics:
        n = partitions.get(t, -1)
        if n < 0:
            raise AssignorError(f"members subscribe to topic {t.hex()} which has no metadata")
        counts[t] = n
        total += n

    num_members = len(members)
    min_quota, extra = divmod(total, num_members)
    if all(not ms.assignment for ms in members.values()):
        return _deal_fresh(members, ordered_topics, counts, min_quota, extra)
    kept = _assign_valid_history(members, ordered_topics, counts, min_quota, extra)
    if kept is not None:
        return kept
    return _assign_with_history(members, topics, ordered_topics, counts, min_quota, extra)


def _deal_fresh(members: dict[str, MemberSpec], ordered_topics: list[TopicId],
                counts: dict[TopicId, int], min_quota: int, extra: int) -> dict[str, Assignment]:
    """No member holds anything (a full assignment): the same deal as the general
    path, member i taking the next quota_i partitions of the topics in id order,
    without its per-partition bookkeeping.  Topics of one size are cut at the same
    positions, so each (start, length) range is built once and shared between the
    members that get it (frozensets: results are read-only, as range's are)."""
    result: dict[str, Assignment] = {}
    shared: dict[int, frozenset[int]] = {}
    stride = min_quota + 2  # a share's length is at most min_quota + 1
    ti = 0
    t = ordered_topics[0]
    n = counts[t]
    pos = 0
    for mid, ms in members.items():
        room = min_quota + 1 if extra > 0 else min_quota
        extra -= 1
        if not room:
            result[mid] = ms.assignment  # unchanged: the very same object
            continue
        if pos + room <= n:  # the usual case: the member's share lies within one topic
            key = pos * stride + room
            part = shared.get(key)
            if part is None:
                part = shared[key] = frozenset(range(pos, pos + room))
            result[mid] = {t: part}
            pos += room
            continue
        grown: dict[TopicId, frozenset[int]] = {}
        while room:
            while pos >= n:
                ti += 1
                t = ordered_topics[ti]
                n = counts[t]
                pos = 0
            take = min(room, n - pos)
            key = pos * stride + take
            part = shared.get(key)
            if part is None:
                part = shared[key] = frozenset(range(pos, pos + take))
            grown[t] = part
            pos += take
            room -= take
        result[mid] = grown
    return result


def _assign_with_history(members: dict[str, MemberSpec], topics: AbstractSet[TopicId],
                         ordered_topics: list[TopicId], counts: dict[TopicId, int],
                         min_quota: int, extra: int) -> dict[str, Assignment]:

    # What each member may keep: its subscribed partitions, valid for the topic's size.
    held: dict[str, int] = {}
    clean: dict[str, bool] = {}  # the assignment is valid as it is (no copy needed)
    for mid, ms in members.items():
        a = ms.assignment
        ok = a.keys() <= topics
        size = 0
        for t, parts in a.items():
            if t in counts:
                if parts and max(parts) >= counts[t]:
                    ok = False
                    size += sum(1 for p in parts if p < counts[t])
                else:
                    size += len(parts)
        held[mid] = size
        clean[mid] = ok

    quota = dict(zip(members, _quotas([held[mid] for mid in members], min_quota, extra)))

    result: dict[str, Assignment] = {}
    owned: dict[TopicId, set[int]] = {t: set() for t in ordered_topics}
    unfilled: list[tuple[str, int]] = []
    for mid, ms in members.items():
        a = ms.assignment
        q = quota[mid]
        if clean[mid] and held[mid] <= q and _disjoint(owned, a):
            for t, parts in a.items():
                owned[t].update(parts)
            result[mid] = a
            if held[mid] < q:
                unfilled.append((mid, q - held[mid]))
            continue
        # Keep the lowest-numbered valid partitions up to the quota.
        new: dict[TopicId, set[int]] = {}
        room = q
        for t in sorted(a):
            if room <= 0:
                break
            count = counts.get(t)
            if count is None:
                continue
            mine = owned[t]
            keep = sorted(p for p in a[t] if p < count and p not in mine)[:room]
            if keep:
                ks = set(keep)
                new[t] = ks
                mine.update(ks)
                room -= len(ks)
        result[mid] = new
        if room > 0:
            unfilled.append((mid, room))

    _deal_free(members, result, owned, unfilled, ordered_topics, counts)
    return result


def _deal_free(members: dict[str, MemberSpec], result: dict[str, Assignment],
               owned: dict[TopicId, set[int]], unfilled: list[tuple[str, int]],
               ordered_topics: list[TopicId], counts: dict[TopicId, int]) -> None:
    """Deal the unassigned partitions, topic by topic in id order, to members below quota."""
    pool: list[tuple[TopicId, list[int]]] = []
    for t in ordered_topics:
        n = counts[t]
        mine = owned[t]
        if len(mine) == n:
            continue
        free = sorted(set(range(n)) - mine) if mine else list(range(n))
        if free:
            pool.append((t, free))
    ti = 0
    pos = 0
    for mid, room in unfilled:
        # the member's own assignment (read-only: copied before it grows; it may hold
        # frozensets) or `new` above, a dict of sets of this function's own
        current = result[mid]
        if current is members[mid].assignment:
            grown = {t: set(p) for t, p in current.items()}
            result[mid] = grown
        else:
            grown = cast("dict[TopicId, set[int]]", current)
        while room > 0 and ti < len(pool):
            t, free = pool[ti]
            take = free[pos:pos + room]
            pos += len(take)
            room -= len(take)
            cur = grown.get(t)
            if cur is None:
                grown[t] = set(take)
            else:
                cur.update(take)
            if pos >= len(free):
                ti += 1
                pos = 0
    if ti < len(pool):
        raise AssignorError("partitions were left unassigned")


def _assign_valid_history(members: dict[str, MemberSpec], ordered_topics: list[TopicId],
                          counts: dict[TopicId, int], min_quota: int,
                          extra: int) -> dict[str, Assignment] | None:
    """The usual case, every member holding only subscribed, in-range partitions and
    no partition held twice (what this assignor gave last time): the general path's
    result without its per-member copy-and-check.  None when that does not hold."""
    assignments = [ms.assignment for ms in members.values()]
    sizes = [0] * len(assignments)
    owned: dict[TopicId, set[int]] = {t: set() for t in ordered_topics}
    total = 0
    for i, a in enumerate(assignments):
        size = 0
        for t, parts in a.items():
            mine = owned.get(t)
            if mine is None:  # a topic the group no longer subscribes to
                return None
            mine.update(parts)
            size += len(parts)
        sizes[i] = size
        total += size
    union = 0
    for t, mine in owned.items():
        if mine and max(mine) >= counts[t]:  # a partition beyond the topic's size
            return None
        union += len(mine)
    if union != total:  # a partition held twice
        return None

    quotas = _quotas(sizes, min_quota, extra)

    result: dict[str, Assignment] = {}
    unfilled: list[tuple[str, int]] = []
    for i, mid in enumerate(members):
        a = assignments[i]
        size = sizes[i]
        room = quotas[i]
        if size <= room:
            result[mid] = a  # unchanged: the very same object
            if size < room:
                unfilled.append((mid, room - size))
            continue
        # Over quota: keep the lowest-numbered partitions, the rest go back to the pool.
        new: dict[TopicId, set[int]] = {}
        for t in sorted(a):
            ordered = sorted(a[t])
            if room > 0 and ordered:
                keep = ordered[:room]
                new[t] = set(keep)
                room -= len(keep)
                ordered = ordered[len(keep):]
            owned[t].difference_update(ordered)
        result[mid] = new
    _deal_free(members, result, owned, unfilled, ordered_topics, counts)
    return result


def _disjoint(owned: dict[TopicId, set[int]], a: Assignment) -> bool:
    for t, parts in a.items():
        mine = owned.get(t)
        if mine and not mine.isdisjoint(parts):
            return False
    return True


# ================================================================= heterogeneous
class _Balancer:
    """Kafka's MemberAssignmentBalancer: least- and most-loaded ranges over members
    sorted by (assigned count, member index)."""

    __slots__ = ("sizes", "sorted", "least_end", "least_count", "next_least",
                 "most_start", "most_end", "most_count", "next_most")

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes
        self.sorted: list[int] = []

    def initialize(self, members: list[int]) -> int:
        """`members` is in ascending index order, so a stable sort by size alone
        orders by (size, index)."""
        sizes = self.sizes
        self.sorted = sorted(members, key=sizes.__getitem__)
        s = self.sorted
        self.least_end = 0
        self.least_count = sizes[s[0]] - 1
        self.next_least = 0
        self.most_start = len(s)
        self.most_end = len(s)
        self.most_count = sizes[s[-1]] + 1
        self.next_most = len(s) - 1
        return sizes[s[-1]] - sizes[s[0]]

    def next_least_loaded(self) -> int:
        s, sizes = self.sorted, self.sizes
        if self.next_least >= self.least_end:
            self.least_count += 1
            while self.least_end < len(s) and sizes[s[self.least_end]] == self.least_count:
                self.least_end += 1
            self.next_least = 0
        member = s[self.next_least]
        self.next_least += 1
        return member

    def next_most_loaded(self) -> int:
        s, sizes = self.sorted, self.sizes
        if self.next_most < self.most_start:
            if self.most_end <= self.most_start and self.most_start > 0:
                self.most_count = sizes[s[self.most_start - 1]]
            else:
                self.most_count -= 1
            while self.most_start > 0 and sizes[s[self.most_start - 1]] == self.most_count:
                self.most_start -= 1
            self.next_most = self.most_end - 1
        if self.next_most < 0:
            return -1
        member = s[self.next_most]
        self.next_most -= 1
        return member

    def exclude_most_loaded(self) -> None:
        s = self.sorted
        i = self.next_most + 1
        s[i], s[self.most_end - 1] = s[self.most_end - 1], s[i]
        self.most_end -= 1

    def is_balanced(self) -> bool:
        return self.most_count - self.least_count <= 1


class HeterogeneousBuilder:
    def __init__(self, spec: GroupSpec, partitions: Mapping[TopicId, int]) -> None:
        self.spec = spec
        self.member_ids = list(spec.members)
        self.subscribers: dict[TopicId, list[int]] = {}
        self.counts: dict[TopicId, int] = {}
        # Members with identical subscriptions form a bucket; a topic's subscribers are
        # the members of the buckets that subscribe to it (lists shared between topics).
        buckets: dict[AbstractSet[TopicId], list[int]] = {}
        for i, mid in enumerate(self.member_ids):
            subscribed = spec.members[mid].subscribed_topic_ids
            bucket = buckets.get(subscribed)
            if bucket is None:
                bucket = buckets[subscribed] = []
            bucket.append(i)
        topic_buckets: dict[TopicId, list[int]] = {}
        bucket_lists = list(buckets.values())
        for b, subscribed in enumerate(buckets):
            for t in subscribed:
                n = partitions.get(t, -1)
                if n < 0:
                    raise AssignorError(f"members subscribe to topic {t.hex()} which has no metadata")
                self.counts[t] = n
                topic_buckets.setdefault(t, []).append(b)
        merged: dict[tuple, list[int]] = {}
        for t, bs in topic_buckets.items():
            key = tuple(bs)
            subs = merged.get(key)
            if subs is None:
                if len(bs) == 1:
                    subs = bucket_lists[bs[0]]
                else:
                    subs = sorted(i for b in bs for i in bucket_lists[b])
                merged[key] = subs
            self.subscribers[t] = subs
        self.sizes = [0] * len(self.member_ids)
        self.owners: dict[TopicId, list[int]] = {t: [-1] * n for t, n in self.counts.items()}
        self.target: list[Assignment] = []
        self.copied = [False] * len(self.member_ids)

    def _topic_key(self, t: TopicId):
        n = self.counts[t]
        subs = len(self.subscribers[t])
        # partitions per subscriber descending, subscriber count ascending, topic id ascending
        return (-n / subs, subs, t)

    def build(self) -> dict[str, Assignment]:
        if not self.counts:
            return {m: {} for m in self.member_ids}
        self._revoke()
        unassigned = {}
        for t in sorted(self.counts):
            owners = self.owners[t]
            free = [p for p, o in enumerate(owners) if o == -1]
            if free:
                unassigned[t] = free
        self._assign_remaining(unassigned)
        self._balance()
        return dict(zip(self.member_ids, self.target))

    def _revoke(self) -> None:
        for i, mid in enumerate(self.member_ids):
            ms = self.spec.members[mid]
            a = ms.assignment
            subscribed = ms.subscribed_topic_ids
            new = None
            for t in sorted(a):
                parts = a[t]
                if t in subscribed:
                    owners = self.owners[t]
                    n = len(owners)
                    bad = None
                    for p in parts:
                        if p < n and owners[p] == -1:
                            owners[p] = i
                            self.sizes[i] += 1
                        else:  # out of range, or already held by another member
                            bad = bad or []
                            bad.append(p)
                    if bad:
                        if new is None:
                            new = {k: set(v) for k, v in a.items()}
                        new[t].difference_update(bad)
                        if not new[t]:
                            del new[t]
                else:
                    if new is None:
                        new = {k: set(v) for k, v in a.items()}
                    del new[t]
            if new is None:
                self.target.append(a)
            else:
                self.target.append(new)
                self.copied[i] = True

    def _assign_remaining(self, unassigned: dict[TopicId, list[int]]) -> None:
        """Each partition to the least-loaded subscriber.  Kafka walks a least-loaded
        range over the subscribers sorted by (load, index); the same order comes out
        of a heap keyed (load, rank in that sort), and only the first k ranks can
        receive any of k partitions, so the heap holds at most k members."""
        sizes = self.sizes
        owners_of = self.owners
        for t in sorted(unassigned, key=self._topic_key):
            parts = unassigned[t]
            ranked = sorted(self.subscribers[t], key=sizes.__getitem__)[:len(parts)]
            heap = [(sizes[m], rank, m) for rank, m in enumerate(ranked)]  # sorted: a heap
            owners = owners_of[t]
            for p in parts:
                load, rank, m = heap[0]
                a = self._mutable(m)
                got = a.get(t)
                if got is None:
                    a[t] = {p}
                else:
                    got.add(p)
                owners[p] = m
                sizes[m] = load + 1
                heapq.heapreplace(heap, (load + 1, rank, m))

    def _balance(self) -> None:
        topics = [t for t, subs in self.subscribers.items() if len(subs) >= 2]
        if not topics:
            return
        topics.sort(key=self._topic_key)
        balancer = _Balancer(self.sizes)
        last = -1
        for _ in range(MAX_BALANCE_PASSES):
            for idx, t in enumerate(topics):
                if idx == last:
                    return
                moved = self._balance_topic(t, balancer)
                if moved > 0 or last == -1:
                    last = idx

    def _balance_topic(self, t: TopicId, balancer: _Balancer) -> int:
        moved = 0
        if balancer.initialize(self.subscribers[t]) <= 1:
            return 0
        owners = self.owners[t]
        order = sorted(range(len(owners)), key=owners.__getitem__)  # stable: ties by partition
        start: dict[int, int] = {}
        end: dict[int, int] = {}
        for i, p in enumerate(order):
            o = owners[p]
            start.setdefault(o, i)
            end[o] = i + 1
        while not balancer.is_balanced():
            most = -1
            while True:
                most = balancer.next_most_loaded()
                if most == -1:
                    break
                if most not in end or end[most] - start[most] <= 0:
                    balancer.exclude_most_loaded()
                    continue
                break
            if most == -1:
                break
            p = order[end[most] - 1]
            end[most] -= 1
            least = balancer.next_least_loaded()
            if balancer.is_balanced():
                break
            self._assign(t, p, least)
            moved += 1
        return moved

    def _mutable(self, i: int) -> dict[TopicId, set[int]]:
        if not self.copied[i]:
            self.target[i] = {k: set(v) for k, v in self.target[i].items()}
            self.copied[i] = True
        return self.target[i]  # type: ignore[return-value]

    def _assign(self, t: TopicId, p: int, member: int) -> None:
        owners = self.owners[t]
        old = owners[p]
        if old != -1:
            a = self._mutable(old)
            parts = a.get(t)
            if parts is not None:
                parts.discard(p)
                if not parts:
                    del a[t]
            self.sizes[old] -= 1
        a = self._mutable(member)
        a.setdefault(t, set()).add(p)
        owners[p] = member
        self.sizes[member] += 1


def _quotas(held: list[int], min_quota: int, extra: int) -> list[int]:
    """Each member's quota, in member order: the +1 of the remainder goes to
    members already above the minimum first, then to the others in order."""
    quotas = [min_quota] * len(held)
    for i, size in enumerate(held):
        if not extra:
            break
        if size > min_quota:
            quotas[i] += 1
            extra -= 1
    for i in range(len(quotas)):
        if not extra:
            break
        if quotas[i] == min_quota:
            quotas[i] += 1
            extra -= 1
    return quotas
