"""The seam between share partitions and the share coordinator (Kafka's Persister).

A share partition (the in-flight state of one (group, topic, partition) on
the partition leader) keeps only memory; its durable copy is the share
coordinator's, on __share_group_state.  The leader reads that copy once when
the share partition loads and writes every state change through it before it
answers an acknowledgement as done.  On a single node the persister calls the
local share coordinator through the coordinator runtime; in a cluster it sends
the inter-broker RPCs 83-87 to the node that leads the key's partition.  Both
speak this Protocol, so the share partition code does not know which it has.

Every method answers with a Kafka error code (0 = success) rather than
raising: the share partition maps each code as Kafka's SharePartition does.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, slots=True)
class ShareKey:
    """One share partition's durable state: the key of ShareSnapshot/ShareUpdate."""
    group_id: str
    topic_id: bytes          # 16-byte topic uuid
    partition: int


@dataclass(frozen=True, slots=True)
class StateBatch:
    """A run of offsets in one delivery state (Kafka's PersisterStateBatch).

    delivery_state: 0 Available, 2 Acknowledged, 4 Archived (Acquired is never
    persisted; an acquired record is persisted as Available with its count)."""
    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(slots=True)
class ShareState:
    """What ReadShareGroupState answers for one key."""
    error_code: int = 0
    state_epoch: int = 0
    start_offset: int = -1   # -1: not yet decided (share.auto.offset.reset applies)
    leader_epoch: int = 0
    batches: list[StateBatch] = field(default_factory=list)


@dataclass(slots=True)
class ShareSummary:
    """What ReadShareGroupStateSummary answers for one key."""
    error_code: int = 0
    state_epoch: int = 0
    leader_epoch: int = 0
    start_offset: int = -1
    delivery_complete_count: int = -1


class SharePersister(Protocol):
    async def initialize(self, key: ShareKey, state_epoch: int, start_offset: int) -> int:
        """InitializeShareGroupState: a new snapshot with no batches."""

    async def read(self, key: ShareKey, leader_epoch: int) -> ShareState:
        """ReadShareGroupState; a leader_epoch other than -1 fences older leaders."""

    async def write(self, key: ShareKey, state_epoch: int, leader_epoch: int,
                    start_offset: int, batches: list[StateBatch],
                    delivery_complete_count: int = -1) -> int:
        """WriteShareGroupState: durable (fsynced/replicated) before it returns 0."""

    async def delete(self, key: ShareKey) -> int:
        """DeleteShareGroupState: a tombstone for the key."""

    async def summary(self, key: ShareKey) -> ShareSummary:
        """ReadShareGroupStateSummary (nothing written)."""
