"""Byte-for-byte cross-check of kcoord's codecs against kafka-python and kio.

For every (API, version, request/response) in kcoord's registry that a peer
library also knows (kafka-python 3.0.12, kio 0.6.5), and for the embedded
consumer-protocol schemas:

1. build a populated message generically from kcoord's Schema: deterministic,
   distinct, non-default values per field (so that swapped fields show up),
   in two variants: "full" (2-element arrays, every tagged field set, no
   nulls) and "sparse" (1-element struct arrays, empty primitive arrays, null
   wherever the field is nullable in that version, tagged fields at their
   defaults so they are left off the wire), and "defaults" (like "full",
   but every tagged field explicitly set to Kafka's default value -- for a
   tagged struct, a struct of its fields' defaults -- which Kafka leaves
   off the wire);
2. encode it with kcoord;
3. decode kcoord's bytes with the peer library, and check that the peer sees
   the same message (field by field, by name: kafka-python names are Kafka's
   names in snake_case, kio drops "_ms" on the fields it types as
   timedelta/datetime);
4. re-encode that message with the peer library and require exactly
   kcoord's bytes;
5. decode the peer's bytes with kcoord and require the same dict.

Together 3+4 mean: given the same message, the peer produces exactly
kcoord's bytes.  Pure representation choices of the peers are mapped, not
ignored: kio's timedelta/datetime/ErrorCode/UUID(None for zero) and
kafka-python's authorized_operations bit sets (it renames the Metadata
fields and decodes them as sets of bits).  Every (API, version) a peer cannot
do is skipped with the specific reason.
"""
from __future__ import annotations

import dataclasses
import datetime
import enum
import importlib
import io
import pkgutil
import re
import uuid

import pytest

from kcoord.protocol.api import APIS, SCHEMAS, request_codec, response_codec, schema_codec
from kcoord.protocol.schema import ZERO_UUID, Field, Schema

kafka_protocol = pytest.importorskip("kafka.protocol")
pytest.importorskip("kio")

from kafka.protocol.api_data import ApiData  # noqa: E402
from kafka.protocol.api_message import ApiMessage  # noqa: E402
from kafka.protocol.schemas.fields.codecs import BitField  # noqa: E402
from kio.index import load_entity_schema  # noqa: E402
from kio.schema.index import api_key_map, schema_name_map  # noqa: E402
from kio.serial import entity_reader, entity_writer  # noqa: E402
from kio.static.constants import EntityType  # noqa: E402

VARIANTS = ("full", "sparse", "defaults")
LIBS = ("kafka-python", "kio")

# Standalone kcoord schemas that the peers also know.  The __consumer_offsets
# record keys/values are in neither kafka-python 3.0.12 nor kio 0.6.5.
STANDALONE = ("ConsumerProtocolSubscription", "ConsumerProtocolAssignment")


def snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


# ---------------------------------------------------------------------------
# sample messages
# ---------------------------------------------------------------------------
# Valid Kafka error codes (kio reads error codes into an enum of known codes).
ERROR_CODES = (3, 16, 25, 27, 15, 22, 29, 79, 87, 6, 14, 24, 30, 69)

# Values pinned for reasons of protocol semantics, not codec differences:
# a non-zero ApiVersionsResponse error code means "the body is v0" to
# kafka-python (as to Kafka's own client), so a populated v1+ body must
# carry error_code 0.
PINNED = {
    ("ApiVersionsResponse", "error_code"): 0,
}


