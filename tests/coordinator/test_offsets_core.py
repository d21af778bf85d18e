"""The offsets core with a fake clock: handlers, expiry, and replay == live."""
from __future__ import annotations

import random

import pytest

from kcoord.coordinator.result import Record, Result
from kcoord.coordinator.shard import CoordinatorConfig, CoordinatorShard
from kcoord.protocol.errors import Err
from kcoord.protocol.record_codec import encode_record
from kcoord.protocol.record_codec import decode_record

HOUR = 3600_000


def commit_req(group, topic, parts, *, generation=-1, metadata="", retention=-1, epoch=-1):
    return {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": "",
            "group_instance_id": None, "retention_time_ms": retention,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": p, "committed_offset": off, "committed_leader_epoch": epoch,
                 "committed_metadata": metadata} for p, off in parts]}]}


class Harness:
    """A shard plus its log as a list of encoded records, the way the runtime keeps them."""

    def __init__(self, config: CoordinatorConfig | None = None) -> None:
        self.shard = CoordinatorShard(0, config or CoordinatorConfig())
        self.log: list[tuple[bytes, bytes | None, int]] = []  # key, value, timestamp
        self.now = 1_700_000_000_000

    def write(self, records: list[Record]) -> None:
        self.shard.replay_emitted(records)  # as the runtime does
        for r in records:
            key, value = encode_record(r)
            self.log.append((key, value, self.now))

    def commit(self, req, version=8):
        result = self.shard.offset_commit(req, version, self.now)
        self.write(result.records)
        return result.response

    def replayed(self, log=None) -> CoordinatorShard:
        fresh = CoordinatorShard(0, self.shard.config)
        for key, value, _ in (self.log if log is None else log):
            fresh.replay(decode_record(key, value))
        return fresh


def compact(log, now, delete_retention_ms):
    """Kafka's compaction semantics: latest record per key; old tombstones dropped."""
    latest = {key: i for i, (key, _, _) in enumerate(log)}
    return [(k, v, ts) for i, (k, v, ts) in enumerate(log)
            if latest[k] == i and (v is not None or now - ts < delete_retention_ms)]


def codes(response):
    return [p["error_code"] for t in response["topics"] for p in t["partitions"]]


def test_commit_then_fetch_and_replay():
    h = Harness()
    resp = h.commit(commit_req("g", "t", [(0, 5), (1, 7)], metadata="m", epoch=3))
    assert codes(resp) == [0, 0]
    code, topics = h.shard.offset_fetch("g", [{"name": "t", "partition_indexes": [0, 1, 2]}])
    assert code == 0
    parts = topics[0]["partitions"]
    assert [(p["committed_offset"], p["committed_leader_epoch"], p["metadata"]) for p in parts] == \
        [(5, 3, "m"), (7, 3, "m"), (-1, -1, "")]
    assert h.replayed().snapshot() == h.shard.snapshot()
    assert h.shard.list_groups([], [])[0]["group_state"] == "Empty"


def test_metadata_too_large_fails_only_that_partition():
    h = Harness(CoordinatorConfig(offset_metadata_max_bytes=10))
    req = commit_req("g", "t", [(0, 1)], metadata="x" * 11)
    req["topics"][0]["partitions"].append({"partition_index": 1, "committed_offset": 2,
                                           "committed_leader_epoch": -1, "committed_metadata": "ok"})
    assert codes(h.commit(req)) == [Err.OFFSET_METADATA_TOO_LARGE, 0]
    assert h.shard.offsets.snapshot() == {"g": {("t", 1): (2, -1, "ok", h.now, None)}}


def test_unknown_group_with_generation():
    h = Harness()
    assert codes(h.commit(commit_req("g", "t", [(0, 1)], generation=3), version=9)) == \
        [Err.GROUP_ID_NOT_FOUND]
    assert codes(h.commit(commit_req("g", "t", [(0, 1)], generation=3), version=8)) == \
        [Err.ILLEGAL_GENERATION]
    assert codes(h.commit(commit_req("", "t", [(0, 1)]))) == [Err.INVALID_GROUP_ID]
    assert h.log == []


