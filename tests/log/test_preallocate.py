"""Segments written ahead with zeros (LogConfig.preallocate): the file is
longer than the data while the segment is active; a clean close and a roll
cut it back, a crash leaves the zeros, which reopening cuts."""
import errno
import logging
import os
import time

from kcoord.log import LogConfig, PartitionLog
from kcoord.log.preallocate import CHUNK_BYTES, SPACE_AHEAD
from kcoord.protocol.records import build_batch, decode_all

PRE = LogConfig(preallocate=True)


def batch(i):
    return build_batch([(b"k", b"value-%d" % i, [], 1000 + i)])


def file_of(log):
    return log.path / f"{log.segment_base_offsets[-1]:020d}.log"


def wait_for_zeros(log, at_least):
    """The filler thread has written zeros past `at_least` (bounded wait)."""
    deadline = time.monotonic() + 30
    while file_of(log).stat().st_size < at_least:
        assert time.monotonic() < deadline, "no zeros were written ahead"
        time.sleep(0.01)
    zone = log.active._zone
    while zone is not None and (zone.queued or zone.fills == 0):
        assert time.monotonic() < deadline, "the fill did not finish"
        time.sleep(0.01)


def values(log):
    return [r.value for r in decode_all(log.read(log.log_start_offset, 1 << 20))]


def every_value(log):
    """Every record's value, read in as many reads as the log needs."""
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        records = decode_all(log.read(offset, 1 << 20))
        out += [r.value for r in records if r.offset >= offset]
        offset = records[-1].offset + 1
    return out


