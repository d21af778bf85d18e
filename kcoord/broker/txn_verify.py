"""KIP-890 part 1 across nodes: before a transactional Produce opens a
transaction on a partition, the partition's leader asks the producer's
transaction coordinator whether the partition is in the ongoing transaction
(AddPartitionsToTxn v4 VerifyOnly), as Kafka's AddPartitionsToTxnManager
does.  Only needed when the coordinator is another node; one question per
(producer, epoch, partition) the first time a transaction writes there."""
from __future__ import annotations

from ..protocol.errors import CorruptRecordError
from ..protocol.records import iter_batches


def unverified(plane, req: dict) -> list[tuple]:
    """(transactional id, producer id, epoch, topic, partition) of each
    transactional batch in `req` that would open a transaction on a
    partition led here and whose coordinator is another node."""
    remote = plane.txn_remote
    tid = req.get("transactional_id")
    if remote is None or not tid or not remote.needs_remote_check(tid):
        return []
    out = []
    for tdata in req["topic_data"]:
        topic = plane.catalogue.get(tdata["name"])
        if topic is None or topic.internal:
            continue
        for pdata in tdata["partition_data"]:
            index = pdata["index"]
            records = pdata["records"]
            if not 0 <= index < len(topic.partitions) or not records \
                    or isinstance(plane._replicated(topic, index), int):
                continue  # the produce path answers these
            state = plane.txn_state(topic.partitions[index])
            try:
                for _, h in iter_batches(records):
                    if h.is_transactional and not h.is_control \
                            and h.producer_id not in state.ongoing:
                        key = (tid, h.producer_id, h.producer_epoch, topic.name, index)
                        if key not in out:
                            out.append(key)
            except CorruptRecordError:
                continue  # refused by the produce path
    return out