class SampleBuilder:
    def __init__(self, sch: Schema, version: int, variant: str):
        self.sch = sch
        self.v = version
        self.flex = sch.is_flexible(version)
        self.variant = variant
        self.n = 0

    def build(self) -> dict:
        return self.struct(self.sch.fields, self.sch.name)

    def struct(self, fields: list[Field], path: str) -> dict:
        out = {}
        for fd in fields:
            if self.v in fd.versions:
                out[fd.name] = self.value(fd, f"{path}.{fd.name}")
        return out

    def value(self, fd: Field, path: str):
        self.n += 1
        n = self.n
        pinned = PINNED.get((self.sch.name, path.split(".", 1)[1]))
        if pinned is not None:
            return pinned
        sparse = self.variant == "sparse"
        if sparse and self.v in fd.nullable:
            return None
        if sparse and fd.tag is not None and self.flex:
            d = fd.default
            return list(d) if isinstance(d, tuple) else d
        if self.variant in ("defaults", "defaults_absent") and fd.tag is not None and self.flex:
            if fd.type == "{}" and fd.default is None:
                if self.variant == "defaults_absent":
                    return None  # kcoord's spelling of "not set"
                return default_struct(fd.fields, self.v)
            d = fd.default
            return list(d) if isinstance(d, tuple) else d
        t = fd.type
        if t == "{}":
            return self.struct(fd.fields, path)
        if t == "[]":
            return [self.struct(fd.fields, path) for _ in range(1 if sparse else 2)]
        if t.startswith("[]"):
            if sparse:
                return []
            et = t[2:]
            return [self.scalar(et, fd.name, n * 2), self.scalar(et, fd.name, n * 2 + 1)]
        val = self.scalar(t, fd.name, n)
        if val == fd.default and not isinstance(val, bool):
            val = self.scalar(t, fd.name, n + 7)
        elif val == fd.default:
            val = not val
        return val

    @staticmethod
    def scalar(t: str, name: str, n: int):
        if t == "bool":
            return bool(n % 2) or True
        if t == "int8":
            return n % 100 + 1
        if t == "int16":
            if name == "error_code" or name.endswith("_error_code"):
                return ERROR_CODES[n % len(ERROR_CODES)]
            return 1000 + n
        if t == "uint16":
            return 40000 + n
        if t == "int32":
            return 100_000 + n
        if t == "uint32":
            return 3_000_000_000 + n
        if t == "int64":
            return 1_600_000_000_000 + n  # also a sane millisecond timestamp
        if t == "float64":
            return n + 0.5
        if t == "string":
            return f"s{n}"
        if t in ("bytes", "records"):
            return bytes([n % 256, 0, 255]) + b"rec"
        if t == "uuid":
            return bytes((n * 7 + i + 1) % 256 for i in range(16))
        raise AssertionError(f"no sample for type {t}")


def default_struct(fields: list[Field], v: int) -> dict:
    """A struct whose fields all hold their defaults (Kafka's `new Struct()`)."""
    out = {}
    for fd in fields:
        if v in fd.versions:
            d = fd.default
            if fd.type == "{}" and d is None:
                d = default_struct(fd.fields, v)
            out[fd.name] = list(d) if isinstance(d, tuple) else d
    return out


def is_default_tagged_struct(fd: Field, val, v: int, flex: bool) -> bool:
    """A tagged struct equal to its default struct: absent on the wire.

    kcoord reads an absent tagged struct as None, kio as the default struct,
    kafka-python as None; all mean the same message."""
    return (flex and fd.tag is not None and fd.type == "{}" and isinstance(val, dict)
            and val == project(fd.fields, default_struct(fd.fields, v), v, flex))


def project(fields: list[Field], msg: dict, v: int, flex: bool) -> dict:
    """kcoord dict restricted to the fields present in version v."""
    out = {}
    for fd in fields:
        if v not in fd.versions:
            continue
        val = msg.get(fd.name, fd.default)
        if fd.type == "{}":
            if val is not None:
                val = project(fd.fields, val, v, flex)
                if is_default_tagged_struct(fd, val, v, flex):
                    val = None
        elif fd.type == "[]":
            if val is not None:
                val = [project(fd.fields, e, v, flex) for e in val]
        elif fd.type.startswith("[]"):
            if val is not None:
                val = list(val)
        elif isinstance(val, (bytearray, memoryview)):
            val = bytes(val)
        out[fd.name] = val
    return out


