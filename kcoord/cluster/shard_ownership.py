"""A coordinator follows the leadership of its internal topic's partitions
(Kafka's onElection / onResignation): this node loads a partition when a
partition state names it leader (for that leader epoch) and unloads it when
the leadership moves to another node, so a partition this node does not lead
answers NOT_COORDINATOR and a deposed leader stops serving it.  The group
coordinator's shards follow __consumer_offsets, the transaction coordinator
follows __transaction_state, the share coordinator __share_group_state."""
from __future__ import annotations

import logging
from typing import Callable

from .state import PartitionState
from ..protocol.internal_topics import OFFSETS_TOPIC, SHARE_STATE_TOPIC, TXN_TOPIC

log = logging.getLogger("kcoord.cluster.shards")


class PartitionOwnership:
    """A PartitionStateListener over a runtime's load(partition, epoch) /
    unload(partition, epoch) for the partitions of `topic` (`count()` of
    them: the runtime's own partition count)."""

    def __init__(self, runtime, node_id: int, topic: str, count: Callable[[], int],
                 what: str) -> None:
        self.runtime = runtime
        self.node_id = node_id
        self.topic = topic
        self.count = count
        self.what = what

    def on_partition_state(self, state: PartitionState) -> None:
        if state.topic != self.topic or not 0 <= state.partition < self.count():
            return
        if state.leader == self.node_id:
            self.runtime.load(state.partition, state.leader_epoch)
        elif self.runtime.unload(state.partition, state.leader_epoch):
            log.info("%s %d unloaded: node %d leads it in epoch %d", self.what,
                     state.partition, state.leader, state.leader_epoch)

    # A lapse of this node's lease: a coordinator with member sessions (the
    # group and share runtimes) holds its timers until it surely leads again
    # and then restarts the sessions (coordinator_runtime.py); the
    # transaction runtime has no such hooks.
    def on_session_lost(self) -> None:
        hook = getattr(self.runtime, "on_lease_lapsed", None)
        if hook is not None:
            hook()

    def on_session_restored(self) -> None:
        hook = getattr(self.runtime, "on_lease_restored", None)
        if hook is not None:
            hook()


def shard_ownership(runtime, node_id: int) -> PartitionOwnership:
    """The group coordinator's shards over __consumer_offsets."""
    return PartitionOwnership(runtime, node_id, OFFSETS_TOPIC, lambda: len(runtime.shards),
                              "shard")


def txn_ownership(runtime, node_id: int) -> PartitionOwnership:
    """The transaction coordinator over __transaction_state."""
    return PartitionOwnership(runtime, node_id, TXN_TOPIC, lambda: len(runtime.partitions),
                              "transaction state partition")


class ShareStateOwnership(PartitionOwnership):
    """The share coordinator over __share_group_state, created on first use:
    its shards exist once the topic is mirrored into the local catalogue."""

    def ensure_open(self) -> bool:
        """Make the shards if the topic is here now. -> whether it opened now."""
        if self.runtime.shards or self.runtime.catalogue.get(self.topic) is None:
            return False
        self.runtime.open_topic()
        return True

    def on_partition_state(self, state: PartitionState) -> None:
        if state.topic == self.topic:
            self.ensure_open()
        super().on_partition_state(state)


def share_ownership(runtime, node_id: int) -> ShareStateOwnership:
    """The share coordinator over __share_group_state."""
    return ShareStateOwnership(runtime, node_id, SHARE_STATE_TOPIC, lambda: len(runtime.shards),
                               "share-state partition")
