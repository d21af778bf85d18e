"""The controller's decisions as pure functions (no etcd, no clock).

Kafka's ZooKeeper-era controller, reduced to what kcoord needs:
- placement of a new topic's replicas over the live nodes (AdminUtils'
  round robin without racks);
- leader election from the in-sync replicas when a leader is lost, or
  when a partition without a leader gets an in-sync replica back;
- controlled shutdown: a stopping node's leaderships move to other in-sync
  replicas and it leaves the ISRs, before it stops.

Each function returns the states to write; the caller writes them by
compare-and-set on their `version`, so a decision taken on a stale view
fails and is taken again on the fresh one."""
from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Sequence

from .state import NO_LEADER, PartitionState


def place_replicas(partitions: int, replication_factor: int, nodes: Sequence[int],
                   start: int = 0, shift: int = 0, first_partition: int = 0
                   ) -> list[tuple[int, ...]]:
    """Replica lists for partitions first_partition.. of a topic: partition
    p's first replica is node (start + p) mod n, the others follow at a
    shift that changes every n partitions, so leaders and followers both
    spread (Kafka's assignReplicasToBrokersRackUnaware).  ValueError when
    there are fewer nodes than the replication factor."""
    ordered = sorted(set(nodes))
    n = len(ordered)
    if replication_factor < 1:
        raise ValueError("replication factor must be at least 1")
    if replication_factor > n:
        raise ValueError(f"replication factor {replication_factor} is larger than the "
                         f"{n} live node(s)")
    out = []
    for p in range(first_partition, first_partition + partitions):
        first = (start + p) % n
        replicas = [ordered[first]]
        if n > 1:
            step = shift + p // n
            for j in range(replication_factor - 1):
                replicas.append(ordered[(first + 1 + (step + j) % (n - 1)) % n])
        out.append(tuple(replicas))
    return out


def initial_state(topic: str, partition: int, replicas: Sequence[int],
                  live: Iterable[int]) -> PartitionState:
    """A new partition: every live replica is in sync (all logs are empty),
    the first live one leads in epoch 0."""
    alive = set(live)
    isr = tuple(r for r in replicas if r in alive)
    leader = isr[0] if isr else NO_LEADER
    return PartitionState(topic, partition, leader, 0, isr, tuple(replicas))


def _without(isr: tuple[int, ...], gone: set[int]) -> tuple[int, ...]:
    """The ISR minus the gone nodes; when that empties it, the ISR keeps its
    last member (Kafka does the same: that replica is the only one known to
    hold every acknowledged record, and only it may lead again)."""
    kept = tuple(r for r in isr if r not in gone)
    return kept if kept else isr[-1:]


def elect(state: PartitionState, live: set[int], unclean: bool = False) -> PartitionState | None:
    """The state after the live node set changed (live = nodes registered
    and not shutting down), or None when nothing changes.

    A leader that is gone is replaced by the first live in-sync replica in
    replica order, with a new leader epoch; a partition with no live
    in-sync replica has no leader (NO_LEADER, epoch bumped so the old leader
    is fenced) unless `unclean` allows any live replica.  A follower that is
    gone leaves the ISR (same epoch)."""
    gone = {r for r in state.replicas if r not in live}
    isr_live = tuple(r for r in state.isr if r in live)
    if state.leader != NO_LEADER and state.leader in live:
        if set(isr_live) == set(state.isr):
            return None
        return replace(state, isr=_without(state.isr, gone))
    candidates = [r for r in state.replicas if r in isr_live]
    if not candidates and unclean:
        candidates = [r for r in state.replicas if r in live]
        if candidates:
            return replace(state, leader=candidates[0], leader_epoch=state.leader_epoch + 1,
                           isr=(candidates[0],))
    if candidates:
        leader = candidates[0]
        return replace(state, leader=leader, leader_epoch=state.leader_epoch + 1,
                       isr=_without(state.isr, gone))
    if state.leader == NO_LEADER:
        return None  # still nobody to elect
    return replace(state, leader=NO_LEADER, leader_epoch=state.leader_epoch + 1,
                   isr=_without(state.isr, gone))


def controlled_shutdown(state: PartitionState, node: int, live: set[int]) -> PartitionState | None:
    """Move `node` out of the way before it stops: if it leads, leadership
    goes to another live in-sync replica (new epoch); if it follows in the
    ISR it leaves the ISR.  None when nothing can or need change (it leads
    alone: it keeps leading until it stops, then the partition waits for an
    in-sync replica, as Kafka does)."""
    others = tuple(r for r in state.isr if r != node and r in live)
    if state.leader == node:
        candidates = [r for r in state.replicas if r in others]
        if not candidates:
            return None
        return replace(state, leader=candidates[0], leader_epoch=state.leader_epoch + 1,
                       isr=tuple(r for r in state.isr if r != node))
    if node in state.isr and state.leader != NO_LEADER and len(state.isr) > 1:
        return replace(state, isr=tuple(r for r in state.isr if r != node))
    return None


def reconcile(states: Iterable[PartitionState], live: set[int],
              stopping: set[int] = frozenset(), unclean: bool = False) -> list[PartitionState]:
    """Every state change the controller should write for this view: nodes
    that are stopping count as gone for leadership (controlled shutdown),
    but a partition they lead alone stays with them until they are gone."""
    serving = live - set(stopping)
    out = []
    for state in states:
        new = elect(state, serving, unclean)
        if new is not None and new.leader == NO_LEADER and state.leader in live:
            # its only in-sync replica is stopping but still up: let it lead to the end
            new = None
            shrunk = tuple(r for r in state.isr if r in serving or r == state.leader)
            if shrunk != state.isr:
                new = replace(state, isr=shrunk)
        if new is not None:
            out.append(new)
    return out


def preferred_leader(state: PartitionState, live: set[int]) -> PartitionState | None:
    """Leadership back to the first replica when it is live and in sync
    (Kafka's preferred replica election), else None."""
    if not state.replicas:
        return None
    preferred = state.replicas[0]
    if state.leader == preferred or preferred not in live or preferred not in state.isr:
        return None
    return replace(state, leader=preferred, leader_epoch=state.leader_epoch + 1)


def rebalance_preferred(states: Iterable[PartitionState], serving: set[int],
                        imbalance_pct: int = 10) -> list[PartitionState]:
    """Kafka's auto leader rebalance: for each node whose share of the
    partitions it is preferred for but does not lead is above imbalance_pct,
    move those back to it (when it is serving and in sync)."""
    states = list(states)
    preferred_of: dict[int, list[PartitionState]] = {}
    for s in states:
        if s.replicas:
            preferred_of.setdefault(s.replicas[0], []).append(s)
    out = []
    for node, mine in preferred_of.items():
        if node not in serving:
            continue
        off = [s for s in mine if s.leader != node]
        if not off or len(off) * 100 <= imbalance_pct * len(mine):
            continue
        for s in off:
            new = preferred_leader(s, serving)
            if new is not None:
                out.append(new)
    return out