# ---------------------------------------------------------------------------
# peer value normalization
# ---------------------------------------------------------------------------
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_MS = datetime.timedelta(milliseconds=1)


def plain(val, kf: Field | None = None):
    """A peer's primitive value as kcoord represents it."""
    if val is None:
        if kf is not None and kf.type == "uuid":
            return ZERO_UUID  # kio reads the zero UUID as None
        return None
    if isinstance(val, bool):
        return val
    if isinstance(val, enum.Enum):
        return val.value
    if isinstance(val, int):
        return int(val)
    if isinstance(val, float):
        return float(val)
    if isinstance(val, str):
        return str(val)
    if isinstance(val, (bytes, bytearray, memoryview)):
        return bytes(val)
    if isinstance(val, uuid.UUID):
        return val.bytes
    if isinstance(val, datetime.datetime):
        return (val - _EPOCH) // _MS
    if isinstance(val, datetime.timedelta):
        return val // _MS
    if isinstance(val, (list, tuple)):
        return [plain(x) for x in val]
    return val


def _kp_field_map(kfields: list[Field], v: int, lib_names: list[str]) -> dict[str, str]:
    present = [fd.name for fd in kfields if v in fd.versions]
    mapping = {}
    for ln in lib_names:
        if ln in present:
            mapping[ln] = ln
        else:
            # kafka-python renames Metadata's cluster_/topic_authorized_operations
            cands = [p for p in present if p.endswith("_" + ln) and p not in lib_names]
            if len(cands) == 1:
                mapping[ln] = cands[0]
    return mapping


def kp_to_dict(obj, kfields: list[Field], v: int, flex: bool) -> dict:
    lib_fields = [f for f in obj._struct._fields if f.for_version_q(v)]
    names = [snake(f._name) for f in lib_fields]
    mapping = _kp_field_map(kfields, v, names)
    kby = {fd.name: fd for fd in kfields if v in fd.versions}
    out = {}
    for f, ln in zip(lib_fields, names):
        kname = mapping.get(ln)
        kf = kby.get(kname)
        val = getattr(obj, f.name)
        key = kname if kf is not None else f"<kafka-python only: {f.name}>"
        if kf is not None and kf.type == "{}":
            out[key] = None if val is None else kp_to_dict(val, kf.fields, v, flex)
            if is_default_tagged_struct(kf, out[key], v, flex):
                out[key] = None
        elif kf is not None and kf.type == "[]":
            out[key] = None if val is None else [kp_to_dict(e, kf.fields, v, flex) for e in val]
        elif f.type_str == "bitfield":
            # kafka-python decodes authorized operations as a set of bit numbers
            if val is None:
                val = {31}
            bits = BitField.to_32_bit_field(val)
            out[key] = bits - (1 << 32) if bits >= 1 << 31 else bits
        else:
            out[key] = plain(val, kf)
    return out


def kio_to_dict(obj, kfields: list[Field], v: int, flex: bool) -> dict:
    kby = {fd.name: fd for fd in kfields if v in fd.versions}
    out = {}
    for f in dataclasses.fields(obj):
        name = f.name
        if name not in kby and name + "_ms" in kby:
            name += "_ms"  # kio types *Ms fields as timedelta/datetime and drops the suffix
        kf = kby.get(name)
        val = getattr(obj, f.name)
        key = name if kf is not None else f"<kio only: {f.name}>"
        if kf is not None and kf.type == "{}":
            out[key] = None if val is None else kio_to_dict(val, kf.fields, v, flex)
            if is_default_tagged_struct(kf, out[key], v, flex):
                out[key] = None
        elif kf is not None and kf.type == "[]":
            out[key] = None if val is None else [kio_to_dict(e, kf.fields, v, flex) for e in val]
        else:
            out[key] = plain(val, kf)
    return out


