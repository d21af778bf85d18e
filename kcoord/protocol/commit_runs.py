"""The shard loader's fast path for runs of plain OffsetCommit batches,
written to be compiled (native/build.py MODULES): records are walked by
hand, each field's bytes read as native ints, and only the key (without
its 2-byte type) and the value of each record are copied, straight into
the loader's latest-per-key dict.

Interpreted, this walk is slower than the one-shape regex path
(records.uniform_records), so the loader takes it only when this module
runs compiled (kcoord.native_build.is_compiled).  It accepts a subset of
what read_record_spans (the reference walk) accepts and gives the same
keys and values; anything else stops it, and the loader's general path
takes that batch (and reports it if malformed).
"""
from __future__ import annotations

from typing import Final

import crc32c as _crc32c

try:
    from mypy_extensions import i64
except ImportError:  # interpreted without the compiler installed: a plain int
    i64 = int  # type: ignore[misc]

# the v2 batch layout (records.py's docstring): offsets inside a batch (Final:
# compiled as constants, not looked up)
_LENGTH_AT: Final = 8
_MAGIC_AT: Final = 16
_CRC_AT: Final = 17
_ATTRIBUTES_AT: Final = 21
_LAST_DELTA_AT: Final = 23
_COUNT_AT: Final = 57
_RECORDS_AT: Final = 61
_LOG_OVERHEAD: Final = 12
_MIN_BATCH_LENGTH: Final = _RECORDS_AT - _LOG_OVERHEAD
# compression, transactional, control: a batch with any of these is not a plain run
_NOT_PLAIN: Final = 0x07 | 0x10 | 0x20
_COMMIT_TYPE: Final = 1  # OffsetCommit keys of record type 1 (type 0 goes the general way)

_crc = _crc32c.crc32c


def _u32(buf: bytes, i: int) -> int:
    return (buf[i] << 24) | (buf[i + 1] << 16) | (buf[i + 2] << 8) | buf[i + 3]


def _i32(buf: bytes, i: int) -> int:
    u = _u32(buf, i)
    return u - (1 << 32) if u >= 1 << 31 else u


def _i64(buf: bytes, i: int) -> int:
    u = (_u32(buf, i) << 32) | _u32(buf, i + 4)
    return u - (1 << 64) if u >= 1 << 63 else u


def take_commit_runs(buf: bytes, pos: int, latest: dict) -> tuple[int, int, int]:
    """From the batch at buf[pos], take each whole batch that is plain
    (magic 2, uncompressed, neither transactional nor control), passes its
    CRC and holds only type-1 OffsetCommit records with values and without
    headers, every varint of one or two bytes: latest[key without its
    2-byte type] = value, record by record in order.
    -> (position of the first batch not taken, records taken, the offset
    after the last batch taken or -1).

    A batch it stops inside may already have set its first records into
    `latest`: the caller takes that batch whole the general way, which
    sets the same keys to the same values in the same order first, so the
    result is the same."""
    n = len(buf)
    taken = 0
    after = -1
    while n - pos >= _RECORDS_AT:
        length = _i32(buf, pos + _LENGTH_AT)
        end = pos + _LOG_OVERHEAD + length
        if length < _MIN_BATCH_LENGTH or end > n or buf[pos + _MAGIC_AT] != 2:
            break
        if buf[pos + _ATTRIBUTES_AT + 1] & _NOT_PLAIN:
            break
        count = _i32(buf, pos + _COUNT_AT)
        if count <= 0 or _crc(memoryview(buf)[pos + _ATTRIBUTES_AT:end]) != _u32(buf, pos + _CRC_AT):
            break
        if not _take_records(buf, pos + _RECORDS_AT, end, count, latest):
            break
        taken += count
        after = _i64(buf, pos) + _i32(buf, pos + _LAST_DELTA_AT) + 1
        pos = end
    return pos, taken, after


def _short_varint(buf: bytes, p: i64) -> tuple[i64, i64]:
    """(zigzag value, position after) of the varint at p, or (0, -1) if it
    takes more than two bytes; the caller has checked that p + 1 is inside
    the record."""
    z: i64 = buf[p]
    if z < 0x80:
        return (z >> 1) ^ -(z & 1), p + 1
    c: i64 = buf[p + 1]
    if c >= 0x80:
        return 0, -1
    z = (z & 0x7F) | (c << 7)
    return (z >> 1) ^ -(z & 1), p + 2


def _take_records(buf: bytes, pos: i64, end: i64, count: i64, latest: dict) -> bool:
    """The `count` records filling buf[pos:end] into latest; False at the
    first one this path does not take (or if they do not fill it exactly).
    Each varint must be of one or two bytes."""
    p: i64
    v: i64
    w: i64
    length: i64
    klen: i64
    vlen: i64
    for _ in range(count):
        if pos + 1 >= end:
            return False
        length, pos = _short_varint(buf, pos)
        rec_end = pos + length
        if pos < 0 or rec_end <= pos + 4 or rec_end > end:
            return False
        # attributes (unused in v2), then the timestamp and offset deltas
        p = pos + 1
        for _field in range(2):
            if buf[p] < 0x80:
                p += 1
            elif buf[p + 1] < 0x80:
                p += 2
            else:
                return False
        # the key: its length, its 2-byte record type, the fields kept
        if p + 1 >= rec_end:
            return False
        klen, p = _short_varint(buf, p)
        v = p + klen
        if p < 0 or v < p + 2 or v + 2 > rec_end or buf[p] != 0 or buf[p + 1] != _COMMIT_TYPE:
            return False
        # the value (no tombstone), then a header count of 0 ending the record
        vlen, w = _short_varint(buf, v)
        if w < 0 or vlen < 0 or w + vlen + 1 != rec_end or buf[rec_end - 1] != 0:
            return False
        latest[buf[p + 2:v]] = buf[w:w + vlen]
        pos = rec_end
    return pos == end
