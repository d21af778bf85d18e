"""The loader's walk of plain OffsetCommit batch runs (protocol/commit_runs.py,
taken when compiled) against the loader's other paths: on random logs (runs
of commit batches, tombstones, other record types, headers, compressed
batches, transactional offsets and their markers, damaged bytes) the scan
with the walk hands the sink exactly what the scan without it hands, and
the load equals a record-by-record replay.  The walk runs here as it is
imported: compiled under the compiled build, interpreted otherwise."""
from __future__ import annotations

import asyncio
import random

import pytest

from kcoord.broker.txn_state import control_batch
from kcoord.coordinator.shard import CoordinatorConfig
from kcoord.log import LogConfig, PartitionLog
from kcoord.protocol.errors import CorruptRecordError
from kcoord.protocol.commit_runs import take_commit_runs
from kcoord.protocol.records import HEADER_SIZE, build_batch, iter_batches
from kcoord.server import shard_loader
from kcoord.server.coordinator_runtime import ShardRuntime
from kcoord.server.shard_loader import CollectSink, LogScan

from .test_load_replay import commit_record, load, random_record, replay_one_by_one, state


def random_batch(rnd: random.Random, groups: list[str]) -> bytes:
    """Mostly a plain batch of type-1 commits with values (what the walk
    takes), else a batch the walk must stop at."""
    n = rnd.choice([1, 5, 64, 65, 100])
    kind = rnd.random()
    recs = []
    for i in range(n):
        key, value = commit_record(rnd, rnd.choice(groups), rnd.choice(["t", "orders"]),
                                   rnd.randrange(70), rnd.choice([1, 3]))
        if kind > 0.8 and rnd.random() < 0.2:
            key, value = random_record(rnd, 0.5, len(groups))  # tombstones, type 0, others
        headers = [("h", b"v")] if kind > 0.95 and i == 0 else []
        step = rnd.choice([0, 1, 100, 9000]) if kind > 0.9 else rnd.choice([0, 1, 50])
        recs.append((key, value, headers, 1000 + i * step))
    if kind > 0.97:
        return build_batch(recs, compression=1)
    if 0.6 < kind < 0.7:
        pid = rnd.randrange(1, 4)
        return build_batch(recs, producer_id=pid, producer_epoch=0, transactional=True)
    return build_batch(recs)


def random_log(rnd: random.Random) -> bytes:
    groups = [f"group-{i:0{rnd.choice([1, 3])}d}" for i in range(rnd.choice([2, 30]))]
    out = bytearray()
    offset = 0
    for _ in range(rnd.randint(3, 30)):
        if rnd.random() < 0.1:
            batch = bytearray(control_batch(rnd.randrange(1, 4), 0, rnd.random() < 0.5, 0, 1000))
        else:
            batch = bytearray(random_batch(rnd, groups))
        batch[0:8] = offset.to_bytes(8, "big")  # offsets as the log gives them
        offset += next(iter_batches(bytes(batch)))[1].last_offset_delta + 1
        out += batch
    return bytes(out)


def scan(data: bytes, runs: bool):
    """(ops handed to the sink, records taken, offset after) or the error."""
    sink = CollectSink()
    latest: dict = {}
    try:
        after = LogScan(sink).scan_chunk(data, latest, -7, runs=runs)
    except CorruptRecordError as exc:
        return ("corrupt", str(exc))
    sink.latest(latest)
    return [normal(op) for op in sink.ops], sink.records_loaded, after


def normal(op):
    """A dict of latest commits as its items in order, a bare value written
    as the (type 1, value, nothing earlier) it stands for."""
    if op.__class__ is not dict:
        return op
    return [(k, (1, e, None) if e.__class__ is bytes else e) for k, e in op.items()]


