"""ShardRuntime.load (latest commit per key, batches walked in place) leaves
exactly the state a record-by-record replay of the same log leaves.

Random logs mix OffsetCommit records of key types 0 and 1 (values v1 and v3,
tombstones), GroupMetadata records and tombstones, records of an unknown
type, null keys, compressed batches and batches of mixed kinds.
"""
from __future__ import annotations

import asyncio
import os
import random

import pytest

from kcoord.coordinator.result import Record
from kcoord.coordinator.shard import CoordinatorConfig, CoordinatorShard
from kcoord.log import LogConfig, PartitionLog
from kcoord.log.scan import segment_data_end
from kcoord.protocol.errors import ProtocolError
from kcoord.protocol.messages.coordinator_records import (RECORD_TYPES, decode_record_key,
                                                         decode_record_value, encode_record_key,
                                                         encode_record_value)
from kcoord.protocol.records import build_batch, decode_batch, iter_batches
from kcoord.server.coordinator_runtime import ShardRuntime
from kcoord.server.shard_loader import CollectSink, LogScan



def group_value(rnd: random.Random) -> dict:
    members = [{"member_id": f"m{i}", "group_instance_id": None, "client_id": "c",
                "client_host": "/127.0.0.1", "rebalance_timeout": 300000,
                "session_timeout": 45000, "subscription": b"s", "assignment": b"a"}
               for i in range(rnd.randint(0, 2))]
    return {"protocol_type": "consumer", "generation": rnd.randint(1, 9),
            "protocol": "range" if members else None, "leader": "m0" if members else None,
            "current_state_timestamp": 1000, "members": members}


def random_record(rnd: random.Random, others: float, groups: int) -> tuple[bytes | None, bytes | None]:
    """An OffsetCommit record, or with probability `others` a record of another kind."""
    group = f"g{rnd.randrange(groups)}"
    x = rnd.random()
    if x >= others:
        rtype = 0 if rnd.random() < 0.1 else 1
        key = encode_record_key(rtype, {"group": group, "topic": rnd.choice("ab"),
                                        "partition": rnd.randint(0, 2)})
        y = rnd.random()
        if y < 0.2:
            return key, None
        if y < 0.35:
            return key, encode_record_value(1, 1, {"offset": rnd.randint(0, 99), "metadata": "m",
                                                   "commit_timestamp": 5,
                                                   "expire_timestamp": rnd.choice([-1, 10**13])})
        return key, encode_record_value(1, 3, {"offset": rnd.randint(0, 99), "leader_epoch": 1,
                                               "metadata": rnd.choice(["", "meta"]),
                                               "commit_timestamp": 7})
    key = encode_record_key(2, {"group": group})
    x /= others
    if x < 0.5:
        return key, encode_record_value(2, 3, group_value(rnd))
    if x < 0.8:
        return key, None
    if x < 0.9:
        return b"\x00\x09\x00\x01g", b"\x00\x00"  # a record type this coordinator skips
    return None, b"x"


def write_log(plog: PartitionLog, rnd: random.Random, records: int, others: float,
              groups: int) -> None:
    left = records
    while left > 0:
        n = min(left, rnd.randint(1, 20))
        left -= n
        recs = [(*random_record(rnd, others, groups), [], 1000 + i) for i in range(n)]
        plog.append(build_batch(recs, compression=1 if rnd.random() < 0.1 else 0))
    plog.flush()


def replay_one_by_one(plog: PartitionLog, since: int = 0) -> tuple[CoordinatorShard, int, int]:
    """The reference: every record (of the batches from offset `since` on)
    decoded and replayed in log order."""
    core = CoordinatorShard(0, CoordinatorConfig())
    loaded = errors = 0
    data = b"".join(path.read_bytes() for path, _ in plog.segment_files())  # every segment
    for pos, header in iter_batches(data):
        if header.attributes & 0x20 or header.base_offset < since:
            continue
        for rec in decode_batch(data, pos)[1]:
            if rec.key is None:
                errors += 1
                continue
            try:
                rtype, key = decode_record_key(rec.key)
                if rec.value is None:
                    record = Record(rtype, key, None)
                else:
                    version, value = decode_record_value(rtype, rec.value)
                    record = Record(rtype, key, value, version)
            except ProtocolError:
                errors += 1
                continue
            if record.type in RECORD_TYPES:
                core.replay(record)
                loaded += 1
    return core, loaded, errors


def state(core: CoordinatorShard) -> dict:
    return {"snapshot": core.snapshot(),
            "offsets": {g: dict(o) for g, o in core.offsets.by_group.items()},
            "groups": {g: (type(grp).__name__, grp.snapshot()) for g, grp in core.groups.items()}}



