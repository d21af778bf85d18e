"""The controller's decisions as pure functions: placement, election from
the ISR, controlled shutdown, and a seeded run of random node losses and
returns checking the election invariants after every step."""
import random
from collections import Counter
from dataclasses import replace

import pytest

from kcoord.cluster import decisions
from kcoord.cluster.state import NO_LEADER, PartitionState


def state(leader, isr, replicas, epoch=3):
    return PartitionState("t", 0, leader, epoch, tuple(isr), tuple(replicas), 7)


def test_placement_spreads_leaders_and_replicas():
    placed = decisions.place_replicas(50, 3, [1, 2, 3])
    assert all(len(set(r)) == 3 for r in placed)
    leaders = Counter(r[0] for r in placed)
    assert max(leaders.values()) - min(leaders.values()) <= 1
    placed = decisions.place_replicas(12, 2, [5, 6, 7, 8], start=1)
    assert all(len(set(r)) == 2 and set(r) <= {5, 6, 7, 8} for r in placed)
    assert Counter(n for r in placed for n in r) == {5: 6, 6: 6, 7: 6, 8: 6}


def test_placement_refuses_more_replicas_than_nodes():
    with pytest.raises(ValueError, match="replication factor 3"):
        decisions.place_replicas(1, 3, [1, 2])


def test_initial_state_leader_is_first_live_replica():
    s = decisions.initial_state("t", 4, (2, 3, 1), {1, 2, 3})
    assert (s.leader, s.leader_epoch, s.isr, s.replicas) == (2, 0, (2, 3, 1), (2, 3, 1))


def test_leader_loss_elects_first_live_isr_member_and_bumps_epoch():
    new = decisions.elect(state(1, [1, 2, 3], [1, 2, 3]), live={2, 3})
    assert (new.leader, new.leader_epoch, new.isr) == (2, 4, (2, 3))
    # replica order, not ISR order, decides; a live replica out of sync is not chosen
    new = decisions.elect(state(1, [1, 3], [1, 2, 3]), live={2, 3})
    assert (new.leader, new.isr) == (3, (3,))


def test_no_live_isr_member_leaves_no_leader_and_keeps_the_last_one():
    new = decisions.elect(state(1, [1], [1, 2]), live={2})
    assert (new.leader, new.leader_epoch, new.isr) == (NO_LEADER, 4, (1,))
    # unclean election takes a live replica out of sync
    new = decisions.elect(state(1, [1], [1, 2]), live={2}, unclean=True)
    assert (new.leader, new.isr) == (2, (2,))
    # the last in-sync replica comes back: it leads again
    back = decisions.elect(state(NO_LEADER, [1], [1, 2], epoch=4), live={1, 2})
    assert (back.leader, back.leader_epoch, back.isr) == (1, 5, (1,))


def test_follower_loss_shrinks_isr_without_new_epoch():
    new = decisions.elect(state(1, [1, 2, 3], [1, 2, 3]), live={1, 3})
    assert (new.leader, new.leader_epoch, new.isr) == (1, 3, (1, 3))
    assert decisions.elect(state(1, [1, 3], [1, 2, 3]), live={1, 3}) is None


def test_controlled_shutdown_moves_leadership_and_leaves_isr():
    moved = decisions.controlled_shutdown(state(1, [1, 2], [1, 2, 3]), 1, {1, 2, 3})
    assert (moved.leader, moved.leader_epoch, moved.isr) == (2, 4, (2,))
    left = decisions.controlled_shutdown(state(2, [1, 2], [1, 2, 3]), 1, {1, 2, 3})
    assert (left.leader, left.leader_epoch, left.isr) == (2, 3, (2,))
    # alone in the ISR: it keeps leading until it is gone
    assert decisions.controlled_shutdown(state(1, [1], [1, 2]), 1, {1, 2}) is None


def test_reconcile_treats_stopping_nodes_as_gone_but_lets_sole_leaders_finish():
    states = [state(1, [1, 2], [1, 2]), PartitionState("t", 1, 1, 0, (1,), (1, 2), 9)]
    out = {s.partition: s for s in decisions.reconcile(states, {1, 2}, stopping={1})}
    assert (out[0].leader, out[0].leader_epoch) == (2, 4)
    assert 1 not in out  # sole ISR member: stays leader while it is up


