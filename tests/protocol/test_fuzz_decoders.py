"""Fuzz every kcoord decoder: malformed input may only raise ProtocolError.

Targets: the request and response decoder of every (API, version) in the
registry, the codec of every standalone schema version (consumer protocol,
__consumer_offsets records), and the hand-written version-prefixed
consumer-protocol helpers.  Inputs are (a) random bytes and (b) valid
encodings of randomly built messages with random mutations: byte flips,
"interesting" bytes, huge int32/varint lengths and counts written over the
message, insertions, deletions and truncations.  Decoding also starts at a
non-zero offset sometimes (decoders take `pos`).

Each decode must return or raise ProtocolError, never anything else, and
must finish quickly (a huge array count must fail fast, not allocate or
loop).  The (target, version) is drawn by hypothesis inside one test, so the
whole run stays at a few seconds.
"""
from __future__ import annotations

import random
import struct
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kcoord.protocol.api import APIS, SCHEMAS, request_codec, response_codec, schema_codec
from kcoord.protocol.errors import ProtocolError
from kcoord.protocol.schema import Field, Schema

FUZZ = settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW_DECODE_S = 1.0  # a single decode of < 1 KiB taking this long counts as a hang


def _targets():
    """(label, schema, version, codec factory, extra decoder or None)."""
    out = []
    for key, api in sorted(APIS.items()):
        for v in range(api.request.versions.low, api.request.versions.high + 1):
            out.append((f"{api.request.name} v{v}", api.request, v,
                        lambda k=key, v=v: request_codec(k, v)))
        for v in range(api.response.versions.low, api.response.versions.high + 1):
            out.append((f"{api.response.name} v{v}", api.response, v,
                        lambda k=key, v=v: response_codec(k, v)))
    for name, sch in sorted(SCHEMAS.items()):
        for v in range(sch.versions.low, sch.versions.high + 1):
            out.append((f"{name} v{v}", sch, v, lambda n=name, v=v: schema_codec(n, v)))
    return out


TARGETS = _targets()


def _helpers():
    """Hand-written decoders around the codecs (version-prefixed consumer protocol)."""
    try:
        from kcoord.protocol.messages import consumer_protocol as cp
    except ImportError:  # pragma: no cover - not written yet
        return []
    out = []
    for fname, sname in (("decode_subscription", "ConsumerProtocolSubscription"),
                         ("decode_assignment", "ConsumerProtocolAssignment")):
        fn = getattr(cp, fname, None)
        enc = getattr(cp, fname.replace("decode", "encode"), None)
        if fn is not None and sname in SCHEMAS:
            out.append((f"consumer_protocol.{fname}", SCHEMAS[sname], fn, enc))
    return out


HELPERS = _helpers()


# ---------------------------------------------------------------------------
# random valid messages
# ---------------------------------------------------------------------------
def _scalar(t: str, rng: random.Random):
    if t == "bool":
        return rng.random() < 0.5
    if t == "int8":
        return rng.randint(-128, 127)
    if t == "int16":
        return rng.randint(-32768, 32767)
    if t == "uint16":
        return rng.randint(0, 65535)
    if t == "int32":
        return rng.choice([0, -1, 1, 127, 128, 2**31 - 1, -2**31, rng.randint(-2**31, 2**31 - 1)])
    if t == "uint32":
        return rng.randint(0, 2**32 - 1)
    if t == "int64":
        return rng.choice([0, -1, 2**63 - 1, -2**63, rng.randint(-2**63, 2**63 - 1)])
    if t == "float64":
        return rng.uniform(-1e9, 1e9)
    if t == "string":
        return "".join(rng.choice("abcxyz-_.é") for _ in range(rng.choice([0, 1, 5, 130])))
    if t in ("bytes", "records"):
        return rng.randbytes(rng.choice([0, 1, 7, 200]))
    if t == "uuid":
        return rng.randbytes(16)
    raise AssertionError(t)


def random_message(fields: list[Field], v: int, flexible: bool, rng: random.Random,
                   depth: int = 0) -> dict:
    msg = {}
    for fd in fields:
        if v not in fd.versions:
            continue
        if fd.tag is not None and flexible and rng.random() < 0.3:
            continue  # leave the tagged field at its default (off the wire)
        if v in fd.nullable and rng.random() < 0.2:
            msg[fd.name] = None
        elif fd.type == "{}":
            msg[fd.name] = random_message(fd.fields, v, flexible, rng, depth + 1)
        elif fd.type == "[]":
            n = rng.choice([0, 1, 2, 3]) if depth < 3 else 0
            msg[fd.name] = [random_message(fd.fields, v, flexible, rng, depth + 1)
                            for _ in range(n)]
        elif fd.type.startswith("[]"):
            msg[fd.name] = [_scalar(fd.type[2:], rng) for _ in range(rng.choice([0, 1, 3]))]
        else:
            msg[fd.name] = _scalar(fd.type, rng)
    return msg


def valid_encoding(sch: Schema, v: int, encode, seed: int) -> bytes:
    rng = random.Random(seed)
    return bytes(encode(random_message(sch.fields, v, sch.is_flexible(v), rng)))


