"""Every batch a coordinator shard appends to its __consumer_offsets log.

A shard's pending writes are runs of records, each with its batch
metadata: plain records (the fast writer, one batch), the records of a
producer's transaction (TxnWrite: one transactional batch carrying the
producer id and epoch), or a transaction's end (TxnEnd: one control batch,
the COMMIT or ABORT marker)."""
from __future__ import annotations

from typing import NamedTuple

from ..broker.txn_state import control_batch
from ..protocol.coordinator_batch import build_records_batch
from ..protocol.record_codec import encode_record
from ..protocol.records import build_batch

COORDINATOR_EPOCH = 0  # one process: the coordinator epoch never changes


class TxnWrite(NamedTuple):
    """Records of a producer's transaction (TxnOffsetCommit)."""
    producer_id: int
    producer_epoch: int


class TxnEnd(NamedTuple):
    """The end of a producer's transaction on this partition (its marker)."""
    producer_id: int
    producer_epoch: int
    commit: bool


def build_shard_batches(records: list, now: int, runs: list | None = None) -> bytearray:
    """The bytes to append: each of `runs` ((metadata, records), in order;
    metadata None for plain records), then `records` (plain)."""
    if not runs:  # every commit's ten records pass here
        return build_records_batch(records, now)
    out = bytearray()
    for meta, items in runs:
        if meta is None:
            if items:
                out += build_records_batch(items, now)
        elif meta.__class__ is TxnWrite:
            out += build_batch([(*encode_record(r), [], now) for r in items],
                               base_timestamp=now, producer_id=meta.producer_id,
                               producer_epoch=meta.producer_epoch, transactional=True)
        else:
            out += control_batch(meta.producer_id, meta.producer_epoch, meta.commit,
                                 COORDINATOR_EPOCH, now)
    if records:
        out += build_records_batch(records, now)
    return out
