"""A full segment's data fsynced in the background before its roll
(kcoord/log/presync.py): the roll's seal then fsyncs a short tail on the
caller's thread, and a segment takes appends past segment.bytes (at most a
quarter) only while that background fsync is under way."""
import os
import time

from kcoord.log import LogConfig, partition_log, segment
from kcoord.log.background import own_descriptor
from kcoord.log.presync import MIN_UNSYNCED, Presync
from kcoord.protocol.records import build_batch, decode_all

MIB = 1 << 20
BIG = build_batch([(b"k", bytes(MIB - 200), [], 0)])   # about 1 MiB a batch


def held(monkeypatch):
    """Presyncs are queued but run only when the test says (the list's jobs)."""
    jobs = []
    monkeypatch.setattr(segment, "start_presync", jobs.append)
    return jobs


def sizes(log):
    return [s.size for s in log._segments]


def test_a_presync_starts_at_three_quarters_and_a_roll_waits_for_it(open_log, monkeypatch):
    jobs = held(monkeypatch)
    log = open_log(LogConfig(segment_bytes=16 * MIB))
    while log.active.size < 12 * MIB - len(BIG):
        log.append(BIG)
    assert jobs == []                       # under three quarters: nothing yet
    log.append(BIG)
    assert len(jobs) == 1 and jobs[0].covers == log.active.size
    while log.active.size + len(BIG) <= 20 * MIB:
        log.append(BIG)                      # past 16 MiB: the roll waits for the presync
    assert len(log.segment_base_offsets) == 1 and log.active.size > 16 * MIB
    log.append(BIG)                          # a quarter past: it rolls anyway
    assert len(log.segment_base_offsets) == 2 and sizes(log)[0] <= 20 * MIB
    for job in jobs:
        job.run()


def test_a_roll_goes_ahead_once_the_presync_left_a_short_tail(open_log, monkeypatch):
    jobs = held(monkeypatch)
    log = open_log(LogConfig(segment_bytes=16 * MIB))
    while log.active.size + len(BIG) <= 16 * MIB:
        log.append(BIG)
        for job in jobs:                     # presyncs finish at once
            if not job.done:
                job.run()
    assert len(jobs) >= 1 and log.active.unsynced() <= MIN_UNSYNCED
    log.append(BIG)
    assert len(log.segment_base_offsets) == 2 and sizes(log)[0] <= 16 * MIB
    assert log.segment_base_offsets[1] == len(decode_all(log.read(0, 32 * MIB)))


def test_small_segments_and_flushed_logs_roll_as_before(open_log, monkeypatch):
    jobs = held(monkeypatch)
    small = open_log(LogConfig(segment_bytes=2 * MIB), name="small")
    for _ in range(9):
        small.append(BIG)
    assert all(s <= 2 * MIB for s in sizes(small)) and len(sizes(small)) >= 4
    flushed = open_log(LogConfig(segment_bytes=16 * MIB), name="flushed")
    for _ in range(40):
        flushed.append(BIG)
        flushed.flush()                      # acks=all: nothing much left unsynced
    assert jobs == [] and all(s <= 16 * MIB for s in sizes(flushed))


def test_rolled_segments_read_back_and_reopen(open_log, monkeypatch):
    log = open_log(LogConfig(segment_bytes=8 * MIB))   # the real presync thread
    for i in range(40):
        log.append(build_batch([(b"k", b"%d" % i + bytes(MIB - 300), [], 0)]))
    deadline = time.monotonic() + 60
    while any(s.presync_under_way() for s in log._segments):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert len(log.segment_base_offsets) >= 4
    log.close()
    reopened = open_log(LogConfig(segment_bytes=8 * MIB))
    got, offset = [], 0
    while offset < reopened.log_end_offset:
        records = decode_all(reopened.read(offset, 16 * MIB))
        got += [r.value[:2].rstrip(b"\0") for r in records if r.offset >= offset]
        offset = records[-1].offset + 1
    assert got == [b"%d" % i for i in range(40)]


def test_a_presync_fsyncs_its_own_descriptor(tmp_path):
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    os.write(fd, b"x" * 100)
    seen = []
    job = Presync(fd, 100, seen.append)
    os.close(fd)                             # the segment may close its own meanwhile
    job.run()
    assert job.done and seen == [100]


def test_truncation_forgets_a_presync(open_log, monkeypatch):
    jobs = held(monkeypatch)
    log = open_log(LogConfig(segment_bytes=8 * MIB))
    for _ in range(7):
        log.append(BIG)
    assert jobs and log.active._presync is jobs[-1]
    log.truncate_to(2)
    assert log.active._presync is None and log.active.unsynced() == 0
    for job in jobs:
        job.run()
    assert partition_log.MIN_UNSYNCED == MIN_UNSYNCED


def test_background_fsyncs_use_an_open_file_description_of_their_own(tmp_path):
    # A dup'd descriptor shares the segment's description: an fsync there that
    # met a writeback error would leave the segment's own fsync answering success.
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    try:
        own = own_descriptor(fd)
        try:
            os.lseek(own, 10, os.SEEK_SET)
            assert os.lseek(fd, 0, os.SEEK_CUR) == 0     # not sharing a file offset
            assert os.path.samestat(os.fstat(own), os.fstat(fd))
        finally:
            os.close(own)
    finally:
        os.close(fd)
