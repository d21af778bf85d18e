"""The pure reconcile step (consumer_group.reconcile, Kafka's
CurrentAssignmentBuilder) driven directly, case by case, as Kafka's
CurrentAssignmentBuilderTest does: a member state, a target, who else holds
a partition (partition epochs) and what the member reports it owns ->
the next state, epochs and assignment."""
from __future__ import annotations

import pytest

from kcoord.coordinator.consumer_group import (STABLE, UNKNOWN, UNRELEASED_PARTITIONS,
                                               UNREVOKED_PARTITIONS, ConsumerMember, FencedError,
                                               reconcile)

A, B = b"A" * 16, b"B" * 16


def parts(**by_topic) -> dict:
    ids = {"a": A, "b": B}
    return {ids[t]: frozenset(ps) for t, ps in by_topic.items()}


def owned(**by_topic) -> list[dict]:
    ids = {"a": A, "b": B}
    return [{"topic_id": ids[t], "partitions": list(ps)} for t, ps in by_topic.items()]


def member(state=STABLE, epoch=10, previous=9, assigned=None, pending=None) -> ConsumerMember:
    return ConsumerMember("m", member_epoch=epoch, previous_member_epoch=previous, state=state,
                          assigned=assigned or {}, pending_revocation=pending or {})


def free(topic, partition) -> int:
    return -1


def held_by_other(*held):
    """partition_epoch: the partitions in `held` are still held by another member."""
    taken = {(t, p) for t, ps in held for p in ps}
    return lambda t, p: 10 if (t, p) in taken else -1


# (name, member, target epoch, target, partition epochs, owned,
#  -> state, epoch, previous epoch, assigned, pending revocation; None: unchanged)
CASES = [
    ("stable to stable (new epoch, same partitions)",
     member(assigned=parts(a=[1, 2], b=[3])), 11, parts(a=[1, 2], b=[3]), free,
     owned(a=[1, 2], b=[3]), (STABLE, 11, 10, parts(a=[1, 2], b=[3]), {})),
    ("stable, already at the target epoch: unchanged",
     member(assigned=parts(a=[1])), 10, parts(a=[1, 2]), free, owned(a=[1]), None),
    ("stable to stable with new free partitions",
     member(assigned=parts(a=[1, 2])), 11, parts(a=[1, 2, 3], b=[1]), free,
     owned(a=[1, 2]), (STABLE, 11, 10, parts(a=[1, 2, 3], b=[1]), {})),
    ("stable to unrevoked partitions (keeps its epoch)",
     member(assigned=parts(a=[1, 2], b=[3])), 11, parts(a=[2], b=[3, 4]), free,
     owned(a=[1, 2], b=[3]), (UNREVOKED_PARTITIONS, 10, 10, parts(a=[2], b=[3]), parts(a=[1]))),
    ("stable, revocation with null owned counts as still owned",
     member(assigned=parts(a=[1, 2])), 11, parts(a=[2]), free, None,
     (UNREVOKED_PARTITIONS, 10, 10, parts(a=[2]), parts(a=[1]))),
    ("stable, a removed partition it no longer reports is revoked at once",
     member(assigned=parts(a=[1, 2])), 11, parts(a=[2]), free, owned(a=[2]),
     (STABLE, 11, 10, parts(a=[2]), {})),
    ("stable to unreleased partitions (a new partition still held by another)",
     member(assigned=parts(a=[1])), 11, parts(a=[1, 2]), held_by_other((A, [2])),
     owned(a=[1]), (UNRELEASED_PARTITIONS, 11, 10, parts(a=[1]), {})),
    ("unrevoked partitions to stable once the revoked ones are no longer reported",
     member(UNREVOKED_PARTITIONS, assigned=parts(a=[2]), pending=parts(a=[1])), 11,
     parts(a=[2], b=[4]), free, owned(a=[2]), (STABLE, 11, 10, parts(a=[2], b=[4]), {})),
    ("remains in unrevoked partitions while it still reports one",
     member(UNREVOKED_PARTITIONS, assigned=parts(a=[2]), pending=parts(a=[1])), 11,
     parts(a=[2]), free, owned(a=[1, 2]), None),
    ("remains in unrevoked partitions with null owned",
     member(UNREVOKED_PARTITIONS, assigned=parts(a=[2]), pending=parts(a=[1])), 11,
     parts(a=[2]), free, None, None),
    ("unrevoked to unrevoked: a newer target revokes more (epoch + 1)",
     member(UNREVOKED_PARTITIONS, assigned=parts(a=[2, 3]), pending=parts(a=[1])), 12,
     parts(a=[3]), free, owned(a=[2, 3]),
     (UNREVOKED_PARTITIONS, 11, 10, parts(a=[3]), parts(a=[2]))),
    ("unrevoked to unreleased: what it waits for is still held",
     member(UNREVOKED_PARTITIONS, assigned=parts(a=[2]), pending=parts(a=[1])), 11,
     parts(a=[2, 5]), held_by_other((A, [5])), owned(a=[2]),
     (UNRELEASED_PARTITIONS, 11, 10, parts(a=[2]), {})),
    ("unreleased to stable once the partition is released",
     member(UNRELEASED_PARTITIONS, epoch=11, previous=11, assigned=parts(a=[1])), 11,
     parts(a=[1, 2]), free, owned(a=[1]), (STABLE, 11, 11, parts(a=[1, 2]), {})),
    ("remains unreleased while the partition is held",
     member(UNRELEASED_PARTITIONS, epoch=11, previous=11, assigned=parts(a=[1])), 11,
     parts(a=[1, 2]), held_by_other((A, [2])), owned(a=[1]), None),
    ("unreleased to unrevoked: a newer target takes one away",
     member(UNRELEASED_PARTITIONS, epoch=11, previous=11, assigned=parts(a=[1, 3])), 12,
     parts(a=[3, 2]), held_by_other((A, [2])), owned(a=[1, 3]),
     (UNREVOKED_PARTITIONS, 11, 11, parts(a=[3]), parts(a=[1]))),
    ("unknown state owning nothing starts over at the target",
     member(UNKNOWN, assigned=parts(a=[1])), 12, parts(a=[7]), free, owned(),
     (STABLE, 12, 10, parts(a=[7]), {})),
]


@pytest.mark.parametrize("name, m, target_epoch, target, epochs, reported, expected", CASES,
                         ids=[c[0] for c in CASES])
def test_reconcile(name, m, target_epoch, target, epochs, reported, expected):
    before = m.copy()
    out = reconcile(m, target_epoch, target, epochs, reported)
    if expected is None:
        assert out is m
        return
    state, epoch, previous, assigned, pending = expected
    assert (out.state, out.member_epoch, out.previous_member_epoch) == (state, epoch, previous)
    assert out.assigned == assigned
    assert out.pending_revocation == pending
    assert out is not m and m == before  # a new member; the input is not mutated


@pytest.mark.parametrize("reported", [None, owned(a=[1])])
def test_unknown_state_owning_partitions_is_fenced(reported):
    with pytest.raises(FencedError):
        reconcile(member(UNKNOWN, assigned=parts(a=[1])), 12, parts(a=[1]), free, reported)
