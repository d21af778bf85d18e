"""Tests of kcoord's group-coordinator message definitions.

For every API and version in group.py, offsets.py, admin_groups.py and
consumer_group.py, and every version of the embedded consumer protocol
and the __consumer_offsets records:

- a fully populated message (a non-default value in every field present in
  that version), one with every nullable field null, and one with long
  strings and arrays (multi-byte varint lengths) round-trip through
  kcoord's generated codecs;
- where kio knows the (api, version), kio's encoding of the same message
  decodes to it with kcoord, kcoord's encoding is byte-identical to kio's,
  and both describe exactly the same set of fields.

The records have no kio counterpart; they are checked against bytes
written out by hand from Kafka's record schemas.
"""
from __future__ import annotations

import dataclasses
import datetime
import importlib
import io
import struct
import typing
import uuid

import pytest

from kcoord.protocol.api import APIS, SCHEMAS, request_codec, response_codec, schema_codec
from kcoord.protocol.errors import ProtocolError
from kcoord.protocol.messages import consumer_protocol as cp
from kcoord.protocol.messages import coordinator_records as cr
from kcoord.protocol import schema as schema_mod
from kcoord.protocol.schema import Field, Schema

# (key, kio package name) of the APIs defined by the modules under test
GROUP_APIS = {
    8: "offset_commit", 9: "offset_fetch", 10: "find_coordinator", 11: "join_group",
    12: "heartbeat", 13: "leave_group", 14: "sync_group", 15: "describe_groups",
    16: "list_groups", 28: "txn_offset_commit", 42: "delete_groups", 47: "offset_delete",
    68: "consumer_group_heartbeat", 69: "consumer_group_describe",
}
EXPECTED_RANGES = {
    8: (0, 9, 8), 9: (0, 9, 6), 10: (0, 6, 3), 11: (0, 9, 6), 12: (0, 4, 4),
    13: (0, 5, 4), 14: (0, 5, 4), 15: (0, 5, 5), 16: (0, 5, 3), 28: (0, 4, 3),
    42: (0, 2, 2), 47: (0, 0, None), 68: (0, 1, 0), 69: (0, 0, 0),
}
RECORD_SCHEMAS = [name for pair in cr.RECORD_TYPES.values() for name in pair]
EMBEDDED_SCHEMAS = ["ConsumerProtocolSubscription", "ConsumerProtocolAssignment"]

API_CASES = [(key, v, is_req)
             for key in sorted(GROUP_APIS)
             for v in range(APIS[key].min_version, APIS[key].max_version + 1)
             for is_req in (True, False)]
SCHEMA_CASES = [(name, v)
                for name in sorted(set(RECORD_SCHEMAS)) + EMBEDDED_SCHEMAS
                for v in range(SCHEMAS[name].versions.low, SCHEMAS[name].versions.high + 1)]


def _api_id(case):
    key, v, is_req = case
    return f"{APIS[key].name}-v{v}-{'req' if is_req else 'resp'}"


def _schema_of(key: int, is_req: bool) -> Schema:
    return APIS[key].request if is_req else APIS[key].response


def _codec(key: int, version: int, is_req: bool):
    return request_codec(key, version) if is_req else response_codec(key, version)


# ---------------------------------------------------------------- message builder

ERROR_CODES = [16, 25, 27, 22, 82, 15, 69, 110]


