"""Codecs of __consumer_offsets record keys and values, cached per type and
version, shared by the runtime's writer (encode_record) and the loader
(decode_record)."""
from __future__ import annotations

import struct
from typing import Callable

from ..coordinator.result import Record
from ..protocol.api import SCHEMAS, schema_codec
from ..protocol.messages.coordinator_records import (RECORD_TYPES, decode_record_key,
                                                     decode_record_value)


# Codecs of the record keys and values seen so far, so that the hot paths
# (a commit writes one record per partition; a load replays millions) skip
# the registry lookups of encode/decode_record_key/value.  Only known types
# and versions get here; everything else takes those functions, which raise
# the right errors.
_INT16 = struct.Struct(">h")
_COMMIT_PREFIX = (b"\x00\x00", b"\x00\x01")  # OffsetCommit keys of record type 0 and 1
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
    return Record(rtype, key_msg, value_msg, version)
