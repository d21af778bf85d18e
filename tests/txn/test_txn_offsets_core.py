"""Transactional offset commits in the group shard core: pending until the
marker, dropped on ABORT, a later plain commit wins, RequireStable, expiry
and deletion; and the same state after a reload of the written log."""
from __future__ import annotations

from kcoord.coordinator.shard import CoordinatorShard
from kcoord.coordinator.txn_offsets import mark_unstable, txn_offset_commit
from kcoord.protocol.errors import Err
from kcoord.protocol.records import iter_batches, read_batch_header
from kcoord.server.shard_loader import CoreReplay, LogScan
from kcoord.server.shard_batches import TxnEnd, TxnWrite, build_shard_batches


def req(offset: int, pid: int = 9, epoch: int = 0, group: str = "g", **extra) -> dict:
    return {"transactional_id": "t", "group_id": group, "producer_id": pid,
            "producer_epoch": epoch, "topics": [{"name": "in", "partitions": [
                {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}], **extra}


def plain(shard: CoordinatorShard, offset: int, now: int = 1) -> list:
    return shard.offset_commit({"group_id": "g", "generation_id_or_member_epoch": -1,
                                "member_id": "", "topics": [{"name": "in", "partitions": [
                                    {"partition_index": 0, "committed_offset": offset,
                                     "committed_metadata": ""}]}]}, 8, now).records


def committed(shard: CoordinatorShard):
    v = shard.offsets.group_offsets("g").get(("in", 0))
    return None if v is None else v.offset


class Log:
    """What a shard runtime does: replay, and keep the written runs (batch
    metadata, records)."""

    def __init__(self) -> None:
        self.shard = CoordinatorShard(0)
        self.items: list = []

    def write(self, records) -> None:
        self.shard.replay_all(list(records))
        self.items.append((None, list(records)))

    def write_txn(self, result, pid: int = 9, epoch: int = 0) -> None:
        """A TxnOffsetCommit's records, in the producer's transactional batch."""
        self.shard.replay_txn_offsets(pid, epoch, result.records)
        self.items.append((TxnWrite(pid, epoch), result.records))

    def end_txn(self, pid: int, epoch: int, commit: bool) -> None:
        self.shard.replay_txn_marker(pid, epoch, commit)
        self.items.append((TxnEnd(pid, epoch, commit), []))


def reload(items) -> CoordinatorShard:
    """Load the bytes the runtime writes for `items` with the real loader."""
    data = bytes(build_shard_batches([], 1000, list(items)))
    buf = bytearray(data)
    offset = 0
    for pos, header in iter_batches(data):  # give the batches offsets, as the log does
        buf[pos:pos + 8] = offset.to_bytes(8, "big")
        offset += header.last_offset_delta + 1

    sink = CoreReplay(CoordinatorShard(0), 0)
    latest: dict = {}
    LogScan(sink).scan_chunk(bytes(buf), latest, 0)
    sink.latest(latest)
    return sink.core


def test_pending_until_commit_marker_and_reload_agrees():
    log = Log()
    log.write_txn(txn_offset_commit(log.shard, req(5), 2, 1))
    assert committed(log.shard) is None and log.shard.txn_offsets.is_pending("g", ("in", 0))
    log.end_txn(9, 0, True)
    assert committed(log.shard) == 5 and not log.shard.txn_offsets.has_open("g")
    back = reload(log.items)
    assert back.offsets.snapshot() == log.shard.offsets.snapshot()


def test_abort_drops_and_reload_keeps_pending_open():
    log = Log()
    log.write(plain(log.shard, 3))
    log.write_txn(txn_offset_commit(log.shard, req(7), 2, 1))
    back = reload(log.items)  # crash before the marker: still pending after load
    assert back.txn_offsets.is_pending("g", ("in", 0)) and committed(back) == 3
    log.end_txn(9, 0, False)
    assert committed(log.shard) == 3 and not log.shard.txn_offsets.has_open("g")
    assert reload(log.items).offsets.snapshot() == log.shard.offsets.snapshot()


def test_the_later_record_wins():
    log = Log()
    log.write_txn(txn_offset_commit(log.shard, req(7), 2, 1))
    log.write(plain(log.shard, 8))  # written after the txn record: wins
    log.end_txn(9, 0, True)
    assert committed(log.shard) == 8
    assert committed(reload(log.items)) == 8
    log2 = Log()
    log2.write(plain(log2.shard, 8))  # written before: the txn commit wins
    log2.write_txn(txn_offset_commit(log2.shard, req(7), 2, 1))
    log2.end_txn(9, 0, True)
    assert committed(log2.shard) == 7 and committed(reload(log2.items)) == 7


def test_batches_carry_producer_and_transactional_attribute():
    log = Log()
    log.write_txn(txn_offset_commit(log.shard, req(7, pid=77, epoch=3), 2, 1), 77, 3)
    log.end_txn(77, 3, True)
    data = bytes(build_shard_batches([], 1000, log.items))
    headers = [h for _, h in iter_batches(data)]
    assert [(h.producer_id, h.producer_epoch, h.is_transactional, h.is_control)
            for h in headers] == [(77, 3, True, False), (77, 3, True, True)]


def test_require_stable_marks_pending_partitions():
    log = Log()
    log.write_txn(txn_offset_commit(log.shard, req(7), 2, 1))
    _, out = log.shard.offset_fetch("g", [{"name": "in", "partition_indexes": [0, 1]}])
    mark_unstable(log.shard.txn_offsets, "g", out)
    codes = [p["error_code"] for p in out[0]["partitions"]]
    assert codes == [Err.UNSTABLE_OFFSET_COMMIT, Err.NONE]


def test_expiry_skips_pending_and_delete_tombstones_them():
    log = Log()
    log.write(plain(log.shard, 3, now=0))
    log.write_txn(txn_offset_commit(log.shard, req(7), 2, 0))
    far = 10**12
    assert log.shard.cleanup(far) == []  # the pending partition keeps its offset
    deleted = log.shard.delete_group("g")
    assert deleted.response["error_code"] == Err.NONE
    log.write(deleted.records)
    assert not log.shard.txn_offsets.has_open("g") and committed(log.shard) is None
    log.end_txn(9, 0, True)  # a late marker installs nothing
    assert committed(log.shard) is None


def test_v3_validates_member_and_generation():
    shard = CoordinatorShard(0)
    res = txn_offset_commit(shard, req(5, generation_id=4, member_id="m"), 3, 1)
    resp, records = res.response, res.records
    assert resp["topics"][0]["partitions"][0]["error_code"] == Err.ILLEGAL_GENERATION
    assert records == []
    res = txn_offset_commit(shard, req(5, generation_id=4, member_id="m"), 2, 1)
    resp, records = res.response, res.records
    assert resp["topics"][0]["partitions"][0]["error_code"] == Err.NONE and records