class Builder:
    """Builds a message with a distinct non-default value in every field
    present in `version` (and the default in every absent one, which is what
    a decoder returns for it)."""

    def __init__(self, version: int, *, nulls: bool = False, big: bool = False):
        self.v = version
        self.nulls = nulls
        self.big = big
        self.n = 0

    def tick(self) -> int:
        self.n += 1
        return self.n

    def build(self, fields: list[Field]) -> dict:
        msg = {}
        for fd in fields:
            if self.v not in fd.versions:
                msg[fd.name] = fd.default
            elif self.nulls and self.v in fd.nullable:
                msg[fd.name] = None
            else:
                msg[fd.name] = self.value(fd)
        return msg

    def value(self, fd: Field):
        n = self.tick()
        t = fd.type
        if t == "{}":
            return self.build(fd.fields)
        if t == "[]":
            count = 3 if self.big else 2
            return [self.build(fd.fields) for _ in range(count)]
        if t.startswith("[]"):
            count = 150 if self.big else 2
            et = t[2:]
            if et == "string":
                return [f"{fd.name}-{n}-{i}" for i in range(count)]
            return [self.scalar(et, fd.name, n + i) for i in range(count)]
        return self.scalar(t, fd.name, n, fd.default)

    def scalar(self, t: str, name: str, n: int, default=None):
        if t == "bool":
            assert default is not True
            return True
        if name == "error_code":
            return ERROR_CODES[n % len(ERROR_CODES)]
        if t == "int8":
            return 1 + n % 100
        if t in ("int16", "int32", "int64"):
            value = {"int16": 1000, "int32": 70000, "int64": 2**40}[t] + n
            assert value != default
            return value
        if t == "uuid":
            return bytes([n % 256]) + bytes(range(1, 16))
        if t == "string":
            base = f"{name}-{n}-é"
            return base * 40 if self.big else base
        if t == "bytes":
            data = bytes([n % 256, 0, 255, 7])
            return data * 100 if self.big else data
        raise AssertionError(f"no sample value for type {t}")


def _roundtrip(encode, decode, msg):
    data = bytes(encode(msg))
    decoded, end = decode(data)
    assert end == len(data)
    assert decoded == msg
    # decoding a bytearray (what a frame reader hands over) works the same
    assert decode(bytearray(data))[0] == msg
    return data


# ---------------------------------------------------------------- definitions

def test_api_ranges_match_kafka():
    for key, (lo, hi, flex) in EXPECTED_RANGES.items():
        api = APIS[key]
        assert (api.min_version, api.max_version) == (lo, hi), api.name
        for sch in (api.request, api.response):
            assert sch.versions == api.request.versions
            for v in range(lo, hi + 1):
                assert sch.is_flexible(v) == (flex is not None and v >= flex), (sch.name, v)


def test_schema_names_and_ranges():
    expected = {
        "ConsumerProtocolSubscription": (0, 3, None), "ConsumerProtocolAssignment": (0, 3, None),
        "OffsetCommitKey": (0, 1, None), "OffsetCommitValue": (0, 4, 4),
        "GroupMetadataKey": (2, 2, None), "GroupMetadataValue": (0, 4, 4),
    }
    for t in range(3, 9):
        key, value = cr.RECORD_TYPES[t]
        expected[key] = (t, t, None)
        expected[value] = (0, 0, 0)
    for name, (lo, hi, flex) in expected.items():
        sch = SCHEMAS[name]
        assert (sch.versions.low, sch.versions.high) == (lo, hi), name
        for v in range(lo, hi + 1):
            assert sch.is_flexible(v) == (flex is not None and v >= flex), (name, v)


def test_record_types():
    assert cr.RECORD_TYPES == {
        0: ("OffsetCommitKey", "OffsetCommitValue"),
        1: ("OffsetCommitKey", "OffsetCommitValue"),
        2: ("GroupMetadataKey", "GroupMetadataValue"),
        3: ("ConsumerGroupMetadataKey", "ConsumerGroupMetadataValue"),
        4: ("ConsumerGroupPartitionMetadataKey", "ConsumerGroupPartitionMetadataValue"),
        5: ("ConsumerGroupMemberMetadataKey", "ConsumerGroupMemberMetadataValue"),
        6: ("ConsumerGroupTargetAssignmentMetadataKey",
            "ConsumerGroupTargetAssignmentMetadataValue"),
        7: ("ConsumerGroupTargetAssignmentMemberKey", "ConsumerGroupTargetAssignmentMemberValue"),
        8: ("ConsumerGroupCurrentMemberAssignmentKey",
            "ConsumerGroupCurrentMemberAssignmentValue"),
        10: ("ShareGroupMemberMetadataKey", "ShareGroupMemberMetadataValue"),
        11: ("ShareGroupMetadataKey", "ShareGroupMetadataValue"),
        12: ("ShareGroupTargetAssignmentMetadataKey", "ShareGroupTargetAssignmentMetadataValue"),
        13: ("ShareGroupTargetAssignmentMemberKey", "ShareGroupTargetAssignmentMemberValue"),
        14: ("ShareGroupCurrentMemberAssignmentKey", "ShareGroupCurrentMemberAssignmentValue"),
        15: ("ShareGroupStatePartitionMetadataKey", "ShareGroupStatePartitionMetadataValue"),
    }


