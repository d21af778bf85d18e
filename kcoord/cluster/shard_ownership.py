"""The coordinator's shards follow the leadership of their __consumer_offsets
partitions (Kafka's onElection / onResignation): this node loads a shard
when a partition state names it leader (for that leader epoch) and unloads
it when the leadership moves to another node, so a shard this node does
not lead answers NOT_COORDINATOR and a deposed leader stops serving it."""
from __future__ import annotations

import logging

from .state import PartitionState

log = logging.getLogger("kcoord.cluster.shards")

OFFSETS_TOPIC = "__consumer_offsets"


class ShardOwnership:
    """A PartitionStateListener over the coordinator runtime's
    load(partition, epoch) / unload(partition, epoch)."""

    def __init__(self, runtime, node_id: int) -> None:
        self.runtime = runtime
        self.node_id = node_id

    def on_partition_state(self, state: PartitionState) -> None:
        if state.topic != OFFSETS_TOPIC or not 0 <= state.partition < len(self.runtime.shards):
            return
        if state.leader == self.node_id:
            self.runtime.load(state.partition, state.leader_epoch)
        else:
            if self.runtime.unload(state.partition, state.leader_epoch):
                log.info("shard %d unloaded: node %d leads it in epoch %d", state.partition,
                         state.leader, state.leader_epoch)
