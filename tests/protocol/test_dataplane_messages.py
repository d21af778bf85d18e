"""Data-plane message definitions (Metadata, CreateTopics, DeleteTopics,
CreatePartitions, Produce, Fetch, ListOffsets) and the request/response headers.

- every (api, version, request/response) round-trips a message with a
  non-default value in every field present in that version, with nulls in
  every nullable field, and with nothing set (all defaults);
- every one of those versions decodes what kio (generated from Kafka's JSON
  schemas) serializes, to the same message, and kcoord's encoding is byte
  for byte kio's;
- headers.py: v1/v2 request headers, v0/v1 response headers, null client
  ids, unknown header tagged fields, and ProtocolError on malformed input.
"""
from __future__ import annotations

import dataclasses
import datetime
import importlib
import io
import re
import struct
import uuid
from types import NoneType, UnionType
from typing import Union, get_args, get_origin

import pytest

from kcoord.protocol import headers
from kcoord.protocol.api import APIS, request_codec, response_codec
from kcoord.protocol.codegen import uvarint_bytes
from kcoord.protocol.errors import ProtocolError

# key: (name, min version, max version, first flexible version)
DATAPLANE = {
    0: ("Produce", 3, 11, 9),
    1: ("Fetch", 4, 16, 12),
    2: ("ListOffsets", 1, 9, 6),
    3: ("Metadata", 0, 12, 9),
    19: ("CreateTopics", 2, 7, 5),
    20: ("DeleteTopics", 1, 6, 4),
    37: ("CreatePartitions", 0, 3, 2),
}

CASES = [(key, v, side) for key, (_, lo, hi, _) in sorted(DATAPLANE.items())
         for v in range(lo, hi + 1) for side in ("request", "response")]
CASE_IDS = [f"{DATAPLANE[k][0]}-v{v}-{side}" for k, v, side in CASES]
MODES = ["full", "null_leaves", "null_arrays"]


def _schema(key: int, side: str):
    api = APIS[key]
    return api.request if side == "request" else api.response


def _codec(key: int, version: int, side: str):
    return (request_codec if side == "request" else response_codec)(key, version)


# ---------------------------------------------------------------- message builder
# Valid Kafka error codes (kio maps int16 error fields onto its ErrorCode enum).
INT16_VALUES = [3, 5, 6, 7, 29, 36, 37, 38, 39, 40, 41, 42]


class _Counter:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> int:
        self.n += 1
        return self.n


def _value(fd, version: int, c: _Counter, mode: str):
    n = c()
    t = fd.type
    if t == "bool":
        return not fd.default
    if t == "int8":
        return 1 + n % 100
    if t == "int16":
        return INT16_VALUES[n % len(INT16_VALUES)]
    if t == "int32":
        return 1000 + n
    if t == "int64":
        return 10**12 + n
    if t == "uuid":
        return b"\xab" + n.to_bytes(15, "big")
    if t == "string":
        return f"{fd.name}-{n}-\u00e9\u4e2d"  # multi-byte UTF-8: byte length != char count
    if t in ("bytes", "records"):
        return f"rec-{n}".encode() * 3
    if t == "[]int32":
        return [n, n + 1, -n]
    if t == "[]int64":
        return [10**12 + n, -n]
    if t == "[]string":
        return [f"s{n}", f"t{n}\u00e9", ""]
    if t == "[]":
        return [build(fd.fields, version, mode, c) for _ in range(2)]
    if t == "{}":
        return build(fd.fields, version, mode, c)
    raise AssertionError(f"no test value for type {t}")


def build(fields, version: int, mode: str = "full", c: _Counter | None = None) -> dict:
    """A message with every field of `version` set: non-default values, or
    (mode null_leaves) None in every nullable non-array field, or (mode
    null_arrays) None in every nullable array.  Absent fields hold their
    defaults, which is what decoding yields for them."""
    c = c or _Counter()
    msg = {}
    for fd in fields:
        if version not in fd.versions:
            msg[fd.name] = fd.default
            continue
        if version in fd.nullable:
            is_array = fd.type.startswith("[]")
            if (mode == "null_leaves" and not is_array) or (mode == "null_arrays" and is_array):
                msg[fd.name] = None
                continue
        value = _value(fd, version, c, mode)
        assert value != fd.default, (fd.name, value)
        msg[fd.name] = value
    return msg