# ---------------------------------------------------------------- round trips

@pytest.mark.parametrize("case", API_CASES, ids=_api_id)
@pytest.mark.parametrize("mode", ["full", "nulls", "big"])
def test_api_roundtrip(case, mode):
    key, v, is_req = case
    sch = _schema_of(key, is_req)
    msg = Builder(v, nulls=mode == "nulls", big=mode == "big").build(sch.fields)
    _roundtrip(*_codec(key, v, is_req), msg)


@pytest.mark.parametrize("name,v", SCHEMA_CASES, ids=[f"{n}-v{v}" for n, v in SCHEMA_CASES])
@pytest.mark.parametrize("mode", ["full", "nulls", "big"])
def test_schema_roundtrip(name, v, mode):
    msg = Builder(v, nulls=mode == "nulls", big=mode == "big").build(SCHEMAS[name].fields)
    _roundtrip(*schema_codec(name, v), msg)


@pytest.mark.parametrize("case", API_CASES, ids=_api_id)
def test_truncated_input_raises_protocol_error(case):
    key, v, is_req = case
    sch = _schema_of(key, is_req)
    encode, decode = _codec(key, v, is_req)
    data = bytes(encode(Builder(v).build(sch.fields)))
    for cut in range(len(data)):
        with pytest.raises(ProtocolError):
            decode(data[:cut])


def test_missing_keys_encode_defaults():
    # JoinGroup v5: rebalance_timeout_ms defaults to -1, group_instance_id to null
    encode, decode = request_codec(11, 5)
    msg, _ = decode(bytes(encode({"group_id": "g", "session_timeout_ms": 10})))
    assert msg["rebalance_timeout_ms"] == -1
    assert msg["group_instance_id"] is None
    assert msg["protocols"] == []
    encode, decode = response_codec(15, 3)
    data = bytes(encode({"groups": [{"group_id": "g"}]}))
    assert decode(data)[0]["groups"][0]["authorized_operations"] == -2147483648


# ---------------------------------------------------------------- kio cross-check

def _kio_class(key: int, version: int, is_req: bool):
    pkg = GROUP_APIS[key]
    kind = "request" if is_req else "response"
    try:
        mod = importlib.import_module(f"kio.schema.{pkg}.v{version}.{kind}")
    except ModuleNotFoundError:
        return None
    cls_name = "".join(part.title() for part in pkg.split("_")) + kind.title()
    return getattr(mod, cls_name)


def _kio_data_class(name: str, version: int):
    pkg = {"ConsumerProtocolSubscription": "consumer_protocol_subscription",
           "ConsumerProtocolAssignment": "consumer_protocol_assignment"}[name]
    return getattr(importlib.import_module(f"kio.schema.{pkg}.v{version}.data"), name)


def _kio_key(kio_name: str, msg: dict) -> str:
    """kcoord's name of a kio field: kio drops the unit of *Ms durations."""
    if kio_name in msg:
        return kio_name
    if kio_name + "_ms" in msg:
        return kio_name + "_ms"
    raise AssertionError(f"kio field {kio_name} has no kcoord counterpart in {sorted(msg)}")


def _unoptional(tp):
    if typing.get_origin(tp) in (typing.Union, getattr(__import__("types"), "UnionType")):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        assert len(args) == 1
        return args[0]
    return tp


