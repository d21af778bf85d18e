"""ShardRuntime.load (latest commit per key, batches walked in place) leaves
exactly the state a record-by-record replay of the same log leaves.

Random logs mix OffsetCommit records of key types 0 and 1 (values v1 and v3,
tombstones), GroupMetadata records and tombstones, records of an unknown
type, null keys, compressed batches and batches of mixed kinds.
"""
from __future__ import annotations

import asyncio
import random

import pytest

from kcoord.coordinator.result import Record
from kcoord.coordinator.shard import CoordinatorConfig, CoordinatorShard
from kcoord.log import PartitionLog
from kcoord.protocol.errors import ProtocolError
from kcoord.protocol.messages.coordinator_records import (RECORD_TYPES, decode_record_key,
                                                         decode_record_value, encode_record_key,
                                                         encode_record_value)
from kcoord.protocol.records import build_batch, decode_batch, iter_batches
from kcoord.server.coordinator_runtime import ShardRuntime



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


def replay_one_by_one(plog: PartitionLog) -> tuple[CoordinatorShard, int, int]:
    """The reference: every record decoded and replayed in log order."""
    core = CoordinatorShard(0, CoordinatorConfig())
    loaded = errors = 0
    data = plog.read(plog.log_start_offset, 1 << 30)
    for pos, header in iter_batches(data):
        if header.attributes & 0x20:
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


@pytest.mark.parametrize("groups", [4, 100])
@pytest.mark.parametrize("others", [0.2, 0.01])
@pytest.mark.parametrize("seed", range(20))
def test_load_equals_record_by_record_replay(tmp_path, seed, others, groups):
    rnd = random.Random(seed)
    plog = PartitionLog(tmp_path / "__consumer_offsets-0")
    write_log(plog, rnd, rnd.choice([50, 400, 2000]), others, groups)
    ref, loaded, errors = replay_one_by_one(plog)
    shard = ShardRuntime(0, plog, CoordinatorConfig(), 0)
    asyncio.run(shard.load())
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
    asyncio.run(shard.load())
    assert set(shard.core.groups) == set(ref.groups) == {"g"}
    assert state(shard.core) == state(ref)
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
        size = active.stat().st_size
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
