"""Compaction keeps the latest record per key, offsets intact, across reopen."""
import random

from kcoord.log import LogConfig, PartitionLog
from kcoord.log.compaction import compact
from kcoord.protocol.records import decode_all, build_batch

DAY = 86_400_000


def all_records(plog):
    out, offset = [], plog.log_start_offset
    while offset < plog.log_end_offset:
        chunk = plog.read(offset, 1 << 20)
        if not chunk:
            break
        recs = [r for r in decode_all(chunk) if r.offset >= offset]
        out.extend(recs)
        offset = recs[-1].offset + 1 if recs else offset + 1
    return out


def expected_after(history, now, delete_retention):
    latest = {}
    for offset, key, value, ts in history:
        latest[key] = (offset, key, value, ts)
    return sorted(v for v in latest.values() if v[2] is not None or now - v[3] < delete_retention)


def test_compaction_matches_model(tmp_path):
    rng = random.Random(7)
    plog = PartitionLog(tmp_path / "p-0", LogConfig(segment_bytes=2000, index_interval_bytes=100))
    history = []
    now = 1_000_000_000_000
    for i in range(600):
        key = b"k%d" % rng.randrange(40)
        value = None if rng.random() < 0.15 else b"v%d" % i
        ts = now + i * 1000
        base, _ = plog.append(build_batch([(key, value, [], ts)]))
        history.append((base, key, value, ts))
    assert len(plog.sealed_segments()) > 3
    active_base = plog.active.base_offset
    check_time = now + 600 * 1000 + DAY // 2
    stats = compact(plog, check_time, DAY)
    assert stats.records_removed > 0
    got = [(r.offset, r.key, r.value, r.timestamp) for r in all_records(plog)]
    # records in the active segment are untouched; sealed ones follow the model
    sealed_expect = [h for h in expected_after(history, check_time, DAY) if h[0] < active_base]
    sealed_expect += [h for h in history if h[0] >= active_base]
    assert sorted(got) == sorted(sealed_expect)
    plog.close()
    reopened = PartitionLog(tmp_path / "p-0", LogConfig(segment_bytes=2000, index_interval_bytes=100))
    assert [(r.offset, r.key, r.value, r.timestamp) for r in all_records(reopened)] == got
    # old tombstones go once delete retention has passed
    compact(reopened, check_time + DAY, DAY)
    remaining = all_records(reopened)
    assert all(r.value is not None for r in remaining if r.offset < reopened.active.base_offset)
    end = reopened.log_end_offset
    base, _ = reopened.append(build_batch([(b"new", b"x", [], check_time)]))
    assert base == end
    reopened.close()
