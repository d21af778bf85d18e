"""The transaction coordinator follows the leadership of the
__transaction_state partitions, as the group coordinator's shards follow
__consumer_offsets (shard_ownership.py): this node coordinates the
transactional ids of a partition while it leads it (loaded for that leader
epoch, the coordinator epoch of its markers) and answers NOT_COORDINATOR
for them once another node does."""
from __future__ import annotations

import logging

from .state import PartitionState

log = logging.getLogger("kcoord.cluster.txn")

TXN_TOPIC = "__transaction_state"


class TxnOwnership:
    """A PartitionStateListener over the transaction runtime's
    load(partition, epoch) / unload(partition, epoch)."""

    def __init__(self, runtime, node_id: int) -> None:
        self.runtime = runtime
        self.node_id = node_id

    def on_partition_state(self, state: PartitionState) -> None:
        if state.topic != TXN_TOPIC or not 0 <= state.partition < len(self.runtime.states):
            return
        if state.leader == self.node_id:
            self.runtime.load(state.partition, state.leader_epoch)
        elif self.runtime.unload(state.partition, state.leader_epoch):
            log.info("transaction state partition %d unloaded: node %d leads it in epoch %d",
                     state.partition, state.leader, state.leader_epoch)
