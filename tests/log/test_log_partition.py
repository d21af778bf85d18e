"""PartitionLog: appends, reads, rolls, indexes, timestamps, retention."""
import os
import struct

import pytest

from kcoord.log import InvalidAppend, LogConfig, OffsetOutOfRange
from kcoord.protocol.records import (
    build_batch, decode_all, iter_batches, read_batch_header, set_log_append_time)

SMALL = LogConfig(segment_bytes=2000, index_interval_bytes=150)


def batch(n=1, ts=1_000, value=b"v" * 20, **kw):
    return build_batch([(b"k%d" % i, value, [], ts + i) for i in range(n)], **kw)


def offsets_in(data):
    return [r.offset for r in decode_all(data)]


def read_all(log, max_bytes=10_000):
    """Every record (offset, value) by fetching like a consumer does."""
    out, pos = [], log.log_start_offset
    while pos < log.log_end_offset:
        data = log.read(pos, max_bytes)
        assert data, pos
        recs = [r for r in decode_all(data) if r.offset >= pos]
        out += [(r.offset, r.value, r.timestamp) for r in recs]
        pos = recs[-1].offset + 1
    return out


def fill(log, batches=120, seed_ts=1_000):
    """Append batches of 1..5 records; returns the expected (offset, ts) list."""
    expected = []
    for i in range(batches):
        n = i % 5 + 1
        first, last = log.append(batch(n, ts=seed_ts + 10 * i, value=b"x" * (i % 37)))
        assert last - first == n - 1
        expected += [(first + j, seed_ts + 10 * i + j) for j in range(n)]
    return expected


def test_empty_log(open_log):
    log = open_log()
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (0, 0, 0)
    assert log.read(0, 1000) == b""
    assert log.offset_for_timestamp(0) is None
    assert log.max_timestamp_offset() == (-1, -1)
    assert sorted(p.name for p in log.path.iterdir()) == [
        "00000000000000000000.index", "00000000000000000000.log",
        "00000000000000000000.timeindex"]


def test_append_assigns_consecutive_offsets(open_log):
    log = open_log()
    assert log.append(batch(3)) == (0, 2)
    # Several batches in one call, with stale base offsets from the producer.
    assert log.append(batch(2, base_offset=77) + batch(4, base_offset=5)) == (3, 8)
    assert log.log_end_offset == 9
    data = log.read(0, 1 << 20)
    assert offsets_in(data) == list(range(9))
    assert [h.base_offset for _, h in iter_batches(data)] == [0, 3, 5]
    assert log.size_bytes == len(data)


def test_append_rejects_partial_or_empty_input(open_log):
    log = open_log()
    b = batch(2)
    with pytest.raises(InvalidAppend):
        log.append(b[:-1])
    with pytest.raises(InvalidAppend):
        log.append(b + b[:30])
    with pytest.raises(InvalidAppend):
        log.append(b"")
    assert log.log_end_offset == 0 and log.size_bytes == 0


def test_rolls_and_reads_across_segments(open_log):
    log = open_log(SMALL)
    expected = fill(log)
    names = sorted(p.name for p in log.path.glob("*.log"))
    assert len(names) > 5
    assert all(len(n) == len("00000000000000000000.log") for n in names)
    assert log.segment_base_offsets == [int(n[:20]) for n in names]
    for path in log.path.glob("*.log"):
        # A segment only exceeds segment_bytes if a single append does.
        assert path.stat().st_size <= SMALL.segment_bytes
    assert [(o, ts) for o, _, ts in read_all(log)] == expected
    assert log.size_bytes == sum(p.stat().st_size for p in log.path.glob("*.log"))


def test_read_from_every_offset_starts_at_containing_batch(open_log):
    for interval in (0, 150, 4096):
        log = open_log(LogConfig(segment_bytes=1500, index_interval_bytes=interval),
                       name=f"t-{interval}")
        fill(log, 80)
        for offset in range(log.log_end_offset):
            data = log.read(offset, 1)  # min_one: exactly the containing batch
            (pos, h), = iter_batches(data)
            assert h.base_offset <= offset <= h.base_offset + h.last_offset_delta
            assert len(data) == h.size


