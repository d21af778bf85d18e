"""PartitionLog.advance_log_start (DeleteRecords): forward only, at most the
log end, durable across a reopen, segments wholly below it deleted."""
import pytest

from kcoord.log import LogConfig, OffsetOutOfRange
from kcoord.protocol.records import build_batch

SMALL = LogConfig(segment_bytes=2000, index_interval_bytes=150)


def fill(log, batches=60):
    for i in range(batches):
        log.append(build_batch([(b"k", b"x" * 40, [], 1000 + i)]))


def test_advance_reads_and_reopen(open_log):
    log = open_log(SMALL)
    fill(log)
    segments = len(log.segment_base_offsets)
    assert segments > 3
    assert log.advance_log_start(37) == 37
    assert log.log_start_offset == 37
    assert len(log.segment_base_offsets) < segments  # wholly-deleted segments are gone
    assert log.segment_base_offsets[0] <= 37 < log.segment_base_offsets[1]
    with pytest.raises(OffsetOutOfRange):
        log.read(36, 10_000)
    assert log.read(37, 10_000)
    # never backwards; never beyond the end
    assert log.advance_log_start(10) == 37
    assert log.advance_log_start(10_000) == log.log_end_offset == 60
    log.close()
    again = open_log(SMALL)
    assert again.log_start_offset == 60 and again.log_end_offset == 60
    fill(again, 3)
    assert again.log_start_offset == 60 and again.read(60, 10_000)


def test_truncation_below_start_restarts_there(open_log):
    log = open_log(SMALL)
    fill(log, 10)
    log.advance_log_start(8)
    log.truncate_to(5)
    assert log.log_start_offset == log.log_end_offset == 5