def _to_kio_scalar(kafka_type: str, tp, value):
    from kio.schema.errors import ErrorCode
    from kio.static.primitive import i32Timedelta, i64Timedelta
    if kafka_type == "timedelta_i32":
        return i32Timedelta.parse(datetime.timedelta(milliseconds=value))
    if kafka_type == "timedelta_i64":
        return i64Timedelta.parse(datetime.timedelta(milliseconds=value))
    if kafka_type == "error_code":
        return ErrorCode(value)
    if kafka_type == "uuid":
        return uuid.UUID(bytes=value)
    if kafka_type in ("bytes", "records"):
        return bytes(value)
    if kafka_type == "bool":
        return bool(value)
    return tp(value)


def to_kio(cls, msg: dict, present: set[str]):
    """Build a kio entity of class `cls` from kcoord message `msg`, checking
    that kio's fields are exactly kcoord's fields present in this version."""
    hints = typing.get_type_hints(cls)
    kio_fields = dataclasses.fields(cls)
    mapped = {_kio_key(fd.name, msg) for fd in kio_fields}
    assert mapped == present, f"{cls.__name__}: kio {sorted(mapped)} != kcoord {sorted(present)}"
    kwargs = {}
    for fd in kio_fields:
        value = msg[_kio_key(fd.name, msg)]
        tp = _unoptional(hints[fd.name])
        kwargs[fd.name] = _to_kio_value(fd, tp, value)
    return cls(**kwargs)


def _to_kio_value(fd, tp, value):
    if value is None:
        return None
    if typing.get_origin(tp) is tuple:
        inner = typing.get_args(tp)[0]
        if dataclasses.is_dataclass(inner):
            return tuple(_to_kio_entity(inner, e) for e in value)
        return tuple(_to_kio_scalar(fd.metadata["kafka_type"], inner, e) for e in value)
    if dataclasses.is_dataclass(tp):
        return _to_kio_entity(tp, value)
    return _to_kio_scalar(fd.metadata["kafka_type"], tp, value)


# nested kcoord field lists by kio class, filled in by _prepare_nested
_NESTED: dict[type, set[str]] = {}


def _to_kio_entity(cls, msg: dict):
    return to_kio(cls, msg, _NESTED[cls])


def _prepare_nested(cls, fields: list[Field], version: int):
    """Record, for cls and every nested kio class, which kcoord fields are
    present in `version`, so that to_kio can check them at every level."""
    present = {fd.name for fd in fields if version in fd.versions}
    _NESTED[cls] = present
    hints = typing.get_type_hints(cls)
    by_name = {fd.name: fd for fd in fields}
    for kfd in dataclasses.fields(cls):
        if kfd.name in by_name or kfd.name + "_ms" in by_name:
            _check_nullable_and_default(
                cls, kfd, by_name[kfd.name if kfd.name in by_name else kfd.name + "_ms"],
                version)
        tp = _unoptional(hints[kfd.name])
        if typing.get_origin(tp) is tuple:
            tp = typing.get_args(tp)[0]
        if dataclasses.is_dataclass(tp):
            ours = by_name[kfd.name if kfd.name in by_name else kfd.name + "_ms"]
            assert ours.fields is not None, f"{kfd.name} is a struct in kio only"
            _prepare_nested(tp, ours.fields, version)
    return present


def _from_kio_default(value):
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    if isinstance(value, bool) or value is None or isinstance(value, (str, bytes, tuple)):
        return value
    if isinstance(value, int):
        return int(value)
    raise AssertionError(f"unexpected kio default {value!r}")


def _check_nullable_and_default(cls, kfd, ours: Field, version: int):
    """kio's field is nullable exactly where ours is, and has our default."""
    from kio.serial._introspect import is_optional
    where = f"{cls.__name__}.{kfd.name} v{version}"
    # kio types every uuid as optional (None stands for the zero uuid)
    if kfd.metadata.get("kafka_type") != "uuid":
        assert is_optional(kfd) == (version in ours.nullable), f"nullability of {where}"
    if kfd.default is not dataclasses.MISSING:
        assert _from_kio_default(kfd.default) == ours.default, f"default of {where}"
    elif ours.type != "[]":  # kio gives struct arrays no default, even a JSON "null"
        implicit = schema_mod.f("x", ours.type, fields=ours.fields).default
        assert ours.default == implicit, f"default of {where}: kio has none"


