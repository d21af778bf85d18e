"""Reopening a log after crashes: torn tails, corrupt batches, lost indexes."""
import logging
import os

import pytest

from kcoord.log import LogConfig
from kcoord.protocol.errors import CorruptRecordError
from kcoord.protocol.records import build_batch, decode_all, iter_batches, read_batch_header

CONFIG = LogConfig(segment_bytes=3000, index_interval_bytes=200)


def batch(n, ts, **kw):
    return build_batch([(b"key", b"value-%d" % i, [("h", b"x")], ts + i) for i in range(n)], **kw)


def populate(open_log, batches=60):
    log = open_log(CONFIG)
    for i in range(batches):
        log.append(batch(i % 4 + 1, ts=1000 + 10 * i))
    return log


def records(log):
    out, pos = [], log.log_start_offset
    while pos < log.log_end_offset:
        recs = [r for r in decode_all(log.read(pos, 4096)) if r.offset >= pos]
        out += recs
        pos = recs[-1].offset + 1
    return out


def active_file(log):
    return log.path / f"{log.segment_base_offsets[-1]:020d}.log"


def batches_of(path):
    data = path.read_bytes()
    return data, list(iter_batches(data))


def reopen_after(open_log, log, damage):
    """Close cleanly, damage the files, reopen; returns (old records, new log)."""
    before = records(log)
    log.close()
    damage()
    return before, open_log(CONFIG)


def expect_last_batch_dropped(before, log, path, last_header):
    assert log.log_end_offset == last_header.base_offset
    assert records(log) == [r for r in before if r.offset < last_header.base_offset]
    # Appends continue right where the surviving batches end.
    assert log.append(batch(2, ts=5)) == (last_header.base_offset, last_header.base_offset + 1)
    assert records(log)[-1].value == b"value-1"


@pytest.mark.parametrize("cut", [1, 3, 20, 61, "all-but-header", "all-but-1"])
def test_torn_tail_is_cut_at_the_last_whole_batch(open_log, cut, caplog):
    log = populate(open_log)
    path = active_file(log)
    data, batches = batches_of(path)
    last_pos, last = batches[-1]
    size = last.size
    cut = {"all-but-header": size - 61, "all-but-1": size - 1}.get(cut, cut)

    def damage():
        os.truncate(path, len(data) - cut)

    with caplog.at_level(logging.WARNING, logger="kcoord.log"):
        before, log = reopen_after(open_log, log, damage)
    assert path.stat().st_size == last_pos
    assert f"{size - cut} bytes" in caplog.text
    expect_last_batch_dropped(before, log, path, last)


@pytest.mark.parametrize("garbage", [
    b"\x00" * 100,                 # a zero-filled tail, as some filesystems leave
    b"\x00" * 7,                   # shorter than a header
    os.urandom(500),
    b"\x00" * 8 + b"\x7f\xff\xff\xff" + b"\x00" * 60,   # huge batchLength
])
def test_garbage_after_the_last_batch_is_dropped(open_log, garbage):
    log = populate(open_log)
    path = active_file(log)
    end = log.log_end_offset
    size = path.stat().st_size

    def damage():
        with open(path, "ab") as f:
            f.write(garbage)

    before, log = reopen_after(open_log, log, damage)
    assert path.stat().st_size == size
    assert log.log_end_offset == end
    assert records(log) == before
    assert log.append(batch(1, ts=5)) == (end, end)


def test_flipped_byte_in_last_batch_fails_crc(open_log):
    log = populate(open_log)
    path = active_file(log)
    data, batches = batches_of(path)
    last_pos, last = batches[-1]

    def damage():
        flipped = bytearray(data)
        flipped[last_pos + last.size - 3] ^= 0x40   # inside a record value
        path.write_bytes(flipped)

    before, log = reopen_after(open_log, log, damage)
    assert path.stat().st_size == last_pos
    expect_last_batch_dropped(before, log, path, last)