def diff(a, b, path="") -> list[str]:
    """Differences between kcoord's (a) and the peer's (b) view of a message."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in a:
            if k not in b:
                out.append(f"{path}.{k}: missing in peer (kcoord={a[k]!r})")
        for k in b:
            if k not in a:
                out.append(f"{path}.{k}: only in peer (value {b[k]!r})")
        for k in a:
            if k in b:
                out.extend(diff(a[k], b[k], f"{path}.{k}"))
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        out = []
        for i, (x, y) in enumerate(zip(a, b)):
            out.extend(diff(x, y, f"{path}[{i}]"))
        return out
    if a != b or type(a) is not type(b) and not (
            isinstance(a, (int, float)) and isinstance(b, (int, float))
            and isinstance(a, bool) == isinstance(b, bool)):
        return [f"{path}: kcoord={a!r} peer={b!r}"]
    return []


def hexdiff(a: bytes, b: bytes) -> str:
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    lo = max(0, i - 8)
    return (f"lengths kcoord={len(a)} peer={len(b)}, first difference at byte {i}: "
            f"kcoord[{lo}:]={a[lo:i + 24].hex(' ')} peer[{lo}:]={b[lo:i + 24].hex(' ')}\n"
            f"    kcoord={a.hex()}\n    peer  ={b.hex()}")


# ---------------------------------------------------------------------------
# peer adapters
# ---------------------------------------------------------------------------
def _kafka_python_classes():
    for mod in pkgutil.walk_packages(kafka_protocol.__path__, "kafka.protocol."):
        try:
            importlib.import_module(mod.name)
        except Exception:  # pragma: no cover - optional modules of the peer
            pass
    found = {}

    def walk(cls):
        for sub in cls.__subclasses__():
            if getattr(sub, "_class_version", None) is None and getattr(sub, "_json", None):
                found.setdefault((sub.API_KEY, sub.type), sub)
            walk(sub)

    walk(ApiMessage)
    from kafka.protocol.consumer.metadata import (ConsumerProtocolAssignment,
                                                  ConsumerProtocolSubscription)
    found[("ConsumerProtocolSubscription", "data")] = ConsumerProtocolSubscription
    found[("ConsumerProtocolAssignment", "data")] = ConsumerProtocolAssignment
    return found


KP_CLASSES = _kafka_python_classes()


class KafkaPython:
    name = "kafka-python"

    @staticmethod
    def lookup(target, direction, version):
        """(class, None) or (None, reason to skip)."""
        cls = KP_CLASSES.get((target, direction))
        label = target if isinstance(target, str) else f"api key {target}"
        if cls is None:
            return None, f"kafka-python 3.0.12 has no class for {label} {direction}"
        lo, hi = cls._valid_versions
        if not lo <= version <= hi:
            why = "Kafka 4.0 removed it" if version < lo else "newer than its schema"
            return None, (f"kafka-python 3.0.12's JSON-based {cls.__name__} knows v{lo}-{hi} "
                          f"only, not v{version} ({why})")
        return cls, None

    @staticmethod
    def decode(cls, data: bytes, version: int):
        if issubclass(cls, ApiData):
            return cls.decode(data, version=version, header=False)
        obj = cls.decode(data, version=version)
        # kafka-python leaves the _header slot of a decoded message unset, so
        # an encode(version=...) (DeleteTopicsRequest.encode always passes
        # one) dies with AttributeError; a freshly built message has None.
        if getattr(obj, "_header", None) is None:
            obj._header = None
        return obj

    @staticmethod
    def encode(obj, version: int) -> bytes:
        if isinstance(obj, ApiData):
            return bytes(obj.encode(version=version, header=False))
        return bytes(obj.encode())  # version comes from decode

    to_dict = staticmethod(kp_to_dict)


class Kio:
    name = "kio"

    @staticmethod
    def lookup(target, direction, version):
        if isinstance(target, str):
            sname = snake(target)
            etype = EntityType.data
        else:
            sname = api_key_map.get(target)
            if sname is None:
                return None, f"kio 0.6.5 has no schema for api key {target}"
            etype = EntityType.request if direction == "request" else EntityType.response
        versions = schema_name_map.get(sname)
        if not versions:
            return None, f"kio 0.6.5 has no schema {sname}"
        if version not in versions or etype not in versions[version]:
            why = "Kafka 4.0 removed it" if version < min(versions) else "newer than its schema"
            return None, (f"kio 0.6.5 knows {sname} v{min(versions)}-{max(versions)} only, "
                          f"not v{version} ({why})")
        return load_entity_schema(sname, version, etype), None

    @staticmethod
    def decode(cls, data: bytes, version: int):
        obj, size = entity_reader(cls)(data, 0)
        if size != len(data):
            raise AssertionError(f"kio consumed {size} of {len(data)} bytes")
        return obj

    @staticmethod
    def encode(obj, version: int) -> bytes:
        buf = io.BytesIO()
        entity_writer(type(obj))(buf, obj)
        return buf.getvalue()

    to_dict = staticmethod(kio_to_dict)


def _kafka_python_legacy_classes():
    """kafka-python's hand-written pre-JSON definitions (kafka.protocol.old)."""
    import kafka.protocol.old as old
    from kafka.protocol.old.api import Request, Response
    for mod in pkgutil.walk_packages(old.__path__, "kafka.protocol.old."):
        try:
            importlib.import_module(mod.name)
        except Exception:  # pragma: no cover
            pass
    found = {}

    def walk(cls, direction):
        for sub in cls.__subclasses__():
            if isinstance(getattr(sub, "API_VERSION", None), int) and isinstance(
                    getattr(sub, "API_KEY", None), int):
                found.setdefault((sub.API_KEY, direction, sub.API_VERSION), sub)
            walk(sub, direction)

    walk(Request, "request")
    walk(Response, "response")
    return found