async def load(shard: ShardRuntime) -> None:
    await shard.load(0)  # becomes the shard's coordinator: replays its log

@pytest.mark.parametrize("groups", [4, 100])
@pytest.mark.parametrize("others", [0.2, 0.01])
@pytest.mark.parametrize("seed", range(20))
def test_load_equals_record_by_record_replay(tmp_path, seed, others, groups):
    rnd = random.Random(seed)
    plog = PartitionLog(tmp_path / "__consumer_offsets-0")
    write_log(plog, rnd, rnd.choice([50, 400, 2000]), others, groups)
    ref, loaded, errors = replay_one_by_one(plog)
    shard = ShardRuntime(0, plog, CoordinatorConfig(), 0)
    asyncio.run(load(shard))
    assert shard.loaded
    assert state(shard.core) == state(ref)
    assert shard.records_loaded == loaded
    assert shard.load_errors == errors
    plog.close()


def test_load_of_commit_then_tombstone_keeps_the_simple_group(tmp_path):
    """A commit creates a simple group; its later tombstone does not remove it."""
    plog = PartitionLog(tmp_path / "__consumer_offsets-0")
    key = encode_record_key(1, {"group": "g", "topic": "t", "partition": 0})
    value = encode_record_value(1, 3, {"offset": 1, "leader_epoch": -1, "metadata": "",
                                       "commit_timestamp": 1})
    plog.append(build_batch([(key, value, [], 1), (key, None, [], 1)]))
    ref, _, _ = replay_one_by_one(plog)
    shard = ShardRuntime(0, plog, CoordinatorConfig(), 0)
    asyncio.run(load(shard))
    assert set(shard.core.groups) == set(ref.groups) == {"g"}
    assert state(shard.core) == state(ref)
    plog.close()


def commit_record(rnd: random.Random, group: str, topic: str, partition: int,
                  version: int = 3, tombstone: bool = False) -> tuple[bytes, bytes | None]:
    key = encode_record_key(1, {"group": group, "topic": topic, "partition": partition})
    if tombstone:
        return key, None
    if version == 1:
        return key, encode_record_value(1, 1, {"offset": rnd.randint(0, 10**12), "metadata": "",
                                               "commit_timestamp": 5, "expire_timestamp": -1})
    return key, encode_record_value(1, 3, {"offset": rnd.randint(0, 10**12), "leader_epoch": 0,
                                           "metadata": "", "commit_timestamp": 7})


@pytest.mark.parametrize("seed", range(12))
def test_uniform_batches_take_the_pattern_path(tmp_path, seed, monkeypatch):
    """Batches whose commits share one key length and one value length (ids
    of one length, as a group commit of similar groups writes) are taken by
    the pattern of their shape; batches of mixed shapes, tombstones, long
    timestamp deltas or other records go the other ways; the state is the
    record-by-record one either way."""
    rnd = random.Random(seed)
    plog = PartitionLog(tmp_path / "__consumer_offsets-0")
    groups = [f"group-{i:03d}" for i in range(rnd.choice([3, 40]))]
    for _ in range(rnd.randint(5, 40)):
        n = rnd.choice([1, 10, 63, 64, 65, 100, 200, 300])
        kind = rnd.random()
        version = rnd.choice([1, 3])
        recs = []
        for i in range(n):
            group = rnd.choice(groups)
            if kind < 0.1:  # mixed value versions: two shapes in one batch
                version = rnd.choice([1, 3])
            tombstone = kind > 0.9 and rnd.random() < 0.1
            key, value = commit_record(rnd, group, rnd.choice(["ab", "cd"]), rnd.randrange(3),
                                       version, tombstone)
            # timestamp deltas of one byte, two bytes, or (rarely) three
            step = rnd.choice([0, 0, 1, 100, 9000]) if kind < 0.8 else 0
            recs.append((key, value, [], 1000 + i * step))
        if kind > 0.95:
            recs.append((*random_record(rnd, 1.0, 4), [], 1000))  # another kind of record
        plog.append(build_batch(recs))
    plog.flush()
    taken = []
    original = LogScan.match_batch

    def counting(self, buf, pos, header, latest):
        ok = original(self, buf, pos, header, latest)
        taken.append(ok)
        return ok

    monkeypatch.setattr(LogScan, "match_batch", counting)
    from kcoord.server import shard_loader
    monkeypatch.setattr(shard_loader, "TAKE_RUNS", False)  # the compiled walk would take them first
    ref, loaded, errors = replay_one_by_one(plog)
    shard = ShardRuntime(0, plog, CoordinatorConfig(), 0)
    asyncio.run(load(shard))
    assert state(shard.core) == state(ref)
    assert (shard.records_loaded, shard.load_errors) == (loaded, errors)
    assert any(taken)
    plog.close()


