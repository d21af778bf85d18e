"""api.error_response: the error answer of every (API, version), from the schema.

Each request is synthesized from its schema with two items in every array,
so an answer that loses an item, a key or an error code shows."""
from __future__ import annotations

import itertools

import pytest

from kcoord.protocol.api import (APIS, AUTH_OPS_NOT_REQUESTED, API_KEYS, error_response,
                                 response_defaults,
                                 request_codec, response_codec)
from kcoord.protocol.error_response import ERROR_FIELDS, ITEMS
from kcoord.protocol.errors import Err
from kcoord.protocol.schema import Field

CODE = Err.COORDINATOR_NOT_AVAILABLE


def _sample(fields: list[Field], v: int, counter) -> dict:
    out = {}
    for fd in fields:
        if v not in fd.versions:
            continue
        if fd.type == "{}":
            out[fd.name] = _sample(fd.fields, v, counter)
        elif fd.type == "[]":
            out[fd.name] = [_sample(fd.fields, v, counter) for _ in range(2)]
        elif fd.type.startswith("[]"):
            out[fd.name] = [_scalar(fd.type[2:], next(counter)) for _ in range(2)]
        else:
            out[fd.name] = _scalar(fd.type, next(counter))
    return out


def _scalar(t: str, n: int):
    if t == "bool":
        return True
    if t == "string":
        return f"s{n}"
    if t == "uuid":
        return bytes([n % 256]) * 16
    if t in ("bytes", "records"):
        return b"x"
    if t == "float64":
        return n + 0.5
    return n % 100 + 1


def _request(key: int, v: int) -> dict:
    """A decoded request (as a handler sees it) with two items per array."""
    encode, decode = request_codec(key, v)
    return decode(bytes(encode(_sample(APIS[key].request.fields, v, itertools.count()))), 0)[0]


def _wire(key: int, v: int, response: dict) -> dict:
    """The response as a client decodes it (the encoder filled the defaults)."""
    encode, decode = response_codec(key, v)
    return decode(bytes(encode(response)), 0)[0]


def _error_values(msg: dict, fields: list[Field], v: int, path: str = ""):
    for fd in fields:
        if v not in fd.versions:
            continue
        value = msg.get(fd.name)
        if fd.name in ERROR_FIELDS:
            yield path + fd.name, value
        elif fd.type == "[]" and value:
            for item in value:
                yield from _error_values(item, fd.fields, v, f"{path}{fd.name}[].")
        elif fd.type == "{}" and value:
            yield from _error_values(value, fd.fields, v, f"{path}{fd.name}.")


CASES = [(key, v) for key, api in sorted(APIS.items())
         for v in range(api.min_version, api.max_version + 1)]


@pytest.mark.parametrize("key,v", CASES, ids=[f"{APIS[k].name}-v{v}" for k, v in CASES])
def test_every_error_field_carries_the_code_and_the_answer_encodes(key, v):
    resp = _wire(key, v, error_response(key, v, _request(key, v), CODE))
    errors = list(_error_values(resp, APIS[key].response.fields, v))
    # an answer without any error code would tell the client nothing (Kafka's
    # DescribeLogDirs before v3 has nowhere to put one: it answers no log dirs)
    assert errors or (APIS[key].name, v < 3) == ("DescribeLogDirs", True), \
        f"{APIS[key].name} v{v}: no error code reaches the client"
    assert all(value == CODE for _, value in errors), errors


def _leaf_count(msg, items, v) -> int:
    if not items.versions[0] <= v <= items.versions[1] or msg.get(items.request) is None:
        return 0
    if not items.inner:
        return len(msg[items.request])
    return sum(_leaf_count(e, inner, v) for e in msg[items.request] for inner in items.inner)


@pytest.mark.parametrize("key,v", [(k, v) for k, v in CASES if APIS[k].name in ITEMS],
                         ids=[f"{APIS[k].name}-v{v}" for k, v in CASES if APIS[k].name in ITEMS])
