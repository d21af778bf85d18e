"""The share coordinator's shard: the durable state of share partitions kept
on one __share_group_state partition (Kafka's ShareCoordinatorShard).

Sans-I/O like the group coordinator's shard: every operation takes `now`
and its request's fields and returns a Result whose `response` is the
partition's answer (the RPC's per-partition result fields) and whose
records, once durable, make the change.  State changes only in `replay`,
which the runtime calls for the records an operation emits and for every
record of the log when it loads the shard, so live and loaded state agree.

Per key (group id, topic id, partition) the state is a ShareSnapshot
(complete) followed by ShareUpdates (only the changed ranges): after
`share.coordinator.snapshot.update.records.per.snapshot` updates the next
write is a new snapshot, which merges everything and drops what lies below
the start offset.  Topic existence comes in as data (`partitions`: the
topic's partition count, None when the topic id is unknown), as the core
has no catalogue.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..coordinator.result import Result
from ..protocol.errors import Err
from ..protocol.messages.share_state import SHARE_SNAPSHOT, SHARE_UPDATE
from ..protocol.record_codec import Record
from .batch_merge import merge_batches
from .persister import StateBatch

# Kafka's ShareCoordinatorConfig (name, default, minimum)
SHARE_COORDINATOR_CONFIGS = {
    "share.coordinator.state.topic.num.partitions": (50, 1),
    "share.coordinator.state.topic.replication.factor": (3, 1),
    "share.coordinator.state.topic.min.isr": (2, 1),
    "share.coordinator.state.topic.segment.bytes": (104857600, 1),
    "share.coordinator.state.topic.compression.codec": (0, 0),
    "share.coordinator.threads": (1, 1),
    "share.coordinator.snapshot.update.records.per.snapshot": (500, 0),
    "share.coordinator.write.timeout.ms": (5000, 1),
    "share.coordinator.load.buffer.size": (5242880, 1),
    "share.coordinator.append.linger.ms": (-1, -1),
    "share.coordinator.state.topic.prune.interval.ms": (300000, 1),
    "share.coordinator.cold.partition.snapshot.interval.ms": (300000, 1),
}

COLD_SNAPSHOT_TIMER = ("share-cold-snapshot",)

Key = tuple  # (group id, topic id bytes, partition)


@dataclass
class ShareCoordinatorConfig:
    snapshot_update_records_per_snapshot: int = 500
    cold_partition_snapshot_interval_ms: int = 300000

    @classmethod
    def from_values(cls, v: dict) -> "ShareCoordinatorConfig":
        return cls(v["share.coordinator.snapshot.update.records.per.snapshot"],
                   v["share.coordinator.cold.partition.snapshot.interval.ms"])


@dataclass(frozen=True)
class ShareGroupOffset:
    """One key's state (Kafka's ShareGroupOffset)."""
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int
    create_timestamp: int
    write_timestamp: int
    batches: tuple = ()


@dataclass
class _Request:
    """Fields common to every share-state operation on one key."""
    key: Key
    partitions: int | None  # the topic's partition count; None: topic id unknown


def batches_from_rows(rows) -> list[StateBatch]:
    return [StateBatch(b["first_offset"], b["last_offset"], b["delivery_state"],
                       b["delivery_count"]) for b in rows]


def batch_rows(batches) -> list[dict]:
    return [{"first_offset": b.first_offset, "last_offset": b.last_offset,
             "delivery_state": b.delivery_state, "delivery_count": b.delivery_count}
            for b in batches]


def _answer(partition: int, code: int = Err.NONE, message: str | None = None, **fields) -> dict:
    return {"partition": partition, "error_code": code, "error_message": message, **fields}


def _key_fields(key: Key) -> dict:
    return {"group_id": key[0], "topic_id": key[1], "partition": key[2]}


class ShareCoordinatorShard:
    def __init__(self, partition: int, config: ShareCoordinatorConfig | None = None) -> None:
        self.partition = partition
        self.config = config or ShareCoordinatorConfig()
        self.states: dict[Key, ShareGroupOffset] = {}
        self.leader_epochs: dict[Key, int] = {}  # highest leader epoch seen per key
        self.state_epochs: dict[Key, int] = {}   # highest state epoch seen per key
        self.updates: dict[Key, int] = {}        # ShareUpdates since the key's last snapshot
        # Where the log holds each key's latest snapshot, and the offset after
        # the last record placed: what pruning may drop (Kafka's
        # ShareCoordinatorOffsetsManager).  Not state: learnt from the log as
        # records are appended or loaded.
        self.snapshot_offsets: dict[Key, int] = {}
        self.next_offset = -1

    # ================================================================ replay
    def replay(self, record: Record) -> None:
        rtype, key, value, _ = record
        k = (key["group_id"], key["topic_id"], key["partition"])
        if rtype == SHARE_SNAPSHOT:
            if value is None:  # tombstone: the key's state is gone
                self.states.pop(k, None)
                self.leader_epochs.pop(k, None)
                self.state_epochs.pop(k, None)
                self.updates.pop(k, None)
                return
            self._raise_epoch(self.leader_epochs, k, value["leader_epoch"])
            self._raise_epoch(self.state_epochs, k, value["state_epoch"])
            self.states[k] = ShareGroupOffset(
                value["snapshot_epoch"], value["state_epoch"], value["leader_epoch"],
                value["start_offset"], value["delivery_complete_count"],
                value["create_timestamp"], value["write_timestamp"],
                tuple(batches_from_rows(value["state_batches"])))
            # Kafka resets the count only once it has reached the limit
            if self.updates.get(k, 0) >= self.config.snapshot_update_records_per_snapshot:
                self.updates[k] = 0
        elif rtype == SHARE_UPDATE and value is not None:
            self._raise_epoch(self.leader_epochs, k, value["leader_epoch"])
            current = self.states.get(k)
            start = value["start_offset"]
            if current is None:
                self.states[k] = ShareGroupOffset(
                    value["snapshot_epoch"], 0, value["leader_epoch"], start,
                    value["delivery_complete_count"], 0, 0,
                    tuple(merge_batches([], batches_from_rows(value["state_batches"]), start)))
            else:
                start = current.start_offset if start == -1 else start
                leader = current.leader_epoch if value["leader_epoch"] == -1 \
                    else value["leader_epoch"]
                self.states[k] = replace(
                    current, start_offset=start, leader_epoch=leader,
                    delivery_complete_count=value["delivery_complete_count"],
                    batches=tuple(merge_batches(list(current.batches),
                                                batches_from_rows(value["state_batches"]), start)))
            self.updates[k] = self.updates.get(k, 0) + 1

    def replay_emitted(self, records: list[Record]) -> None:
        for record in records:
            self.replay(record)

    def placed(self, record: Record, offset: int) -> None:
        """`record` (already replayed) sits at `offset` in the log."""
        if record.type == SHARE_SNAPSHOT:
            key = record.key
            k = (key["group_id"], key["topic_id"], key["partition"])
            if record.value is None:
                self.snapshot_offsets.pop(k, None)
            else:
                self.snapshot_offsets[k] = offset
        self.next_offset = max(self.next_offset, offset + 1)

    def redundant_offset(self) -> int | None:
        """The log offset below which no record is needed to rebuild the
        state (the oldest latest-snapshot of the live keys; everything read
        when no key is live), or None when unknown."""
        if not self.states:
            return self.next_offset if self.next_offset >= 0 else None
        offsets = self.snapshot_offsets
        if any(k not in offsets for k in self.states):
            return None  # a key's snapshot is not placed yet
        return min(offsets[k] for k in self.states)

    @staticmethod
    def _raise_epoch(epochs: dict, k: Key, epoch: int) -> None:
        if epochs.get(k, epoch) <= epoch:
            epochs[k] = epoch

    # ================================================================ runtime hooks
    def set_observer(self, observer) -> None:
        """The runtime's event log; the share coordinator reports nothing yet."""

    def on_loaded(self, now: int) -> Result:
        result = Result()
        result.arm(COLD_SNAPSHOT_TIMER, now + self.config.cold_partition_snapshot_interval_ms)
        return result

    def restart_member_timers(self, _now: int) -> Result:
        """No member sessions here (the runtime's hook after a lapse)."""
        return Result()

    def on_timer(self, key: tuple, now: int) -> Result:
        if key != COLD_SNAPSHOT_TIMER:
            return Result()
        result = Result(records=self.cold_snapshots(now))
        result.arm(COLD_SNAPSHOT_TIMER, now + self.config.cold_partition_snapshot_interval_ms)
        return result

    def cleanup(self, _now: int) -> list[Record]:
        return []

    # ================================================================ checks
    @staticmethod
    def _invalid(req: _Request) -> dict | None:
        """Kafka's first checks of every operation, in its order."""
        group_id, topic_id, partition = req.key
        if topic_id is None:
            return _answer(partition, Err.INVALID_REQUEST, "The topic id in the request is null.")
        if partition < 0:
            return _answer(partition, Err.INVALID_REQUEST,
                           "The partition id in the request is negative.")
        return None

    @staticmethod
    def _unknown_topic(req: _Request) -> dict | None:
        if req.partitions is None or req.partitions <= req.key[2]:
            return _answer(req.key[2], Err.UNKNOWN_TOPIC_OR_PARTITION,
                           "This server does not host this topic-partition.")
        return None

    def _fenced_state(self, k: Key, state_epoch: int) -> bool:
        return state_epoch != -1 and self.state_epochs.get(k, state_epoch) > state_epoch

    # ================================================================ operations
    def initialize(self, now: int, req: _Request, state_epoch: int, start_offset: int) -> Result:
        """InitializeShareGroupState: a new snapshot with no batches."""
        k = req.key
        error = self._invalid(req)
        if error is None and self._fenced_state(k, state_epoch):
            error = _answer(k[2], Err.FENCED_STATE_EPOCH,
                            "The share coordinator is fenced by a newer state epoch.")
        error = error or self._unknown_topic(req)
        if error is not None:
            return Result(response=error)
        old = self.states.get(k)
        value = {"snapshot_epoch": 0 if old is None else old.snapshot_epoch + 1,
                 "state_epoch": state_epoch, "leader_epoch": 0, "start_offset": start_offset,
                 "delivery_complete_count": -1 if start_offset == -1 else 0,
                 "create_timestamp": now, "write_timestamp": now, "state_batches": []}
        return Result(records=[Record(SHARE_SNAPSHOT, _key_fields(k), value)],
                      response=_answer(k[2]))

    def read(self, now: int, req: _Request, leader_epoch: int) -> Result:
        """ReadShareGroupState; a new leader epoch is written (the new leader
        fences the old one)."""
        k = req.key
        error = self._invalid(req)
        current = self.states.get(k)
        if error is None and current is None:
            error = _answer(k[2], Err.INVALID_REQUEST, "Read on an uninitialized share partition.")
        if error is None and self.leader_epochs.get(k, leader_epoch) > leader_epoch:
            error = _answer(k[2], Err.FENCED_LEADER_EPOCH,
                            "The leader epoch in the request is older than the one stored.")
        error = error or self._unknown_topic(req)
        if error is not None:
            return Result(response={**error, "state_epoch": 0, "start_offset": -1,
                                    "state_batches": []})
        answer = _answer(k[2], state_epoch=current.state_epoch,
                         start_offset=current.start_offset,
                         state_batches=batch_rows(current.batches))
        if leader_epoch == -1 or self.leader_epochs.get(k) == leader_epoch:
            return Result(response=answer)
        record = self._state_record(now, k, current, leader_epoch, current.start_offset,
                                    current.delivery_complete_count, [])
        return Result(records=[record], response=answer)

    def write(self, now: int, req: _Request, state_epoch: int, leader_epoch: int,
              start_offset: int, delivery_complete_count: int, batches: list[StateBatch]) -> Result:
        """WriteShareGroupState: a ShareUpdate, or a ShareSnapshot once the
        key has had enough updates since its last one."""
        k = req.key
        error = self._invalid(req)
        current = self.states.get(k)
        if error is None and current is None:
            error = _answer(k[2], Err.INVALID_REQUEST,
                            "Write on an uninitialized share partition.")
        if error is None and leader_epoch != -1 \
                and self.leader_epochs.get(k, leader_epoch) > leader_epoch:
            error = _answer(k[2], Err.FENCED_LEADER_EPOCH,
                            "The leader epoch in the request is older than the one stored.")
        if error is None and self._fenced_state(k, state_epoch):
            error = _answer(k[2], Err.FENCED_STATE_EPOCH,
                            "The share coordinator is fenced by a newer state epoch.")
        error = error or self._unknown_topic(req)
        if error is not None:
            return Result(response=error)
        # as Kafka's: the writer's leader epoch (and state epoch) is stored, so a
        # leader that never read at its epoch still fences the ones before it
        record = self._state_record(now, k, current, leader_epoch, start_offset,
                                    delivery_complete_count, batches, state_epoch)
        return Result(records=[record], response=_answer(k[2]))

    def delete(self, _now: int, req: _Request) -> Result:
        """DeleteShareGroupState: a tombstone (nothing for an unknown key)."""
        k = req.key
        error = self._invalid(req) or self._unknown_topic(req)
        if error is not None:
            return Result(response=error)
        if k not in self.states:
            return Result(response=_answer(k[2]))
        return Result(records=[Record(SHARE_SNAPSHOT, _key_fields(k), None)],
                      response=_answer(k[2]))

    def summary(self, _now: int, req: _Request, _leader_epoch: int) -> Result:
        """ReadShareGroupStateSummary: nothing written; an unknown key
        answers start -1, delivery complete count -1, epochs 0."""
        k = req.key
        error = self._invalid(req) or self._unknown_topic(req)
        if error is not None:
            return Result(response={**error, "state_epoch": 0, "leader_epoch": 0,
                                    "start_offset": -1, "delivery_complete_count": -1})
        current = self.states.get(k)
        if current is None:
            return Result(response=_answer(k[2], state_epoch=0, leader_epoch=0, start_offset=-1,
                                           delivery_complete_count=-1))
        return Result(response=_answer(
            k[2], state_epoch=current.state_epoch, leader_epoch=current.leader_epoch,
            start_offset=current.start_offset,
            delivery_complete_count=current.delivery_complete_count))

    def offsets(self) -> list[tuple[Key, int, int]]:
        """Every key's (key, start offset, delivery complete count), as the
        summary gives them: what /metrics' share lag is computed from."""
        return [(k, s.start_offset, s.delivery_complete_count) for k, s in self.states.items()]

    def cold_snapshots(self, now: int) -> list[Record]:
        """A fresh snapshot of every key whose last snapshot is older than
        share.coordinator.cold.partition.snapshot.interval.ms (Kafka's
        snapshotColdPartitions), unless every key already had one."""
        states = self.states
        if all(s.create_timestamp != s.write_timestamp for s in states.values()):
            return []
        interval = self.config.cold_partition_snapshot_interval_ms
        return [self._snapshot(k, replace(s, snapshot_epoch=s.snapshot_epoch + 1,
                                          write_timestamp=now))
                for k, s in states.items() if now - s.write_timestamp >= interval]

    # ================================================================ records
    def _state_record(self, now: int, k: Key, current: ShareGroupOffset, leader_epoch: int,
                      start_offset: int, delivery_complete_count: int,
                      batches: list[StateBatch], state_epoch: int = -1) -> Record:
        """A ShareSnapshot once the key has had enough updates, else a ShareUpdate
        (an epoch of -1 keeps the stored one)."""
        if self.updates.get(k, 0) >= self.config.snapshot_update_records_per_snapshot:
            start = current.start_offset if start_offset == -1 else start_offset
            return self._snapshot(k, ShareGroupOffset(
                current.snapshot_epoch + 1,
                current.state_epoch if state_epoch == -1 else state_epoch,
                current.leader_epoch if leader_epoch == -1 else leader_epoch, start,
                delivery_complete_count, now, now,
                tuple(merge_batches(list(current.batches), batches, start))))
        return Record(SHARE_UPDATE, _key_fields(k), {
            "snapshot_epoch": current.snapshot_epoch, "leader_epoch": leader_epoch,
            "start_offset": start_offset, "delivery_complete_count": delivery_complete_count,
            "state_batches": batch_rows(merge_batches([], batches, start_offset))})

    @staticmethod
    def _snapshot(k: Key, s: ShareGroupOffset) -> Record:
        return Record(SHARE_SNAPSHOT, _key_fields(k), {
            "snapshot_epoch": s.snapshot_epoch, "state_epoch": s.state_epoch,
            "leader_epoch": s.leader_epoch, "start_offset": s.start_offset,
            "delivery_complete_count": s.delivery_complete_count,
            "create_timestamp": s.create_timestamp, "write_timestamp": s.write_timestamp,
            "state_batches": batch_rows(s.batches)})

    # ================================================================ tests
    def snapshot(self) -> dict:
        """The durable state, for replay == live comparisons."""
        return {"states": dict(self.states), "leader_epochs": dict(self.leader_epochs),
                "state_epochs": dict(self.state_epochs), "updates": dict(self.updates)}


def share_request(group_id: str, topic_id: bytes, partition: int,
                  partitions: int | None) -> _Request:
    return _Request((group_id, topic_id, partition), partitions)
