"""The share coordinator's core (kcoord/share/coordinator.py), after Kafka's
ShareCoordinatorShardTest: each RPC's checks and records, the snapshot
cadence, and replay == live on random schedules."""
import random

import pytest

from kcoord.protocol.errors import Err
from kcoord.share.coordinator import (COLD_SNAPSHOT_TIMER, ShareCoordinatorConfig,
                                      ShareCoordinatorShard, share_request)
from kcoord.share.persister import StateBatch as B
from kcoord.share.records import SHARE_SNAPSHOT, SHARE_UPDATE, decode_share_record, \
    encode_share_record

T = b"\x01" * 16


class Core:
    """A core whose emitted records are replayed (as the runtime does) and kept."""

    def __init__(self, per_snapshot: int = 500, cold_ms: int = 300000) -> None:
        self.config = ShareCoordinatorConfig(per_snapshot, cold_ms)
        self.core = ShareCoordinatorShard(0, self.config)
        self.log: list = []
        self.now = 1000

    def run(self, op: str, *args, partition: int = 0, partitions=3, group: str = "g"):
        result = getattr(self.core, op)(self.now, share_request(group, T, partition, partitions),
                                        *args)
        self.core.replay_emitted(result.records)
        # every record goes through bytes, as the log keeps it
        self.log += [decode_share_record(*encode_share_record(r)) for r in result.records]
        return result

    def reloaded(self) -> ShareCoordinatorShard:
        fresh = ShareCoordinatorShard(0, self.config)
        for r in self.log:
            fresh.replay(r)
        return fresh


def test_initialize_writes_a_snapshot_without_batches():
    c = Core()
    r = c.run("initialize", 3, 42)
    assert r.response["error_code"] == 0
    (rec,) = r.records
    assert rec.type == SHARE_SNAPSHOT
    assert rec.value["snapshot_epoch"] == 0 and rec.value["state_epoch"] == 3
    assert rec.value["start_offset"] == 42 and rec.value["delivery_complete_count"] == 0
    assert rec.value["state_batches"] == []
    assert c.run("initialize", 3, -1).records[0].value["delivery_complete_count"] == -1
    assert c.core.states[("g", T, 0)].snapshot_epoch == 1  # old + 1


def test_initialize_checks():
    c = Core()
    c.run("initialize", 5, 0)
    assert c.run("initialize", 4, 0).response["error_code"] == Err.FENCED_STATE_EPOCH
    assert c.run("initialize", -1, 0).response["error_code"] == 0  # -1 is not fenced
    assert c.run("initialize", 5, 0, partition=-1).response["error_code"] == Err.INVALID_REQUEST
    r = c.run("initialize", 5, 0, partition=3)
    assert r.response["error_code"] == Err.UNKNOWN_TOPIC_OR_PARTITION and not r.records
    assert c.run("initialize", 5, 0, partitions=None).response["error_code"] == \
        Err.UNKNOWN_TOPIC_OR_PARTITION


def test_read_answers_the_state_and_records_a_new_leader_epoch():
    c = Core()
    assert c.run("read", 0).response["error_code"] == Err.INVALID_REQUEST  # uninitialized
    c.run("initialize", 0, 10)
    c.run("write", 0, 0, -1, -1, [B(10, 19, 2, 1), B(20, 24, 0, 1)])
    r = c.run("read", 0)
    assert not r.records  # the same leader epoch: nothing to write
    assert r.response["start_offset"] == 10 and r.response["state_batches"] == [
        {"first_offset": 10, "last_offset": 19, "delivery_state": 2, "delivery_count": 1},
        {"first_offset": 20, "last_offset": 24, "delivery_state": 0, "delivery_count": 1}]
    r = c.run("read", 3)  # a new leader: fences the old one
    assert len(r.records) == 1 and r.records[0].value["leader_epoch"] == 3
    assert c.run("read", 2).response["error_code"] == Err.FENCED_LEADER_EPOCH
    assert c.run("read", -1).response["error_code"] == Err.FENCED_LEADER_EPOCH  # as Kafka's
    assert c.run("write", 0, 2, -1, -1, []).response["error_code"] == Err.FENCED_LEADER_EPOCH
    assert c.run("write", 0, -1, -1, -1, []).response["error_code"] == 0  # -1 not fenced
    assert c.run("read", 0, partition=7).response["error_code"] == Err.INVALID_REQUEST