KP_LEGACY_CLASSES = _kafka_python_legacy_classes()


def legacy_to_dict(values, schema, kfields: list[Field], v: int, flex: bool) -> dict:
    """A kafka.protocol.old Struct (or nested positional tuple) as a kcoord dict."""
    from kafka.protocol.old.types import Array, Schema as OldSchema, TaggedFields
    kby = {fd.name: fd for fd in kfields if v in fd.versions}
    if not isinstance(values, (list, tuple)):
        values = [getattr(values, name) for name in schema.names]
    out = {}
    for name, ftype, val in zip(schema.names, schema.fields, values):
        if ftype is TaggedFields:
            continue
        kf = kby.get(name)
        key = name if kf is not None else f"<kafka-python legacy only: {name}>"
        if isinstance(ftype, Array) and isinstance(ftype.array_of, OldSchema):
            out[key] = None if val is None else [
                legacy_to_dict(e, ftype.array_of, kf.fields if kf else [], v, flex) for e in val]
        elif isinstance(ftype, OldSchema):
            out[key] = None if val is None else legacy_to_dict(
                val, ftype, kf.fields if kf else [], v, flex)
        else:
            out[key] = plain(val, kf)
    return out


class KafkaPythonLegacy:
    """Fallback for versions kafka-python's JSON-based classes no longer know
    (Kafka 4.0 dropped them): its hand-written kafka.protocol.old classes."""
    name = "kafka-python"

    @staticmethod
    def lookup(target, direction, version):
        cls = KP_LEGACY_CLASSES.get((target, direction, version))
        if cls is None:
            return None, "no kafka.protocol.old class either"
        return cls, None

    @staticmethod
    def decode(cls, data: bytes, version: int):
        stream = io.BytesIO(data)
        obj = cls(*cls.SCHEMA.decode(stream))
        if stream.tell() != len(data):
            raise AssertionError(f"consumed {stream.tell()} of {len(data)} bytes")
        return obj

    @staticmethod
    def encode(obj, version: int) -> bytes:
        return bytes(obj.encode())

    @staticmethod
    def to_dict(obj, kfields, v, flex):
        return legacy_to_dict(obj, obj.SCHEMA, kfields, v, flex)


