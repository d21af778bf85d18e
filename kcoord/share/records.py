"""__share_group_state records (ShareSnapshot, ShareUpdate) to and from bytes.

The record types share numbers with __consumer_offsets' (0 and 1), so they
have their own codec here rather than record_codec's registry.  A record is
the project's `Record(type, key, value, value_version)`; keys are
{group_id, topic_id, partition}; a ShareSnapshot key with value None is a
tombstone.
"""
from __future__ import annotations

import struct

from ..protocol.api import schema_codec
from ..protocol.errors import ProtocolError
from ..protocol.messages.share_state import SHARE_RECORD_TYPES, SHARE_SNAPSHOT, SHARE_UPDATE
from ..protocol.record_codec import Record

__all__ = ["Record", "SHARE_SNAPSHOT", "SHARE_UPDATE", "encode_share_record",
           "decode_share_record"]

_INT16 = struct.Struct(">h")
KEY_VERSION = VALUE_VERSION = 0


def encode_share_record(record: Record) -> tuple[bytes, bytes | None]:
    key_name, value_name = SHARE_RECORD_TYPES[record.type]
    key = _INT16.pack(record.type) + schema_codec(key_name, KEY_VERSION)[0](record.key)
    if record.value is None:
        return key, None
    return key, _INT16.pack(VALUE_VERSION) + schema_codec(value_name, VALUE_VERSION)[0](record.value)


def decode_share_record(key: bytes, value: bytes | None) -> Record | None:
    """The record, or None for a record type this coordinator does not know
    (skipped on load, as Kafka's serde does).  ProtocolError for bytes that
    do not parse."""
    if len(key) < 2:
        raise ProtocolError("share-state record key shorter than its type")
    rtype, = _INT16.unpack_from(key, 0)
    names = SHARE_RECORD_TYPES.get(rtype)
    if names is None:
        return None
    key_msg, _ = schema_codec(names[0], KEY_VERSION)[1](key, 2)
    if value is None:
        return Record(rtype, key_msg, None)
    if len(value) < 2:
        raise ProtocolError("share-state record value shorter than its version")
    version, = _INT16.unpack_from(value, 0)
    if version != VALUE_VERSION:
        return None  # a newer writer's value: unknown here, skipped
    value_msg, _ = schema_codec(names[1], VALUE_VERSION)[1](value, 2)
    return Record(rtype, key_msg, value_msg, version)
