"""The codecs written ahead of time (codec_source.py, compiled by `make
native`) encode and decode exactly as the ones generated at import time
(codegen.py, the reference): every API and schema version, on random
messages, their encodings and mutated encodings."""
from __future__ import annotations

import random
import types

import pytest

from kcoord.protocol import api, codec_source
from kcoord.protocol.codegen import build_codec
from kcoord.protocol.errors import ProtocolError
from tests.protocol.test_fuzz_decoders import HUGE, mutate, random_message

MESSAGES = 4  # random messages per (schema, version)
MUTATIONS = 3  # mutated encodings of each


def _schemas():
    return {sch.name: sch for sch in codec_source.hot_schemas(None)}


def _source_table() -> dict:
    """The generated module for every schema, run as Python."""
    module = types.ModuleType("generated_codecs_under_test")
    exec(compile(codec_source.module_source(codec_source.hot_schemas(None)),
                 "<generated codecs>", "exec"), module.__dict__)
    return module.CODECS


def _outcome(decode, data: bytes):
    try:
        return decode(data, 0)
    except ProtocolError:
        return "ProtocolError"


def _differential(table: dict, schemas: dict) -> int:
    compared = 0
    for (name, version), ahead in sorted(table.items()):
        sch = schemas[name]
        ref_enc, ref_dec = build_codec(sch, version)
        enc, dec = build_codec(sch, version, ahead)
        rng = random.Random(f"{name}/{version}")
        for _ in range(MESSAGES):
            msg = random_message(sch.fields, version, sch.is_flexible(version), rng)
            data = bytes(ref_enc(msg))
            assert bytes(enc(msg)) == data, (name, version, msg)
            assert dec(data, 0) == ref_dec(data, 0), (name, version)
            for _ in range(MUTATIONS):
                kind = rng.choice(["flip", "truncate", "huge", "delete"])
                arg = {"flip": rng.randint(1, 255), "truncate": None,
                       "huge": rng.choice(HUGE), "delete": rng.randint(1, 8)}[kind]
                ops = [(kind, rng.randrange(len(data) + 1), arg)]
                bad = mutate(data, ops)
                assert _outcome(dec, bad) == _outcome(ref_dec, bad), (name, version, ops)
            compared += 1
    return compared


def test_generated_source_matches_import_time_codecs():
    """Every API and schema version, the generated module run as Python."""
    schemas = _schemas()
    table = _source_table()
    expected = {(s.name, v) for s in schemas.values()
                for v in range(s.versions.low, s.versions.high + 1)}
    assert set(table) == expected
    assert _differential(table, schemas) == len(expected) * MESSAGES


def test_compiled_codecs_match_import_time_codecs():
    """The compiled module of a `make native` build, as api.py uses it."""
    if not api._AHEAD:
        pytest.skip("no compiled codecs here (pure Python or no current build)")
    assert {k for k, _ in api._AHEAD} >= {api.APIS[8].request.name, api.APIS[12].request.name}
    assert _differential(api._AHEAD, _schemas()) == len(api._AHEAD) * MESSAGES


def test_hot_requests_use_the_compiled_codecs():
    if not api._AHEAD:
        pytest.skip("no compiled codecs here (pure Python or no current build)")
    for key in codec_source.HOT_APIS:
        version = api.APIS[key].max_version
        decode = api.request_codec(key, version)[1]
        assert decode.__self__.decoder is api._AHEAD[(api.APIS[key].request.name, version)][1]