def test_read_respects_max_bytes_and_min_one(open_log):
    log = open_log()
    sizes = [len(b) for b in (batch(1), batch(3), batch(2))]
    log.append(batch(1)); log.append(batch(3)); log.append(batch(2))
    assert len(log.read(0, sizes[0] - 1)) == sizes[0]          # min_one
    assert log.read(0, sizes[0] - 1, min_one=False) == b""
    assert len(log.read(0, sizes[0] + sizes[1] - 1)) == sizes[0]  # whole batches only
    assert len(log.read(2, sizes[1] + sizes[2])) == sizes[1] + sizes[2]
    assert len(log.read(1, 1 << 20)) == sizes[1] + sizes[2]
    assert len(log.read(4, 1 << 20)) == len(log.read(5, 1 << 20)) == sizes[2]


def test_offset_out_of_range(open_log):
    log = open_log(LogConfig(segment_bytes=500, retention_bytes=1000))
    for _ in range(20):
        log.append(batch(2))
    with pytest.raises(OffsetOutOfRange) as err:
        log.read(41, 100)
    assert (err.value.log_start_offset, err.value.log_end_offset) == (0, 40)
    assert log.read(40, 100) == b""
    with pytest.raises(OffsetOutOfRange):
        log.read(-1, 100)
    assert log.apply_retention(now_ms=0) > 0
    start = log.log_start_offset
    assert start > 0
    with pytest.raises(OffsetOutOfRange):
        log.read(start - 1, 100)
    assert offsets_in(log.read(start, 100))[0] == start


def test_index_files_are_kafka_layout(open_log):
    log = open_log(SMALL)
    fill(log)
    log.close()
    for idx in log.path.glob("*.index"):
        base = int(idx.stem)
        raw = idx.read_bytes()
        seg = idx.with_suffix(".log").read_bytes()
        assert len(raw) % 8 == 0
        prev = -1
        for rel, pos in struct.iter_unpack(">ii", raw):
            h = read_batch_header(seg, pos)
            assert h.base_offset + h.last_offset_delta == base + rel
            assert rel > prev
            prev = rel
        times = list(struct.iter_unpack(">qi", idx.with_suffix(".timeindex").read_bytes()))
        assert times == sorted(times) and len({t for t, _ in times}) == len(times)


def test_offset_for_timestamp(open_log):
    log = open_log(SMALL)
    # Timestamps go backwards now and then, and one batch is compressed.
    stamps = []
    for i in range(150):
        ts = 10_000 + 7 * i - (300 if i % 13 == 0 else 0)
        stamps.append(ts)
        log.append(batch(3, ts=ts, compression=1 if i == 40 else 0))
    records = [(o, ts) for o, _, ts in read_all(log)]

    def expected(target):
        return next(((o, ts) for o, ts in records if ts >= target), None)

    for target in sorted({ts + d for ts in stamps for d in (-1, 0, 1, 2, 3)}) + [0, 99_999]:
        assert log.offset_for_timestamp(target) == expected(target), target
    assert log.max_timestamp_offset() == max(records, key=lambda r: (r[1], -r[0]))
    log.close()
    log = open_log(SMALL)  # sealed segments now answer from their .timeindex
    for target in (0, 10_000, 10_500, 10_701, 11_000, 11_044, 11_045, 11_046):
        assert log.offset_for_timestamp(target) == expected(target), target


def test_max_timestamp_earliest_on_ties(open_log):
    log = open_log()
    log.append(batch(2, ts=50))
    log.append(build_batch([(None, b"a", [], 10), (None, b"b", [], 90), (None, b"c", [], 90)]))
    log.append(batch(1, ts=90))
    assert log.max_timestamp_offset() == (3, 90)
    assert log.offset_for_timestamp(60) == (3, 90)


def test_log_append_time_batches(open_log):
    log = open_log()
    log.append(batch(3, ts=5))                       # timestamps 5, 6, 7
    lat = bytearray(build_batch([(None, b"a", [], 1), (None, b"b", [], 2)]))
    set_log_append_time(lat, 0, 100)
    log.append(lat)
    assert log.offset_for_timestamp(6) == (1, 6)
    # Under LogAppendTime every record carries the batch's maxTimestamp.
    assert log.offset_for_timestamp(8) == (3, 100)
    assert log.max_timestamp_offset() == (3, 100)
    assert log.offset_for_timestamp(101) is None


