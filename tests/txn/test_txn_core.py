"""The transaction coordinator core, handler by handler (fake clock), and its
record schemas."""
from __future__ import annotations

import struct

from kcoord.protocol.errors import Err
from kcoord.txn.coordinator import TxnConfig, TxnCoordinator
from kcoord.protocol.records import build_batch, decode_batch
from kcoord.txn.records import (COMPLETE_ABORT, COMPLETE_COMMIT, EMPTY, ONGOING, PREPARE_ABORT,
                                PREPARE_COMMIT, TxnRecord, TxnValue, decode_key, decode_value,
                                encode_key, encode_value, partition_batches)


def core(**kw) -> TxnCoordinator:
    pids = iter(range(500, 10**6))
    return TxnCoordinator(TxnConfig(max_timeout_ms=60_000, id_expiration_ms=100_000, **kw),
                          lambda: next(pids))


def apply(c: TxnCoordinator, res):
    c.replay_all(res.records)
    return res


def finish(c: TxnCoordinator, tid: str, now: int) -> None:
    c.replay_all(c.complete(tid, now))


def test_records_round_trip_in_kafkas_layout():
    key = encode_key("tx-1")
    assert key == b"\x00\x00\x00\x04tx-1"
    v = TxnValue(42, 3, 60000, ONGOING, (("a", 0), ("a", 2), ("b", 1)), 1000, 900)
    raw = encode_value(v)
    # version 0, pid, epoch, timeout, status, then 2 topics
    assert raw[:17] == struct.pack(">hqhib", 0, 42, 3, 60000, ONGOING)
    assert struct.unpack_from(">i", raw, 17)[0] == 2
    assert decode_value(raw) == v and decode_key(key) == "tx-1"
    empty = TxnValue(42, 4, 60000, EMPTY, None, 1000, -1)
    assert struct.unpack_from(">i", encode_value(empty), 17)[0] == -1  # null partitions
    assert decode_value(encode_value(empty)) == empty
    assert decode_value(None) is None and decode_key(b"\x00\x01\x00\x00") is None


def test_a_lone_record_is_written_as_build_batch_writes_it():
    """partition_batches writes one record by hand (one_record_batch) and
    reuses the key and the partitions section it encoded before: the bytes
    must be build_batch's for every shape: a null value (tombstone), a null
    partitions array (Empty), long ids and values (two-byte varints), and
    the same id and partitions written again (from the caches)."""
    long_topic = "t" * 90
    values = [None,
              TxnValue(7, 0, 60000, EMPTY, None, 5, -1),
              TxnValue(7, 1, 60000, ONGOING, (("a", 0), ("a", 3), ("b", 1)), 6, 6),
              TxnValue(7, 1, 60000, PREPARE_COMMIT, (("a", 0), ("a", 3), ("b", 1)), 8, 6),
              TxnValue(7, 1, 60000, ONGOING, tuple((long_topic, p) for p in range(40)), 9, 9),
              TxnValue(7, 1, 60000, COMPLETE_COMMIT, (), 10, 6)]
    for tid in ("tx-1", "x" * 200):
        for _ in range(2):  # the second time from the caches
            for now, v in enumerate(values, 1_700_000_000_000):
                [(partition, batch)] = partition_batches([TxnRecord(3, tid, v)], now)
                key = b"\x00\x00" + struct.pack(">h", len(tid)) + tid.encode()
                assert partition == 3
                assert batch == build_batch([(key, encode_value(v), [], now)],
                                            base_timestamp=now)
                header, [record] = decode_batch(batch)
                assert (header.base_timestamp, header.max_timestamp) == (now, now)
                assert decode_key(record.key) == tid and decode_value(record.value) == v
    # several records: one batch per partition, in the order they first appear
    two = partition_batches([TxnRecord(1, "a", values[1]), TxnRecord(0, "b", values[2]),
                             TxnRecord(1, "c", None)], 5)
    assert [p for p, _ in two] == [1, 0]
    assert [decode_key(r.key) for r in decode_batch(two[0][1])[1]] == ["a", "c"]


