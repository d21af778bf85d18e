"""Server-side assignors: uniform (homogeneous and heterogeneous) and range.

Properties checked on seeded random inputs: every subscribed partition is
assigned exactly once and only to a subscriber; balance within one partition
where the subscriptions allow it; stickiness (an unchanged group gets the
same assignment back, a join or leave moves as little as balance requires);
range co-partitions topics and orders static members first.
"""
from __future__ import annotations

import random

import pytest

from kcoord.coordinator.assignors import (ASSIGNORS, AssignorError, GroupSpec, MemberSpec,
                                          assignment_size, is_homogeneous)
from kcoord.coordinator.assignors import range as range_assignor
from kcoord.coordinator.assignors import uniform


def tid(n: int) -> bytes:
    return n.to_bytes(16, "big")


def spec_of(members: dict[str, MemberSpec]) -> GroupSpec:
    return GroupSpec(members, is_homogeneous(members))


def owners(result) -> dict[tuple, str]:
    out = {}
    for m, a in result.items():
        for t, parts in a.items():
            for p in parts:
                assert (t, p) not in out, f"{t.hex()}-{p} assigned to {out[(t, p)]} and {m}"
                out[(t, p)] = m
    return out


def check_valid(spec: GroupSpec, partitions: dict[bytes, int], result) -> dict[tuple, str]:
    """Each subscribed partition exactly once, to a subscriber; nothing else."""
    own = owners(result)
    subscribed = set()
    for ms in spec.members.values():
        subscribed |= set(ms.subscribed_topic_ids)
    expected = {(t, p) for t in subscribed for p in range(partitions[t])}
    assert set(own) == expected
    for (t, _), m in own.items():
        assert t in spec.members[m].subscribed_topic_ids
    return own


def sizes(result, members) -> list[int]:
    return [assignment_size(result.get(m, {})) for m in members]


def with_assignment(spec: GroupSpec, result) -> GroupSpec:
    return spec_of({m: MemberSpec(ms.subscribed_topic_ids, result.get(m, {}), ms.instance_id)
                    for m, ms in spec.members.items()})


# ====================================================================== uniform
@pytest.mark.parametrize("seed", range(200))
def test_uniform_homogeneous_balanced_and_complete(seed):
    rng = random.Random(seed)
    partitions = {tid(i): rng.randint(0, 20) for i in range(rng.randint(1, 6))}
    topics = frozenset(partitions)
    members = {f"m{i}": MemberSpec(topics) for i in range(rng.randint(1, 30))}
    spec = spec_of(members)
    result = uniform.assign(spec, partitions)
    check_valid(spec, partitions, result)
    s = sizes(result, members)
    assert max(s) - min(s) <= 1


@pytest.mark.parametrize("seed", range(200))
def test_uniform_homogeneous_sticky(seed):
    rng = random.Random(seed)
    partitions = {tid(i): rng.randint(1, 30) for i in range(rng.randint(1, 5))}
    topics = frozenset(partitions)
    members = {f"m{i}": MemberSpec(topics) for i in range(rng.randint(1, 12))}
    spec = spec_of(members)
    first = uniform.assign(spec, partitions)
    before = owners(first)

    # unchanged group: the very same assignment
    again = uniform.assign(with_assignment(spec, first), partitions)
    assert owners(again) == before

    # one member joins: only the excess above the new quotas moves, and only to it
    grown = dict(with_assignment(spec, first).members)
    grown["new"] = MemberSpec(topics)
    second = uniform.assign(spec_of(grown), partitions)
    after = check_valid(spec_of(grown), partitions, second)
    s = sizes(second, grown)
    assert max(s) - min(s) <= 1
    moved = {tp for tp in before if after[tp] != before[tp]}
    assert all(after[tp] == "new" for tp in moved)
    assert len(moved) == assignment_size(second["new"])

    # one member leaves: only its partitions move
    if len(members) > 1:
        gone = sorted(members)[rng.randrange(len(members))]
        shrunk = {m: ms for m, ms in with_assignment(spec, first).members.items() if m != gone}
        third = uniform.assign(spec_of(shrunk), partitions)
        after = check_valid(spec_of(shrunk), partitions, third)
        s = sizes(third, shrunk)
        assert max(s) - min(s) <= 1
        for tp, m in before.items():
            if m != gone:
                assert after[tp] == m, "a partition of a staying member moved"


