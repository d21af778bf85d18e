"""The writer side of the coordinator log: __consumer_offsets records to one
uncompressed v2 record batch (build_records_batch), OffsetCommits with
precompiled structs (tests/server/test_commit_batch.py)."""
from __future__ import annotations

import struct
from typing import Any

from .record_codec import COMMIT_KEY_CACHE_MAX, encode_commit, encode_record, generic_commit
from .records import HEADER_SIZE, encode_varint, seal_batch


# Zigzag varints of 0..16383 (one or two bytes), for the records of a batch,
# and the same after a record's attributes and timestamp delta (both 0).
_ZV_MAX = 1 << 14
_ZV = tuple(encode_varint(n) for n in range(_ZV_MAX))
_ZV00 = tuple(b"\x00\x00" + z for z in _ZV)
# An OffsetCommit record from its partition on: partition, value length (24,
# as a varint), value v3 with empty metadata, no headers (the metadata
# length and the header count are pad bytes, zeros: two arguments fewer to
# convert per record)
_COMMIT_TAIL = struct.Struct(">iBhqi2xqx")
_COMMIT_TAIL_SIZE = _COMMIT_TAIL.size
_INT16 = struct.Struct(">h")
# (group, topic) -> key length varint + key up to its partition
_COMMIT_HEADS: dict[tuple[str, str], bytes] = {}


class EncodedRecords:
    """Records already encoded, for a batch whose earlier records number
    `first_delta` (their offset deltas are in the bytes): what
    encode_commit_records makes of a commit's compact records when it is
    queued, and build_records_batch copies as they are."""

    def __init__(self, data: bytes, first_delta: int, count: int) -> None:
        self.data = data
        self.first_delta = first_delta
        self.count = count


def encode_commit_records(records: list, first_delta: int) -> EncodedRecords | None:
    """The bytes build_records_batch gives `records` (compact commit
    records, record_codec.py) at offset deltas first_delta.. of their batch,
    encoded now, while the commit that made them is still in the cache (a
    round encodes its batch 10-30 ms later: reading each record's objects
    back then, and freeing them, missed the cache at every step).  None
    when some record is not the consumer's plain commit that the compact
    packing takes (not compact, metadata, a name too long, a value out of
    range, deltas past 16383): the caller queues the records themselves."""
    if first_delta + len(records) > _ZV_MAX:
        return None
    zv, zv00 = _ZV, _ZV00
    heads = _COMMIT_HEADS
    pack_tail, tail_size = _COMMIT_TAIL.pack, _COMMIT_TAIL_SIZE
    out: list[bytes] = []
    last_group = last_topic = ""
    last_head = b""
    delta = first_delta
    for record in records:
        if type(record) is not tuple:
            return None
        compact: tuple[str, str, Any, tuple[Any, Any, str, Any, Any]] = record
        group, topic, partition, committed = compact
        offset, epoch, meta, stamp, _ = committed
        if meta:
            return None
        head = last_head
        if group != last_group or topic != last_topic or not last_head:
            found = heads.get((group, topic))
            if found is None:
                found = _commit_head(group, topic)
                if found is None:
                    return None
            head = found
        try:
            tail = pack_tail(partition, 48, 3, offset, epoch, stamp)
        except struct.error:  # out of range: the schema codec reports it
            return None
        last_group, last_topic, last_head = group, topic, head
        od = zv00[delta]
        n = len(od) + len(head) + tail_size
        out.append(zv[n] if n < _ZV_MAX else encode_varint(n))
        out.append(od)
        out.append(head)
        out.append(tail)
        delta += 1
    return EncodedRecords(b"".join(out), first_delta, len(records))


