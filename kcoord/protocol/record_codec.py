"""__consumer_offsets records (`Record`) and their key/value codecs, cached
per type and version: the coordinator's writer (encode_record), the loader
and the pipeline (decode_record).  OffsetCommit records, the bulk of what
is written, take precompiled struct paths that give the bytes the schema
codecs give (tests/server/test_commit_batch.py)."""
from __future__ import annotations

import struct
from typing import Any, Callable, NamedTuple

from .api import SCHEMAS, schema_codec
from .messages.coordinator_records import (RECORD_TYPES, decode_record_key, decode_record_value,
                                           encode_record_key, encode_record_value)


class Record(NamedTuple):
    """One __consumer_offsets record: a key and a value (None = tombstone)."""
    type: int          # record type (the key's version): 1 offset commit, 2 group metadata, ...
    key: dict
    value: dict | None
    value_version: int = 0


# The compact form of the record a consumer's plain OffsetCommit writes
# (coordinator/offsets.commit_applied): the plain tuple
#     (group, topic, partition, value)
# where `value` is the committed value as the offsets store keeps it, a tuple
# (offset, leader_epoch, metadata, commit_timestamp, expire_timestamp None)
# (offsets.OffsetValue, shared, not copied).  It stands for an OffsetCommit
# record (type 1) with a v3 value.  Ten generic Records per commit, each with
# a fresh key dict and value dict and a NamedTuple made through tuple.__new__,
# were a third of the core's instructions per commit (bench instr_split);
# coordinator_batch.build_records_batch packs the compact form straight to the
# same bytes (tests/server/test_commit_batch.py).  Records are NamedTuples, so
# a plain tuple is told from every other record by its class alone.  Its
# change is in memory when it is made, so, like an AppliedRecord, the runtime
# appends it without replaying it; loading the log decodes a plain Record.
COMMIT_VALUE_VERSION = 3


def generic_commit(record: Any) -> Record:
    """A compact commit record as the generic Record (what loading the log gives)."""
    group, topic, partition, value = record
    return Record(1, {"group": group, "topic": topic, "partition": partition},
                  {"offset": value[0], "leader_epoch": value[1], "metadata": value[2],
                   "commit_timestamp": value[3]}, COMMIT_VALUE_VERSION)


# Codecs of the record keys and values seen so far, so that the hot paths
# (a commit writes one record per partition; a load replays millions) skip
# the registry lookups of encode/decode_record_key/value.  Only known types
# and versions get here; everything else takes those functions, which raise
# the right errors.
_INT16 = struct.Struct(">h")
COMMIT_KEY_PREFIX = (b"\x00\x00", b"\x00\x01")  # OffsetCommit keys of record type 0 and 1
_KEY_CODECS: dict[int, tuple[bytes, Callable, Callable]] = {}
_VALUE_CODECS: dict[tuple[int, int], tuple[bytes, Callable, Callable]] = {}


def _key_codec(rtype: int):
    codec = _KEY_CODECS.get(rtype)
    if codec is None and rtype in RECORD_TYPES:
        enc, dec = schema_codec(RECORD_TYPES[rtype][0], rtype)
        codec = _KEY_CODECS[rtype] = (_INT16.pack(rtype), enc, dec)
    return codec


def _value_codec(rtype: int, version: int):
    codec = _VALUE_CODECS.get((rtype, version))
    if codec is None and rtype in RECORD_TYPES:
        name = RECORD_TYPES[rtype][1]
        if version in SCHEMAS[name].versions:
            enc, dec = schema_codec(name, version)
            codec = _VALUE_CODECS[(rtype, version)] = (_INT16.pack(version), enc, dec)
    return codec


def decode_record(key: bytes, value: bytes | None) -> Record:
    if len(key) >= 2:
        rtype, = _INT16.unpack_from(key, 0)
        kc = _KEY_CODECS.get(rtype) or _key_codec(rtype)
        if kc is not None:
            key_msg, _ = kc[2](key, 2)
            if value is None:
                return Record(rtype, key_msg, None)
            if len(value) >= 2:
                version, = _INT16.unpack_from(value, 0)
                vc = _VALUE_CODECS.get((rtype, version)) or _value_codec(rtype, version)
                if vc is not None:
                    value_msg, _ = vc[2](value, 2)
                    return Record(rtype, key_msg, value_msg, version)
    # unknown types and versions, short buffers: these raise the right errors
    rtype, key_msg = decode_record_key(key)
    if value is None:
        return Record(rtype, key_msg, None)
    version, value_msg = decode_record_value(rtype, value)
    assert version is not None  # only a tombstone has none
    return Record(rtype, key_msg, value_msg, version)


def encode_record(record: Record) -> tuple[bytes, bytes | None]:
    if record.__class__ is tuple:  # a compact commit record (its fields are not Record's)
        record = generic_commit(record)
    if record.type == 1:  # an OffsetCommit: the hot path, precompiled
        encoded = encode_commit(record)
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
COMMIT_KEY_CACHE_MAX = 100_000
_H = struct.Struct(">h")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_V3 = struct.Struct(">hqih")         # OffsetCommitValue v3 up to the metadata bytes
_V3_EMPTY = struct.Struct(">hqihq")  # ... with empty metadata, and the commit timestamp


def encode_commit(record: Record) -> tuple[bytes, bytes | None] | None:
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
            if len(_COMMIT_KEY_PREFIXES) >= COMMIT_KEY_CACHE_MAX:
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
