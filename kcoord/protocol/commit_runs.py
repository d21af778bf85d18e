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
takes that batch (and reports it if malformed).  plain_commits then reads
the latest commits it kept straight to their fields for the core
(CoordinatorShard.replay_plain_commits), without the general decode's
dicts and Records.
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



def _i16(buf: bytes, i: int) -> int:
    u = (buf[i] << 8) | buf[i + 1]
    return u - (1 << 16) if u >= 1 << 15 else u


def _same(a: bytes, a0: i64, b: bytes, b0: i64, n: i64) -> bool:
    """a[a0:a0 + n] == b[b0:b0 + n], read in place (no slices made)."""
    for i in range(n):
        if a[a0 + i] != b[b0 + i]:
            return False
    return True


def plain_commits(latest: dict[bytes, object]) -> list:
    """The loader's latest-per-key dict (OffsetCommit keys without their
    2-byte type -> a value, or a (type, value, earlier) tuple) read straight
    to fields: per entry in order, (group, topic, partition, offset, leader
    epoch, metadata, commit timestamp) for a bare value of version 3, None
    for any other entry, value version or anything malformed, which the
    loader's general decode then takes (or reports).  Of a v3 value it
    accepts exactly what shard_loader._decode_commit accepts (bytes after
    the fields are ignored, as there).  A key's group or topic equal to the
    previous key's is given as the same str (keys of one group come
    together): one decode, and the core's dicts find it by identity."""
    out: list = []
    prev = b""
    pg: i64 = -1   # the previous key's group ends at pg, its topic at pq (-1: none)
    pq: i64 = -1
    group = ""
    topic = ""
    for key, entry in latest.items():
        if not isinstance(entry, bytes):
            out.append(None)
            continue
        value: bytes = entry
        n: i64 = len(key)
        if n < 4:
            out.append(None)
            continue
        glen: i64 = _i16(key, 0)
        p: i64 = 2 + glen
        if glen < 0 or p + 2 > n:
            out.append(None)
            continue
        tlen: i64 = _i16(key, p)
        q: i64 = p + 2 + tlen
        m: i64 = len(value)
        if tlen < 0 or q + 4 > n or m < 16 or value[0] != 0 or value[1] != 3:
            out.append(None)
            continue
        mlen: i64 = _i16(value, 14)
        if mlen < 0 or 16 + mlen + 8 > m:
            out.append(None)
            continue
        try:
            if p != pg or not _same(key, 2, prev, 2, glen):
                group = key[2:p].decode()
            if pg < 0 or q - p != pq - pg or not _same(key, p + 2, prev, pg + 2, tlen):
                topic = key[p + 2:q].decode()
            metadata = value[16:16 + mlen].decode()
        except UnicodeDecodeError:
            out.append(None)
            pg = -1
            continue
        prev, pg, pq = key, p, q
        out.append((group, topic, _i32(key, q), _i64(value, 2), _i32(value, 10), metadata,
                    _i64(value, 16 + mlen)))
    return out