def test_uniform_homogeneous_prefers_current_holders_for_the_remainder():
    # 13 partitions, A holds 5, B and C hold 4; D joins: quotas 4,3,3,3 -> 3 moves, not 4
    t = tid(1)
    a = {t: frozenset(range(0, 5))}
    b = {t: frozenset(range(5, 9))}
    c = {t: frozenset(range(9, 13))}
    topics = frozenset({t})
    members = {"D": MemberSpec(topics), "A": MemberSpec(topics, a), "B": MemberSpec(topics, b),
               "C": MemberSpec(topics, c)}
    result = uniform.assign(spec_of(members), {t: 13})
    assert assignment_size(result["D"]) == 3
    assert result["A"][t] <= a[t] and result["B"][t] <= b[t] and result["C"][t] <= c[t]


def test_uniform_drops_unsubscribed_and_out_of_range_partitions():
    t1, t2 = tid(1), tid(2)
    members = {"a": MemberSpec(frozenset({t1}), {t1: frozenset({0, 1, 7}), t2: frozenset({0})}),
               "b": MemberSpec(frozenset({t1}), {t1: frozenset({1})})}  # 1 held twice
    spec = spec_of(members)
    result = uniform.assign(spec, {t1: 4, t2: 2})
    check_valid(spec, {t1: 4, t2: 2}, result)


def test_uniform_members_with_no_topics():
    members = {"a": MemberSpec(frozenset()), "b": MemberSpec(frozenset())}
    assert all(not a for a in uniform.assign(spec_of(members), {}).values())


def test_uniform_unknown_topic_is_an_error():
    members = {"a": MemberSpec(frozenset({tid(9)}))}
    with pytest.raises(AssignorError):
        uniform.assign(spec_of(members), {})


@pytest.mark.parametrize("seed", range(200))
def test_uniform_heterogeneous_complete_and_sticky(seed):
    rng = random.Random(seed)
    partitions = {tid(i): rng.randint(1, 15) for i in range(rng.randint(2, 6))}
    ids = sorted(partitions)
    members = {f"m{i}": MemberSpec(frozenset(rng.sample(ids, rng.randint(1, len(ids)))))
               for i in range(rng.randint(2, 15))}
    spec = GroupSpec(members, False)
    first = uniform.assign(spec, partitions)
    before = check_valid(spec, partitions, first)
    again = uniform.assign(GroupSpec(with_assignment(spec, first).members, False), partitions)
    assert owners(again) == before


@pytest.mark.parametrize("seed", range(100))
def test_uniform_heterogeneous_balanced_when_subscribers_share_subscriptions(seed):
    # disjoint buckets of members, each bucket with its own topics: every topic's
    # subscribers have identical subscriptions, so each bucket is balanced to one
    rng = random.Random(seed)
    buckets = rng.randint(2, 4)
    partitions = {}
    members = {}
    for b in range(buckets):
        topics = [tid(b * 10 + i) for i in range(rng.randint(1, 3))]
        for t in topics:
            partitions[t] = rng.randint(1, 25)
        for i in range(rng.randint(1, 8)):
            members[f"b{b}-m{i}"] = MemberSpec(frozenset(topics))
    spec = GroupSpec(members, False)
    result = uniform.assign(spec, partitions)
    check_valid(spec, partitions, result)
    for b in range(buckets):
        s = [assignment_size(result[m]) for m in members if m.startswith(f"b{b}-")]
        assert max(s) - min(s) <= 1

    # the same from a skewed starting point (everything on one member per bucket)
    skewed = {}
    for m, ms in members.items():
        first = next(x for x in members if x.split("-")[0] == m.split("-")[0])
        skewed[m] = MemberSpec(ms.subscribed_topic_ids,
                               {t: frozenset(range(partitions[t])) for t in ms.subscribed_topic_ids}
                               if m == first else {})
    result = uniform.assign(GroupSpec(skewed, False), partitions)
    check_valid(spec, partitions, result)
    for b in range(buckets):
        s = [assignment_size(result[m]) for m in members if m.startswith(f"b{b}-")]
        assert max(s) - min(s) <= 1


def test_uniform_heterogeneous_overlapping_subscriptions():
    t1, t2 = tid(1), tid(2)
    members = {"a": MemberSpec(frozenset({t1})), "b": MemberSpec(frozenset({t1, t2})),
               "c": MemberSpec(frozenset({t2}))}
    spec = GroupSpec(members, False)
    result = uniform.assign(spec, {t1: 6, t2: 6})
    check_valid(spec, {t1: 6, t2: 6}, result)
    # balancing works topic by topic (as in Kafka): each topic's subscribers end within one
    load = dict(zip(members, sizes(result, members)))
    assert abs(load["a"] - load["b"]) <= 1 and abs(load["b"] - load["c"]) <= 1