def test_corruption_mid_segment_keeps_everything_before_it(open_log):
    log = populate(open_log)
    path = active_file(log)
    data, batches = batches_of(path)
    assert len(batches) >= 4
    pos, bad = batches[1]

    def damage():
        flipped = bytearray(data)
        flipped[pos + 30] ^= 0xFF    # lastOffsetDelta/baseTimestamp: CRC covers it
        path.write_bytes(flipped)

    before, log = reopen_after(open_log, log, damage)
    assert path.stat().st_size == pos
    assert log.log_end_offset == bad.base_offset
    assert records(log) == [r for r in before if r.offset < bad.base_offset]
    # The sealed segments before it were not touched.
    assert len(log.segment_base_offsets) > 1


def test_offsets_going_backwards_are_corruption(open_log):
    log = populate(open_log)
    path = active_file(log)
    end = log.log_end_offset
    stale = build_batch([(None, b"old", [], 1)], base_offset=end - 3)  # valid CRC

    def damage():
        with open(path, "ab") as f:
            f.write(stale)

    before, log = reopen_after(open_log, log, damage)
    assert log.log_end_offset == end
    assert records(log) == before


def test_partial_append_after_a_crash(open_log):
    log = populate(open_log)
    path = active_file(log)
    end = log.log_end_offset
    half = batch(3, ts=1)[:40]

    def damage():
        with open(path, "ab") as f:
            f.write(half)

    before, log = reopen_after(open_log, log, damage)
    assert records(log) == before
    assert log.append(batch(3, ts=1)) == (end, end + 2)


def test_everything_corrupt_leaves_an_empty_active_segment(open_log):
    log = populate(open_log)
    path = active_file(log)
    base = log.segment_base_offsets[-1]

    def damage():
        path.write_bytes(b"\xff" * path.stat().st_size)

    before, log = reopen_after(open_log, log, damage)
    assert log.log_end_offset == base
    assert records(log) == [r for r in before if r.offset < base]
    assert log.append(batch(1, ts=1)) == (base, base)


def test_crash_right_after_a_roll(open_log):
    log = open_log(LogConfig(segment_bytes=100))
    log.append(batch(1, ts=1))
    log.close()
    # The new segment file was created, nothing written to it yet.
    (log.path / f"{1:020d}.log").write_bytes(b"")
    log = open_log(LogConfig(segment_bytes=100))
    assert log.segment_base_offsets == [0, 1]
    assert (log.log_start_offset, log.log_end_offset) == (0, 1)
    assert log.append(batch(1, ts=1)) == (1, 1)
    assert [r.offset for r in records(log)] == [0, 1]


@pytest.mark.parametrize("damage_kind", [
    "odd-size", "missing", "empty", "bogus-position", "mid-batch-position"])
def test_damaged_sealed_indexes_are_rebuilt(open_log, damage_kind):
    log = populate(open_log, batches=100)
    bases = log.segment_base_offsets
    assert len(bases) >= 3
    stamps = [r.timestamp for r in records(log)]
    answers = {ts: log.offset_for_timestamp(ts) for ts in range(990, max(stamps) + 2, 7)}
    index = log.path / f"{bases[0]:020d}.index"
    timeindex = index.with_suffix(".timeindex")
    assert index.stat().st_size > 0

    def damage():
        if damage_kind == "odd-size":
            with open(index, "ab") as f:
                f.write(b"\x01\x02\x03")
        elif damage_kind == "missing":
            index.unlink()
            timeindex.unlink()
        elif damage_kind == "empty":
            os.truncate(timeindex, 0)
            index.unlink()
        elif damage_kind == "bogus-position":
            with open(index, "ab") as f:
                f.write(b"\x00\x00\x00\x05\x7f\x00\x00\x00")
        else:
            raw = bytearray(index.read_bytes())
            raw[-1] ^= 0x01   # still inside the file, no longer a batch start
            index.write_bytes(raw)

    before, log = reopen_after(open_log, log, damage)
    assert records(log) == before
    for offset in range(log.log_end_offset):
        h = read_batch_header(log.read(offset, 1))
        assert h.base_offset <= offset <= h.base_offset + h.last_offset_delta
    assert {ts: log.offset_for_timestamp(ts) for ts in answers} == answers
    assert index.stat().st_size % 8 == 0 and timeindex.stat().st_size % 12 == 0