def test_per_item_apis_answer_every_item_the_request_names(key, v):
    req = _request(key, v)
    name = APIS[key].name
    resp = _wire(key, v, error_response(key, v, req, CODE))
    asked = sum(_leaf_count(req, items, v) for items in ITEMS[name])
    if asked == 0:  # this version answers with its top-level error alone
        assert resp["error_code"] == CODE
        return
    item_errors = [p for p, _ in _error_values(resp, APIS[key].response.fields, v) if "[]" in p]
    # each requested leaf item is answered once (Kafka's per-item error answer)
    leaf_paths = {p for p in item_errors if p.count("[]") == max(q.count("[]") for q in item_errors)}
    assert len([p for p in item_errors if p in leaf_paths]) == asked


def test_consumer_group_heartbeat_keeps_the_schema_defaults():
    key = API_KEYS["ConsumerGroupHeartbeat"]
    resp = _wire(key, 1, error_response(key, 1, {"group_id": "g"}, Err.GROUP_AUTHORIZATION_FAILED,
                                        "denied"))
    # Kafka's getErrorResponse sets the code alone: member_epoch stays 0, not -1
    assert resp == {"throttle_time_ms": 0, "error_code": Err.GROUP_AUTHORIZATION_FAILED,
                    "error_message": "denied", "member_id": None, "member_epoch": 0,
                    "heartbeat_interval_ms": 0, "assignment": None}


def test_consumer_group_describe_answers_each_group():
    key = API_KEYS["ConsumerGroupDescribe"]
    resp = _wire(key, 0, error_response(key, 0, {"group_ids": ["a", "b"]}, Err.NOT_COORDINATOR))
    assert [(g["group_id"], g["error_code"], g["group_epoch"], g["authorized_operations"])
            for g in resp["groups"]] == [
        ("a", Err.NOT_COORDINATOR, 0, AUTH_OPS_NOT_REQUESTED),
        ("b", Err.NOT_COORDINATOR, 0, AUTH_OPS_NOT_REQUESTED)]


def test_produce_partition_errors_are_kafkas():
    key = API_KEYS["Produce"]
    req = {"acks": 1, "topic_data": [{"name": "t", "partition_data": [{"index": 3}]}]}
    part = _wire(key, 9, error_response(key, 9, req, Err.TOPIC_AUTHORIZATION_FAILED)
                 )["responses"][0]["partition_responses"][0]
    assert (part["index"], part["error_code"], part["base_offset"], part["log_append_time_ms"],
            part["log_start_offset"]) == (3, Err.TOPIC_AUTHORIZATION_FAILED, -1, -1, -1)


def test_find_coordinator_has_no_node_in_either_shape():
    key = API_KEYS["FindCoordinator"]
    old = _wire(key, 3, error_response(key, 3, {"key": "g"}, Err.COORDINATOR_NOT_AVAILABLE))
    assert (old["node_id"], old["host"], old["port"]) == (-1, "", -1)
    new = _wire(key, 4, error_response(key, 4, {"coordinator_keys": ["g"]},
                                       Err.COORDINATOR_NOT_AVAILABLE))
    assert [(c["key"], c["node_id"], c["port"]) for c in new["coordinators"]] == [("g", -1, -1)]


def test_offset_fetch_v1_answers_partitions_and_v2_the_top_level():
    key = API_KEYS["OffsetFetch"]
    req = {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0, 1]}]}
    v1 = _wire(key, 1, error_response(key, 1, req, Err.GROUP_AUTHORIZATION_FAILED))
    assert [(p["partition_index"], p["committed_offset"], p["error_code"])
            for p in v1["topics"][0]["partitions"]] == [
        (0, -1, Err.GROUP_AUTHORIZATION_FAILED), (1, -1, Err.GROUP_AUTHORIZATION_FAILED)]
    v2 = _wire(key, 2, error_response(key, 2, req, Err.GROUP_AUTHORIZATION_FAILED))
    assert v2["error_code"] == Err.GROUP_AUTHORIZATION_FAILED and v2["topics"] == []


def test_response_defaults_are_the_encoders_and_fresh_each_time():
    """A version-free core's answer (the classic JoinGroup error): every field
    the newest version has, as the encoder would fill it; lists not shared."""
    join = API_KEYS["JoinGroup"]
    first, second = response_defaults(join), response_defaults(join)
    assert first["members"] == [] and first["members"] is not second["members"]
    assert first["generation_id"] == -1 and first["protocol_type"] is None
    newest = APIS[join].response.versions.high
    assert _wire(join, newest, {"throttle_time_ms": 0}) == first
    assert set(response_defaults(join, 3)) == set(first) - {"protocol_type", "skip_assignment"}