# ---------------------------------------------------------------------------
# mutations
# ---------------------------------------------------------------------------
HUGE = [struct.pack(">i", 0x7FFFFFFF), struct.pack(">i", -2), struct.pack(">I", 0x80000000),
        struct.pack(">h", 0x7FFF), struct.pack(">h", -2), b"\xff\xff\xff\xff\x0f",
        b"\xff\xff\xff\x7f", b"\x80\x80\x80\x80\x80\x80", b"\xfe\xff\xff\xff\x07"]
INTERESTING = [0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF]

mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(0, 255)),
    st.tuples(st.just("byte"), st.integers(0, 10**6), st.sampled_from(INTERESTING)),
    st.tuples(st.just("huge"), st.integers(0, 10**6), st.sampled_from(HUGE)),
    st.tuples(st.just("insert"), st.integers(0, 10**6), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("delete"), st.integers(0, 10**6), st.integers(1, 16)),
    st.tuples(st.just("truncate"), st.integers(0, 10**6), st.none()),
    st.tuples(st.just("append"), st.none(), st.binary(min_size=1, max_size=8)),
)


def mutate(data: bytes, ops) -> bytes:
    buf = bytearray(data)
    for op, at, arg in ops:
        n = len(buf)
        i = at % (n + 1) if at is not None else n
        if op == "flip" and n:
            buf[i % n] ^= arg or 1
        elif op == "byte" and n:
            buf[i % n] = arg
        elif op == "huge":
            buf[i:i + len(arg)] = arg
        elif op == "insert":
            buf[i:i] = arg
        elif op == "delete":
            del buf[i:i + arg]
        elif op == "truncate":
            del buf[i:]
        elif op == "append":
            buf += arg
    return bytes(buf)


# ---------------------------------------------------------------------------
# the check
# ---------------------------------------------------------------------------
def check_decode(label: str, decode, data: bytes, pos: int = 0) -> None:
    t0 = time.perf_counter()
    try:
        if pos:
            decode(data, pos)
        else:
            decode(data)
    except ProtocolError:
        pass
    except BaseException as exc:  # noqa: BLE001 - this is what we are looking for
        raise AssertionError(
            f"{label}: decoder raised {type(exc).__name__}: {exc!r} (not ProtocolError) "
            f"on {len(data)} bytes at pos {pos}: {data.hex()}") from exc
    elapsed = time.perf_counter() - t0
    assert elapsed < SLOW_DECODE_S, (
        f"{label}: decoding {len(data)} bytes took {elapsed:.2f}s (hang / huge count?): "
        f"{data.hex()}")


decoder_index = st.integers(0, max(len(TARGETS) - 1, 0))
prefix = st.one_of(st.just(b""), st.binary(min_size=1, max_size=4))


@FUZZ
@given(idx=decoder_index, data=st.binary(max_size=600),
       pre=prefix)
def test_random_bytes_raise_only_protocol_error(idx, data, pre):
    label, sch, v, codec = TARGETS[idx]
    _, decode = codec()
    check_decode(label, decode, pre + data, len(pre))


@FUZZ
@given(idx=decoder_index, seed=st.integers(0, 2**32 - 1),
       ops=st.lists(mutation, min_size=1, max_size=5), pre=prefix)
def test_mutated_valid_encodings_raise_only_protocol_error(idx, seed, ops, pre):
    label, sch, v, codec = TARGETS[idx]
    encode, decode = codec()
    valid = valid_encoding(sch, v, encode, seed)
    # the unmutated message must decode (sanity of the generator and codec)
    msg, end = decode(pre + valid, len(pre))
    assert end == len(pre) + len(valid), label
    check_decode(label, decode, pre + mutate(valid, ops), len(pre))


@FUZZ
@given(which=st.integers(0, max(len(HELPERS) - 1, 0)), seed=st.integers(0, 2**32 - 1),
       ops=st.lists(mutation, min_size=0, max_size=5), raw=st.binary(max_size=300),
       use_raw=st.booleans())
def test_consumer_protocol_helpers_raise_only_protocol_error(which, seed, ops, raw, use_raw):
    if not HELPERS:
        return
    label, sch, decode_fn, encode_fn = HELPERS[which]
    if use_raw or encode_fn is None:
        data = raw
    else:
        rng = random.Random(seed)
        v = rng.randint(sch.versions.low, sch.versions.high)
        valid = encode_fn(random_message(sch.fields, v, False, rng), v)
        data = mutate(valid, ops) if ops else valid

    t0 = time.perf_counter()
    try:
        decode_fn(data)
    except ProtocolError:
        pass
    except BaseException as exc:  # noqa: BLE001
        raise AssertionError(f"{label}: raised {type(exc).__name__}: {exc!r} on {data.hex()}") \
            from exc
    assert time.perf_counter() - t0 < SLOW_DECODE_S, f"{label}: slow on {data.hex()}"


def test_huge_counts_fail_fast():
    """Deterministic: a huge array/string/bytes count at every offset fails fast."""
    for label, sch, v, codec in TARGETS:
        encode, decode = codec()
        valid = valid_encoding(sch, v, encode, 1)
        for i in range(0, min(len(valid), 64)):
            for huge in HUGE:
                data = bytearray(valid)
                data[i:i + len(huge)] = huge
                check_decode(label, decode, bytes(data))