def test_active_index_is_rebuilt_on_open(open_log):
    log = populate(open_log)
    index = active_file(log).with_suffix(".index")
    before = records(log)
    log.close()
    index.write_bytes(b"\x00\x00\x00\x09\x00\x00\x00\x03" * 10)  # positions that are lies
    log = open_log(CONFIG)
    assert records(log) == before


def test_orphan_index_files_are_removed(open_log):
    log = populate(open_log)
    log.close()
    orphan = log.path / f"{10**9:020d}.index"
    orphan.write_bytes(b"")
    (log.path / f"{10**9:020d}.timeindex").write_bytes(b"")
    log = open_log(CONFIG)
    assert not orphan.exists()
    assert log.segment_base_offsets[-1] < 10**9


def test_segment_headers_stop_quietly_where_a_recovery_would_cut(tmp_path):
    """log.scan.segment_headers (the pipeline's header walk over a log it does
    not own): every whole batch from a position, then nothing at a torn or
    malformed batch; never an error."""
    from kcoord.log.scan import segment_headers
    whole = b"".join(batch(i + 1, ts=1000, base_offset=10 * i) for i in range(5))
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(whole)
    got = list(segment_headers(path))
    assert [(pos, h) for pos, h in got] == list(iter_batches(whole))
    assert list(segment_headers(path, got[2][0])) == got[2:]
    path.write_bytes(whole + batch(3, ts=1)[:40])          # a torn tail
    assert list(segment_headers(path)) == got
    bad = bytearray(whole)
    bad[got[3][0] + 16] = 1                                  # batch 3's magic
    path.write_bytes(bytes(bad))
    assert list(segment_headers(path)) == got[:3]


def test_recovery_point_limits_the_crc_scan_and_truncation_forgets_it(open_log, monkeypatch):
    """Past the recovery point a flush wrote, the active segment is checked
    batch by batch after a crash; below it only headers are read (a flipped
    value byte there is not looked for).  A truncation forgets the point."""
    from kcoord.log import recovery_point
    monkeypatch.setattr(recovery_point, "RECOVERY_POINT_BYTES", 1)
    log = open_log(LogConfig(segment_bytes=1 << 20, index_interval_bytes=200))
    for i in range(20):
        log.append(batch(3, ts=1000 + i))
    log.flush()
    path = active_file(log)
    point = (log.path / recovery_point.FILE_NAME).read_text().split()
    assert point[:2] == ["0", str(path.stat().st_size)]
    for i in range(5):
        log.append(batch(3, ts=2000 + i))  # past the point: never flushed
    data, batches = batches_of(path)
    trusted_pos, trusted = batches[3]
    torn_pos, torn = batches[22]

    def damage():
        flipped = bytearray(data)
        flipped[trusted_pos + trusted.size - 3] ^= 0x40  # a value byte below the point
        flipped[torn_pos + torn.size - 3] ^= 0x40        # and one past it
        path.write_bytes(flipped)

    monkeypatch.setattr(recovery_point, "RECOVERY_POINT_BYTES", 1 << 40)  # close: no new point
    _, log = reopen_after(open_log, log, damage)
    assert log.recovery_scanned and path.stat().st_size == torn_pos
    assert log.log_end_offset == torn.base_offset
    with pytest.raises(CorruptRecordError):  # left as it was: trusted, not scanned
        decode_all(log.read(trusted.base_offset, 1))
    log.truncate_to(10)
    assert not (log.path / recovery_point.FILE_NAME).exists()


def test_recovery_point_of_another_segment_is_ignored(open_log, monkeypatch):
    from kcoord.log import recovery_point
    monkeypatch.setattr(recovery_point, "RECOVERY_POINT_BYTES", 1 << 40)  # flushes write none
    log = populate(open_log)  # several segments; the point names an older one
    (log.path / recovery_point.FILE_NAME).write_text("0 100\n")
    path = active_file(log)
    data, batches = batches_of(path)
    pos, first = batches[0]

    def damage():
        flipped = bytearray(data)
        flipped[pos + first.size - 3] ^= 0x40
        path.write_bytes(flipped)

    _, log = reopen_after(open_log, log, damage)
    assert path.stat().st_size == pos  # checked from its first batch