def test_write_stores_the_writers_epochs_and_fences_older_leaders():
    """As Kafka's ShareCoordinatorShard: a write raises the stored leader
    epoch (ShareUpdate and ShareSnapshot alike, -1 keeps it), so a leader
    that wrote at a newer epoch without reading fences the older one."""
    c = Core(per_snapshot=2)
    c.run("initialize", 1, 0)
    r = c.run("write", 1, 4, -1, -1, [B(0, 4, 2, 1)])
    assert r.records[0].type == SHARE_UPDATE and r.records[0].value["leader_epoch"] == 4
    assert c.core.states[("g", T, 0)].leader_epoch == 4
    assert c.run("write", 1, 3, -1, -1, []).response["error_code"] == Err.FENCED_LEADER_EPOCH
    assert c.run("read", 3).response["error_code"] == Err.FENCED_LEADER_EPOCH
    c.run("write", 1, -1, -1, -1, [])           # -1: not fenced, the epoch kept
    assert c.core.states[("g", T, 0)].leader_epoch == 4
    r = c.run("write", 2, 6, -1, -1, [])        # the snapshot takes both new epochs
    assert r.records[0].type == SHARE_SNAPSHOT
    assert (r.records[0].value["leader_epoch"], r.records[0].value["state_epoch"]) == (6, 2)
    assert c.run("write", 1, 6, -1, -1, []).response["error_code"] == Err.FENCED_STATE_EPOCH
    fresh = c.reloaded()                        # the log says the same
    assert fresh.leader_epochs[("g", T, 0)] == 6 and fresh.state_epochs[("g", T, 0)] == 2


def test_write_checks_in_kafkas_order():
    c = Core()
    assert c.run("write", 0, 0, -1, -1, []).response["error_code"] == Err.INVALID_REQUEST
    c.run("initialize", 4, 0)
    assert c.run("write", 3, 0, -1, -1, []).response["error_code"] == Err.FENCED_STATE_EPOCH
    assert c.run("write", -1, 0, -1, -1, []).response["error_code"] == 0
    r = c.run("write", 4, 0, -1, -1, [], partitions=None)
    assert r.response["error_code"] == Err.UNKNOWN_TOPIC_OR_PARTITION and not r.records


def test_updates_then_a_snapshot_every_n_updates():
    c = Core(per_snapshot=3)
    c.run("initialize", 0, 0)
    kinds = []
    for i in range(8):
        r = c.run("write", 0, 0, i, -1, [B(i, i, 2, 1)])
        kinds.append(r.records[0].type)
    assert kinds == [SHARE_UPDATE] * 3 + [SHARE_SNAPSHOT] + [SHARE_UPDATE] * 3 + [SHARE_SNAPSHOT]
    snap = c.log[-1].value
    # a snapshot merges everything and drops what is below the start offset
    assert snap["start_offset"] == 7 and snap["snapshot_epoch"] == 2
    assert snap["state_batches"] == [
        {"first_offset": 7, "last_offset": 7, "delivery_state": 2, "delivery_count": 1}]
    # an update keeps its snapshot's epoch and carries only its ranges
    assert c.log[-2].type == SHARE_UPDATE and c.log[-2].value["snapshot_epoch"] == 1


def test_updates_merge_newest_wins_below_start_pruned():
    c = Core()
    c.run("initialize", 0, 0)
    c.run("write", 0, 0, -1, -1, [B(0, 9, 0, 1)])
    c.run("write", 0, 0, -1, -1, [B(2, 4, 2, 1)])
    c.run("write", 0, 0, 3, 5, [B(5, 5, 4, 5)])
    s = c.core.states[("g", T, 0)]
    assert s.start_offset == 3 and s.delivery_complete_count == 5
    assert list(s.batches) == [B(3, 4, 2, 1), B(5, 5, 4, 5), B(6, 9, 0, 1)]
    assert c.reloaded().snapshot() == c.core.snapshot()