@pytest.mark.parametrize("seed", range(40))
def test_the_walk_hands_the_sink_what_the_other_paths_hand(seed):
    rnd = random.Random(seed)
    data = random_log(rnd)
    assert scan(data, runs=True) == scan(data, runs=False)
    # damaged: a byte changed, inserted or removed among the records of a
    # batch (its CRC then fails unless recomputed: both cases)
    batches = [(pos, h) for pos, h in iter_batches(data)]
    pos, h = rnd.choice(batches)
    lo, hi = pos + HEADER_SIZE, pos + 12 + h.batch_length
    at = rnd.randrange(lo, hi)
    for damaged in (data[:at] + bytes([rnd.randrange(256)]) + data[at + 1:],
                    data[:at] + bytes([rnd.randrange(256)]) + data[at:],
                    data[:at] + data[at + 1:]):
        assert scan(damaged, runs=True) == scan(damaged, runs=False)


def test_the_walk_stops_at_what_it_does_not_take():
    rnd = random.Random(1)
    plain = build_batch([(*commit_record(rnd, "g", "t", p), [], 1) for p in range(3)])
    tombstone = build_batch([(*commit_record(rnd, "g", "t", 0, tombstone=True), [], 1)])
    latest: dict = {}
    assert take_commit_runs(plain + plain + tombstone + plain, 0, latest) == \
        (2 * len(plain), 6, 3)  # both plain batches (offsets 0-2 each), not the tombstone
    assert len(latest) == 3
    # a record claiming a byte more than it holds: not taken (the walk may have set
    # the records before it; the general path sets the same ones again)
    bad = bytearray(plain)
    bad[HEADER_SIZE] += 2
    assert take_commit_runs(bytes(bad), 0, {})[:2] == (0, 0)
    assert take_commit_runs(b"", 0, {}) == (0, 0, -1)
    assert take_commit_runs(plain[:-1], 0, {}) == (0, 0, -1)  # a torn batch


@pytest.mark.parametrize("seed", range(6))
def test_load_with_the_walk_equals_record_by_record_replay(tmp_path, seed, monkeypatch):
    """Through the runtime's load, in process and in worker pieces (a
    thread), with segments and pieces cut anywhere between batches."""
    from concurrent.futures import ThreadPoolExecutor

    rnd = random.Random(seed)
    plog = PartitionLog(tmp_path / "__consumer_offsets-0",
                        LogConfig(segment_bytes=rnd.choice([3_000, 1 << 30])))
    groups = [f"group-{i:02d}" for i in range(rnd.choice([2, 30]))]
    for _ in range(rnd.randint(5, 40)):
        if rnd.random() < 0.9:
            plog.append(build_batch([(*commit_record(rnd, rnd.choice(groups), "t",
                                                     rnd.randrange(5), rnd.choice([1, 3])),
                                      [], 1000 + i) for i in range(rnd.choice([1, 20, 100]))]))
        else:
            plog.append(build_batch([(*random_record(rnd, 0.5, len(groups)), [], 1000)]))
    plog.flush()
    ref, loaded, errors = replay_one_by_one(plog)
    monkeypatch.setattr(shard_loader, "TAKE_RUNS", True)
    shard = ShardRuntime(0, plog, CoordinatorConfig(), 0)
    asyncio.run(load(shard))
    assert state(shard.core) == state(ref)
    assert (shard.records_loaded, shard.load_errors) == (loaded, errors)

    monkeypatch.setattr(shard_loader, "PARALLEL_LOAD_MIN_BYTES", 0)
    monkeypatch.setattr(shard_loader, "LOAD_WORKERS", 2)
    monkeypatch.setattr(shard_loader, "WORKER_PIECE_BYTES", rnd.choice([100, 5_000]))
    monkeypatch.setattr(shard_loader._LoadPool, "pool", None)
    monkeypatch.setattr(shard_loader, "ProcessPoolExecutor",
                        lambda workers, mp_context=None, initializer=None: ThreadPoolExecutor(2))
    shard = ShardRuntime(0, plog, CoordinatorConfig(), 0)
    asyncio.run(load(shard))
    assert state(shard.core) == state(ref)
    assert (shard.records_loaded, shard.load_errors) == (loaded, errors)
    plog.close()