def test_pattern_path_refuses_a_record_whose_length_disagrees(tmp_path):
    """A batch that passes its CRC but whose record length field does not
    fit the record is not taken by the pattern (decode_batch then decides)."""
    from kcoord.protocol.records import HEADER_SIZE

    rnd = random.Random(3)
    recs = [(*commit_record(rnd, "g", "t", p), [], 1) for p in range(3)]
    batch = bytearray(build_batch(recs))
    header = next(iter_batches(bytes(batch)))[1]

    def Probe():
        return LogScan(CollectSink())

    latest: dict = {}
    assert Probe().match_batch(bytes(batch), 0, header, latest)
    assert len(latest) == 3
    batch[HEADER_SIZE] += 2  # the first record claims one byte more
    latest = {}
    assert not Probe().match_batch(bytes(batch), 0, header, latest)
    assert latest == {}



@pytest.mark.parametrize("seed", range(6))
def test_pattern_path_takes_only_exact_batches(tmp_path, seed):
    """Bytes inserted or removed anywhere among the records, a record more
    or less than the count says: the pattern path refuses the batch and
    takes nothing (the CRC is checked before; here it is not recomputed)."""
    from kcoord.protocol.records import HEADER_SIZE, LOG_OVERHEAD

    def Probe():
        return LogScan(CollectSink())

    rnd = random.Random(seed)
    n = rnd.choice([1, 2, 5, 70])
    recs = [(*commit_record(rnd, "grp", "t", p % 7), [], 1000 + rnd.choice([0, 3, 50]) * p)
            for p in range(n)]
    good = build_batch(recs)
    header = next(iter_batches(good))[1]

    def attempt(region: bytes, count: int) -> tuple[bool, dict]:
        data = good[:HEADER_SIZE] + region
        h = header._replace(batch_length=len(data) - LOG_OVERHEAD, records_count=count)
        latest: dict = {}
        probe = Probe()
        return probe.match_batch(data, 0, h, latest), latest

    region = good[HEADER_SIZE:]
    ok, latest = attempt(region, n)
    assert ok and len(latest) == len({r[0] for r in recs})
    for _ in range(20):
        at = rnd.randrange(len(region) + 1)
        ok, latest = attempt(region[:at] + bytes([rnd.randrange(256)]) + region[at:], n)
        assert not ok and latest == {}
        at = rnd.randrange(len(region))
        ok, latest = attempt(region[:at] + region[at + 1:], n)
        assert not ok and latest == {}
    assert attempt(region, n + 1) == (False, {})
    assert attempt(region, n - 1) == (False, {})
    assert attempt(region + region, n) == (False, {})
    assert attempt(region + region, 2 * n)[0]

def _load_with_workers(plog, monkeypatch, executor_factory=None) -> ShardRuntime:
    from kcoord.server import shard_loader
    monkeypatch.setattr(shard_loader, "PARALLEL_LOAD_MIN_BYTES", 0)
    monkeypatch.setattr(shard_loader, "LOAD_WORKERS", 2)
    if executor_factory is not None:
        monkeypatch.setattr(shard_loader._LoadPool, "pool", None)
        monkeypatch.setattr(shard_loader, "ProcessPoolExecutor",
                            lambda workers, mp_context=None, initializer=None: executor_factory())
    shard = ShardRuntime(0, plog, CoordinatorConfig(), 0)
    asyncio.run(load(shard))
    return shard


@pytest.mark.parametrize("seed", range(10))
def test_scan_in_a_worker_gives_the_same_state(tmp_path, seed, monkeypatch):
    """The worker's scan (here on a thread) returns what the replay needs;
    replaying it gives the record-by-record state, counts included, also
    across several segments."""
    from concurrent.futures import ThreadPoolExecutor
    rnd = random.Random(seed)
    plog = PartitionLog(tmp_path / "__consumer_offsets-0",
                        LogConfig(segment_bytes=rnd.choice([2_000, 50_000, 1 << 30])))
    write_log(plog, rnd, rnd.choice([50, 400, 2000]), rnd.choice([0.2, 0.01]), rnd.choice([4, 100]))
    ref, loaded, errors = replay_one_by_one(plog)
    shard = _load_with_workers(plog, monkeypatch, lambda: ThreadPoolExecutor(2))
    assert state(shard.core) == state(ref)
    assert (shard.records_loaded, shard.load_errors) == (loaded, errors)
    plog.close()


def test_scan_in_worker_processes(tmp_path, monkeypatch):
    """The same through real worker processes (spawned)."""
    rnd = random.Random(7)
    plog = PartitionLog(tmp_path / "__consumer_offsets-0", LogConfig(segment_bytes=20_000))
    write_log(plog, rnd, 3000, 0.05, 30)
    ref, loaded, errors = replay_one_by_one(plog)
    shard = _load_with_workers(plog, monkeypatch)
    assert state(shard.core) == state(ref)
    assert (shard.records_loaded, shard.load_errors) == (loaded, errors)
    plog.close()