class KafkaPythonAny:
    """kafka-python: its JSON-based classes, else its legacy classes."""
    name = "kafka-python"

    @staticmethod
    def pick(target, direction, version):
        cls, reason = KafkaPython.lookup(target, direction, version)
        if cls is not None:
            return KafkaPython, cls, None
        if isinstance(target, int):
            lcls, lreason = KafkaPythonLegacy.lookup(target, direction, version)
            if lcls is not None:
                return KafkaPythonLegacy, lcls, None
            reason = f"{reason}, and {lreason}"
        return None, None, reason


PEERS = {"kafka-python": KafkaPythonAny, "kio": Kio}


def resolve_peer(lib, target, direction, version):
    """(adapter, class, None) or (None, None, reason)."""
    if lib == "kafka-python":
        return KafkaPythonAny.pick(target, direction, version)
    cls, reason = Kio.lookup(target, direction, version)
    return (Kio, cls, None) if cls is not None else (None, None, reason)


# ---------------------------------------------------------------------------
# cases
# ---------------------------------------------------------------------------
def _targets():
    """(target, direction, schema, codec factory, label) for every kcoord message."""
    out = []
    for key, api in sorted(APIS.items()):
        out.append((key, "request", api.request, lambda v, k=key: request_codec(k, v)))
        out.append((key, "response", api.response, lambda v, k=key: response_codec(k, v)))
    for name in STANDALONE:
        if name in SCHEMAS:
            out.append((name, "data", SCHEMAS[name], lambda v, n=name: schema_codec(n, v)))
    return out


TARGETS = _targets()
CODECS = {(t, d): (sch, codec) for t, d, sch, codec in TARGETS}


def _cases():
    cases = []
    for target, direction, sch, _ in TARGETS:
        for v in range(sch.versions.low, sch.versions.high + 1):
            for lib in PEERS:
                _, _, reason = resolve_peer(lib, target, direction, v)
                marks = [pytest.mark.skip(reason=f"{sch.name} v{v}: {reason}")] if reason else []
                cases.append(pytest.param(lib, target, direction, v, marks=marks,
                                          id=f"{lib}-{sch.name}-v{v}"))
    return cases


@pytest.mark.parametrize("lib,target,direction,version", _cases())
def test_bytes_match_peer(lib, target, direction, version):
    sch, codec = CODECS[(target, direction)]
    encode, decode = codec(version)
    peer, cls, reason = resolve_peer(lib, target, direction, version)
    assert cls is not None, reason
    if peer is KafkaPythonLegacy:
        lib = "kafka-python (legacy kafka.protocol.old)"
    problems: list[str] = []
    for variant in VARIANTS:
        tag = f"[{variant}]"
        msg = SampleBuilder(sch, version, variant).build()
        kb = bytes(encode(msg))
        kdict, end = decode(kb)
        flex = sch.is_flexible(version)
        expected = project(sch.fields, msg, version, flex)
        if end != len(kb):
            problems.append(f"{tag} kcoord decoded {end} of its own {len(kb)} bytes")
        own = diff(expected, project(sch.fields, kdict, version, flex))
        if own:
            problems.append(f"{tag} kcoord does not round-trip its own encoding:\n    "
                            + "\n    ".join(own))
        try:
            obj = peer.decode(cls, kb, version)
        except Exception as exc:  # the peer rejects kcoord's bytes
            problems.append(f"{tag} {lib} cannot decode kcoord's bytes: {exc!r}\n"
                            f"    kcoord={kb.hex()}")
            continue
        seen = diff(expected, peer.to_dict(obj, sch.fields, version, flex))
        if seen:
            problems.append(f"{tag} {lib} reads kcoord's bytes as a different message:\n    "
                            + "\n    ".join(seen))
        try:
            lb = peer.encode(obj, version)
        except Exception as exc:
            problems.append(f"{tag} {lib} cannot re-encode the message: {exc!r}")
            continue
        if lb != kb:
            hint = ""
            if variant == "defaults":
                hint = ("\n    (in this variant every tagged field holds Kafka's default value; "
                        "Kafka's generated Java code and kio leave such fields off the wire, "
                        "for a tagged struct when it equals `new Struct()`; see "
                        "test_tagged_struct_at_default_is_left_off_the_wire)")
            problems.append(f"{tag} {lib} encodes the same message differently: "
                            f"{hexdiff(kb, lb)}{hint}")
            try:
                back, end = decode(lb)
            except Exception as exc:
                problems.append(f"{tag} kcoord cannot decode {lib}'s bytes: {exc!r}")
                continue
            back_diff = diff(expected, project(sch.fields, back, version, flex))
            if end != len(lb):
                back_diff.append(f"consumed {end} of {len(lb)} bytes")
            if back_diff:
                problems.append(f"{tag} kcoord decodes {lib}'s bytes to a different message:\n    "
                                + "\n    ".join(back_diff))
        else:
            back, end = decode(lb)
            assert end == len(lb)
    assert not problems, f"{sch.name} v{version} vs {lib}:\n  " + "\n  ".join(problems)