def test_init_bumps_epoch_and_fences_the_old_producer():
    c = core()
    r1 = apply(c, c.init_producer_id("t", 1000, -1, -1, 0))
    assert (r1.error, r1.producer_epoch) == (Err.NONE, 0)
    r2 = apply(c, c.init_producer_id("t", 1000, -1, -1, 1))
    assert (r2.producer_id, r2.producer_epoch) == (r1.producer_id, 1)
    stale = c.add_partitions("t", r1.producer_id, 0, [("x", 0)], 2)
    assert stale.error == Err.PRODUCER_FENCED and not stale.records
    assert c.end_txn("t", r1.producer_id + 1, 1, True, 2).error == Err.INVALID_PRODUCER_ID_MAPPING


def test_init_on_an_ongoing_transaction_aborts_it_first():
    c = core()
    r = apply(c, c.init_producer_id("t", 1000, -1, -1, 0))
    apply(c, c.add_partitions("t", r.producer_id, 0, [("x", 0)], 10))
    fence = apply(c, c.init_producer_id("t", 1000, -1, -1, 20))
    assert fence.error == Err.CONCURRENT_TRANSACTIONS
    [rec] = fence.records
    assert rec.value.state == PREPARE_ABORT and rec.value.producer_epoch == 1
    comp = c.completion("t")
    assert (comp.commit, comp.producer_epoch, comp.partitions) == (False, 1, (("x", 0),))
    assert c.init_producer_id("t", 1000, -1, -1, 21).error == Err.CONCURRENT_TRANSACTIONS
    finish(c, "t", 22)
    assert c.txns["t"].state == COMPLETE_ABORT
    again = apply(c, c.init_producer_id("t", 1000, -1, -1, 23))
    assert (again.error, again.producer_epoch) == (Err.NONE, 2)


def test_kip360_bump_with_producer_id_and_epoch_and_its_retry():
    c = core()
    r = apply(c, c.init_producer_id("t", 1000, -1, -1, 0))
    bump = apply(c, c.init_producer_id("t", 1000, r.producer_id, 0, 1))
    assert (bump.error, bump.producer_epoch) == (Err.NONE, 1)
    retry = c.init_producer_id("t", 1000, r.producer_id, 0, 2)  # the answer was lost
    assert (retry.error, retry.producer_epoch, retry.records) == (Err.NONE, 1, [])
    assert c.init_producer_id("t", 1000, r.producer_id, 5, 3).error == Err.PRODUCER_FENCED
    assert c.init_producer_id("t", 1000, r.producer_id + 7, 1, 3).error == Err.PRODUCER_FENCED
    assert c.init_producer_id("t", 1000, r.producer_id, -1, 3).error == Err.INVALID_REQUEST


def test_exhausted_epoch_rotates_the_producer_id():
    c = core()
    c.replay(TxnRecord(c.partition_of("t"), "t", TxnValue(7, 32766, 1000, EMPTY, None, 0, -1)))
    r = c.init_producer_id("t", 1000, -1, -1, 1)
    assert r.producer_id != 7 and r.producer_epoch == 0


def test_timeout_validation():
    c = core()
    for bad in (0, -5, 60_001):
        assert c.init_producer_id("t", bad, -1, -1, 0).error == Err.INVALID_TRANSACTION_TIMEOUT
    assert c.init_producer_id("", 1000, -1, -1, 0).error == Err.INVALID_REQUEST


def test_add_partitions_writes_only_what_is_new_and_start_time_once():
    c = core()
    r = apply(c, c.init_producer_id("t", 1000, -1, -1, 0))
    first = apply(c, c.add_partitions("t", r.producer_id, 0, [("x", 0)], 100))
    assert first.records[0].value.start_ms == 100
    assert c.add_partitions("t", r.producer_id, 0, [("x", 0)], 150).records == []
    more = apply(c, c.add_partitions("t", r.producer_id, 0, [("y", 1)], 200))
    assert more.records[0].value.start_ms == 100
    assert set(c.txns["t"].partitions) == {("x", 0), ("y", 1)}
    v = c.verify_partitions("t", r.producer_id, 0, [("x", 0), ("z", 0)])
    assert v.partition_errors == {("x", 0): Err.NONE, ("z", 0): Err.TRANSACTION_ABORTABLE}
    assert c.in_transaction(r.producer_id, 0, "x", 0) == Err.NONE
    assert c.in_transaction(r.producer_id, 0, "z", 0) == Err.INVALID_TXN_STATE


