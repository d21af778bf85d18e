"""Batches of a coordinator shard's log when transactions are involved:
TxnOffsetCommit records go in a transactional batch of their producer,
markers are control batches; plain records keep the fast writer."""
from __future__ import annotations

from operator import itemgetter

from ..broker.txn_state import control_batch
from ..coordinator.txn_offsets import TXN_MARKER, TXN_OFFSET_BATCH
from ..protocol.records import build_batch
from ..protocol.coordinator_batch import build_records_batch
from ..protocol.record_codec import encode_record

COORDINATOR_EPOCH = 0  # one process: the coordinator epoch never changes
_RECORD_TYPE = itemgetter(0)  # a record's type; transactional items' are negative


def build_shard_batches(items: list, now: int) -> bytearray:
    """The bytes to append for a shard's pending items, in order."""
    # a loop in C: every commit's ten records pass here
    if not items or min(map(_RECORD_TYPE, items)) >= 0:
        return build_records_batch(items, now)
    out = bytearray()
    run: list = []
    for item in items:
        if item[0] >= 0:
            run.append(item)
            continue
        if run:
            out += build_records_batch(run, now)
            run = []
        if item.type == TXN_OFFSET_BATCH:
            out += build_batch([(*encode_record(r), [], now) for r in item.records],
                               base_timestamp=now, producer_id=item.producer_id,
                               producer_epoch=item.producer_epoch, transactional=True)
        elif item.type == TXN_MARKER:
            out += control_batch(item.producer_id, item.producer_epoch, item.commit,
                                 COORDINATOR_EPOCH, now)
    if run:
        out += build_records_batch(run, now)
    return out
