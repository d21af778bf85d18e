"""The transaction coordinator core (Kafka's TransactionCoordinator and
TransactionMetadata), deterministic and sans-I/O.

Every handler takes the request and `now` (ms) and returns the records to
append to __transaction_state and the answer; the state changes only in
`replay`.  The runtime appends the records, replays them, and answers once
they are durable.  Completing a transaction is driven from outside: once a
PrepareCommit/PrepareAbort is durable the runtime writes the markers named
by `completion(tid)` to every partition of the transaction, then appends
what `complete(tid, now)` returns.  On load the same is done for every
Prepare* found (`pending_completions()`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..coordinator.partitioner import partition_for
from ..protocol.api import error_response
from ..protocol.messages.transactions import DESCRIBE_TRANSACTIONS
from ..protocol.errors import Err
from .records import (ALL_STATE_NAMES, COMPLETE_ABORT, COMPLETE_COMMIT, EMPTY, ONGOING,
                      PREPARE_ABORT, PREPARE_COMMIT, STATE_NAMES, TxnRecord, TxnValue)

NO_PRODUCER_ID = -1
NO_EPOCH = -1
# Kafka's isEpochExhausted: epoch >= Short.MAX_VALUE - 1 rotates to a new producer id
EPOCH_EXHAUSTED = 32766
COMPLETED = (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT)


@dataclass
class TxnConfig:
    num_partitions: int = 50                        # transaction.state.log.num.partitions
    max_timeout_ms: int = 900_000                   # transaction.max.timeout.ms
    id_expiration_ms: int = 604_800_000             # transactional.id.expiration.ms

    @classmethod
    def from_values(cls, v: dict) -> "TxnConfig":
        return cls(num_partitions=v.get("transaction.state.log.num.partitions", 50),
                   max_timeout_ms=v.get("transaction.max.timeout.ms", 900_000),
                   id_expiration_ms=v.get("transactional.id.expiration.ms", 604_800_000))


@dataclass
class TxnMeta:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: int
    partitions: frozenset = frozenset()
    start_ms: int = -1
    last_update_ms: int = -1
    # not persisted (loads as -1, as in Kafka): a KIP-360 retry of the bump
    # that led to producer_epoch carries this epoch and gets the same answer
    last_producer_epoch: int = NO_EPOCH

    def value(self, state: int, last_update_ms: int, partitions: tuple | None = None,
              start_ms: int | None = None, producer_epoch: int | None = None) -> TxnValue:
        """The record value of this id moved to `state` at `last_update_ms`,
        with the given fields changed (None: as they are now).  Explicit
        arguments, not **changes and two _replace: one tuple built per write."""
        if state == EMPTY:
            partitions = None  # Kafka writes null for Empty
        elif partitions is None:
            partitions = tuple(sorted(self.partitions))
        return TxnValue(self.producer_id,
                        self.producer_epoch if producer_epoch is None else producer_epoch,
                        self.timeout_ms, state, partitions, last_update_ms,
                        self.start_ms if start_ms is None else start_ms)


@dataclass
class Completion:
    """The markers a Prepare* asks for: one control batch per partition."""
    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: tuple


@dataclass
class TxnResult:
    records: list = field(default_factory=list)
    error: int = Err.NONE
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_EPOCH
    partition_errors: dict = field(default_factory=dict)  # (topic, p) -> code


class TxnCoordinator:
    def __init__(self, config: TxnConfig | None = None,
                 new_producer_id: Callable[[], int] | None = None) -> None:
        self.config = config or TxnConfig()
        self.txns: dict[str, TxnMeta] = {}
        self.by_producer: dict[int, str] = {}  # producer id -> transactional id
        counter = iter(range(1000, 1 << 62))
        self.new_producer_id = new_producer_id or (lambda: next(counter))

    def partition_of(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.config.num_partitions)

    def _record(self, tid: str, value: TxnValue | None) -> TxnRecord:
        return TxnRecord(self.partition_of(tid), tid, value)

    # ================================================================ replay
    def replay(self, record: TxnRecord) -> None:
        tid, v = record.transactional_id, record.value
        old = self.txns.get(tid)
        if old is not None and self.by_producer.get(old.producer_id) == tid:
            del self.by_producer[old.producer_id]
        if v is None:
            self.txns.pop(tid, None)
            return
        self.by_producer[v.producer_id] = tid
        last_epoch = NO_EPOCH
        if old is not None:
            if old.producer_id == v.producer_id and v.producer_epoch == old.producer_epoch:
                last_epoch = old.last_producer_epoch
            elif (old.producer_id == v.producer_id and v.state == EMPTY
                  and v.producer_epoch == old.producer_epoch + 1):
                last_epoch = old.producer_epoch  # an InitProducerId bump
        self.txns[tid] = TxnMeta(tid, v.producer_id, v.producer_epoch, v.timeout_ms, v.state,
                                 frozenset(v.partitions or ()), v.start_ms, v.last_update_ms,
                                 last_epoch)

    def drop_partition(self, partition: int) -> None:
        """Forget the ids of one __transaction_state partition (it is no
        longer coordinated here, or is about to be replayed again)."""
        for tid in [t for t in self.txns if self.partition_of(t) == partition]:
            meta = self.txns.pop(tid)
            if self.by_producer.get(meta.producer_id) == tid:
                del self.by_producer[meta.producer_id]

    def replay_all(self, records) -> None:
        for r in records:
            self.replay(r)

    def snapshot(self) -> dict:
        """The durable state (what a reload from the log gives)."""
        return {tid: (m.producer_id, m.producer_epoch, m.timeout_ms, m.state,
                      tuple(sorted(m.partitions)), m.start_ms, m.last_update_ms)
                for tid, m in self.txns.items()}

    # ========================================================= InitProducerId
    def init_producer_id(self, tid: str, timeout_ms: int, producer_id: int, producer_epoch: int,
                         now: int) -> TxnResult:
        if not tid:
            return TxnResult(error=Err.INVALID_REQUEST)
        if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_EPOCH):
            return TxnResult(error=Err.INVALID_REQUEST)
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return TxnResult(error=Err.INVALID_TRANSACTION_TIMEOUT)
        meta = self.txns.get(tid)
        if meta is None:
            # a new id (or one expired): accepted whatever pid/epoch it carries
            pid = self.new_producer_id()
            value = TxnValue(pid, 0, timeout_ms, EMPTY, None, now, -1)
            return TxnResult([self._record(tid, value)], Err.NONE, pid, 0)
        if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
            return TxnResult(error=Err.CONCURRENT_TRANSACTIONS)
        if producer_id != NO_PRODUCER_ID and producer_id != meta.producer_id:
            return TxnResult(error=Err.PRODUCER_FENCED)
        if meta.state == ONGOING:
            # fence the producer of the open transaction: abort it with a
            # bumped epoch; the client retries once the abort completes
            fenced = meta.value(producer_epoch=self._fence_epoch(meta), state=PREPARE_ABORT,
                                last_update_ms=now)
            return TxnResult([self._record(tid, fenced)], Err.CONCURRENT_TRANSACTIONS)
        if producer_epoch != NO_EPOCH and producer_epoch != meta.producer_epoch:
            if producer_epoch == meta.last_producer_epoch:
                # a retry of the bump that was already made: same answer
                return TxnResult([], Err.NONE, meta.producer_id, meta.producer_epoch)
            return TxnResult(error=Err.PRODUCER_FENCED)
        pid, epoch = meta.producer_id, meta.producer_epoch + 1
        if meta.producer_epoch >= EPOCH_EXHAUSTED:
            pid, epoch = self.new_producer_id(), 0
        value = TxnValue(pid, epoch, timeout_ms, EMPTY, None, now, -1)
        return TxnResult([self._record(tid, value)], Err.NONE, pid, epoch)

    @staticmethod
    def _fence_epoch(meta: TxnMeta) -> int:
        return min(meta.producer_epoch + 1, 32767)

    # ======================================================== AddPartitionsToTxn
    def _check_producer(self, tid: str, pid: int, epoch: int) -> tuple[TxnMeta | None, int]:
        if not tid:
            return None, Err.INVALID_REQUEST
        meta = self.txns.get(tid)
        if meta is None or meta.producer_id != pid:
            return None, Err.INVALID_PRODUCER_ID_MAPPING
        if meta.producer_epoch != epoch:
            return None, Err.PRODUCER_FENCED
        return meta, Err.NONE

    def add_partitions(self, tid: str, pid: int, epoch: int, partitions, now: int) -> TxnResult:
        """Add (topic, partition) pairs to the producer's transaction
        (AddPartitionsToTxn; AddOffsetsToTxn adds the group's
        __consumer_offsets partition)."""
        meta, error = self._check_producer(tid, pid, epoch)
        if meta is None:  # error is set
            return TxnResult(error=error)
        if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
            return TxnResult(error=Err.CONCURRENT_TRANSACTIONS)
        wanted = frozenset(partitions)
        if meta.state == ONGOING and wanted <= meta.partitions:
            return TxnResult([], Err.NONE, pid, epoch)  # nothing new: no write
        start = meta.start_ms if meta.state == ONGOING else now
        value = meta.value(state=ONGOING, partitions=tuple(sorted(meta.partitions | wanted)),
                           start_ms=start, last_update_ms=now)
        return TxnResult([self._record(tid, value)], Err.NONE, pid, epoch)

    def verify_partitions(self, tid: str, pid: int, epoch: int, partitions) -> TxnResult:
        """AddPartitionsToTxn v4+ VerifyOnly (KIP-890): is each partition in
        the ongoing transaction of this producer?  No records."""
        meta, error = self._check_producer(tid, pid, epoch)
        if meta is None:  # error is set
            return TxnResult(error=error)
        if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
            return TxnResult(error=Err.CONCURRENT_TRANSACTIONS)
        inside = meta.partitions if meta.state == ONGOING else frozenset()
        return TxnResult(partition_errors={
            tp: (Err.NONE if tp in inside else Err.TRANSACTION_ABORTABLE) for tp in partitions})

    def in_transaction(self, pid: int, epoch: int, topic: str, partition: int) -> int:
        """For a transactional append to a partition (KIP-890 part 1): NONE
        if the partition is in the ongoing transaction of pid at epoch."""
        tid = self.by_producer.get(pid)
        if tid is None:
            return Err.INVALID_TXN_STATE
        meta = self.txns[tid]
        if epoch < meta.producer_epoch:
            return Err.INVALID_PRODUCER_EPOCH
        if meta.state == ONGOING and epoch == meta.producer_epoch \
                and (topic, partition) in meta.partitions:
            return Err.NONE
        return Err.INVALID_TXN_STATE

    # ================================================================ EndTxn
    def end_txn(self, tid: str, pid: int, epoch: int, commit: bool, now: int) -> TxnResult:
        meta, error = self._check_producer(tid, pid, epoch)
        if meta is None:  # error is set
            return TxnResult(error=error)
        state = meta.state
        if state == ONGOING:
            value = meta.value(state=PREPARE_COMMIT if commit else PREPARE_ABORT,
                               last_update_ms=now)
            return TxnResult([self._record(tid, value)], Err.NONE, pid, epoch)
        if (state, commit) in ((COMPLETE_COMMIT, True), (COMPLETE_ABORT, False)):
            return TxnResult([], Err.NONE, pid, epoch)  # a retry of a finished EndTxn
        if (state, commit) in ((PREPARE_COMMIT, True), (PREPARE_ABORT, False)):
            return TxnResult(error=Err.CONCURRENT_TRANSACTIONS)
        return TxnResult(error=Err.INVALID_TXN_STATE)

    # ============================================================ completion
    def completion(self, tid: str) -> Completion | None:
        meta = self.txns.get(tid)
        if meta is None or meta.state not in (PREPARE_COMMIT, PREPARE_ABORT):
            return None
        return Completion(tid, meta.producer_id, meta.producer_epoch,
                          meta.state == PREPARE_COMMIT, tuple(sorted(meta.partitions)))

    def pending_completions(self) -> list[Completion]:
        return [c for c in (self.completion(t) for t in sorted(self.txns)) if c is not None]

    def complete(self, tid: str, now: int) -> list[TxnRecord]:
        """Every marker of the Prepare* is written: -> the Complete* record."""
        meta = self.txns.get(tid)
        if meta is None or meta.state not in (PREPARE_COMMIT, PREPARE_ABORT):
            return []
        state = COMPLETE_COMMIT if meta.state == PREPARE_COMMIT else COMPLETE_ABORT
        return [self._record(tid, meta.value(state=state, partitions=(), last_update_ms=now))]

    # ================================================================ timers
    def abort_timed_out(self, now: int) -> list[TxnRecord]:
        """PrepareAbort, with the epoch bumped (fencing the producer), for
        every Ongoing transaction older than its timeout."""
        out = []
        for tid in sorted(self.txns):
            meta = self.txns[tid]
            if meta.state == ONGOING and meta.start_ms + meta.timeout_ms < now:
                out.append(self._record(tid, meta.value(
                    producer_epoch=self._fence_epoch(meta), state=PREPARE_ABORT,
                    last_update_ms=now)))
        return out

    def expire_ids(self, now: int) -> list[TxnRecord]:
        """Tombstones for ids idle (Empty/Complete*) for transactional.id.expiration.ms."""
        limit = self.config.id_expiration_ms
        return [self._record(tid, None) for tid in sorted(self.txns)
                if self.txns[tid].state in COMPLETED
                and self.txns[tid].last_update_ms + limit <= now]

    # ============================================================ describing
    def describe(self, tid: str) -> dict:
        meta = self.txns.get(tid) if tid else None
        if not tid or meta is None:  # the other fields at the schema's defaults, as Kafka
            code = Err.INVALID_REQUEST if not tid else Err.TRANSACTIONAL_ID_NOT_FOUND
            return error_response(DESCRIBE_TRANSACTIONS.key, 0, {"transactional_ids": [tid]},
                                  code)["transaction_states"][0]
        by_topic: dict[str, list[int]] = {}
        for topic, p in sorted(meta.partitions):
            by_topic.setdefault(topic, []).append(p)
        return {"error_code": Err.NONE, "transactional_id": tid,
                "transaction_state": STATE_NAMES[meta.state],
                "transaction_timeout_ms": meta.timeout_ms,
                "transaction_start_time_ms": meta.start_ms,
                "producer_id": meta.producer_id, "producer_epoch": meta.producer_epoch,
                "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]}

    def list_transactions(self, states, producer_ids, duration_ms: int, now: int) -> dict:
        unknown = [s for s in states if s not in ALL_STATE_NAMES]
        wanted_states, wanted_pids = set(states), set(producer_ids)
        out = []
        for tid in sorted(self.txns):
            meta = self.txns[tid]
            name = STATE_NAMES[meta.state]
            if wanted_states and name not in wanted_states:
                continue
            if wanted_pids and meta.producer_id not in wanted_pids:
                continue
            if duration_ms >= 0 and not (meta.start_ms >= 0 and now - meta.start_ms > duration_ms):
                continue
            out.append({"transactional_id": tid, "producer_id": meta.producer_id,
                        "transaction_state": name})
        return {"throttle_time_ms": 0, "error_code": Err.NONE, "unknown_state_filters": unknown,
                "transaction_states": out}