def _kio_encode(cls, entity) -> bytes:
    from kio.serial import entity_writer
    buf = io.BytesIO()
    entity_writer(cls)(buf, entity)
    return buf.getvalue()


KIO_CASES = [c for c in API_CASES if _kio_class(*c) is not None]


def test_kio_covers_most_versions():
    missing = sorted({_api_id(c) for c in API_CASES} - {_api_id(c) for c in KIO_CASES})
    # kio 0.6 starts OffsetCommit at v2 and OffsetFetch at v1, like Kafka 4.x
    assert missing == ["OffsetCommit-v0-req", "OffsetCommit-v0-resp", "OffsetCommit-v1-req",
                       "OffsetCommit-v1-resp", "OffsetFetch-v0-req", "OffsetFetch-v0-resp"]


@pytest.mark.parametrize("case", KIO_CASES, ids=_api_id)
@pytest.mark.parametrize("mode", ["full", "nulls", "big"])
def test_against_kio(case, mode):
    from kio.serial import entity_reader
    key, v, is_req = case
    cls = _kio_class(key, v, is_req)
    assert cls.__version__ == v and cls.__api_key__ == key
    assert cls.__flexible__ == APIS[key].request.is_flexible(v)
    sch = _schema_of(key, is_req)
    msg = Builder(v, nulls=mode == "nulls", big=mode == "big").build(sch.fields)
    present = _prepare_nested(cls, sch.fields, v)
    entity = to_kio(cls, msg, present)
    kio_bytes = _kio_encode(cls, entity)
    encode, decode = _codec(key, v, is_req)
    decoded, end = decode(kio_bytes)
    assert end == len(kio_bytes)
    assert decoded == msg
    assert bytes(encode(msg)) == kio_bytes
    parsed, size = entity_reader(cls)(kio_bytes, 0)
    assert parsed == entity and size == len(kio_bytes)


def _to_old_values(schema, msg: dict) -> list:
    """kcoord dict -> positional values of a kafka-python legacy Schema."""
    from kafka.protocol.old.types import Array, Schema as OldSchema
    assert list(schema.names) == [n for n in msg if n in schema.names]
    values = []
    for name, typ in zip(schema.names, schema.fields):
        value = msg[name]
        if isinstance(typ, Array) and isinstance(typ.array_of, OldSchema) and value is not None:
            value = [_to_old_values(typ.array_of, e) for e in value]
        values.append(value)
    return values


# versions kio 0.6 does not have (Kafka 4 dropped them); kafka-python keeps
# hand-written classes for them
OLD_CASES = [(8, 0, True), (8, 0, False), (8, 1, True), (8, 1, False),
             (9, 0, True), (9, 0, False)]


@pytest.mark.filterwarnings("ignore:.*is deprecated. Use files:DeprecationWarning")
@pytest.mark.parametrize("case", OLD_CASES, ids=_api_id)
@pytest.mark.parametrize("mode", ["full", "nulls", "big"])
def test_old_versions_against_kafka_python(case, mode):
    from kafka.protocol.old import commit
    key, v, is_req = case
    cls = getattr(commit, f"{APIS[key].name}{'Request' if is_req else 'Response'}_v{v}")
    sch = _schema_of(key, is_req)
    msg = Builder(v, nulls=mode == "nulls", big=mode == "big").build(sch.fields)
    present = {k: msg[k] for k in msg if v in next(fd for fd in sch.fields if fd.name == k).versions}
    assert set(cls.SCHEMA.names) == set(present)
    old_bytes = cls(*_to_old_values(cls.SCHEMA, present)).encode()
    encode, decode = _codec(key, v, is_req)
    assert bytes(encode(msg)) == old_bytes
    assert decode(old_bytes) == (msg, len(old_bytes))


