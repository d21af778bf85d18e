"""Transactional offset commits of one shard (Kafka's OffsetMetadataManager
pendingTransactionalOffsets / openTransactionsByGroup).

TxnOffsetCommit writes the same OffsetCommit records as OffsetCommit, in a
transactional batch of the producer (the runtime's write_txn: producer id
and epoch are the batch's metadata); they stay pending, invisible to
OffsetFetch, until the transaction's marker reaches this shard's
__consumer_offsets partition (complete_txn): COMMIT installs each pending
offset unless a plain commit of the same partition was replayed after it
(the later record wins), ABORT drops them.  Both are replayed (the shard's
replay_txn_offsets and replay_txn_marker), live and when loading, so a
reload gives the state the live shard had.
"""
from __future__ import annotations

from ..protocol.errors import Err
from .offsets import OffsetValue, commit_records
from .result import Record, Result

class PendingTxnOffsets:
    def __init__(self) -> None:
        # producer id -> group -> (topic, partition) -> [OffsetValue, superseded]
        self.pending: dict[int, dict[str, dict[tuple, list]]] = {}
        self.by_group: dict[str, set[int]] = {}  # group -> producers with pending offsets

    # -------------------------------------------------------------- replay
    def replay_batch(self, pid: int, records: list[Record]) -> None:
        for _rtype, key, value, _version in records:
            group, tp = key["group"], (key["topic"], key["partition"])
            if value is None:
                self.on_tombstone(group, tp)
                continue
            entry = OffsetValue(value["offset"], value.get("leader_epoch", -1),
                                value.get("metadata") or "", value["commit_timestamp"], None)
            self.pending.setdefault(pid, {}).setdefault(group, {})[tp] = [entry, False]
            self.by_group.setdefault(group, set()).add(pid)

    def replay_marker(self, pid: int, commit: bool, offsets) -> list[str]:
        """Install (COMMIT) or drop (ABORT) the producer's pending offsets;
        -> the groups whose offsets were installed."""
        groups = self.pending.pop(pid, {})
        for group in groups:
            pids = self.by_group.get(group)
            if pids is not None:
                pids.discard(pid)
                if not pids:
                    del self.by_group[group]
        if not commit:
            return []
        installed = []
        for group, parts in groups.items():
            committed = offsets.by_group.setdefault(group, {})
            for tp, (value, superseded) in parts.items():
                if not superseded:
                    committed[tp] = value
            if not committed:
                del offsets.by_group[group]
            else:
                installed.append(group)
        return installed

    def on_plain_commit(self, group: str, tp: tuple) -> None:
        """A plain commit replayed after a pending one wins over it."""
        for pid in self.by_group.get(group, ()):
            entry = self.pending[pid][group].get(tp)
            if entry is not None:
                entry[1] = True

    def on_tombstone(self, group: str, tp: tuple) -> None:
        """A tombstone removes the pending offsets of the partition too."""
        for pid in list(self.by_group.get(group, ())):
            parts = self.pending[pid][group]
            parts.pop(tp, None)
            if not parts:
                del self.pending[pid][group]
                if not self.pending[pid]:
                    del self.pending[pid]
                self.by_group[group].discard(pid)
        if group in self.by_group and not self.by_group[group]:
            del self.by_group[group]

    # --------------------------------------------------------------- reads
    def is_pending(self, group: str, tp: tuple) -> bool:
        return any(tp in self.pending[pid][group] for pid in self.by_group.get(group, ()))

    def has_open(self, group: str) -> bool:
        return bool(self.by_group.get(group))

    def partitions(self, group: str) -> set:
        out = set()
        for pid in self.by_group.get(group, ()):
            out |= set(self.pending[pid][group])
        return out

    def snapshot(self) -> dict:
        return {pid: {g: {tp: (v[0].offset, v[0].metadata, v[1]) for tp, v in parts.items()}
                      for g, parts in groups.items()}
                for pid, groups in self.pending.items()}


def txn_offset_commit(shard, req: dict, version: int, now: int) -> Result:
    """TxnOffsetCommit on `shard` (a CoordinatorShard): -> the response and the
    records, which the runtime writes in the producer's transactional batch.
    v3+ validates member and generation like OffsetCommit (KIP-447), with no
    REBALANCE_IN_PROGRESS; v0-2 are accepted whatever the group's state.  The
    runtime has already checked that the group's partition is in the
    producer's transaction and marked unknown partitions."""
    group_id = req["group_id"]
    error: int = Err.NONE
    if not group_id:
        error = Err.INVALID_GROUP_ID
    elif version >= 3:
        error = _validate(shard, group_id, req.get("member_id") or "",
                          req.get("group_instance_id"), req.get("generation_id", -1))
    topics, records = commit_records(group_id, req["topics"], error, now, None,
                                     shard.config.offset_metadata_max_bytes)
    return Result(records=records, response={"throttle_time_ms": 0, "topics": topics})


def _validate(shard, group_id: str, member_id: str, instance_id, generation: int) -> int:
    if group_id in shard.share.groups:  # share groups have no committed offsets
        return Err.GROUP_ID_NOT_FOUND
    consumer_group = shard.consumer.groups.get(group_id)
    if consumer_group is not None:
        # KIP-848 groups: the generation is the member epoch
        return shard.consumer.validate_offset_commit(consumer_group, member_id, generation, 9,
                                                    transactional=True)
    group = shard.groups.get(group_id)
    if group is None:
        return Err.NONE if generation < 0 else Err.ILLEGAL_GENERATION
    return shard.classic.validate_offset_commit(group, member_id, instance_id, generation,
                                                 transactional=True)


def mark_unstable(pending: PendingTxnOffsets, group: str, topics: list[dict]) -> None:
    """OffsetFetch with RequireStable: partitions with pending transactional
    offsets answer UNSTABLE_OFFSET_COMMIT (the client retries)."""
    for t in topics:
        for p in t["partitions"]:
            if p["error_code"] == Err.NONE and pending.is_pending(group, (t["name"],
                                                                       p["partition_index"])):
                p.update(committed_offset=-1, committed_leader_epoch=-1, metadata="",
                         error_code=Err.UNSTABLE_OFFSET_COMMIT)
