"""Transactional state of one data partition (Kafka's ProducerStateManager,
the parts transactions need): the producers with an open transaction and
the offset it began at, the last stable offset, and the aborted
transactions (the `.txnindex` entries).

Rebuilt on open by scanning the log's batch headers (control batches are
decoded for their type); the `.txnindex` files (Kafka's format: int16
version 0, producer id, first offset, last offset = the ABORT marker's,
last stable offset after it; 34 bytes big-endian) are rewritten from that
scan, and appended to as aborts happen.
"""
from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from ..protocol.errors import Err
from ..protocol.records import build_batch, decode_batch, iter_batches

ABORT, COMMIT = 0, 1
TXN_INDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")
SCAN_CHUNK = 4 << 20


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


INT32_MAX = 2**31 - 1
BATCHES_KEPT = 5  # Kafka keeps the last 5 batches per producer for duplicate detection


@dataclass
class ProducerEntry:
    epoch: int = -1
    coordinator_epoch: int = -1
    last_sequence: int = -1
    last_timestamp: int = -1
    # (first sequence, last sequence, base offset) of its last batches at this epoch
    batches: list = field(default_factory=list)

    def new_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch = epoch
            self.last_sequence = -1
            self.batches = []


def in_sequence(last: int, first: int) -> bool:
    return first == last + 1 or (first == 0 and last == INT32_MAX)


def control_batch(producer_id: int, epoch: int, commit: bool, coordinator_epoch: int,
                  timestamp: int) -> bytes:
    """An end-transaction marker: Kafka's control record (key: version 0 and
    type, 0 ABORT / 1 COMMIT; value: version 0 and the coordinator epoch)."""
    key = _CONTROL_KEY.pack(0, COMMIT if commit else ABORT)
    value = _CONTROL_VALUE.pack(0, coordinator_epoch)
    return build_batch([(key, value, [], timestamp)], base_timestamp=timestamp,
                       producer_id=producer_id, producer_epoch=epoch, transactional=True,
                       control=True)


def control_type(batch: bytes, pos: int = 0) -> int | None:
    """ABORT or COMMIT for an end-transaction control batch, else None."""
    _, records = decode_batch(batch, pos)
    if not records or records[0].key is None or len(records[0].key) < 4:
        return None
    _, kind = _CONTROL_KEY.unpack_from(records[0].key, 0)
    return kind if kind in (ABORT, COMMIT) else None