def defaults(fields, version: int) -> dict:
    """What decoding a message encoded from {} yields: the defaults, except
    that arrays present on the wire (not tagged) decode as lists."""
    return {fd.name: [] if version in fd.versions and fd.tag is None
            and fd.type.startswith("[]") and fd.default == () else fd.default
            for fd in fields}


# ---------------------------------------------------------------- registry
def test_registry_ranges():
    for key, (name, lo, hi, flex) in DATAPLANE.items():
        api = APIS[key]
        assert (api.name, api.min_version, api.max_version) == (name, lo, hi)
        for sch in (api.request, api.response):
            assert (sch.versions.low, sch.versions.high) == (lo, hi)
            for v in range(lo, hi + 1):
                assert sch.is_flexible(v) == (v >= flex), (name, v)


def test_field_names_are_snake_case():
    def walk(fields):
        for fd in fields:
            assert re.fullmatch(r"[a-z][a-z0-9_]*", fd.name), fd.name
            if fd.fields:
                walk(fd.fields)
    for key in DATAPLANE:
        walk(APIS[key].request.fields)
        walk(APIS[key].response.fields)


# ---------------------------------------------------------------- round trips
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("key,version,side", CASES, ids=CASE_IDS)
def test_round_trip(key, version, side, mode):
    sch = _schema(key, side)
    enc, dec = _codec(key, version, side)
    msg = build(sch.fields, version, mode)
    data = bytes(enc(msg))
    decoded, pos = dec(data)
    assert pos == len(data)
    assert decoded == msg
    assert bytes(enc(decoded)) == data
    # decoding at an offset into a larger buffer (as from a frame after its header)
    decoded2, pos2 = dec(bytearray(b"\x07" * 5 + data + b"\x00"), 5)
    assert decoded2 == msg and pos2 == 5 + len(data)


@pytest.mark.parametrize("key,version,side", CASES, ids=CASE_IDS)
def test_empty_message_encodes_defaults(key, version, side):
    sch = _schema(key, side)
    enc, dec = _codec(key, version, side)
    data = bytes(enc({}))
    decoded, pos = dec(data)
    assert pos == len(data)
    assert decoded == defaults(sch.fields, version)