def test_retention_time_sets_expire_timestamp_and_expires():
    h = Harness()
    h.commit(commit_req("g", "t", [(0, 1)], retention=1000), version=2)
    assert h.shard.offsets.by_group["g"][("t", 0)].expire_timestamp == h.now + 1000
    h.now += 999
    assert h.shard.cleanup(h.now) == []
    h.now += 1
    records = h.shard.cleanup(h.now)
    h.write(records)
    assert "g" not in h.shard.groups and h.shard.offsets.snapshot() == {}
    assert h.replayed().snapshot() == h.shard.snapshot()


def test_default_retention_from_commit_time():
    h = Harness(CoordinatorConfig(offsets_retention_ms=HOUR))
    h.commit(commit_req("g", "t", [(0, 1)]))
    h.now += HOUR // 2
    h.commit(commit_req("g", "t", [(1, 1)]))
    h.now += HOUR // 2
    h.write(h.shard.cleanup(h.now))
    assert set(h.shard.offsets.group_offsets("g")) == {("t", 1)}
    h.now += HOUR // 2
    h.write(h.shard.cleanup(h.now))
    assert "g" not in h.shard.groups


def test_offset_delete_and_delete_groups():
    h = Harness()
    h.commit(commit_req("g", "t", [(0, 1), (1, 2)]))
    deleted = h.shard.offset_delete({"group_id": "g", "topics": [
        {"name": "t", "partitions": [{"partition_index": 0}]}]})
    resp = deleted.response
    h.write(deleted.records)
    assert resp["error_code"] == 0 and set(h.shard.offsets.group_offsets("g")) == {("t", 1)}
    resp = h.shard.offset_delete({"group_id": "nope", "topics": []}).response
    assert resp["error_code"] == Err.GROUP_ID_NOT_FOUND
    deleted = h.shard.delete_group("g")
    h.write(deleted.records)
    assert deleted.response == {"group_id": "g", "error_code": 0} and "g" not in h.shard.groups and h.shard.offsets.snapshot() == {}
    assert h.shard.delete_group("g").response["error_code"] == Err.GROUP_ID_NOT_FOUND
    assert h.replayed().snapshot() == h.shard.snapshot()


@pytest.mark.parametrize("seed", range(150))
def test_random_schedules_replay_equals_live(seed):
    """Any sequence of commits, deletes, expiries and compactions: replay == live."""
    rng = random.Random(seed)
    h = Harness(CoordinatorConfig(offsets_retention_ms=rng.choice([HOUR, 10 * HOUR])))
    delete_retention = rng.choice([0, HOUR, 24 * HOUR])
    groups = [f"g{i}" for i in range(rng.randint(1, 4))]
    topics = ["a", "b"]
    for _ in range(rng.randint(20, 80)):
        h.now += rng.randint(0, HOUR)
        op = rng.random()
        group = rng.choice(groups)
        if op < 0.55:
            parts = [(p, rng.randint(0, 10_000)) for p in rng.sample(range(4), rng.randint(1, 3))]
            version = rng.choice([1, 2, 3, 5, 8, 9])
            retention = rng.choice([-1, -1, HOUR]) if 2 <= version <= 4 else -1
            h.commit(commit_req(group, rng.choice(topics), parts, retention=retention,
                                metadata=rng.choice(["", "m", "x" * 50])), version)
        elif op < 0.65:
            h.write(h.shard.offset_delete({"group_id": group, "topics": [
                {"name": rng.choice(topics), "partitions": [{"partition_index": rng.randrange(4)}]}]}
            ).records)
        elif op < 0.72:
            h.write(h.shard.delete_group(group).records)
        elif op < 0.9:
            h.write(h.shard.cleanup(h.now))
        else:
            h.log = compact(h.log, h.now, delete_retention)
        live = h.shard.snapshot()
        assert h.replayed().snapshot() == live, f"seed {seed}: replay differs from live state"
        assert h.replayed(compact(h.log, h.now, delete_retention)).snapshot() == live


