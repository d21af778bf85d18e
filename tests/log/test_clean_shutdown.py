"""Clean shutdown: a closed log reopened with clean_shutdown=True trusts its
active segment (no recovery scan) and ends up in exactly the state a
recovery scan gives; damaged indexes fall back to recovery; the marker file
is taken and written durably.
"""
from __future__ import annotations

import random
import shutil

import pytest

from kcoord.log import LogConfig, PartitionLog
from kcoord.log.clean_shutdown import (CLEAN_SHUTDOWN_FILE, take_clean_shutdown_marker,
                                       write_clean_shutdown_marker)
from kcoord.protocol.records import build_batch


def append_random(plog: PartitionLog, rnd: random.Random, batches: int) -> None:
    for _ in range(batches):
        n = rnd.randint(1, 8)
        ts = rnd.randint(1_000, 9_000)
        plog.append(build_batch([(b"k%d" % rnd.randrange(50), b"v" * rnd.randint(0, 300), [],
                                  ts + i) for i in range(n)]))


def segment_state(plog: PartitionLog) -> dict:
    seg = plog.active
    return {"end": plog.log_end_offset, "size": plog.size_bytes,
            "bases": plog.segment_base_offsets, "max_ts": seg.max_timestamp,
            "max_ts_offset": seg.offset_of_max_timestamp, "first_ts": seg.first_timestamp,
            "since_index": seg._bytes_since_index,
            "index": [seg.index._entry(i) for i in range(seg.index.entries)]}


def time_entries(plog: PartitionLog) -> list[tuple]:
    ti = plog.active.time_index
    return [ti._entry(i) for i in range(ti.entries)]


def assert_time_index_ok(clean: PartitionLog, recovered: PartitionLog) -> None:
    """The clean one may hold, among the entries a rebuild gives, the entry
    close() wrote for the max timestamp (as Kafka's close does); a later
    lookup finds the same batches either way."""
    got, want = time_entries(clean), time_entries(recovered)
    extra = [e for e in got if e not in want]
    assert [e for e in got if e in want] == want
    assert len(extra) <= 1
    assert got == sorted(got) and len({e[0] for e in got}) == len(got)


def data_bytes(path) -> dict:
    """.log and .index files (time indexes may differ by close()'s entry)."""
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.suffix != ".timeindex"}


@pytest.mark.parametrize("seed", range(8))
def test_clean_open_equals_recovered_open(tmp_path, seed):
    rnd = random.Random(seed)
    config = LogConfig(segment_bytes=rnd.choice([20_000, 1 << 20]),
                       index_interval_bytes=rnd.choice([0, 500, 4096]))
    clean_dir, crash_dir = tmp_path / "clean-0", tmp_path / "crash-0"
    plog = PartitionLog(clean_dir, config)
    append_random(plog, rnd, rnd.randint(0, 120))
    plog.close()
    shutil.copytree(clean_dir, crash_dir)

    clean = PartitionLog(clean_dir, config, clean_shutdown=True)
    recovered = PartitionLog(crash_dir, config)
    assert not clean.recovery_scanned and recovered.recovery_scanned
    assert segment_state(clean) == segment_state(recovered)
    assert_time_index_ok(clean, recovered)
    seg = clean.active
    if seg.size:  # close() recorded the max timestamp as the last entry
        assert time_entries(clean)[-1] == (seg.max_timestamp,
                                           seg.offset_of_max_timestamp - seg.base_offset)
    # both go on the same way: the same offsets, rolls and index entries
    more = random.Random(seed + 1000)
    append_random(clean, more, 60)
    more = random.Random(seed + 1000)
    append_random(recovered, more, 60)
    assert segment_state(clean) == segment_state(recovered)
    assert_time_index_ok(clean, recovered)
    for t in (0, 1000, 5000, 9000, 10_000):
        assert clean.offset_for_timestamp(t) == recovered.offset_for_timestamp(t)
    clean.close()
    recovered.close()
    assert data_bytes(clean_dir) == data_bytes(crash_dir)


def test_clean_open_of_an_empty_log(tmp_path):
    PartitionLog(tmp_path / "t-0").close()
    plog = PartitionLog(tmp_path / "t-0", clean_shutdown=True)
    assert not plog.recovery_scanned and plog.log_end_offset == 0
    assert plog.append(build_batch([(b"k", b"v", [], 5)])) == (0, 0)
    plog.close()


@pytest.mark.parametrize("damage", ["index_removed", "index_torn", "index_points_past_end"])
def test_damaged_active_index_falls_back_to_recovery(tmp_path, damage, caplog):
    config = LogConfig(index_interval_bytes=100)
    plog = PartitionLog(tmp_path / "t-0", config)
    append_random(plog, random.Random(1), 40)
    end = plog.log_end_offset
    index_path = plog.active.index.path
    plog.close()
    if damage == "index_removed":
        index_path.unlink()
    elif damage == "index_torn":
        index_path.write_bytes(index_path.read_bytes()[:-3])
    else:
        index_path.write_bytes(index_path.read_bytes() + (10**6).to_bytes(4, "big") * 2)
    reopened = PartitionLog(tmp_path / "t-0", config, clean_shutdown=True)
    assert reopened.recovery_scanned
    assert reopened.log_end_offset == end
    assert "recovering" in caplog.text
    reopened.close()


def test_torn_tail_without_marker_is_truncated(tmp_path):
    """No marker (a crash): the recovery scan still cuts a torn tail."""
    plog = PartitionLog(tmp_path / "t-0")
    append_random(plog, random.Random(2), 20)
    end, size = plog.log_end_offset, plog.size_bytes
    path = plog.active.log_path
    plog.close()
    with open(path, "ab") as fh:
        fh.write(build_batch([(b"k", b"torn", [], 1)])[:-5])
    reopened = PartitionLog(tmp_path / "t-0")
    assert reopened.recovery_scanned
    assert (reopened.log_end_offset, reopened.size_bytes) == (end, size)
    assert path.stat().st_size == size
    reopened.close()


def test_marker_is_taken_once(tmp_path):
    assert not take_clean_shutdown_marker(tmp_path)
    write_clean_shutdown_marker(tmp_path)
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert take_clean_shutdown_marker(tmp_path)
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert not take_clean_shutdown_marker(tmp_path)
