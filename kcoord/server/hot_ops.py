"""The core operations of the two hottest requests, a consumer's
OffsetCommit and a steady KIP-848 heartbeat, with the cached encodings of
their repeating answers: in the mypyc build (native/build.py), since
interpreted they were the largest part of the handler chain left between
the compiled network layer and the compiled core (bench instr_split)."""
from __future__ import annotations

from typing import Any

from ..coordinator.result import Result
from ..protocol.api import API_KEYS, response_codec
from ..coordinator.offsets import commit_answer
from .dispatch import RequestContext

OFFSET_COMMIT = API_KEYS["OffsetCommit"]
HEARTBEAT = API_KEYS["ConsumerGroupHeartbeat"]

COMMIT_BODIES_MAX = 10_000  # encoded OffsetCommit answers kept (one per version, topic, partitions)
# member id -> (epoch, heartbeat interval, version, the encoded answer): a
# steady heartbeat's answer (no error, no assignment) depends on those alone
# and repeats every heartbeat, so it is encoded once (a ninth of the steady
# heartbeat's server instructions were its encoding)
STEADY_BODIES_MAX = 50_000
_STEADY_BODIES: dict[str, tuple[int, int, int, bytes]] = {}


def commit_op(core: Any, now: int, req: dict, version: int, metrics: Any,
              bodies: dict[tuple[int, str, tuple[int, ...]], bytes]) -> Result:
    """OffsetCommit on the group's core; the answer of a commit whose every
    partition was taken is all NONE: encoded once per (version, topic,
    partition indexes) in `bodies` for a one-topic commit."""
    result: Result = core.offset_commit(req, version, now, True)
    if metrics is not None:  # observe.events.ServerMetrics
        metrics.offsets_committed(len(result.records))
    if result.response is None:
        result.response = commit_body(version, req, bodies)
    return result


def commit_body(version: int, req: dict,
                bodies: dict[tuple[int, str, tuple[int, ...]], bytes]) -> Any:
    """The all-NONE answer of a commit whose every partition was taken:
    cached encoded bytes for a one-topic commit, else the dict."""
    topics: list[dict] = req["topics"]
    if len(topics) != 1:
        return {"throttle_time_ms": 0, "topics": commit_answer(topics, None)}
    topic = topics[0]
    key = (version, topic["name"], tuple([p["partition_index"] for p in topic["partitions"]]))
    body = bodies.get(key)
    if body is None:
        if len(bodies) >= COMMIT_BODIES_MAX:
            bodies.clear()
        response = {"throttle_time_ms": 0, "topics": commit_answer(topics, None)}
        body = bodies[key] = bytes(response_codec(OFFSET_COMMIT, version)[0](response, bytearray()))
    return body


def heartbeat_op(core: Any, now: int, req: dict, ctx: RequestContext, topics: Any) -> Any:
    """ConsumerGroupHeartbeat on the group's core: a steady heartbeat (a
    stable member, nothing to change) takes the core's shortcut (no record,
    the answer alone unless its session timer must be armed), its answer
    encoded once per member and epoch."""
    client_id = ctx.client_id
    host = "/" + ctx.client_host if ctx.client_host else ""  # as client_host(ctx)
    consumer = core.consumer
    # an authorizer: whose rights filter the member's regex
    principal = ((ctx.principal, ctx.client_host)
                 if consumer.config.topic_describable is not None else None)
    steady = consumer.steady_heartbeat(req, client_id or "", host, now, topics, principal)
    if steady is not None:
        if steady.__class__ is dict:
            return steady_body(ctx.api_version, steady)
        steady.response = steady_body(ctx.api_version, steady.response)
        return steady
    return core.consumer_group_heartbeat(req, ctx.api_version, client_id, host, now, topics,
                                         principal)


def steady_body(version: int, answer: dict) -> bytes:
    """The encoded body of steady_heartbeat's answer (cached per member)."""
    member_id: str = answer["member_id"]
    epoch: int = answer["member_epoch"]
    interval: int = answer["heartbeat_interval_ms"]
    cached = _STEADY_BODIES.get(member_id)
    if cached is not None and cached[0] == epoch and cached[1] == interval \
            and cached[2] == version:
        return cached[3]
    body = bytes(response_codec(HEARTBEAT, version)[0](answer, bytearray()))
    if len(_STEADY_BODIES) >= STEADY_BODIES_MAX:
        _STEADY_BODIES.clear()
    _STEADY_BODIES[member_id] = (epoch, interval, version, body)
    return body