def test_preferred_leader():
    s = decisions.preferred_leader(state(2, [1, 2], [1, 2]), {1, 2})
    assert (s.leader, s.leader_epoch) == (1, 4)
    assert decisions.preferred_leader(state(2, [2], [1, 2]), {1, 2}) is None


@pytest.mark.parametrize("seed", range(200))
def test_random_membership_changes_keep_election_invariants(seed):
    """Nodes fail, stop and return at random; the ISR only shrinks here (no
    follower catches up), as when followers are slow.  After every step:
    a leader is a live member of the ISR, epochs never go back and change
    with every leader change, the ISR stays within the replicas and is never
    empty, and a leader is only ever a node that was in the ISR before."""
    rng = random.Random(seed)
    nodes = [1, 2, 3, 4]
    replicas = tuple(rng.sample(nodes, 3))
    s = decisions.initial_state("t", 0, replicas, set(nodes))
    live = set(nodes)
    for _ in range(40):
        node = rng.choice(nodes)
        stopping = set()
        if node in live and rng.random() < 0.3:
            stopping = {node}
        elif node in live:
            live.discard(node)
        else:
            live.add(node)
        before = s
        for new in decisions.reconcile([s], live, stopping):
            s = new
        assert s.isr and set(s.isr) <= set(s.replicas)
        assert s.leader_epoch >= before.leader_epoch
        if s.leader != before.leader:
            assert s.leader_epoch > before.leader_epoch
        if s.leader != NO_LEADER:
            assert s.leader in s.isr and s.leader in before.isr
            assert s.leader in live
            if s.leader in stopping:
                assert not (set(s.isr) - {s.leader}) & (live - stopping)
        else:
            assert not set(s.isr) & (live - stopping)


def test_rebalance_moves_leaders_back_to_preferred_nodes_past_the_threshold():
    def st(p, leader, replicas):
        return PartitionState("t", p, leader, 2, tuple(replicas), tuple(replicas), 1)
    # node 1 is preferred for 4 partitions and leads none: all 4 move back
    states = [st(p, 2, (1, 2)) for p in range(4)] + [st(4, 2, (2, 1))]
    moved = decisions.rebalance_preferred(states, {1, 2})
    assert sorted(s.partition for s in moved) == [0, 1, 2, 3]
    assert all(s.leader == 1 and s.leader_epoch == 3 for s in moved)
    # not serving (stopping or gone): nothing moves to it
    assert decisions.rebalance_preferred(states, {2}) == []
    # 1 off of 20 preferred (5%) is under the 10% threshold
    states = [st(p, 1, (1, 2)) for p in range(19)] + [st(19, 2, (1, 2))]
    assert decisions.rebalance_preferred(states, {1, 2}) == []
    # out of sync: not eligible
    states = [PartitionState("t", 0, 2, 2, (2,), (1, 2), 1)]
    assert decisions.rebalance_preferred(states, {1, 2}) == []


def test_a_bounced_lone_leader_leads_again_only_at_a_new_epoch():
    """A restarted node (new incarnation) that led alone: the controller's
    pass over the bounce (it counts as gone and stopping) fences its epoch,
    and once the bounce is handled it is elected again at a later epoch,
    never at the one its old incarnation led (followers may hold that
    incarnation's unfsynced tail)."""
    lone = PartitionState("t", 0, 1, 5, (1,), (1, 2, 3), 9)
    live, bounced = {1, 2, 3}, {1}
    [fenced] = decisions.reconcile([lone], live - bounced, stopping=bounced)
    assert (fenced.leader, fenced.leader_epoch, fenced.isr) == (NO_LEADER, 6, (1,))
    [back] = decisions.reconcile([replace(fenced, version=10)], live)
    assert (back.leader, back.leader_epoch) == (1, 7)
    # a single-replica partition too
    only = PartitionState("t", 1, 1, 2, (1,), (1,), 9)
    [fenced] = decisions.reconcile([only], set(), stopping=bounced)
    assert (fenced.leader, fenced.leader_epoch) == (NO_LEADER, 3)
    [back] = decisions.reconcile([replace(fenced, version=10)], {1})
    assert (back.leader, back.leader_epoch) == (1, 4)
