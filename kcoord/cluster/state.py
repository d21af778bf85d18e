"""Partition state shared by the control plane and the replica manager.

Kafka's LeaderAndIsr (ZooKeeper era): who leads a partition, in which leader
epoch, which replicas hold it and which of them are in sync. It changes only
by a compare-and-set on `version` (etcd's mod revision in kcoord, zkVersion's
role in Kafka), so a stale leader cannot overwrite a newer decision."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Awaitable, Protocol

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class PartitionState:
    topic: str
    partition: int
    leader: int              # node id, NO_LEADER when none is in sync
    leader_epoch: int        # bumped on every leader change
    isr: tuple[int, ...]     # in-sync replicas, the leader among them
    replicas: tuple[int, ...]  # assigned replicas, preferred leader first
    version: int = 0         # compare-and-set version of this state in the store

    def with_isr(self, isr: tuple[int, ...]) -> "PartitionState":
        """The same leadership with another ISR (the leader's AlterPartition)."""
        return replace(self, isr=tuple(isr))


class IneligibleReplica(Exception):
    """alter_isr refused to add a replica that may not join the ISR (Kafka's
    INELIGIBLE_REPLICA): its node is not registered, is shutting down, or
    is an incarnation the controller has not fenced yet.  The stored state
    is unchanged, so the leader is not stale: it may propose again later."""


class PartitionStateStore(Protocol):
    """What the replica manager needs from the control plane."""

    def alter_isr(self, proposed: PartitionState) -> Awaitable[PartitionState | None]:
        """Compare-and-set the ISR of `proposed` against its `version`: the
        stored state on success (new version), None when the version or the
        leader epoch no longer match (this leader is stale: it must stop
        acknowledging and wait for the next state); IneligibleReplica when a
        replica it adds may not join now."""
        ...

    # Optional: isr_eligible(self, node_id) -> bool
    # May this node join an ISR now (the leader asks before proposing it)?


class PartitionStateListener(Protocol):
    """What the control plane calls on every node when a state changes."""

    def on_partition_state(self, state: PartitionState) -> None:
        """Become leader, follower, or neither, of state's partition."""
        ...

    # Optional (called only if the listener has it):
    #   on_session_lost(self) -> None
    # This node's etcd lease may have lapsed (no refresh answered for a whole
    # TTL: paused, or cut off from etcd), so the controller may already have
    # given its leaderships to others: stop acknowledging as a leader until
    # the next on_partition_state says otherwise.
    #   on_session_restored(self) -> None
    # After a lapse, etcd answered a refresh of the same lease: it never
    # expired, so acknowledging may resume (no newer state may ever come).
