"""When a flush writes a new recovery point: after 4 MB of small batches (a
coordinator log: many index entries), but after 64 batches or 64 MB of large
ones (1 MB produce batches: one index entry each), so that a log of large
batches does not pay four fsyncs every 4 batches; read() resumes the count."""
from __future__ import annotations

from kcoord.log.recovery_point import FILE_NAME, RecoveryPoint

MB = 1 << 20


def _flush(rp: RecoveryPoint, base: int, position: int, entries: int) -> bool:
    """A flush at `position` of the segment at `base` with `entries` offset
    index entries: -> whether it wrote a new point."""
    synced = []
    rp.flushed(base, position, rp.generation(), (entries, entries), lambda: synced.append(1))
    return bool(synced)


def _point(tmp_path) -> list[int]:
    return [int(x) for x in (tmp_path / FILE_NAME).read_text().split()]


def test_small_batches_get_a_point_every_4_mb(tmp_path):
    rp = RecoveryPoint(tmp_path)
    assert not _flush(rp, 0, 4 * MB - 1, 1023)
    assert _flush(rp, 0, 4 * MB, 1024)
    assert _point(tmp_path) == [0, 4 * MB, 1024, 1024]
    assert not _flush(rp, 0, 8 * MB - 1, 2047)
    assert _flush(rp, 0, 8 * MB, 2048)


def test_large_batches_get_a_point_every_64_batches_or_64_mb(tmp_path):
    rp = RecoveryPoint(tmp_path)
    assert not _flush(rp, 0, 40 * MB, 40)          # 40 batches of 1 MB
    assert _flush(rp, 0, 64 * MB, 64)
    assert not _flush(rp, 0, 127 * MB, 64 + 10)    # 10 batches of 6.3 MB
    assert _flush(rp, 0, 128 * MB, 64 + 11)        # 64 MB past the point
    assert _point(tmp_path) == [0, 128 * MB, 75, 75]


def test_a_new_segment_counts_from_its_start(tmp_path):
    rp = RecoveryPoint(tmp_path)
    assert _flush(rp, 0, 64 * MB, 64)
    assert not _flush(rp, 1000, 3 * MB, 3)
    assert _flush(rp, 1000, 5 * MB, 64)
    assert _point(tmp_path)[:2] == [1000, 5 * MB]


def test_a_reopened_point_resumes_the_count(tmp_path):
    assert _flush(RecoveryPoint(tmp_path), 0, 64 * MB, 64)
    rp = RecoveryPoint(tmp_path)
    assert rp.read(0, 70 * MB) == (64 * MB, (64, 64))
    assert not _flush(rp, 0, 70 * MB, 70)          # 6 MB and 6 batches past it
    assert _flush(rp, 0, 70 * MB, 64 + 64)