def test_delete_and_summary():
    c = Core()
    r = c.run("summary", -1)
    assert (r.response["start_offset"], r.response["delivery_complete_count"],
            r.response["leader_epoch"], r.response["state_epoch"]) == (-1, -1, 0, 0)
    assert not c.run("delete").records  # unknown key: success, nothing written
    c.run("initialize", 2, 5)
    c.run("read", 1)
    r = c.run("summary", -1)
    assert (r.response["start_offset"], r.response["delivery_complete_count"],
            r.response["leader_epoch"], r.response["state_epoch"]) == (5, 0, 1, 2)
    assert not r.records
    r = c.run("delete")
    assert r.records[0].type == SHARE_SNAPSHOT and r.records[0].value is None
    assert ("g", T, 0) not in c.core.states and not c.core.leader_epochs
    assert c.run("delete", partitions=None).response["error_code"] == \
        Err.UNKNOWN_TOPIC_OR_PARTITION
    assert c.reloaded().snapshot() == c.core.snapshot()


def test_cold_snapshots_on_the_timer():
    c = Core(cold_ms=1000)
    loaded = c.core.on_loaded(c.now)
    assert loaded.timers[0].key == COLD_SNAPSHOT_TIMER
    c.run("initialize", 0, 0)
    c.run("write", 0, 0, -1, -1, [B(0, 1, 2, 1)])
    c.now += 1000
    r = c.core.on_timer(COLD_SNAPSHOT_TIMER, c.now)
    (rec,) = r.records
    assert rec.type == SHARE_SNAPSHOT and rec.value["snapshot_epoch"] == 1
    assert rec.value["write_timestamp"] == c.now != rec.value["create_timestamp"]
    assert rec.value["state_batches"] == [
        {"first_offset": 0, "last_offset": 1, "delivery_state": 2, "delivery_count": 1}]
    assert r.timers[0].deadline_ms == c.now + 1000
    c.core.replay_emitted(r.records)
    # every key cold-snapshotted already: nothing more
    c.now += 5000
    assert not c.core.on_timer(COLD_SNAPSHOT_TIMER, c.now).records


@pytest.mark.parametrize("seed", range(0, 500, 50))
def test_replay_equals_live_on_random_schedules(seed):
    """After every operation a fresh core replaying the log equals the live
    one, and the live state is the per-offset model of what was written."""
    for s in range(seed, seed + 50):
        _schedule(random.Random(s))


def _schedule(rng: random.Random) -> None:
    c = Core(per_snapshot=rng.choice((0, 1, 3, 500)), cold_ms=rng.choice((10, 100000)))
    model: dict = {}  # partition -> (start, {offset: (state, count)})
    for _ in range(40):
        c.now += rng.randint(0, 50)
        p = rng.randint(0, 2)
        op = rng.random()
        if op < 0.15:
            start = rng.choice((-1, rng.randint(0, 30)))
            if c.run("initialize", rng.randint(-1, 2), start, partition=p).records:
                model[p] = (start, {})
        elif op < 0.6:
            start = rng.choice((-1, -1, rng.randint(0, 40)))
            batches = []
            for _ in range(rng.randint(0, 3)):
                first = rng.randint(0, 40)
                batches.append(B(first, first + rng.randint(0, 6), rng.choice((0, 2, 4)),
                                 rng.randint(1, 5)))
            if c.run("write", rng.randint(-1, 2), rng.randint(-1, 3), start, -1, batches,
                     partition=p).records:
                old_start, offsets = model[p]
                new_start = old_start if start == -1 else start
                for b in batches:
                    if b.last_offset >= b.first_offset:
                        for o in range(b.first_offset, b.last_offset + 1):
                            offsets[o] = (b.delivery_state, b.delivery_count)
                model[p] = (new_start, {o: v for o, v in offsets.items()
                                        if new_start < 0 or o >= new_start})
        elif op < 0.75:
            c.run("read", rng.randint(-1, 4), partition=p)
        elif op < 0.85:
            if c.run("delete", partition=p).records:
                del model[p]
        elif op < 0.92:
            c.run("summary", -1, partition=p)
        else:
            r = c.core.on_timer(COLD_SNAPSHOT_TIMER, c.now)
            c.core.replay_emitted(r.records)
            c.log += r.records
        assert c.reloaded().snapshot() == c.core.snapshot()
        for part, (start, offsets) in model.items():
            state = c.core.states[("g", T, part)]
            assert state.start_offset == start
            got = {}
            for b in state.batches:
                for o in range(b.first_offset, b.last_offset + 1):
                    got[o] = (b.delivery_state, b.delivery_count)
            assert got == offsets
        assert set(model) == {k[2] for k in c.core.states}