def _timestamps_seen(log, stamps):
    return [log.offset_for_timestamp(ts) for ts in stamps] + [log.max_timestamp_offset()]


def test_after_a_crash_the_index_below_the_recovery_point_is_kept(open_log, monkeypatch, tmp_path):
    """A crash (no close) past a recovery point: the offset and time index
    entries fsynced below it are kept and batch headers are read only from
    the newest kept entry on (a header damaged below it goes unnoticed);
    past the point a torn write is still found and cut; unfsynced index
    entries are dropped; reads, timestamps and appends then match a log
    reindexed from scratch."""
    from kcoord.log import recovery_point
    monkeypatch.setattr(recovery_point, "RECOVERY_POINT_BYTES", 1)
    config = LogConfig(segment_bytes=1 << 20, index_interval_bytes=200)
    log = open_log(config)
    stamps = [1000 + (i * 37) % 50 for i in range(40)]  # timestamps that go back and forth
    for i, ts in enumerate(stamps[:30]):
        log.append(batch(i % 3 + 1, ts=ts))
    log.flush()
    path = active_file(log)
    point = (log.path / recovery_point.FILE_NAME).read_text().split()
    assert point[:2] == ["0", str(path.stat().st_size)] and int(point[2]) > 3
    monkeypatch.setattr(recovery_point, "RECOVERY_POINT_BYTES", 1 << 40)  # no newer point
    for ts in stamps[30:]:
        log.append(batch(2, ts=ts + 100))   # written, indexed, never fsynced; new maxima
    # counts taken while those appends ran (a flush in a worker thread) name their entries too
    (log.path / recovery_point.FILE_NAME).write_text(
        "0 %s %d %d\n" % (point[1], *log.active.index_counts()))
    before = records(log)
    data, batches = batches_of(path)
    torn_pos, torn = batches[31]  # the newest maximum
    damaged = bytearray(data[:torn_pos + torn.size - 5])  # a torn write past the point
    damaged[batches[1][0] + 16] = 9  # batch 1's magic, below the kept index entries
    path.write_bytes(bytes(damaged))
    index = path.with_suffix(".index")
    index.write_bytes(index.read_bytes() + b"\xff" * 13)  # entries the crash left half-written

    crashed = open_log(config)  # the first log was never closed: a kill -9
    assert crashed.recovery_scanned and crashed.active.walked_from > batches[1][0]
    assert crashed.log_end_offset == torn.base_offset and path.stat().st_size == torn_pos
    damaged[batches[1][0] + 16] = 2  # repaired in place: the reads below go through batch 1
    with open(path, "r+b") as fh:
        fh.write(bytes(damaged[:torn_pos]))
    assert records(crashed) == [r for r in before if r.offset < torn.base_offset]
    probes = sorted(set(stamps)) + [ts + 100 for ts in stamps[30:]] + [2000]

    # the same file reindexed from scratch (no recovery point): the reference
    (tmp_path / "reference").mkdir()
    (tmp_path / "reference" / path.name).write_bytes(path.read_bytes())
    reference = open_log(config, name="reference")
    assert _timestamps_seen(crashed, probes) == _timestamps_seen(reference, probes)
    for plog in (crashed, reference):
        plog.append(batch(2, ts=5000))
    assert _timestamps_seen(crashed, probes + [5000]) == _timestamps_seen(reference, probes + [5000])
    assert records(crashed) == records(reference)


def test_without_index_counts_the_recovery_point_rebuilds_the_index(open_log, monkeypatch):
    """A point written before the counts existed (two fields) trusts the
    bytes below it but walks and reindexes the segment from its start."""
    from kcoord.log import recovery_point
    monkeypatch.setattr(recovery_point, "RECOVERY_POINT_BYTES", 1 << 40)
    log = populate(open_log)
    path = active_file(log)
    (log.path / recovery_point.FILE_NAME).write_text(f"{log.segment_base_offsets[-1]} "
                                                     f"{path.stat().st_size}\n")
    crashed = open_log(CONFIG)
    assert crashed.recovery_scanned and crashed.active.walked_from == 0
    assert records(crashed) == records(log)