def build_records_batch(records: list, now: int) -> bytearray:
    """One uncompressed v2 batch of `records`, every record stamped `now`,
    offset deltas 0..n-1, and one CRC for all of them: the bytes build_batch
    gives for [(*encode_record(r), [], now) for r in records], built with
    fewer steps per record.  An OffsetCommit with a v3 value and no metadata
    (what consumers commit) is one struct pack after its (group, topic)
    part, which is encoded once; a compact commit record (record_codec.py,
    what a consumer's plain commit writes) is packed from its fields, no
    dicts (encode_commit_records, one at a time); EncodedRecords (what it
    made of a whole commit when queued) are copied as they are.
    (`records`: Records, compact ones and encoded ones, hence the plain
    list.)"""
    zv, zv00, zmax, varint = _ZV, _ZV00, _ZV_MAX, encode_varint
    heads = _COMMIT_HEADS
    pack_tail, tail_size = _COMMIT_TAIL.pack, _COMMIT_TAIL_SIZE
    # (compiled: out.append is mypyc's direct list append; a bound method
    # kept in a local, or out += a tuple, would be generic calls)
    out = [bytes(HEADER_SIZE)]
    delta = -1
    for record in records:
        delta += 1
        if record.__class__ is EncodedRecords:  # encoded when queued, at this delta
            ready: EncodedRecords = record
            if ready.first_delta != delta:  # (a queue that miscounted: never written)
                raise ValueError(f"records encoded at offset delta {ready.first_delta} "
                                 f"found at {delta}")
            out.append(ready.data)
            delta += ready.count - 1
            continue
        if type(record) is tuple:  # compact: (group, topic, partition, value)
            # (a commit's records are encoded when queued; these are the ones
            # that were not: packed alone, or through the dict codec)
            alone = encode_commit_records([record], delta)
            if alone is not None:
                out.append(alone.data)
                continue
            record = generic_commit(record)
        rtype, key, value, version = record
        if rtype == 1 and version == 3 and value is not None and delta < zmax \
                and not value["metadata"]:
            head = heads.get((key["group"], key["topic"]))
            if head is None:
                encoded = encode_commit(record)
                if encoded is not None:
                    head = _cache_head(key["group"], key["topic"], encoded[0][:-4])
            if head is not None:
                try:
                    tail = pack_tail(key["partition"], 48, 3, value["offset"],
                                     value["leader_epoch"], value["commit_timestamp"])
                except (struct.error, KeyError):  # the schema codec encodes or reports it
                    pass
                else:
                    od = zv00[delta]
                    n = len(od) + len(head) + tail_size
                    out.append(zv[n] if n < zmax else varint(n))
                    out.append(od)
                    out.append(head)
                    out.append(tail)
                    continue
        k, v = encode_record(record)
        n = len(k)
        head = b"\x00\x00" + (zv[delta] if delta < zmax else varint(delta)) + (
            zv[n] if n < zmax else varint(n))
        if v is None:
            rec = head + k + b"\x01\x00"
        else:
            n = len(v)
            rec = head + k + (zv[n] if n < zmax else varint(n)) + v + b"\x00"
        n = len(rec)
        out.append(zv[n] if n < zmax else varint(n))
        out.append(rec)
    batch = bytearray().join(out)
    count = delta + 1
    seal_batch(batch, 0, 0, count, now, now)
    return batch


def _commit_head(group: str, topic: str) -> bytes | None:
    """The cached head of a compact commit record of (group, topic); None for the
    schema codec to encode (a name too long for its int16 length)."""
    try:
        g, t = group.encode(), topic.encode()
    except UnicodeEncodeError:  # a lone surrogate: the schema codec reports it
        return None
    if len(g) > 32767 or len(t) > 32767:
        return None
    return _cache_head(group, topic, b"\x00\x01" + _INT16.pack(len(g)) + g
                       + _INT16.pack(len(t)) + t)


def _cache_head(group: str, topic: str, key_prefix: bytes) -> bytes:
    """An OffsetCommit record's key length varint and key up to its partition
    (`key_prefix`: the key without the partition), cached per (group, topic)."""
    n = len(key_prefix) + 4
    head = (_ZV[n] if n < _ZV_MAX else encode_varint(n)) + key_prefix
    if len(_COMMIT_HEADS) >= COMMIT_KEY_CACHE_MAX:
        _COMMIT_HEADS.clear()
    _COMMIT_HEADS[(group, topic)] = head
    return head
