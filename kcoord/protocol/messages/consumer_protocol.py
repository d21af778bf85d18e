"""The embedded "consumer" protocol: the bytes inside JoinGroup protocol
metadata (ConsumerProtocolSubscription) and SyncGroup assignments
(ConsumerProtocolAssignment).  Not flexible.

On the wire each is prefixed by an int16 version.  As in Kafka's
ConsumerProtocol, a version newer than we know is read with the newest
format we know (newer versions may only append fields), and a negative
version is an error.
"""
from __future__ import annotations

import struct

from ..errors import ProtocolError
from ..schema import f, schema

CONSUMER_PROTOCOL_SUBSCRIPTION = schema("ConsumerProtocolSubscription", "0-3", "none", [
    f("topics", "[]string"),
    f("user_data", "bytes", null="0+", default=None),
    f("owned_partitions", "[]", "1+", fields=[
        f("topic", "string", "1+"),
        f("partitions", "[]int32", "1+"),
    ]),
    f("generation_id", "int32", "2+", default=-1),
    f("rack_id", "string", "3+", null="3+", default=None),
])

CONSUMER_PROTOCOL_ASSIGNMENT = schema("ConsumerProtocolAssignment", "0-3", "none", [
    f("assigned_partitions", "[]", fields=[
        f("topic", "string"),
        f("partitions", "[]int32"),
    ]),
    f("user_data", "bytes", null="0+", default=None),
])

_VERSION = struct.Struct(">h")


def _encode(sch, msg: dict, version: int) -> bytes:
    from ..api import schema_codec  # the registry imports this package
    if version not in sch.versions:
        raise ProtocolError(f"{sch.name} has no version {version}")
    encode, _ = schema_codec(sch.name, version)
    return _VERSION.pack(version) + encode(msg)


def _decode(sch, buf) -> tuple[int, dict]:
    from ..api import schema_codec
    if len(buf) < 2:
        raise ProtocolError(f"{sch.name}: buffer too short for the version")
    version, = _VERSION.unpack_from(buf, 0)
    if version < sch.versions.low:
        raise ProtocolError(f"{sch.name}: unsupported version {version}")
    _, decode = schema_codec(sch.name, min(version, sch.versions.high))
    msg, _ = decode(buf, 2)  # trailing bytes (fields of newer versions) are ignored
    return version, msg


def encode_subscription(msg: dict, version: int = 3) -> bytes:
    """Version-prefixed ConsumerProtocolSubscription bytes."""
    return _encode(CONSUMER_PROTOCOL_SUBSCRIPTION, msg, version)


def decode_subscription(buf) -> tuple[int, dict]:
    """(version on the wire, message) of version-prefixed subscription bytes."""
    return _decode(CONSUMER_PROTOCOL_SUBSCRIPTION, buf)


def encode_assignment(msg: dict, version: int = 3) -> bytes:
    """Version-prefixed ConsumerProtocolAssignment bytes."""
    return _encode(CONSUMER_PROTOCOL_ASSIGNMENT, msg, version)


def decode_assignment(buf) -> tuple[int, dict]:
    """(version on the wire, message) of version-prefixed assignment bytes."""
    return _decode(CONSUMER_PROTOCOL_ASSIGNMENT, buf)
