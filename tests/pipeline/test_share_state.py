"""The share-group table's pieces without Spark: __share_group_state
records replayed by the pipeline give what the share coordinator's own core
loads from the same records, and the share lag's trend and problems."""
from __future__ import annotations

import random

from kcoord.pipeline.group_rows import uuid_str
from kcoord.pipeline.share_jobs import share_rows
from kcoord.pipeline.share_state import ShareStateReplay
from kcoord.protocol.messages.share_state import SHARE_SNAPSHOT, SHARE_UPDATE
from kcoord.protocol.record_codec import Record
from kcoord.share.coordinator import ShareCoordinatorShard
from kcoord.share.records import encode_share_record

TOPIC_ID = bytes(range(16))


def _records(seed: int) -> list[Record]:
    """A random history of one share partition's writes: a snapshot, then
    updates (some moving the start offset), another snapshot, a tombstone of
    another key."""
    rnd = random.Random(seed)
    key = {"group_id": "g", "topic_id": TOPIC_ID, "partition": 0}
    other = {"group_id": "h", "topic_id": TOPIC_ID, "partition": 1}
    out, start = [], 0

    def batches():
        first = start + rnd.randrange(0, 5)
        rows = []
        for _ in range(rnd.randrange(1, 4)):
            last = first + rnd.randrange(0, 6)
            rows.append({"first_offset": first, "last_offset": last,
                         "delivery_state": rnd.choice((0, 2, 4)),
                         "delivery_count": rnd.randrange(1, 7)})
            first = last + 1 + rnd.randrange(0, 3)
        return rows
    snap = {"snapshot_epoch": 0, "state_epoch": 1, "leader_epoch": 0, "start_offset": 0,
            "delivery_complete_count": 0, "create_timestamp": 1, "write_timestamp": 1}
    out.append(Record(SHARE_SNAPSHOT, key, {**snap, "state_batches": batches()}, 0))
    out.append(Record(SHARE_SNAPSHOT, other, {**snap, "state_batches": batches()}, 0))
    for i in range(30):
        moved = rnd.random() < 0.3
        start += rnd.randrange(1, 4) if moved else 0
        value = {"snapshot_epoch": 0, "leader_epoch": rnd.choice((-1, 1, 2)),
                 "start_offset": start if moved else -1,
                 "delivery_complete_count": rnd.randrange(0, 9), "state_batches": batches()}
        out.append(Record(SHARE_UPDATE, key, value, 0))
        if i == 15:
            out.append(Record(SHARE_SNAPSHOT, other, None, 0))   # deleted
    return out


def test_replay_equals_the_share_coordinators_load():
    for seed in range(20):
        records = _records(seed)
        core = ShareCoordinatorShard(0)
        replay = ShareStateReplay()
        for ts, rec in enumerate(records):
            core.replay(rec)
            key, value = encode_share_record(rec)
            replay.add(ts, key, value)
        want = core.states[("g", TOPIC_ID, 0)]
        [row] = replay.rows(0)
        assert ("h", TOPIC_ID, 1) not in core.states
        assert (row["group"], row["topic_id"], row["partition"]) == ("g", uuid_str(TOPIC_ID), 0)
        assert (row["start_offset"], row["delivery_complete_count"], row["leader_epoch"]) == (
            want.start_offset, want.delivery_complete_count, want.leader_epoch), seed
        by_state = {0: 0, 2: 0, 4: 0}
        for b in want.batches:
            by_state[b.delivery_state] += b.last_offset - b.first_offset + 1
        assert (row["in_flight"], row["acknowledged"], row["archived"]) == (
            by_state[0], by_state[2], by_state[4]), seed
        assert row["writes"] == 31 and row["bad_records"] == 0


def test_archived_at_the_limit_counts_distinct_offsets_across_writes():
    replay = ShareStateReplay(delivery_limit=3)
    key = {"group_id": "g", "topic_id": TOPIC_ID, "partition": 0}
    for start, rows in ((0, [(0, 4, 4, 3), (5, 5, 4, 1)]),     # 0-4 at the limit; 5 rejected
                        (3, [(3, 6, 4, 3)]),                   # 3-4 again, 5-6 at the limit
                        (10, [])):                             # all pruned below 10
        value = {"snapshot_epoch": 0, "leader_epoch": 0, "start_offset": start,
                 "delivery_complete_count": 0,
                 "state_batches": [{"first_offset": a, "last_offset": b, "delivery_state": s,
                                    "delivery_count": c} for a, b, s, c in rows]}
        replay.add(0, *encode_share_record(Record(SHARE_UPDATE, key, value, 0)))
    [row] = replay.rows(0)
    assert row["archived_at_limit"] == 7                       # 0-6, each counted once
    assert row["archived"] == 0 and row["start_offset"] == 10


def _state_row(history, start=10, complete=0):
    return {"group": "g", "topic_id": "T", "partition": 0, "start_offset": start,
            "delivery_complete_count": complete, "in_flight": 0, "acknowledged": 0,
            "archived": 0, "archived_at_limit": 0, "last_write_ms": history[-1][0],
            "history": [{"ts": t, "start_offset": s, "delivery_complete_count": c}
                        for t, s, c in history]}


def test_lag_growing_needs_the_lag_never_shrinking_and_growing():
    names = {"T": "t"}
    obs = {("t", 0): [(10, 100), (14, 200), (20, 300), (25, 400)]}   # the log end grows
    stuck = _state_row([(150, 10, 0), (250, 10, 0), (350, 10, 0)])   # the start never moves
    [row] = share_rows([stuck], names, obs, {"g"})
    assert (row["lag"], row["lag_growing"], row["problems"]) == (15, True, ["LAG_GROWING"])
    keeping_up = _state_row([(150, 10, 0), (250, 14, 0), (350, 20, 0)], start=25)
    [row] = share_rows([keeping_up], names, obs, set())
    assert (row["lag"], row["lag_growing"], row["problems"]) == (0, False, [])
    assert row["group_in_offsets"] is False
    # a running server: only the current end in obs, the past from ListOffsets
    live = {("t", 0): [(25, -(1 << 62))]}
    past = {("t", 0): [(14, 150), (20, 250), (25, 350)]}
    [row] = share_rows([stuck], names, live, {"g"}, past)
    assert (row["lag"], row["lag_growing"]) == (15, True)
    [row] = share_rows([stuck], names, live, {"g"}, {})         # no past: no trend
    assert (row["lag"], row["lag_growing"]) == (15, False)
