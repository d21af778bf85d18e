"""OffsetForLeaderEpoch (23): where a leader epoch ends in a partition's log.

Answered from the log's leader-epoch cache with Kafka's rules
(LeaderEpochFileCache.endOffsetFor): the latest epoch ends at the log end,
an older one where the next begins.  A single node is the leader of every
partition in epoch 0 (as its Metadata and ListOffsets say), so its epoch
checks are against 0 and a log with no epoch recorded yet (written before
batches were stamped) is all epoch 0.  In a cluster a partition's Replica
answers (replica.py: fencing by the current leader epoch, leader only).
Authorization (CLUSTER_ACTION, or DESCRIBE per topic) is security/checks.py's.
"""
from __future__ import annotations

from typing import Callable

from ..log.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, EpochCache
from ..protocol.api import serves
from ..protocol.errors import Err

SINGLE_NODE_EPOCH = 0


class LeaderEpochHandlers:
    def __init__(self, catalogue, replica_for: Callable | None = None) -> None:
        self.catalogue = catalogue
        # (topic, partition) -> Replica or None; set in a cluster
        self.replica_for = replica_for

    @serves("OffsetForLeaderEpoch")
    def offset_for_leader_epoch(self, _ctx, req: dict) -> dict:
        topics = []
        for treq in req["topics"]:
            parts = []
            for preq in treq["partitions"]:
                index = preq["partition"]
                error, epoch, end = self._answer(treq["topic"], index,
                                                 preq.get("current_leader_epoch", -1),
                                                 preq["leader_epoch"])
                parts.append({"error_code": error, "partition": index,
                              "leader_epoch": epoch, "end_offset": end})
            topics.append({"topic": treq["topic"], "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}

    def _answer(self, name: str, index: int, current: int, requested: int):
        undefined = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        plog = self.catalogue.partition(name, index)
        if plog is None:
            return (Err.UNKNOWN_TOPIC_OR_PARTITION, *undefined)
        if self.replica_for is not None:
            replica = self.replica_for(name, index)
            if replica is None:
                return (Err.NOT_LEADER_OR_FOLLOWER, *undefined)
            return replica.answer_epoch_query(current, requested)
        if current > SINGLE_NODE_EPOCH:
            return (Err.UNKNOWN_LEADER_EPOCH, *undefined)
        if 0 <= current < SINGLE_NODE_EPOCH:
            return (Err.FENCED_LEADER_EPOCH, *undefined)
        cache = plog.epochs if plog.epochs.entries else EpochCache(
            [(SINGLE_NODE_EPOCH, plog.log_start_offset)])
        epoch, end = cache.end_offset_for(requested, plog.log_end_offset)
        return Err.NONE, epoch, end
