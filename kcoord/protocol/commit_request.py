"""OffsetCommit v8-v9 requests decoded flat: a tuple per partition
(index, offset, leader epoch, metadata) instead of the generated codec's
dict of five keys per partition, which was a sixth of a consumer's commit
(bench instr_split).  The server's commit path takes this form when it
can serve it (server/hot_ops.py); anything else gets commit_dict(flat),
the very dict the generated decoder makes.

decode_flat answers None for anything it does not take: a buffer that is
not bytes, a tagged field, any malformed or truncated input.  The caller
then decodes with the generated codec, which raises the ProtocolError the
connection closes on, so bad input meets one decoder's rules only.
"""
from __future__ import annotations

from typing import Any, Optional

try:
    from mypy_extensions import i64
except ImportError:  # interpreted without the compiler installed: a plain int
    i64 = int  # type: ignore[misc]

FLAT_VERSIONS = (8, 9)  # flexible, no retention time, the fields below only

# (partition index, committed offset, committed leader epoch, metadata or None);
# typed as a plain tuple on purpose: compiled, a tuple of declared item types
# is unboxed where it is read, and its ints boxed again (a new int object
# each) where they are put into the store's values and the records
FlatPartition = tuple
# (topic name, its partitions in request order)
FlatTopic = tuple[str, list[FlatPartition]]
# (group id, generation id or member epoch, member id, group instance id, topics)
FlatCommit = tuple[str, int, str, Optional[str], list[FlatTopic]]


class _NotFlat(Exception):
    """Input decode_flat leaves to the generated decoder."""


def decode_flat(buf: Any, pos: int) -> Optional[FlatCommit]:
    """The request body at pos (after the header's tags), or None."""
    if buf.__class__ is not bytes:
        return None
    data: bytes = buf  # (compiled: checked once, then bytes indexing)
    try:
        return _decode(data, pos)
    except Exception:  # malformed, truncated or tagged: the generated decoder's to judge
        return None


def _decode(buf: bytes, pos: int) -> FlatCommit:
    group_id, pos = _string(buf, pos)
    generation = _int32(buf, pos)
    member_id, pos = _string(buf, pos + 4)
    instance_id, pos = _string(buf, pos)
    if group_id is None or member_id is None:
        raise _NotFlat()
    count, pos = _uvarint(buf, pos)
    topics: list[FlatTopic] = []
    for _ in range(count - 1):  # (a compact array: count + 1; 0 is null)
        name, pos = _string(buf, pos)
        if name is None:
            raise _NotFlat()
        n, pos = _uvarint(buf, pos)
        partitions: list[FlatPartition] = []
        for _ in range(n - 1):
            index = _int32(buf, pos)
            # the offset: a signed 64-bit integer, as two halves
            offset = _int32(buf, pos + 4) * 0x1_0000_0000 + _uint32(buf, pos + 8)
            epoch = _int32(buf, pos + 12)
            metadata, pos = _string(buf, pos + 16)
            if buf[pos]:  # tagged fields
                raise _NotFlat()
            partitions.append((index, offset, epoch, metadata))
            pos += 1
        if n == 0 or buf[pos]:  # a null partitions array, or tagged fields
            raise _NotFlat()
        topics.append((name, partitions))
        pos += 1
    if count == 0 or buf[pos]:
        raise _NotFlat()
    return group_id, generation, member_id, instance_id, topics


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    result = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise _NotFlat()


def _string(buf: bytes, pos: int) -> tuple[Optional[str], int]:
    """A compact nullable string (length + 1, 0 for null)."""
    n, pos = _uvarint(buf, pos)
    if n == 1:
        return "", pos
    if n == 0:
        return None, pos
    end = pos + n - 1
    if end > len(buf):
        raise _NotFlat()
    return buf[pos:end].decode(), end


def _uint32(buf: bytes, pos: i64) -> i64:
    # (compiled: i64 is a C integer, its shifts and ors plain C operations)
    b0: i64 = buf[pos]
    b1: i64 = buf[pos + 1]
    b2: i64 = buf[pos + 2]
    b3: i64 = buf[pos + 3]
    return b0 << 24 | b1 << 16 | b2 << 8 | b3


def _int32(buf: bytes, pos: i64) -> i64:
    value = _uint32(buf, pos)
    return value - 0x1_0000_0000 if value >= 0x8000_0000 else value


def commit_dict(flat: FlatCommit) -> dict:
    """The request as the generated decoder gives it (fields it fills with
    defaults included), for every path but the flat one."""
    group_id, generation, member_id, instance_id, topics = flat
    return {"group_id": group_id, "generation_id_or_member_epoch": generation,
            "member_id": member_id, "group_instance_id": instance_id,
            "retention_time_ms": -1,
            "topics": [{"name": name, "partitions": [
                {"partition_index": index, "committed_offset": offset,
                 "committed_leader_epoch": epoch, "commit_timestamp": -1,
                 "committed_metadata": metadata}
                for index, offset, epoch, metadata in partitions]}
                for name, partitions in topics]}