@dataclass
class PartitionTxnState:
    path: Path
    producers: dict = field(default_factory=dict)   # pid -> ProducerEntry
    ongoing: dict = field(default_factory=dict)     # pid -> first offset of its open txn
    aborted: list = field(default_factory=list)     # AbortedTxn, by last offset

    # ----------------------------------------------------------- reading
    def last_stable_offset(self, high_watermark: int) -> int:
        """First offset of the earliest open transaction, capped at the high
        watermark (a replicated leader's open transaction may start above it)."""
        return min(min(self.ongoing.values(), default=high_watermark), high_watermark)

    def aborted_between(self, start: int, upper: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start, upper): those whose ABORT
        marker is at or after start and which began before upper."""
        i = bisect.bisect_left(self.aborted, start, key=lambda a: a.last_offset)
        return [a for a in self.aborted[i:] if a.first_offset < upper]

    # ------------------------------------------------------------ checks
    def check_append(self, header, previous=None) -> int:
        """Before appending a client batch: Kafka's producer-state checks.
        `previous`: the batch of the same producer just before it in the
        same request (its sequence then continues that one's)."""
        pid = header.producer_id
        if header.is_control:
            return Err.INVALID_RECORD  # only the coordinator writes markers
        if pid < 0:
            return Err.NONE
        entry = self.producers.get(pid)
        if entry is not None and header.producer_epoch < entry.epoch:
            return Err.INVALID_PRODUCER_EPOCH
        if not header.is_transactional and pid in self.ongoing:
            return Err.INVALID_TXN_STATE
        first = header.base_sequence
        if previous is not None and first >= 0 and previous.base_sequence >= 0 \
                and previous.producer_epoch == header.producer_epoch:
            last = previous.base_sequence + previous.last_offset_delta
            return Err.NONE if in_sequence(last, first) else Err.OUT_OF_ORDER_SEQUENCE_NUMBER
        if entry is None or first < 0 or entry.epoch < 0:
            return Err.NONE  # unknown producer state accepts any sequence (Kafka's rule)
        if header.producer_epoch != entry.epoch:
            return Err.NONE if first == 0 else Err.OUT_OF_ORDER_SEQUENCE_NUMBER
        if entry.last_sequence >= 0 and not in_sequence(entry.last_sequence, first):
            return Err.OUT_OF_ORDER_SEQUENCE_NUMBER
        return Err.NONE

    def duplicate_of(self, header) -> int | None:
        """The base offset a retried batch was written at (a batch with the
        same producer, epoch and sequence range among the last five), or None."""
        entry = self.producers.get(header.producer_id)
        if entry is None or header.base_sequence < 0 or header.producer_epoch != entry.epoch:
            return None
        last = header.base_sequence + header.last_offset_delta
        for first_seq, last_seq, offset in entry.batches:
            if first_seq == header.base_sequence and last_seq == last:
                return offset
        return None

    def check_marker(self, pid: int, epoch: int, coordinator_epoch: int) -> int:
        entry = self.producers.get(pid)
        if entry is not None:
            if epoch < entry.epoch:
                return Err.INVALID_PRODUCER_EPOCH
            if coordinator_epoch < entry.coordinator_epoch:
                return Err.TRANSACTION_COORDINATOR_FENCED
        return Err.NONE

    # ----------------------------------------------------------- updates
    def on_data(self, header, base_offset: int) -> None:
        pid = header.producer_id
        if pid < 0:
            return
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry()
        entry.new_epoch(header.producer_epoch)
        entry.last_timestamp = header.max_timestamp
        if header.base_sequence >= 0:
            entry.last_sequence = header.base_sequence + header.last_offset_delta
            entry.batches.append((header.base_sequence, entry.last_sequence, base_offset))
            del entry.batches[:-BATCHES_KEPT]
        if header.is_transactional and pid not in self.ongoing:
            self.ongoing[pid] = base_offset

    def on_marker(self, pid: int, epoch: int, kind: int, coordinator_epoch: int,
                  offset: int, timestamp: int) -> AbortedTxn | None:
        """A marker at `offset`: closes pid's open transaction, if any.
        -> the aborted-transaction entry to index, for a non-empty abort."""
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry()
        entry.new_epoch(epoch)
        entry.coordinator_epoch = coordinator_epoch
        entry.last_timestamp = timestamp
        # no client retries a batch of an ended transaction (commit flushes,
        # abort waits out what is in flight): a batch with the same sequences
        # now is new data reusing them (librdkafka after purging a batch it
        # took for unwritten), answered OUT_OF_ORDER_SEQUENCE_NUMBER by the
        # sequence check rather than acknowledged at the old batch's offset
        entry.batches = []
        first = self.ongoing.pop(pid, None)
        if first is None or kind != ABORT:
            return None
        lso = min(self.ongoing.values(), default=offset + 1)
        aborted = AbortedTxn(pid, first, offset, lso)
        self.aborted.append(aborted)
        return aborted

    # --------------------------------------------------- the .txnindex files
    def index_abort(self, segment_base: int, aborted: AbortedTxn) -> None:
        with open(self.path / f"{segment_base:020d}{TXN_INDEX_SUFFIX}", "ab") as fh:
            fh.write(_ENTRY.pack(0, *aborted))

    def rewrite_indexes(self, segment_bases: list[int]) -> None:
        """Write every segment's .txnindex from the aborted list (after a scan)."""
        for old in self.path.glob(f"*{TXN_INDEX_SUFFIX}"):
            old.unlink()
        for a in self.aborted:
            base = segment_bases[max(bisect.bisect_right(segment_bases, a.last_offset) - 1, 0)]
            self.index_abort(base, a)

    # -------------------------------------------------------------- rebuild
    @classmethod
    def scan(cls, plog) -> "PartitionTxnState":
        """Rebuild from the log: every batch header, control batches decoded."""
        state = cls(Path(plog.path))
        offset, end = plog.log_start_offset, plog.log_end_offset
        while offset < end:
            chunk = plog.read(offset, SCAN_CHUNK, min_one=True)
            if not chunk:
                break
            for pos, header in iter_batches(chunk):
                if header.next_offset <= offset:
                    continue  # the read starts at the batch holding `offset`
                offset = header.next_offset
                if header.is_control:
                    kind = control_type(chunk, pos)
                    if kind is not None:
                        value = decode_batch(chunk, pos)[1][0].value or b""
                        coord_epoch = (_CONTROL_VALUE.unpack_from(value, 0)[1]
                                       if len(value) >= 6 else -1)
                        state.on_marker(header.producer_id, header.producer_epoch, kind,
                                        coord_epoch, header.base_offset, header.max_timestamp)
                else:
                    state.on_data(header, header.base_offset)
        state.rewrite_indexes(plog.segment_base_offsets)
        return state