# ======================================================================== range
def test_range_co_partitions_topics():
    t1, t2 = tid(1), tid(2)
    topics = frozenset({t1, t2})
    members = {m: MemberSpec(topics) for m in ("c", "a", "b")}
    result = range_assignor.assign(spec_of(members), {t1: 7, t2: 7})
    check_valid(spec_of(members), {t1: 7, t2: 7}, result)
    for m in members:
        assert result[m][t1] == result[m][t2]
    assert result["a"][t1] == frozenset({0, 1, 2})  # sorted by member id, extra to the first
    assert result["b"][t1] == frozenset({3, 4})
    assert result["c"][t1] == frozenset({5, 6})


def test_range_static_members_first_by_instance_id():
    t = tid(1)
    members = {"a": MemberSpec(frozenset({t})),
               "z": MemberSpec(frozenset({t}), instance_id="i2"),
               "y": MemberSpec(frozenset({t}), instance_id="i1")}
    result = range_assignor.assign(spec_of(members), {t: 3})
    assert result["y"][t] == {0} and result["z"][t] == {1} and result["a"][t] == {2}


def test_range_more_members_than_partitions():
    t = tid(1)
    members = {f"m{i}": MemberSpec(frozenset({t})) for i in range(5)}
    result = range_assignor.assign(spec_of(members), {t: 2})
    check_valid(spec_of(members), {t: 2}, result)
    assert result["m0"][t] == {0} and result["m1"][t] == {1}
    assert not result["m4"]


@pytest.mark.parametrize("seed", range(100))
def test_range_heterogeneous(seed):
    rng = random.Random(seed)
    partitions = {tid(i): rng.randint(0, 12) for i in range(rng.randint(1, 5))}
    ids = sorted(partitions)
    members = {f"m{i}": MemberSpec(frozenset(rng.sample(ids, rng.randint(1, len(ids)))))
               for i in range(rng.randint(1, 10))}
    spec = spec_of(members)
    result = range_assignor.assign(spec, partitions)
    check_valid(spec, partitions, result)
    # contiguous ranges; subscribers of a topic differ by at most one partition
    for t, n in partitions.items():
        subs = [m for m in sorted(members) if t in members[m].subscribed_topic_ids]
        got = [sorted(result[m].get(t, ())) for m in subs]
        for g in got:
            assert g == list(range(g[0], g[0] + len(g))) if g else True
        if subs:
            assert max(map(len, got)) - min(map(len, got)) <= 1


def test_registry_names():
    assert set(ASSIGNORS) == {"uniform", "range", "roundrobin"}


def test_assignors_do_not_mutate_their_input():
    t = tid(1)
    held = {t: frozenset({0, 1, 2, 3})}
    members = {"a": MemberSpec(frozenset({t}), held), "b": MemberSpec(frozenset({t}))}
    for homogeneous in (True, False):
        uniform.assign(GroupSpec(members, homogeneous), {t: 4})
        assert held == {t: frozenset({0, 1, 2, 3})}


@pytest.mark.parametrize("seed", range(20))
def test_fast_paths_equal_the_general_paths(seed):
    """The fresh-deal path of uniform and the shared-range path of range give what
    the general paths give on the same input (same keys in the same order too)."""
    rng = random.Random(seed)
    partitions = {tid(t): rng.choice([0, 1, 3, 7] if seed % 2 else [5]) for t in range(rng.randint(1, 8))}
    topics = frozenset(partitions)
    members = {}
    for m in range(rng.randint(1, 30)):
        static = f"i{rng.randint(0, 99):02d}" if rng.random() < 0.3 else None
        members[f"m{rng.randint(0, 999):03d}-{m}"] = MemberSpec(topics, {}, instance_id=static)
    total = sum(partitions.values())
    ordered = sorted(topics)
    general = uniform._assign_with_history(members, topics, ordered, dict(partitions),
                                           *divmod(total, len(members)))
    fast = uniform.assign(GroupSpec(members, True), partitions)
    assert [(m, list(a.items())) for m, a in fast.items()] == \
        [(m, list(a.items())) for m, a in general.items()]
    shared = range_assignor.assign(GroupSpec(members, True), partitions)
    per_topic = range_assignor.assign(GroupSpec(members, False), partitions)
    assert [(m, list(a.items())) for m, a in shared.items()] == \
        [(m, list(a.items())) for m, a in per_topic.items()]