@pytest.mark.parametrize("name", EMBEDDED_SCHEMAS)
@pytest.mark.parametrize("v", range(4))
@pytest.mark.parametrize("mode", ["full", "nulls", "big"])
def test_consumer_protocol_against_kio(name, v, mode):
    cls = _kio_data_class(name, v)
    sch = SCHEMAS[name]
    msg = Builder(v, nulls=mode == "nulls", big=mode == "big").build(sch.fields)
    entity = to_kio(cls, msg, _prepare_nested(cls, sch.fields, v))
    kio_bytes = _kio_encode(cls, entity)
    encode, decode = schema_codec(name, v)
    assert decode(kio_bytes)[0] == msg
    assert bytes(encode(msg)) == kio_bytes
    # and the version-prefixed helpers
    helpers = {"ConsumerProtocolSubscription": (cp.encode_subscription, cp.decode_subscription),
               "ConsumerProtocolAssignment": (cp.encode_assignment, cp.decode_assignment)}
    enc, dec = helpers[name]
    framed = struct.pack(">h", v) + kio_bytes
    assert enc(msg, v) == framed
    assert dec(framed) == (v, msg)


# ---------------------------------------------------------------- consumer protocol helpers

def test_subscription_known_bytes():
    # v1: topics ["t"], user_data null, owned_partitions [("t", [0, 2])]
    data = (b"\x00\x01" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\xff\xff\xff\xff"
            + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\x00\x00\x00\x02" + b"\x00\x00\x00\x00"
            + b"\x00\x00\x00\x02")
    version, msg = cp.decode_subscription(data)
    assert version == 1
    assert msg == {"topics": ["t"], "user_data": None,
                   "owned_partitions": [{"topic": "t", "partitions": [0, 2]}],
                   "generation_id": -1, "rack_id": None}
    assert cp.encode_subscription(msg, 1) == data


def test_subscription_newer_version_decodes_as_newest_known():
    msg = Builder(3).build(cp.CONSUMER_PROTOCOL_SUBSCRIPTION.fields)
    body = cp.encode_subscription(msg, 3)[2:]
    # a v7 subscription: v3 fields followed by fields we do not know
    version, decoded = cp.decode_subscription(b"\x00\x07" + body + b"\x00\x00\x00\x2a")
    assert version == 7
    assert decoded == msg
    version, decoded = cp.decode_assignment(
        b"\x00\x04" + cp.encode_assignment({"assigned_partitions": [
            {"topic": "a", "partitions": [1]}]}, 3)[2:] + b"extra")
    assert version == 4
    assert decoded == {"assigned_partitions": [{"topic": "a", "partitions": [1]}],
                       "user_data": None}


def test_consumer_protocol_bad_input():
    with pytest.raises(ProtocolError):
        cp.decode_subscription(b"\xff\xff\x00\x00\x00\x00\xff\xff\xff\xff")  # version -1
    with pytest.raises(ProtocolError):
        cp.decode_assignment(b"\x00")
    with pytest.raises(ProtocolError):
        cp.decode_assignment(b"\x00\x00\x00\x00\x00\x05")  # array longer than the buffer
    with pytest.raises(ProtocolError):
        cp.encode_subscription({"topics": []}, 4)
    with pytest.raises(ProtocolError):
        cp.encode_assignment({}, -1)


def test_assignment_default_version_is_newest():
    data = cp.encode_assignment({"assigned_partitions": [], "user_data": b"u"})
    assert data == b"\x00\x03" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x01u"


# ---------------------------------------------------------------- coordinator records