def test_samples_are_populated():
    """The sample builder really sets non-default values everywhere (full variant)."""
    for target, direction, sch, _ in TARGETS:
        for v in (sch.versions.low, sch.versions.high):
            msg = SampleBuilder(sch, v, "full").build()

            def check(fields, m, path):
                for fd in fields:
                    if v not in fd.versions:
                        continue
                    val = m[fd.name]
                    if (sch.name, fd.name) in PINNED and path == sch.name:
                        continue
                    assert val is not None, f"{path}.{fd.name}"
                    if fd.type == "[]":
                        assert len(val) == 2
                        for e in val:
                            check(fd.fields, e, f"{path}.{fd.name}")
                    elif fd.type == "{}":
                        check(fd.fields, val, f"{path}.{fd.name}")
                    else:
                        assert val != fd.default or fd.type.startswith("[]"), f"{path}.{fd.name}"

            check(sch.fields, msg, sch.name)


def _tagged_struct_paths(fields: list[Field], v: int, path: str) -> list[str]:
    out = []
    for fd in fields:
        if v not in fd.versions or fd.fields is None:
            continue
        if fd.tag is not None and fd.type == "{}":
            out.append(f"{path}.{fd.name} (tag {fd.tag})")
        out.extend(_tagged_struct_paths(fd.fields, v, f"{path}.{fd.name}"))
    return out


def _tagged_struct_cases():
    cases = []
    for target, direction, sch, _ in TARGETS:
        for v in range(sch.versions.low, sch.versions.high + 1):
            if sch.is_flexible(v) and _tagged_struct_paths(sch.fields, v, sch.name):
                cases.append(pytest.param(target, direction, v, id=f"{sch.name}-v{v}"))
    return cases


@pytest.mark.parametrize("target,direction,version", _tagged_struct_cases())
def test_tagged_struct_at_default_is_left_off_the_wire(target, direction, version):
    """A tagged struct equal to its default struct is not written.

    Kafka's generated Java writes a tagged struct field only when
    `!field.equals(new Struct())` (e.g. FetchResponseData: `if
    (!this.currentLeader.equals(new LeaderIdAndEpoch()))`), and kio does the
    same, so a message whose tagged structs hold their defaults must encode
    exactly like one without them.
    """
    sch, codec = CODECS[(target, direction)]
    encode, _ = codec(version)
    with_defaults = bytes(encode(SampleBuilder(sch, version, "defaults").build()))
    without = bytes(encode(SampleBuilder(sch, version, "defaults_absent").build()))
    assert with_defaults == without, (
        f"{sch.name} v{version}: kcoord writes tagged struct fields that equal their default "
        f"struct (Kafka and kio leave them off the wire): "
        f"{', '.join(_tagged_struct_paths(sch.fields, version, sch.name))}\n  "
        + hexdiff(without, with_defaults).replace("peer", "with default structs"))