def test_zeros_ahead_after_the_first_flush_and_a_clean_close_cuts_them(open_log):
    log = open_log(PRE)
    log.append(batch(0))
    log.flush()
    assert file_of(log).stat().st_size == log.size_bytes  # no zeros before a flush asked
    for i in range(1, 20):
        log.append(batch(i))
        log.flush()
    wait_for_zeros(log, log.size_bytes + CHUNK_BYTES // 2)
    data_end = log.size_bytes
    assert log.active.size == data_end
    assert file_of(log).read_bytes()[data_end:].strip(b"\0") == b""
    log.close()
    assert file_of(log).stat().st_size == data_end
    reopened = open_log(PRE)
    assert not reopened.recovery_scanned or reopened.log_end_offset == 20
    assert values(reopened) == [b"value-%d" % i for i in range(20)]


def test_a_crash_leaves_zeros_that_reopening_cuts(open_log, tmp_path, caplog):
    log = open_log(PRE)
    for i in range(10):
        log.append(batch(i))
        log.flush()
    wait_for_zeros(log, log.size_bytes + 1)
    data_end = log.size_bytes
    # a crash: nothing closed; the zone stops so the old filler leaves the file alone
    log.active.close()
    log._closed = True   # (nothing of it is touched again)
    assert file_of(log).stat().st_size > data_end
    with caplog.at_level(logging.WARNING, logger="kcoord.log.segment"):
        crashed = PartitionLog(tmp_path / "topic-0", PRE)
    try:
        assert crashed.recovery_scanned and crashed.log_end_offset == 10
        assert file_of(crashed).stat().st_size == data_end
        assert any("zeros after the last batch" in r.getMessage() for r in caplog.records)
        assert crashed.append(batch(10)) == (10, 10)
        assert values(crashed)[-1] == b"value-10"
    finally:
        crashed.close()


def test_a_roll_seals_the_segment_at_its_data(open_log):
    log = open_log(LogConfig(preallocate=True, segment_bytes=1 << 20))
    for i in range(5):
        log.append(batch(i))
        log.flush()
    wait_for_zeros(log, log.size_bytes + 1)
    sealed_path, sealed_size = file_of(log), log.size_bytes
    log.append(build_batch([(b"k", bytes(1 << 20), [], 0)]))  # does not fit: a roll
    assert len(log.segment_base_offsets) == 2
    assert sealed_path.stat().st_size == sealed_size


def test_appends_that_outrun_the_zeros_stop_them_for_the_segment(open_log):
    log = open_log(PRE)
    log.append(batch(0))
    log.flush()
    log.append(batch(1))
    wait_for_zeros(log, log.size_bytes + 1)
    big = build_batch([(b"k", bytes(CHUNK_BYTES), [], 0)])
    log.append(big)          # past every zero written: the log outruns the filler
    assert log.active._zone is None
    end = log.size_bytes
    log.append(batch(2))
    log.flush()
    assert file_of(log).stat().st_size == end + len(batch(2))
    assert values(log)[-1] == b"value-2"


def test_truncation_cuts_the_zeros_and_appends_go_on(open_log):
    log = open_log(PRE)
    for i in range(10):
        log.append(batch(i))
        log.flush()
    wait_for_zeros(log, log.size_bytes + 1)
    log.truncate_to(4)
    assert log.log_end_offset == 4 and file_of(log).stat().st_size == log.size_bytes
    log.append(batch(40))
    log.flush()
    assert values(log) == [b"value-%d" % i for i in (0, 1, 2, 3, 40)]


def test_a_log_of_large_appends_reserves_space_instead_of_zeros(open_log):
    log = open_log(PRE)
    big = build_batch([(b"k", bytes(64 << 10), [], 0)])
    for _ in range(4):
        log.append(big)
        log.flush()
        # no zone (nothing written but the data), space reserved past it
        assert log.active._zone is None
        assert log.size_bytes < file_of(log).stat().st_size <= log.size_bytes + SPACE_AHEAD
    data_end = log.size_bytes
    assert file_of(log).read_bytes()[data_end:].strip(b"\0") == b""
    log.close()
    assert file_of(log).stat().st_size == data_end
    reopened = open_log(PRE)
    assert every_value(reopened) == [bytes(64 << 10)] * 4


def test_reserved_space_is_taken_ahead_not_per_append(open_log, monkeypatch):
    calls = []
    real = os.posix_fallocate
    monkeypatch.setattr(os, "posix_fallocate",
                        lambda fd, at, n: (calls.append((at, n)), real(fd, at, n))[1])
    log = open_log(PRE)
    big = build_batch([(b"k", bytes(256 << 10), [], 0)])
    for _ in range(32):     # 8 MiB in 256 KiB appends
        log.append(big)
    assert 2 <= len(calls) <= 3
    ends = [at + n for at, n in calls]
    assert all(at == end for at, end in zip([c[0] for c in calls[1:]], ends))  # contiguous
    assert every_value(log) == [bytes(256 << 10)] * 32


def test_a_crash_leaves_reserved_space_that_reopening_cuts(open_log, tmp_path, caplog):
    log = open_log(PRE)
    big = build_batch([(b"k", bytes(100_000), [], 0)])
    for _ in range(3):
        log.append(big)
    log.flush()
    data_end = log.size_bytes
    log.active.close()      # a crash: nothing cut
    log._closed = True
    assert file_of(log).stat().st_size > data_end
    with caplog.at_level(logging.WARNING, logger="kcoord.log.segment"):
        crashed = PartitionLog(tmp_path / "topic-0", PRE)
    try:
        assert crashed.recovery_scanned and crashed.log_end_offset == 3
        assert file_of(crashed).stat().st_size == data_end
        assert any("zeros after the last batch" in r.getMessage() for r in caplog.records)
        crashed.append(big)
        assert every_value(crashed) == [bytes(100_000)] * 4
    finally:
        crashed.close()


def test_a_roll_cuts_reserved_space_from_the_sealed_segment(open_log):
    log = open_log(LogConfig(preallocate=True, segment_bytes=1 << 20))
    big = build_batch([(b"k", bytes(300_000), [], 0)])
    for _ in range(3):
        log.append(big)
    sealed_path, sealed_size = file_of(log), log.size_bytes
    assert sealed_path.stat().st_size > sealed_size
    assert sealed_path.stat().st_size <= 1 << 20   # never reserved past the roll size
    log.append(big)         # does not fit: a roll
    assert len(log.segment_base_offsets) == 2
    assert sealed_path.stat().st_size == sealed_size
    log.truncate_to(3)      # the sealed segment becomes the active one again
    log.append(big)
    assert every_value(log) == [bytes(300_000)] * 4


def test_no_reserved_space_without_preallocate_or_when_refused(open_log, monkeypatch):
    big = build_batch([(b"k", bytes(64 << 10), [], 0)])
    plain = open_log(LogConfig())
    plain.append(big)
    assert file_of(plain).stat().st_size == plain.size_bytes
    plain.close()

    def refuse(fd, at, n):
        refuse.calls += 1
        raise OSError(errno.EOPNOTSUPP, "not here")
    refuse.calls = 0
    monkeypatch.setattr(os, "posix_fallocate", refuse)
    log = open_log(PRE, name="refused")
    for _ in range(3):
        log.append(big)
    assert refuse.calls == 1    # asked once; the segment then grows as it goes
    assert file_of(log).stat().st_size == log.size_bytes
    assert every_value(log) == [bytes(64 << 10)] * 3