@pytest.mark.parametrize("seed", range(40))
def test_uniform_valid_history_path_equals_the_general_path(seed):
    """When every member holds a valid, disjoint assignment (the usual case), the
    index-based pass gives what the copy-and-check path gives: keys, order and the
    very same object for an unchanged member."""
    rng = random.Random(seed)
    partitions = {tid(t): rng.choice([0, 1, 3, 7, 12]) for t in range(rng.randint(1, 8))}
    topics = frozenset(partitions)
    # a valid, disjoint history: each partition to one random member or to nobody
    count = rng.randint(1, 30)
    held: list[dict[bytes, set[int]]] = [{} for _ in range(count)]
    for t, n in partitions.items():
        for p in rng.sample(range(n), n):
            if rng.random() < 0.8:
                held[rng.randrange(count)].setdefault(t, set()).add(p)
    if seed % 4 == 0:  # an empty set kept under a topic
        held[0].setdefault(next(iter(partitions)), set())
    members = {f"m{rng.randint(0, 999):03d}-{m}": MemberSpec(topics, a) for m, a in enumerate(held)}
    if seed % 3 == 0:  # members that join with nothing
        for j in range(rng.randint(1, 5)):
            members[f"new-{j}"] = MemberSpec(topics)
    total = sum(partitions.values())
    ordered = sorted(topics)
    quota = divmod(total, len(members))
    fast = uniform._assign_valid_history(members, ordered, dict(partitions), *quota)
    general = uniform._assign_with_history(members, topics, ordered, dict(partitions), *quota)
    assert fast is not None
    assert [(m, list(a.items())) for m, a in fast.items()] == \
        [(m, list(a.items())) for m, a in general.items()]
    assert [fast[m] is ms.assignment for m, ms in members.items()] == \
        [general[m] is ms.assignment for m, ms in members.items()]
    check_valid(GroupSpec(members, True), partitions, fast)


def test_uniform_valid_history_path_declines_what_it_cannot_take():
    """A partition held twice, out of range, or of a topic no longer subscribed: the
    general path decides."""
    t0, t1 = tid(0), tid(1)
    counts = {t0: 4}
    for held in ([{t0: {0, 1}}, {t0: {1}}], [{t0: {4}}], [{t1: {0}}]):
        members = {f"m{i}": MemberSpec(frozenset(counts), a) for i, a in enumerate(held)}
        assert uniform._assign_valid_history(members, [t0], counts, *divmod(4, len(members))) is None
        check_valid(GroupSpec(members, True), counts, uniform.assign(GroupSpec(members, True), counts))


@pytest.mark.parametrize("seed", range(10))
def test_uniform_fresh_deal_shares_ranges_and_later_rounds_leave_them_alone(seed):
    """The fresh deal hands one frozenset to every member cut at the same place of
    equal-size topics; fed back as history (a join, then a leave) those shared sets
    are read, never changed, and the fast and general paths still agree."""
    rng = random.Random(seed)
    # per_topic members of `share` partitions each on every topic: all cut alike
    share, per_topic, count = rng.randint(1, 4), rng.randint(1, 3), rng.randint(2, 5)
    partitions = {tid(t): share * per_topic for t in range(count)}
    topics = frozenset(partitions)
    members = {f"m{i:02d}": MemberSpec(topics) for i in range(count * per_topic)}
    first = uniform.assign(GroupSpec(members, True), partitions)
    by_range: dict[frozenset, list] = {}
    for a in first.values():
        for parts in a.values():
            by_range.setdefault(frozenset(parts), []).append(parts)
    assert all(all(p is group[0] for p in group) for group in by_range.values())
    assert any(len(group) > 1 for group in by_range.values())
    before = {id(p): frozenset(p) for group in by_range.values() for p in group}
    spec = with_assignment(GroupSpec(members, True), first)
    spec.members["joined"] = MemberSpec(topics)
    gone = rng.choice(sorted(members))
    for step in (spec, spec_of({m: ms for m, ms in spec.members.items() if m != gone})):
        total, ordered = sum(partitions.values()), sorted(topics)
        quota = divmod(total, len(step.members))
        fast = uniform.assign(step, partitions)
        general = uniform._assign_with_history(step.members, topics, ordered, dict(partitions), *quota)
        assert [(m, list(a.items())) for m, a in fast.items()] == \
            [(m, list(a.items())) for m, a in general.items()]
        check_valid(step, partitions, fast)
    assert all(frozenset(p) == before[id(p)] for group in by_range.values() for p in group)