def test_retention_by_size_keeps_at_least_retention_bytes(open_log):
    log = open_log(LogConfig(segment_bytes=1000, retention_bytes=2500))
    fill(log, 100)
    before = log.segment_base_offsets
    deleted = log.apply_retention(now_ms=0)
    assert deleted == len(before) - len(log.segment_base_offsets) > 0
    assert log.size_bytes >= 2500
    # One more deletion would have gone below the limit.
    first = log.path / f"{log.log_start_offset:020d}.log"
    assert log.size_bytes - first.stat().st_size < 2500
    assert log.log_start_offset == log.segment_base_offsets[0]
    assert not (log.path / f"{before[0]:020d}.log").exists()
    assert not (log.path / f"{before[0]:020d}.index").exists()
    assert read_all(log)[0][0] == log.log_start_offset


def test_retention_by_time_never_deletes_active(open_log):
    log = open_log(LogConfig(segment_bytes=600, retention_ms=1000))
    for i in range(30):
        log.append(batch(2, ts=i * 100))  # newest timestamp 2901
    segments = log.segment_base_offsets
    assert log.apply_retention(now_ms=1500) > 0
    # Only segments whose newest record is older than now - retention went.
    assert log.log_start_offset > 0
    assert log.apply_retention(now_ms=10**9) > 0
    assert log.segment_base_offsets == segments[-1:]
    assert log.log_end_offset == 60
    assert log.log_start_offset == segments[-1]
    assert log.append(batch(1)) == (60, 60)


def test_retention_time_boundary(open_log):
    log = open_log(LogConfig(segment_bytes=100, retention_ms=1000))  # a batch each
    log.append(batch(1, ts=1000))
    log.append(batch(1, ts=2000))
    log.append(batch(1, ts=3000))
    assert len(log.segment_base_offsets) == 3
    assert log.apply_retention(now_ms=2000) == 0   # 2000 - 1000 is not > 1000
    assert log.apply_retention(now_ms=2001) == 1
    assert log.apply_retention(now_ms=3001) == 1   # the active one stays
    assert log.log_start_offset == 2


def test_restart_keeps_everything(open_log):
    log = open_log(SMALL)
    expected = fill(log)
    before = read_all(log)
    size, segments = log.size_bytes, log.segment_base_offsets
    max_ts = log.max_timestamp_offset()
    log.close()
    log = open_log(SMALL)
    assert read_all(log) == before
    assert (log.size_bytes, log.segment_base_offsets) == (size, segments)
    assert log.log_end_offset == expected[-1][0] + 1
    assert log.max_timestamp_offset() == max_ts
    assert log.append(batch(2)) == (len(expected), len(expected) + 1)


def test_append_raw_keeps_offsets_and_allows_gaps(open_log):
    log = open_log(LogConfig(segment_bytes=400))
    assert log.append_raw(batch(2, base_offset=10) + batch(1, base_offset=20)) == (10, 20)
    assert log.log_end_offset == 21
    with pytest.raises(InvalidAppend):
        log.append_raw(batch(1, base_offset=20))
    with pytest.raises(InvalidAppend):  # not increasing within the input
        log.append_raw(batch(1, base_offset=30) + batch(1, base_offset=25))
    log.append_raw(batch(2, base_offset=40))
    # Offsets in a gap read as the next batch that exists.
    assert offsets_in(log.read(15, 1)) == [20]
    assert offsets_in(log.read(25, 1)) == [40, 41]
    assert log.append(batch(1)) == (42, 42)


def test_append_raw_far_ahead_gets_a_new_segment(open_log):
    log = open_log()
    log.append(batch(1))
    far = 2**31 + 10
    assert log.append_raw(batch(1, base_offset=far)) == (far, far)
    assert log.segment_base_offsets == [0, far]
    assert offsets_in(log.read(5, 100)) == [far]


def test_truncate_to(open_log):
    log = open_log(SMALL)
    fill(log)
    segments = log.segment_base_offsets
    cut = segments[2] + 1
    data = log.read(cut, 1)
    h = read_batch_header(data)
    log.truncate_to(cut)
    # The batch holding `cut` goes whole.
    expect_end = h.base_offset if h.base_offset < cut else cut
    assert log.log_end_offset == expect_end
    assert log.segment_base_offsets == segments[:3]
    assert [o for o, _, _ in read_all(log)] == list(range(expect_end))
    assert log.append(batch(1)) == (expect_end, expect_end)
    log.close()
    log = open_log(SMALL)
    assert log.log_end_offset == expect_end + 1
    log.truncate_to(segments[1])   # exactly a segment boundary
    assert log.log_end_offset == segments[1]
    assert log.segment_base_offsets == segments[:1]
    assert log.append(batch(1)) == (segments[1], segments[1])