def _s16(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def _cs(text: str) -> bytes:  # compact string, short
    raw = text.encode()
    return bytes([len(raw) + 1]) + raw


def test_offset_commit_record_bytes():
    key = cr.encode_record_key(1, {"group": "grp", "topic": "tp", "partition": 7})
    assert key == b"\x00\x01" + _s16("grp") + _s16("tp") + struct.pack(">i", 7)
    assert cr.decode_record_key(key) == (1, {"group": "grp", "topic": "tp", "partition": 7})
    # type 0 is the same key layout
    key0 = b"\x00\x00" + key[2:]
    assert cr.decode_record_key(key0) == (0, {"group": "grp", "topic": "tp", "partition": 7})
    assert cr.encode_record_key(0, {"group": "grp", "topic": "tp", "partition": 7}) == key0

    v3 = {"offset": 42, "leader_epoch": 5, "metadata": "md", "commit_timestamp": 1000,
          "expire_timestamp": -1}
    data = cr.encode_record_value("OffsetCommitValue", 3, v3)
    assert data == (b"\x00\x03" + struct.pack(">qi", 42, 5) + _s16("md")
                    + struct.pack(">q", 1000))
    assert cr.decode_record_value(1, data) == (3, v3)

    v1 = {"offset": 42, "leader_epoch": -1, "metadata": "", "commit_timestamp": 1000,
          "expire_timestamp": 2000}
    data = cr.encode_record_value(1, 1, v1)
    assert data == b"\x00\x01" + struct.pack(">q", 42) + _s16("") + struct.pack(">qq", 1000, 2000)
    assert cr.decode_record_value(0, data) == (1, v1)

    v4 = dict(v3)
    data = cr.encode_record_value("OffsetCommit", 4, v4)
    assert data == (b"\x00\x04" + struct.pack(">qi", 42, 5) + _cs("md")
                    + struct.pack(">q", 1000) + b"\x00")
    assert cr.decode_record_value(1, data) == (4, v4)


def test_group_metadata_record_bytes():
    key = cr.encode_record_key(2, {"group": "g1"})
    assert key == b"\x00\x02" + _s16("g1")
    assert cr.decode_record_key(key) == (2, {"group": "g1"})
    value = {"protocol_type": "consumer", "generation": 3, "protocol": "range", "leader": None,
             "current_state_timestamp": 123456,
             "members": [{"member_id": "m1", "group_instance_id": None, "client_id": "c",
                          "client_host": "/h", "rebalance_timeout": 300000,
                          "session_timeout": 45000, "subscription": b"S",
                          "assignment": b""}]}
    expected = (b"\x00\x03" + _s16("consumer") + struct.pack(">i", 3) + _s16("range")
                + b"\xff\xff" + struct.pack(">q", 123456) + struct.pack(">i", 1)
                + _s16("m1") + b"\xff\xff" + _s16("c") + _s16("/h")
                + struct.pack(">ii", 300000, 45000) + struct.pack(">i", 1) + b"S"
                + struct.pack(">i", 0))
    data = cr.encode_record_value(2, 3, value)
    assert data == expected
    assert cr.decode_record_value(2, data) == (3, value)
    # v0 has neither the timestamp, the instance id nor the rebalance timeout
    data0 = cr.encode_record_value("GroupMetadataValue", 0, value)
    decoded = cr.decode_record_value(2, data0)[1]
    assert decoded["current_state_timestamp"] == -1
    assert decoded["members"][0]["rebalance_timeout"] == -1
    assert len(data0) == len(expected) - 8 - 2 - 4


def test_consumer_group_member_metadata_record_bytes():
    key = cr.encode_record_key(5, {"group_id": "g", "member_id": "m"})
    assert key == b"\x00\x05" + _s16("g") + _s16("m")
    value = {"instance_id": None, "rack_id": "r", "client_id": "c", "client_host": "h",
             "subscribed_topic_names": ["a", "b"], "subscribed_topic_regex": None,
             "rebalance_timeout_ms": 5000, "server_assignor": "uniform",
             "classic_member_metadata": None}
    base = (b"\x00\x00" + b"\x00" + _cs("r") + _cs("c") + _cs("h") + b"\x03" + _cs("a")
            + _cs("b") + b"\x00" + struct.pack(">i", 5000) + _cs("uniform"))
    data = cr.encode_record_value(5, 0, value)
    assert data == base + b"\x00"  # no tagged fields
    assert cr.decode_record_value(5, data) == (0, value)
    # a member that joined with the classic protocol: tagged field 0,
    # a nullable struct (presence byte 1) inside a length-prefixed tag
    classic = {"session_timeout_ms": 45000,
               "supported_protocols": [{"name": "range", "metadata": b"\x00\x01"}]}
    struct_body = (struct.pack(">i", 45000) + b"\x02" + _cs("range") + b"\x03\x00\x01"
                   + b"\x00" + b"\x00")
    tag = b"\x01" + b"\x00" + bytes([1 + len(struct_body)]) + b"\x01" + struct_body
    data = cr.encode_record_value("ConsumerGroupMemberMetadata", 0,
                                  dict(value, classic_member_metadata=classic))
    assert data == base + tag
    assert cr.decode_record_value(5, data)[1]["classic_member_metadata"] == classic


def test_consumer_group_assignment_record_bytes():
    tid = bytes(range(16))
    value = {"member_epoch": 10, "previous_member_epoch": 9, "state": 1,
             "assigned_partitions": [{"topic_id": tid, "partitions": [0, 1]}],
             "partitions_pending_revocation": []}
    data = cr.encode_record_value(8, 0, value)
    assert data == (b"\x00\x00" + struct.pack(">iib", 10, 9, 1) + b"\x02" + tid + b"\x03"
                    + struct.pack(">ii", 0, 1) + b"\x00" + b"\x01" + b"\x00")
    assert cr.decode_record_value(8, data) == (0, value)
    key = cr.encode_record_key(8, {"group_id": "g", "member_id": "m"})
    assert cr.decode_record_key(key) == (8, {"group_id": "g", "member_id": "m"})
    meta = cr.encode_record_value(3, 0, {"epoch": 4})
    assert meta == b"\x00\x00" + struct.pack(">i", 4) + b"\x00"
    target = cr.encode_record_value(6, 0, {"assignment_epoch": 4})
    assert cr.decode_record_value(6, target) == (0, {"assignment_epoch": 4})


@pytest.mark.parametrize("record_type", sorted(cr.RECORD_TYPES))
def test_record_helpers_roundtrip(record_type):
    key_name, value_name = cr.RECORD_TYPES[record_type]
    key = Builder(record_type).build(SCHEMAS[key_name].fields)
    data = cr.encode_record_key(record_type, key)
    assert data[:2] == struct.pack(">h", record_type)
    assert cr.decode_record_key(data) == (record_type, key)
    sch = SCHEMAS[value_name]
    for v in range(sch.versions.low, sch.versions.high + 1):
        value = Builder(v).build(sch.fields)
        for ref in (record_type, value_name, value_name[:-len("Value")]):
            data = cr.encode_record_value(ref, v, value)
            assert data[:2] == struct.pack(">h", v)
            assert cr.decode_record_value(record_type, data) == (v, value)
    # tombstones
    assert cr.encode_record_value(record_type, 0, None) is None
    assert cr.decode_record_value(record_type, None) == (None, None)


def test_record_helper_errors():
    with pytest.raises(cr.UnknownRecordTypeError) as info:
        cr.decode_record_key(b"\x00\x09" + _s16("g"))  # 4.0's early-access share record
    assert info.value.record_type == 9
    assert isinstance(info.value, ProtocolError)
    with pytest.raises(ProtocolError):
        cr.decode_record_key(b"\x00")
    with pytest.raises(ProtocolError):
        cr.decode_record_key(b"\x00\x01" + _s16("g"))  # truncated key body
    with pytest.raises(ProtocolError):
        cr.encode_record_key(16, {"group_id": "g"})  # a streams record
    with pytest.raises(ProtocolError):
        cr.decode_record_value(1, b"\x00\x05" + bytes(30))  # OffsetCommitValue v5
    with pytest.raises(ProtocolError):
        cr.decode_record_value(3, b"\x00\x01\x00\x00\x00\x01\x00")
    with pytest.raises(ProtocolError):
        cr.decode_record_value(42, b"\x00\x00")
    with pytest.raises(ProtocolError):
        cr.encode_record_value("NoSuchRecord", 0, {})
    with pytest.raises(ProtocolError):
        cr.encode_record_value("GroupMetadataValue", 5, {})
    with pytest.raises(ProtocolError):
        cr.decode_record_value(2, b"\x00")