def test_end_txn_states():
    c = core()
    r = apply(c, c.init_producer_id("t", 1000, -1, -1, 0))
    pid = r.producer_id
    assert c.end_txn("t", pid, 0, True, 1).error == Err.INVALID_TXN_STATE  # nothing added
    apply(c, c.add_partitions("t", pid, 0, [("x", 0)], 2))
    end = apply(c, c.end_txn("t", pid, 0, True, 3))
    assert end.records[0].value.state == PREPARE_COMMIT
    assert c.end_txn("t", pid, 0, True, 4).error == Err.CONCURRENT_TRANSACTIONS
    assert c.add_partitions("t", pid, 0, [("y", 0)], 4).error == Err.CONCURRENT_TRANSACTIONS
    finish(c, "t", 5)
    assert c.txns["t"].state == COMPLETE_COMMIT and not c.txns["t"].partitions
    assert c.end_txn("t", pid, 0, True, 6).error == Err.NONE  # a retry: idempotent
    assert c.end_txn("t", pid, 0, False, 6).error == Err.INVALID_TXN_STATE


def test_timed_out_transactions_are_aborted_with_a_bumped_epoch():
    c = core()
    r = apply(c, c.init_producer_id("t", 1000, -1, -1, 0))
    apply(c, c.add_partitions("t", r.producer_id, 0, [("x", 0)], 100))
    assert c.abort_timed_out(1100) == []
    [rec] = c.abort_timed_out(1101)
    c.replay(rec)
    assert (rec.value.state, rec.value.producer_epoch) == (PREPARE_ABORT, 1)
    finish(c, "t", 1102)
    assert c.end_txn("t", r.producer_id, 0, True, 1103).error == Err.PRODUCER_FENCED
    assert c.in_transaction(r.producer_id, 0, "x", 0) == Err.INVALID_PRODUCER_EPOCH


def test_idle_ids_expire_and_come_back_fresh():
    c = core()
    r = apply(c, c.init_producer_id("t", 1000, -1, -1, 0))
    assert c.expire_ids(99_999) == []
    [tomb] = c.expire_ids(100_000)
    assert tomb.value is None
    c.replay(tomb)
    assert "t" not in c.txns
    # the old producer: its id is unknown now; KIP-360 recovery gets a fresh pid
    assert c.add_partitions("t", r.producer_id, 0, [("x", 0)], 1).error == \
        Err.INVALID_PRODUCER_ID_MAPPING
    fresh = c.init_producer_id("t", 1000, r.producer_id, 0, 2)
    assert fresh.error == Err.NONE and fresh.producer_id != r.producer_id


def test_describe_and_list():
    c = core()
    r = apply(c, c.init_producer_id("t", 1000, -1, -1, 0))
    apply(c, c.add_partitions("t", r.producer_id, 0, [("x", 1), ("x", 0)], 10))
    d = c.describe("t")
    assert (d["transaction_state"], d["topics"]) == ("Ongoing", [{"topic": "x",
                                                                  "partitions": [0, 1]}])
    assert c.describe("nope")["error_code"] == Err.TRANSACTIONAL_ID_NOT_FOUND
    listed = c.list_transactions(["Ongoing", "Bogus"], [], -1, 20)
    assert listed["unknown_state_filters"] == ["Bogus"]
    assert [t["transactional_id"] for t in listed["transaction_states"]] == ["t"]
    assert c.list_transactions([], [], 50, 20)["transaction_states"] == []
    assert c.list_transactions([], [r.producer_id + 1], -1, 20)["transaction_states"] == []


def test_dropping_a_partition_forgets_only_its_ids():
    """A cluster node that stops leading a __transaction_state partition
    drops its ids (and their producer ids) and keeps the others'."""
    c = core(num_partitions=4)
    tids = [f"t-{i}" for i in range(12)]
    for t in tids:
        apply(c, c.init_producer_id(t, 10_000, -1, -1, 0))
    gone = c.partition_of(tids[0])
    kept = [t for t in tids if c.partition_of(t) != gone]
    assert kept and len(kept) < len(tids)
    c.drop_partition(gone)
    assert sorted(c.txns) == sorted(kept)
    assert sorted(c.by_producer.values()) == sorted(kept)
    # the same records replayed again (the partition loaded again) give it back
    snapshot = c.snapshot()
    apply(c, c.init_producer_id(tids[0], 10_000, -1, -1, 0))
    assert tids[0] in c.txns and {k: v for k, v in c.snapshot().items()
                                  if k != tids[0]} == snapshot