@pytest.mark.parametrize("seed", range(5))
def test_real_log_compaction_keeps_replayed_state(tmp_path, seed):
    """Records through a real segment log and the real compactor replay to the live state."""
    from kcoord.log import LogConfig, PartitionLog
    from kcoord.log.compaction import compact as compact_log
    from kcoord.protocol.records import build_batch, decode_all

    rng = random.Random(seed)
    h = Harness(CoordinatorConfig(offsets_retention_ms=HOUR))
    plog = PartitionLog(tmp_path / "__consumer_offsets-0", LogConfig(segment_bytes=4096))
    written = 0

    def sync_log():
        nonlocal written
        for key, value, ts in h.log[written:]:
            plog.append(build_batch([(key, value, [], ts)]))
        written = len(h.log)

    def replay_log():
        fresh = CoordinatorShard(0, h.shard.config)
        offset = plog.log_start_offset
        while offset < plog.log_end_offset:
            recs = [r for r in decode_all(plog.read(offset, 1 << 20)) if r.offset >= offset]
            for r in recs:
                fresh.replay(decode_record(r.key, r.value))
            offset = recs[-1].offset + 1
        return fresh

    for step in range(300):
        h.now += rng.randint(0, HOUR // 4)
        group = f"g{rng.randrange(3)}"
        if rng.random() < 0.8:
            h.commit(commit_req(group, "t", [(rng.randrange(3), rng.randint(0, 999))]))
        elif rng.random() < 0.5:
            h.write(h.shard.delete_group(group).records)
        else:
            h.write(h.shard.cleanup(h.now))
        sync_log()
        if step % 50 == 49:
            compact_log(plog, h.now, rng.choice([0, HOUR]))
            assert replay_log().snapshot() == h.shard.snapshot()
    plog.close()


def flat_request(req: dict) -> tuple:
    """The request as protocol/commit_request.py decodes it."""
    return (req["group_id"], req["generation_id_or_member_epoch"], req["member_id"],
            req["group_instance_id"],
            [(t["name"], [(p["partition_index"], p["committed_offset"],
                           p["committed_leader_epoch"], p["committed_metadata"])
                          for p in t["partitions"]]) for t in req["topics"]])


@pytest.mark.parametrize("seed", range(20))
def test_plain_commit_is_offset_commit_or_declines(seed):
    """A flat commit (CoordinatorShard.plain_commit) makes the very records,
    state and lean answer of offset_commit(lean=True), or declines (None)
    with nothing changed when offset_commit would not take every partition
    of a plain commit: group errors, metadata that may be too long, pending
    transactional offsets."""
    rng = random.Random(seed)
    config = CoordinatorConfig(offset_metadata_max_bytes=8)
    dicts, flats = Harness(config), Harness(config)
    taken = declined = 0
    for _ in range(60):
        dicts.now = flats.now = dicts.now + rng.randint(0, HOUR)
        group = rng.choice(["g0", "g1", "g2"])
        parts = [(p, rng.randint(0, 10_000)) for p in rng.sample(range(4), rng.randint(0, 3))]
        req = commit_req(group, rng.choice(["a", "b"]), parts,
                         generation=rng.choice([-1, -1, -1, 0, 3]),
                         metadata=rng.choice(["", "", None, "m", "x" * 5, "y" * 9]),
                         epoch=rng.choice([-1, 4]))
        version = rng.choice([8, 9])
        pending = rng.random() < 0.1
        if pending:  # a producer's offsets pending in some group
            flats.shard.txn_offsets.by_group["other"] = {7}
        before = flats.shard.snapshot()
        flat = flats.shard.plain_commit(*flat_request(req), version, flats.now)
        if flat.__class__ is list:  # a simple group's commit: the records alone
            flat = Result(records=flat)
        expected = dicts.shard.offset_commit(req, version, dicts.now, True)
        if pending:
            del flats.shard.txn_offsets.by_group["other"]
        if flat is None:
            declined += 1
            assert flats.shard.snapshot() == before
            assert pending or expected.response is not None  # something not taken
            flat = flats.shard.offset_commit(req, version, flats.now, True)
        else:
            taken += 1
            assert expected.response is None and flat.response is None
        assert flat.records == expected.records and flat.timers == expected.timers
        for h, result in ((dicts, expected), (flats, flat)):
            for record in result.records:
                key, value = encode_record(record)
                h.log.append((key, value, h.now))
        assert flats.shard.snapshot() == dicts.shard.snapshot()
        assert flats.replayed().snapshot() == dicts.shard.snapshot()
    assert taken and declined