@pytest.mark.parametrize("key,version,side", CASES, ids=CASE_IDS)
def test_truncated_message_raises_protocol_error(key, version, side):
    sch = _schema(key, side)
    enc, dec = _codec(key, version, side)
    data = bytes(enc(build(sch.fields, version)))
    for cut in {0, 1, len(data) // 3, len(data) // 2, len(data) - 1}:
        with pytest.raises(ProtocolError):
            dec(data[:cut])


# ---------------------------------------------------------------- spot checks of the wire layout
def test_metadata_v0_and_v1_topics_layout():
    enc0, _ = request_codec(3, 0)
    assert bytes(enc0({"topics": []})) == b"\x00\x00\x00\x00"
    enc1, dec1 = request_codec(3, 1)
    assert bytes(enc1({"topics": None})) == b"\xff\xff\xff\xff"  # null = all topics
    assert dec1(b"\xff\xff\xff\xff")[0]["topics"] is None
    enc4, _ = request_codec(3, 4)
    assert bytes(enc4({"topics": None})) == b"\xff\xff\xff\xff\x01"  # auto-create defaults to true


def test_fetch_v12_tagged_fields_written_only_when_set():
    enc, dec = response_codec(1, 12)
    part = {"partition_index": 0, "records": None}
    plain = bytes(enc({"responses": [{"topic": "t", "partitions": [part]}]}))
    tagged = bytes(enc({"responses": [{"topic": "t", "partitions": [
        dict(part, current_leader={"leader_id": 3, "leader_epoch": 9})]}]}))
    # tag 1, 8 bytes (two int32s + the struct's own empty tag section = 9)
    assert len(tagged) == len(plain) + 1 + 1 + 8 + 1
    got = dec(tagged)[0]["responses"][0]["partitions"][0]
    assert got["current_leader"] == {"leader_id": 3, "leader_epoch": 9}
    assert got["diverging_epoch"] is None and got["records"] is None


def test_fetch_records_null_and_empty_differ():
    for version in (4, 12):
        enc, dec = response_codec(1, version)
        for records in (None, b"", b"\x00" * 70):
            msg = {"responses": [{"topic": "t", "partitions": [{"records": records}]}]}
            got = dec(bytes(enc(msg)))[0]["responses"][0]["partitions"][0]["records"]
            assert got == records


def test_produce_request_transactional_id_layout():
    enc, _ = request_codec(0, 3)
    # null transactional id: int16 length -1, then acks
    assert bytes(enc({"acks": -1, "timeout_ms": 1500}))[:4] == b"\xff\xff\xff\xff"
    enc9, _ = request_codec(0, 9)
    # null compact string: length+1 = 0
    assert bytes(enc9({"acks": -1, "timeout_ms": 1500}))[:3] == b"\x00\xff\xff"


def test_unknown_tagged_fields_in_bodies_are_skipped():
    enc, dec = response_codec(0, 10)
    msg = build(APIS[0].response.fields, 10)
    data = bytes(enc(msg))
    # the top-level tag section is the tail of the message: append an unknown tag to it
    base = bytes(enc(dict(msg, node_endpoints=[])))
    assert base[-1] == 0
    extra = base[:-1] + b"\x01" + uvarint_bytes(77) + uvarint_bytes(3) + b"xyz"
    got, pos = dec(extra)
    assert pos == len(extra)
    assert got == dict(msg, node_endpoints=())
    assert dec(data)[0] == msg


# ---------------------------------------------------------------- kio
_TIME_TYPES = ("timedelta_i32", "timedelta_i64", "datetime_i64")


def _kio_class(name: str, version: int, side: str):
    module_name = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()
    mod = importlib.import_module(f"kio.schema.{module_name}.v{version}.{side}")
    return getattr(mod, name + side.capitalize())


def _strip_optional(tp):
    if get_origin(tp) in (UnionType, Union):
        args = [a for a in get_args(tp) if a is not NoneType]
        assert len(args) == 1
        return args[0]
    return tp


def _kio_scalar(tp, ktype, value):
    from kio.schema.errors import ErrorCode
    if dataclasses.is_dataclass(tp):
        return to_kio(tp, value)
    if ktype == "error_code":
        return ErrorCode(value)
    if ktype in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(milliseconds=value)
    if ktype == "datetime_i64":
        return datetime.datetime.fromtimestamp(value / 1000, tz=datetime.timezone.utc)
    if ktype == "uuid":
        return uuid.UUID(bytes=value)
    return value


def to_kio(cls, msg: dict):
    """Build the kio entity of `cls` from a kcoord message dict.  Checks on the
    way that kio's fields are exactly kcoord's fields present in that version
    (kio names millisecond durations and times without the _ms suffix)."""
    kwargs = {}
    for fld in dataclasses.fields(cls):
        ktype = fld.metadata.get("kafka_type")
        name = fld.name + "_ms" if ktype in _TIME_TYPES else fld.name
        assert name in msg, f"kio {cls.__name__}.{fld.name} has no kcoord field {name}"
        value = msg[name]
        if value is None:
            kwargs[fld.name] = None
            continue
        tp = _strip_optional(fld.type)
        if get_origin(tp) is tuple:
            inner = _strip_optional(get_args(tp)[0])
            kwargs[fld.name] = tuple(_kio_scalar(inner, ktype, v) for v in value)
        else:
            kwargs[fld.name] = _kio_scalar(tp, ktype, value)
    return cls(**kwargs)


def _present_names(fields, version):
    return {fd.name for fd in fields if version in fd.versions}


def _from_kio_default(value, ktype):
    if ktype == "datetime_i64" and value is None:
        return -1  # kio's "no time"
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    if isinstance(value, uuid.UUID):
        return value.bytes
    return value


def _check_field_sets(cls, fields, version):
    """kio's fields of `cls` are kcoord's present fields, with the same explicit
    defaults (kio leaves a field without a default where Kafka's is implicit)."""
    from kcoord.protocol.schema import _implicit_default
    by_name = {fd.name: fd for fd in fields}
    kio_names = set()
    for fld in dataclasses.fields(cls):
        ktype = fld.metadata.get("kafka_type")
        name = fld.name + "_ms" if ktype in _TIME_TYPES else fld.name
        kio_names.add(name)
        fd = by_name.get(name)
        tp = _strip_optional(fld.type)
        if get_origin(tp) is tuple:
            tp = _strip_optional(get_args(tp)[0])
        if fd is None:
            continue  # reported by the set comparison below
        if dataclasses.is_dataclass(tp):
            _check_field_sets(tp, fd.fields, version)
        elif fld.default is dataclasses.MISSING:
            assert fd.default == _implicit_default(fd.type), (cls.__name__, name)
        else:
            assert fd.default == _from_kio_default(fld.default, ktype), (cls.__name__, name)
    assert kio_names == _present_names(fields, version), cls.__name__


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("key,version,side", CASES, ids=CASE_IDS)
def test_decodes_kio_serialization(key, version, side, mode):
    from kio.serial import entity_writer
    sch = _schema(key, side)
    cls = _kio_class(APIS[key].name, version, side)
    _check_field_sets(cls, sch.fields, version)
    msg = build(sch.fields, version, mode)
    buf = io.BytesIO()
    entity_writer(cls)(buf, to_kio(cls, msg))
    kio_bytes = buf.getvalue()
    enc, dec = _codec(key, version, side)
    decoded, pos = dec(kio_bytes)
    assert pos == len(kio_bytes)
    assert decoded == msg
    assert bytes(enc(msg)) == kio_bytes


# ---------------------------------------------------------------- headers
def _kio_request_header(version, api_key, api_version, correlation_id, client_id):
    from kio.serial import entity_writer
    mod = importlib.import_module(f"kio.schema.request_header.v{version}.header")
    buf = io.BytesIO()
    entity_writer(mod.RequestHeader)(buf, mod.RequestHeader(
        request_api_key=api_key, request_api_version=api_version,
        correlation_id=correlation_id, client_id=client_id))
    return buf.getvalue()


@pytest.mark.parametrize("client_id", ["consumer-1", "", None, "cl\u00e9-\u4e2d"])
@pytest.mark.parametrize("flexible", [False, True])
def test_request_header_round_trip(client_id, flexible):
    data = headers.encode_request_header(1, 12, -7, client_id, flexible)
    assert data == _kio_request_header(2 if flexible else 1, 1, 12, -7, client_id)
    body = b"BODY"
    got = headers.decode_request_header(data + body, lambda k, v: flexible)
    assert got == (1, 12, -7, client_id, len(data))
    key, version, corr, cid, pos = headers.peek_request_header(data + body)
    assert (key, version, corr, cid) == (1, 12, -7, client_id)
    if flexible:
        assert pos == len(data) - 1
        pos = headers.skip_header_tags(data + body, pos)
    assert pos == len(data)
    # memoryview input, as sliced from a receive buffer
    assert headers.decode_request_header(memoryview(data + body),
                                         lambda k, v: flexible) == got


def test_request_header_null_client_id_bytes():
    data = headers.encode_request_header(3, 1, 5, None, False)
    assert data == struct.pack(">hhih", 3, 1, 5, -1)
    assert headers.peek_request_header(data) == (3, 1, 5, None, 10)


def test_flexible_header_keeps_int16_client_id():
    data = headers.encode_request_header(3, 9, 1, "abc", True)
    assert data == struct.pack(">hhih", 3, 9, 1, 3) + b"abc" + b"\x00"


def test_request_header_unknown_tagged_fields_skipped():
    tags = (uvarint_bytes(2)
            + uvarint_bytes(0) + uvarint_bytes(3) + b"abc"
            + uvarint_bytes(300) + uvarint_bytes(200) + b"z" * 200)
    enc, dec = request_codec(3, 12)
    body = bytes(enc({"topics": [{"name": "orders"}]}))
    frame = struct.pack(">hhih", 3, 12, 42, 4) + b"cli1" + tags + body
    key, version, corr, cid, pos = headers.decode_request_header(frame)
    assert (key, version, corr, cid) == (3, 12, 42, "cli1")
    assert pos == len(frame) - len(body)
    msg, end = dec(frame, pos)
    assert end == len(frame)
    assert msg["topics"][0]["name"] == "orders"


def test_decode_request_header_uses_registry():
    # Metadata v8 is not flexible (header v1), v9 is (header v2)
    v8 = headers.encode_request_header(3, 8, 1, "c", False) + b"\x00"
    assert headers.decode_request_header(v8)[4] == len(v8) - 1
    v9 = headers.encode_request_header(3, 9, 1, "c", True)
    assert headers.decode_request_header(v9)[4] == len(v9)
    # a flexible ApiVersions request (v3+) still has a v2 header, with tags
    av = headers.encode_request_header(18, 3, 1, "c", True)
    assert headers.decode_request_header(av)[4] == len(av)
    # a version newer than kcoord knows is still flexible (open-ended range)
    av9 = headers.encode_request_header(18, 9, 1, "c", True)
    assert headers.decode_request_header(av9)[4] == len(av9)


def test_decode_request_header_unknown_api_key():
    data = headers.encode_request_header(32000, 0, 1, "c", False)
    with pytest.raises(ProtocolError):
        headers.decode_request_header(data)
    assert headers.peek_request_header(data)[0] == 32000


@pytest.mark.parametrize("flexible", [False, True])
def test_request_header_truncated(flexible):
    data = headers.encode_request_header(1, 12, 7, "client", flexible)
    for cut in range(len(data)):
        with pytest.raises(ProtocolError):
            headers.decode_request_header(data[:cut], lambda k, v: flexible)


def test_request_header_malformed():
    bad_len = struct.pack(">hhih", 1, 4, 1, -2)
    with pytest.raises(ProtocolError):
        headers.peek_request_header(bad_len)
    prefix = struct.pack(">hhih", 1, 12, 1, -1)
    for tags in (b"\x01\x00\x05ab",            # tagged field longer than the buffer
                 b"\x01\x80\x80\x80\x80\x80\x01\x00",  # varint longer than 5 bytes
                 b"\x02\x00\x00",                # announces two fields, has one
                 b"\xff"):                       # truncated varint count
        with pytest.raises(ProtocolError):
            headers.decode_request_header(prefix + tags, lambda k, v: True)
    # malformed UTF-8 in client_id is replaced, as Kafka does, not fatal
    raw = struct.pack(">hhih", 1, 4, 1, 2) + b"\xff\xfe"
    assert headers.peek_request_header(raw)[3] == "\ufffd\ufffd"


def test_response_header():
    assert headers.encode_response_header(5, False) == b"\x00\x00\x00\x05"
    assert headers.encode_response_header(-1, True) == b"\xff\xff\xff\xff\x00"
    assert headers.decode_response_header(b"\x00\x00\x00\x05body", False) == (5, 4)
    tagged = b"\x00\x00\x00\x06" + b"\x01\x02\x01Z" + b"body"
    assert headers.decode_response_header(tagged, True) == (6, 8)
    with pytest.raises(ProtocolError):
        headers.decode_response_header(b"\x00\x00", False)
    with pytest.raises(ProtocolError):
        headers.decode_response_header(b"\x00\x00\x00\x01", True)


def test_response_header_matches_kio():
    from kio.serial import entity_writer
    for version, flexible in ((0, False), (1, True)):
        mod = importlib.import_module(f"kio.schema.response_header.v{version}.header")
        buf = io.BytesIO()
        entity_writer(mod.ResponseHeader)(buf, mod.ResponseHeader(correlation_id=123456))
        assert headers.encode_response_header(123456, flexible) == buf.getvalue()


def test_header_versions():
    assert headers.request_header_version(False) == 1
    assert headers.request_header_version(True) == 2
    assert headers.response_header_version(3, True) == 1
    assert headers.response_header_version(3, False) == 0
    assert headers.response_header_version(18, True) == 0  # ApiVersions: always v0
    assert headers.response_header_version(18, False) == 0