def test_a_failing_worker_falls_back_to_loading_in_process(tmp_path, monkeypatch, caplog):
    from kcoord.server import shard_loader

    class Broken:
        def submit(self, *args, **kwargs):
            raise RuntimeError("worker died")

        def shutdown(self, wait=True, cancel_futures=False):
            pass

    rnd = random.Random(8)
    plog = PartitionLog(tmp_path / "__consumer_offsets-0")
    write_log(plog, rnd, 500, 0.1, 10)
    ref, loaded, errors = replay_one_by_one(plog)
    shard = _load_with_workers(plog, monkeypatch, Broken)
    assert "loading in a worker failed" in caplog.text
    assert state(shard.core) == state(ref)
    assert (shard.records_loaded, shard.load_errors) == (loaded, errors)
    assert shard_loader._LoadPool.pool is None and shard_loader._LoadPool.users == 0
    plog.close()

# ------------------------------------------------ restarts of `kcoord serve`
OFFSET_COMMIT, OFFSET_FETCH, LIST_GROUPS = 8, 9, 16


def commit(client, group: str, offset: int) -> None:
    resp = client.request(OFFSET_COMMIT, 8, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "group_instance_id": None, "retention_time_ms": -1,
        "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                 "committed_leader_epoch": -1,
                                                 "committed_metadata": ""}]}]})
    assert resp["topics"][0]["partitions"][0]["error_code"] == 0, resp


def fetched(client, group: str) -> int:
    """The committed offset, once the group's shard has loaded."""
    while True:
        resp = client.request(OFFSET_FETCH, 8, {"groups": [{"group_id": group, "topics": [
            {"name": "t", "partition_indexes": [0]}]}], "require_stable": False})
        g = resp["groups"][0]
        if g["error_code"] != 14:  # COORDINATOR_LOAD_IN_PROGRESS
            assert g["error_code"] == 0, g
            return g["topics"][0]["partitions"][0]["committed_offset"]


def test_clean_restart_skips_recovery_and_a_kill_still_truncates_a_torn_tail(tmp_path):
    from kcoord.coordinator.partitioner import partition_for
    from kcoord.log.clean_shutdown import CLEAN_SHUTDOWN_FILE
    from tests.clients.wire import WireClient, create_topic, wait_for_log
    from tests.support import ServerProcess

    data = tmp_path / "data"
    srv = ServerProcess(data, settings={"offsets.topic.num.partitions": "3"})
    srv.start()
    try:
        with WireClient(srv.port) as c:
            assert create_topic(c, "t")["error_code"] == 0
            commit(c, "g", 41)
            commit(c, "g", 42)
        srv.stop()  # SIGTERM: a clean stop writes the marker after closing every log
        assert srv.proc.returncode == 0
        assert (data / CLEAN_SHUTDOWN_FILE).exists()

        mark = len(srv.log_lines)
        srv.start()
        # the marker is taken at start, before anything can be appended
        assert not (data / CLEAN_SHUTDOWN_FILE).exists()
        line = wait_for_log(srv, "loaded", "topics", since=mark)
        assert "clean shutdown" in line and "0 active segments recovery-scanned" in line, line
        with WireClient(srv.port) as c:
            assert fetched(c, "g") == 42
            commit(c, "g", 43)
        srv.kill()  # SIGKILL: no marker
        assert not (data / CLEAN_SHUTDOWN_FILE).exists()

        # a torn batch at the end of the group's active segment, as a crash mid-write leaves
        part = data / f"__consumer_offsets-{partition_for('g', 3)}"
        active = max(part.glob("*.log"))
        size = segment_data_end(active)    # (the zeros preallocated past it: a crash keeps them)
        os.truncate(active, size)
        key = encode_record_key(1, {"group": "g", "topic": "t", "partition": 0})
        value = encode_record_value(1, 3, {"offset": 99, "leader_epoch": -1, "metadata": "",
                                           "commit_timestamp": 1})
        with open(active, "ab") as fh:
            fh.write(bytes(build_batch([(key, value, [], 1)]))[:-3])

        mark = len(srv.log_lines)
        srv.start()
        line = wait_for_log(srv, "loaded", "topics", since=mark)
        assert "no clean-shutdown marker" in line and "0 active segments" not in line, line
        wait_for_log(srv, "truncating", since=mark)
        assert active.stat().st_size == size
        with WireClient(srv.port) as c:
            assert fetched(c, "g") == 43
    finally:
        srv.stop()
    assert (data / CLEAN_SHUTDOWN_FILE).exists()
