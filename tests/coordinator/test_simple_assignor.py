"""Kafka's `simple` share assignor (SHARE_GROUPS_REFERENCE section 2.9): the
worked examples, stickiness, heterogeneous subscriptions, the assignable
filter, and its invariants over random groups."""
from __future__ import annotations

import math
import random

import pytest

from kcoord.coordinator.assignors import AssignorError, GroupSpec, MemberSpec
from kcoord.coordinator.assignors.simple import assign

A, B, C = (bytes([0xA0 + i]) + bytes(15) for i in range(3))


def spec(members: dict[str, tuple], current: dict | None = None) -> GroupSpec:
    current = current or {}
    specs = {m: MemberSpec(frozenset(topics), current.get(m, {})) for m, topics in members.items()}
    first = next(iter(specs.values())).subscribed_topic_ids if specs else None
    return GroupSpec(specs, all(s.subscribed_topic_ids == first for s in specs.values()))


def counts(result) -> list[int]:
    return [sum(len(p) for p in a.values()) for a in result.values()]


def holders(result) -> dict[tuple, int]:
    out: dict[tuple, int] = {}
    for a in result.values():
        for t, parts in a.items():
            for p in parts:
                out[(t, p)] = out.get((t, p), 0) + 1
    return out


@pytest.mark.parametrize("partitions, members, sharing, expected", [
    (5, 2, 1, [3, 2]),        # like a consumer group
    (3, 4, 2, [2, 1, 2, 1]),  # each partition held by two members
    (1, 3, 3, [1, 1, 1]),     # all three share the one partition
    (4, 4, 1, [1, 1, 1, 1]),
    (2, 5, 3, [2, 1, 1, 1, 1]),
])
def test_worked_examples(partitions, members, sharing, expected):
    result = assign(spec({f"m{i}": (A,) for i in range(members)}), {A: partitions})
    assert counts(result) == expected
    shared = holders(result)
    assert set(shared) == {(A, p) for p in range(partitions)}
    assert max(shared.values()) == sharing


def test_no_members_and_no_topics():
    assert assign(GroupSpec({}, True), {A: 3}) == {}
    assert assign(spec({"m0": (), "m1": ()}), {}) == {}


def test_unknown_topic_is_an_error():
    with pytest.raises(AssignorError):
        assign(spec({"m0": (A,)}), {})


def test_only_assignable_partitions():
    result = assign(spec({"m0": (A,), "m1": (A,)}), {A: 4}, lambda t, p: p in (1, 3))
    assert holders(result) == {(A, 1): 1, (A, 3): 1}
    assert assign(spec({"m0": (A,)}), {A: 4}, lambda t, p: False) == {"m0": {}}


def test_sticky_when_a_member_joins():
    first = assign(spec({"m0": (A,), "m1": (A,)}), {A: 4})
    result = assign(spec({"m0": (A,), "m1": (A,), "m2": (A,)}, first), {A: 4})
    assert sorted(counts(result)) == [1, 1, 2]
    for m in ("m0", "m1"):  # they keep what they had, minus what balance takes
        assert result[m][A] <= first[m][A]
    unchanged = assign(spec({"m0": (A,), "m1": (A,)}, first), {A: 4})
    assert unchanged == first


def test_unsubscribed_topic_is_dropped():
    first = assign(spec({"m0": (A, B)}), {A: 2, B: 2})
    assert holders(first) == {(A, 0): 1, (A, 1): 1, (B, 0): 1, (B, 1): 1}
    result = assign(spec({"m0": (A,)}, first), {A: 2})
    assert result["m0"] == {A: frozenset({0, 1})}


def test_heterogeneous_balances_per_topic():
    members = {"m0": (A,), "m1": (A, B), "m2": (B,), "m3": (B,)}
    result = assign(spec(members), {A: 2, B: 3})
    shared = holders(result)
    # topic A: two subscribers, two partitions; topic B: three subscribers, three partitions
    assert {k: v for k, v in shared.items() if k[0] == A} == {(A, 0): 1, (A, 1): 1}
    assert {k: v for k, v in shared.items() if k[0] == B} == {(B, 0): 1, (B, 1): 1, (B, 2): 1}
    assert B not in result["m0"] and A not in result["m2"] and A not in result["m3"]
    assert [len(result[m].get(B, ())) for m in ("m1", "m2", "m3")] == [1, 1, 1]


@pytest.mark.parametrize("seed", range(40))
def test_random_invariants(seed):
    """Over random groups and repeated runs from the previous target: every
    assignable subscribed partition is held, by at most ceil(M/T) members; a
    member holds only subscribed, assignable partitions; a homogeneous group's
    counts differ by at most one; a second run changes nothing."""
    rng = random.Random(seed)
    topics = {A: rng.randint(1, 6), B: rng.randint(1, 6)}
    current: dict = {}
    for _ in range(4):
        members = {f"m{i}": tuple(t for t in (A, B) if rng.random() < 0.7) or (A,)
                   for i in range(rng.randint(1, 7))}
        homogeneous = rng.random() < 0.5
        if homogeneous:
            members = {m: (A, B) for m in members}
        group = spec(members, {m: a for m, a in current.items() if m in members})
        result = assign(group, topics)
        for m, a in result.items():
            for t, parts in a.items():
                assert t in members[m] and all(p < topics[t] for p in parts)
        for t in (A, B):
            subs = [m for m in members if t in members[m]]
            if not subs:
                continue
            shared = {p: n for (tt, p), n in holders(result).items() if tt == t}
            assert set(shared) == set(range(topics[t]))
            if not homogeneous:
                assert max(shared.values()) <= math.ceil(len(subs) / topics[t])
        if homogeneous:
            total = topics[A] + topics[B]
            assert max(holders(result).values()) <= math.ceil(len(members) / total)
            assert max(counts(result)) - min(counts(result)) <= 1
        again = assign(spec(members, result), topics)
        assert all(again[m] is result[m] or again[m] == result[m] for m in members)
        current = result