@pytest.mark.parametrize("tail", ["", "torn", "bad length"])
def test_file_pieces_give_each_batch_once(tmp_path, tail):
    """Pieces of any size, with a batch longer than a piece, a torn tail or
    a bad length at the file's end: the batches the scan finds in the pieces
    are the file's, each once, and a bad length is still reported."""
    rnd = random.Random(7)
    batches = [random_batch(rnd, ["g1", "g2"]) for _ in range(30)]
    end = {"": b"", "torn": batches[0][:40], "bad length": bytes(8) + b"\x00\x00\x00\x05"}
    path = tmp_path / "segment.log"
    path.write_bytes(b"".join(batches) + end[tail])
    size = path.stat().st_size
    for piece in (100, 5_000, 1 << 20):
        found, reported = [], False
        with open(path, "rb") as fh:
            try:
                for data in shard_loader.file_pieces(fh.fileno(), size, piece):
                    for p, h in iter_batches(data):
                        found.append(data[p:p + 12 + h.batch_length])
            except CorruptRecordError:
                reported = True
        assert found == batches
        assert reported == (tail == "bad length")


def _damaged(rnd: random.Random, data: bytes) -> bytes:
    """`data` with a byte changed, inserted or removed, or cut short."""
    at = rnd.randrange(len(data) + 1)
    kind = rnd.randrange(4)
    if kind == 0 and at < len(data):
        return data[:at] + bytes([rnd.choice([0, 0x7F, 0x80, 0xFF, rnd.randrange(256)])]) + data[at + 1:]
    if kind == 1:
        return data[:at] + bytes([rnd.randrange(256)]) + data[at:]
    if kind == 2 and at < len(data):
        return data[:at] + data[at + 1:]
    return data[:at]


@pytest.mark.parametrize("seed", range(20))
def test_plain_commits_read_what_the_general_decode_reads(seed):
    """plain_commits gives, for each bare value of version 3, the fields
    _decode_commit gives (groups and topics reused from the key before,
    or not: names of one length differing in a byte, non-UTF-8 names),
    and None for every other entry (tuples, v1 values, anything malformed
    or damaged), which the loader then decodes the general way."""
    from kcoord.protocol.commit_runs import plain_commits
    from kcoord.server.shard_loader import _decode_commit

    rnd = random.Random(seed)
    names = [f"g{i}" for i in range(10)] + ["group-é", "gr\xfcn"]
    latest: dict = {}
    for _ in range(300):
        # "o\x00\x00" begins with the bytes of "o" and a partition below 2**16 after it
        key, value = commit_record(rnd, rnd.choice(names), rnd.choice(["t", "o", "o\x00\x00"]),
                                   rnd.randrange(3), rnd.choice([1, 3, 3, 3]))
        key = key[2:]
        meta = rnd.random()
        if meta < 0.1:  # metadata of another length, or not UTF-8
            value = value[:14] + (3).to_bytes(2, "big") + rnd.choice([b"abc", b"\xff\xfe\xfd"]) \
                + value[16:]
        if rnd.random() < 0.15:
            key = _damaged(rnd, key)
        if rnd.random() < 0.15:
            value = _damaged(rnd, value)
        if rnd.random() < 0.05:
            key = key.replace(b"g", b"\xff", 1)  # a group name that is not UTF-8
        entry = value if rnd.random() < 0.9 else (rnd.choice([0, 1]), value, None)
        latest[key] = entry
    fields = plain_commits(latest)
    assert len(fields) == len(latest)
    for (key, entry), got in zip(latest.items(), fields):
        record = _decode_commit(1, key, entry) if entry.__class__ is bytes else None
        if record is None or record.value_version != 3:
            assert got is None, (key, entry, got)
            continue
        k, v = record.key, record.value
        assert got == (k["group"], k["topic"], k["partition"], v["offset"], v["leader_epoch"],
                       v["metadata"], v["commit_timestamp"]), (key, entry)
