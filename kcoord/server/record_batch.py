"""The writer side of the coordinator log: __consumer_offsets records to
key/value bytes (encode_record) and to one uncompressed v2 record batch
(build_records_batch).  OffsetCommit records, the bulk of what is written,
take precompiled struct paths that give the bytes the schema codecs give
(tests/server/test_commit_batch.py)."""
from __future__ import annotations

import struct

from ..coordinator.result import Record
from ..protocol.messages.coordinator_records import encode_record_key, encode_record_value
from ..protocol.records import HEADER_SIZE, encode_varint, seal_batch
from .record_codec import _KEY_CODECS, _VALUE_CODECS, _key_codec, _value_codec


def encode_record(record: Record) -> tuple[bytes, bytes | None]:
    if record.type == 1:  # an OffsetCommit: the hot path, precompiled
        encoded = _encode_commit(record)
        if encoded is not None:
            return encoded
    kc = _KEY_CODECS.get(record.type) or _key_codec(record.type)
    if kc is None:
        return encode_record_key(record.type, record.key), None  # raises
    key = kc[0] + kc[1](record.key)
    if record.value is None:
        return key, None
    vc = (_VALUE_CODECS.get((record.type, record.value_version))
          or _value_codec(record.type, record.value_version))
    if vc is None:
        return key, encode_record_value(record.type, record.value_version, record.value)
    return key, vc[0] + vc[1](record.value)


# OffsetCommit records (type 1) with a v3 value or none, encoded with
# precompiled structs; the same bytes as the schema codecs give
# (tests/server/test_commit_batch.py).  The key's group and topic part is
# encoded once per (group, topic).
_COMMIT_KEY_PREFIXES: dict[tuple[str, str], bytes] = {}
_COMMIT_KEY_PREFIXES_MAX = 100_000
_H = struct.Struct(">h")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_V3 = struct.Struct(">hqih")         # OffsetCommitValue v3 up to the metadata bytes
_V3_EMPTY = struct.Struct(">hqihq")  # ... with empty metadata, and the commit timestamp


def _encode_commit(record: Record) -> tuple[bytes, bytes | None] | None:
    """(key, value) of an OffsetCommit record, or None for what the schema
    codecs must encode (other value versions; anything out of range, which
    they report)."""
    key = record.key
    try:
        group, topic = key["group"], key["topic"]
        prefix = _COMMIT_KEY_PREFIXES.get((group, topic))
        if prefix is None:
            g, t = group.encode(), topic.encode()
            if len(g) > 32767 or len(t) > 32767:
                return None
            prefix = b"\x00\x01" + _H.pack(len(g)) + g + _H.pack(len(t)) + t
            if len(_COMMIT_KEY_PREFIXES) >= _COMMIT_KEY_PREFIXES_MAX:
                _COMMIT_KEY_PREFIXES.clear()
            _COMMIT_KEY_PREFIXES[(group, topic)] = prefix
        k = prefix + _I.pack(key["partition"])
        value = record.value
        if value is None:
            return k, None
        if record.value_version != 3:
            return None
        meta = value["metadata"]
        if not meta:
            return k, _V3_EMPTY.pack(3, value["offset"], value["leader_epoch"], 0,
                                     value["commit_timestamp"])
        m = meta.encode()
        if len(m) > 32767:
            return None
        return k, (_V3.pack(3, value["offset"], value["leader_epoch"], len(m)) + m
                   + _Q.pack(value["commit_timestamp"]))
    except (struct.error, KeyError, TypeError, AttributeError, UnicodeEncodeError):
        return None


# Zigzag varints of 0..16383 (one or two bytes), for the records of a batch,
# and the same after a record's attributes and timestamp delta (both 0).
_ZV_MAX = 1 << 14
_ZV = tuple(encode_varint(n) for n in range(_ZV_MAX))
_ZV00 = tuple(b"\x00\x00" + z for z in _ZV)
# An OffsetCommit record from its partition on: partition, value length (24,
# as a varint), value v3 with empty metadata, no headers.
_COMMIT_TAIL = struct.Struct(">iBhqihqB")
_COMMIT_TAIL_SIZE = _COMMIT_TAIL.size
# (group, topic) -> key length varint + key up to its partition
_COMMIT_HEADS: dict[tuple[str, str], bytes] = {}


def build_records_batch(records: list[Record], now: int) -> bytearray:
    """One uncompressed v2 batch of `records`, every record stamped `now`,
    offset deltas 0..n-1, and one CRC for all of them: the bytes build_batch
    gives for [(*encode_record(r), [], now) for r in records], built with
    fewer steps per record.  An OffsetCommit with a v3 value and no metadata
    (what consumers commit) is one struct pack after its (group, topic)
    part, which is encoded once."""
    zv, zv00, zmax, varint = _ZV, _ZV00, _ZV_MAX, encode_varint
    heads = _COMMIT_HEADS
    pack_tail, tail_size = _COMMIT_TAIL.pack, _COMMIT_TAIL_SIZE
    out = [bytes(HEADER_SIZE)]
    append = out.append
    for delta, record in enumerate(records):
        rtype, key, value, version = record
        if rtype == 1 and version == 3 and value is not None and delta < zmax \
                and not value["metadata"]:
            head = heads.get((key["group"], key["topic"]))
            if head is None:
                encoded = _encode_commit(record)
                if encoded is not None:
                    k = encoded[0][:-4]  # without the partition
                    n = len(k) + 4
                    head = heads[(key["group"], key["topic"])] = (
                        zv[n] if n < zmax else varint(n)) + k
                    if len(heads) > _COMMIT_KEY_PREFIXES_MAX:
                        heads.clear()
            if head is not None:
                try:
                    tail = pack_tail(key["partition"], 48, 3, value["offset"],
                                     value["leader_epoch"], 0, value["commit_timestamp"], 0)
                except (struct.error, KeyError):  # the schema codec encodes or reports it
                    pass
                else:
                    od = zv00[delta]
                    n = len(od) + len(head) + tail_size
                    out += (zv[n] if n < zmax else varint(n)), od, head, tail
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
        append(zv[n] if n < zmax else varint(n))
        append(rec)
    batch = bytearray().join(out)
    count = len(records)
    seal_batch(batch, 0, 0, count, now, now)
    return batch