def test_truncate_below_start_restarts_the_log(open_log):
    log = open_log(LogConfig(segment_bytes=300, retention_bytes=0))
    for _ in range(10):
        log.append(batch(1))
    log.apply_retention(0)
    start = log.log_start_offset
    assert start == 9
    log.truncate_to(3)
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (3, 3, 0)
    assert log.append(batch(1)) == (3, 3)


def test_flush_interval_messages(open_log, monkeypatch):
    log = open_log(LogConfig(flush_interval_messages=5))
    calls = []
    real = os.fdatasync   # a segment's flush (its data, and its size when that changed)
    monkeypatch.setattr(os, "fdatasync", lambda fd: (calls.append(fd), real(fd)))
    log.append(batch(3))
    assert calls == []
    log.append(batch(3))
    assert len(calls) == 1
    log.append(batch(1))
    assert len(calls) == 1


def test_segment_ms_rolls_old_segments(open_log):
    log = open_log(LogConfig(segment_ms=1000))
    log.append(batch(1, ts=1))   # a timestamp from long ago
    log.append(batch(1, ts=1))
    assert len(log.segment_base_offsets) == 2


def test_segment_ms_ages_by_the_clock_the_log_is_given(tmp_path):
    """segment.ms reads the server's clock (a virtual one in kcoord.testing),
    not wall time: a clock far behind the batches' timestamps never rolls,
    one a second past them does."""
    from kcoord.log import PartitionLog
    now = [10**12]   # 2001: older than the batches' time, so no segment looks old yet
    log = PartitionLog(tmp_path / "topic-0", LogConfig(segment_ms=1000), now_ms=lambda: now[0])
    try:
        log.append(batch(1, ts=now[0] + 10**6))
        log.append(batch(1, ts=now[0] + 10**6))
        assert len(log.segment_base_offsets) == 1
        now[0] += 10**6 + 1001
        log.append(batch(1, ts=now[0]))
        assert len(log.segment_base_offsets) == 2
    finally:
        log.close()


def test_delete_removes_directory(open_log):
    log = open_log()
    log.append(batch(1))
    log.delete()
    assert not log.path.exists()


def test_reads_do_not_decode_records(open_log, monkeypatch):
    import kcoord.log.partition_log as pl
    log = open_log(SMALL)
    fill(log)
    monkeypatch.setattr(pl, "decode_batch", lambda *a, **k: pytest.fail("decoded"))
    read_all_offsets = []
    pos = 0
    while pos < log.log_end_offset:
        data = log.read(pos, 500)
        *_, (p, h) = iter_batches(data)
        pos = h.base_offset + h.last_offset_delta + 1
        read_all_offsets.append(pos)
    assert read_all_offsets[-1] == log.log_end_offset


def test_reads_from_the_newest_batches_agree_with_the_header_walk(open_log):
    """A segment finds a read's first batch among its newest ones without
    walking headers (Segment._tail); the answer must be the walk's, for every
    offset, after appends, a truncation and a reopen."""
    log = open_log(LogConfig(segment_bytes=1 << 20, index_interval_bytes=150))

    def check():
        seg = log.active
        for offset in range(seg.base_offset, log.log_end_offset + 2):
            walked = None
            for b in seg._header_walk(seg.index.lookup(offset)):
                if b.header.base_offset + b.header.last_offset_delta >= offset:
                    walked = (b.position, b.header.base_offset)
                    break
            found = seg.locate(offset)
            assert (found and (found[0], found[1].base_offset)) == (walked or None), offset

    fill(log, 40)
    assert len(log.active._tail) == 16
    check()
    log.truncate_to(50)
    check()
    fill(log, 7)
    check()
    log.close()
    log = open_log(LogConfig(segment_bytes=1 << 20, index_interval_bytes=150))
    check()
    assert [o for o, _ in fill(log, 3)] and read_all(log)
    check()
