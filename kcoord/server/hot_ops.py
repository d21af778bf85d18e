"""The core operations of the two hottest requests, a consumer's
OffsetCommit and a steady KIP-848 heartbeat, with the cached encodings of
their repeating answers: in the mypyc build (native/build.py), since
interpreted they were the largest part of the handler chain left between
the compiled network layer and the compiled core (bench instr_split)."""
from __future__ import annotations

from functools import partial
from typing import Any

from ..coordinator.result import Result
from ..protocol.api import API_KEYS, error_response, response_codec
from ..protocol.errors import Err
from ..coordinator.offsets import commit_answer
from ..protocol.commit_request import FlatCommit, FlatTopic, commit_dict
from .coordinator_state import ACTIVE
from .dispatch import Reply, RequestContext
from .fsync_rounds import FULL_BATCH_RECORDS
from ..protocol.coordinator_batch import encode_commit_records

OFFSET_COMMIT = API_KEYS["OffsetCommit"]
HEARTBEAT = API_KEYS["ConsumerGroupHeartbeat"]

COMMIT_BODIES_MAX = 10_000  # encoded OffsetCommit answers kept (one per version, topic, partitions)
# member id -> (epoch, heartbeat interval, version, the encoded answer): a
# steady heartbeat's answer (no error, no assignment) depends on those alone
# and repeats every heartbeat, so it is encoded once (a ninth of the steady
# heartbeat's server instructions were its encoding)
STEADY_BODIES_MAX = 50_000
_STEADY_BODIES: dict[str, tuple[int, int, int, bytes]] = {}
# (version, topic, partition count) -> the partition indexes of the last
# flat commit of that shape and its all-NONE answer, held by the error answer
# that fails it (flat_answer); the answer's bytes depend on those alone, so
# one cache serves every server in a process
_RECENT_BODIES: dict[tuple[int, str, int], tuple[tuple[int, ...], "FlatCommitError"]] = {}
_NO_RECORDS: list = []  # (never changed: ShardRuntime._queue only adds it to a batch)


def commit_request(handlers: Any, ctx: RequestContext, req: dict) -> Any:
    """GroupHandlers.offset_commit with the runtime's write path for it
    (CoordinatorRuntime.write, ShardRuntime.finish and _queue) inlined:
    interpreted, that chain was about a quarter of a commit's server
    instructions (bench instr_split).  Anything but the common case (the
    shard active, records to queue, no timers or replies) takes the
    runtime's own methods, so this is only a shortcut of them."""
    topics: list[dict] = req["topics"]
    # the catalogue's topics read directly (Catalogue.get, an interpreted call)
    known: dict = handlers.catalogue.topics
    # Kafka answers unknown topics before it asks the group coordinator
    # (GroupHandlers.mark_unknown_partitions)
    for t in topics:
        topic = known.get(t["name"])
        count = -1 if topic is None else len(topic.partitions)
        partitions: list[dict] = t["partitions"]  # (typed: mypyc's direct dict calls)
        for p in partitions:
            index: int = p["partition_index"]
            if not 0 <= index < count:
                p["error_code"] = Err.UNKNOWN_TOPIC_OR_PARTITION
    group_id = req["group_id"]
    version = ctx.api_version
    if not group_id:
        return handlers.commit_error(req, version, Err.INVALID_GROUP_ID)
    error = partial(commit_error, req, version)
    runtime = handlers.runtime
    bodies = handlers._commit_bodies
    cached: dict = runtime._partitions  # (typed: mypyc's direct dict get)
    shard_index = cached.get(group_id)
    if shard_index is None:
        shard_index = runtime.partition_for(group_id)
    shard = runtime.shards[shard_index]
    if shard.state is not ACTIVE or runtime.replicated:
        # not served here, or an append may be refused first (write_checked)
        return runtime.write_checked(group_id, commit_op, error, req, version,
                                     runtime.metrics, bodies)
    result = commit_op(shard.core, int(runtime._time() * 1000), req, version,
                       runtime.metrics, bodies)
    records = result.records
    if not records or result.timers or result.replies:
        return shard.finish(result, error, None)
    if type(records[0]) is not tuple:
        # a plain commit's records are all compact (record_codec.py), their
        # change already in memory: nothing to replay; the general path's
        # records are all generic
        shard.core.replay_emitted(records)
    return _queue_commit(shard, records, result.response, error)


def _queue_commit(shard: Any, records: list, response: Any, error: Any) -> Any:
    """Queue a commit's records in the shard's open round and wait for its
    answer there (ShardRuntime._queue): commit_request's and commit_flat's
    shared tail.  Compact records are queued encoded
    (encode_commit_records): their bytes are made now, while the commit is
    in the cache, and the records freed with it."""
    batch = shard._pending
    if batch is None:
        batch = shard._queue(_NO_RECORDS)  # a new batch, in the next round
    delta: int = batch.count
    encoded = encode_commit_records(records, delta)
    pending: list = batch.records
    if encoded is None:
        pending += records
    else:
        pending.append(encoded)
    count = delta + len(records)
    batch.count = count
    if count >= FULL_BATCH_RECORDS:
        shard.commit.filled()
    reply = Reply()
    waiters: list = batch.waiters
    waiters.append((reply, response, error, None))
    return reply


def release_waiters(waiters: list[tuple[Any, Any, Any, Any]], parked: dict,
                    parked_marker: object) -> None:
    """ShardRuntime.release's answers of a durable batch: entries of (reply,
    answer, error, replies to parked requests), answered last request first
    (fsync_rounds: a connection's answers then leave in one write).
    Compiled here: a round releases hundreds of commits, and the Replies'
    own methods are called directly."""
    for i in range(len(waiters) - 1, -1, -1):
        reply, answer, _, replies = waiters[i]
        if replies:
            for token, response in replies:
                if parked.pop(token, None) is not None and not token.done():
                    token.set_result(response)
        if answer is parked_marker:
            continue
        if isinstance(reply, Reply):
            if not reply.done():
                reply.set_result(answer)
        elif not reply.done():
            reply.set_result(answer)


def commit_flat(handlers: Any, ctx: RequestContext, flat: FlatCommit) -> Any:
    """commit_request for an OffsetCommit v8-v9 decoded flat
    (protocol/commit_request.py): the common case (every partition known,
    the shard active and not replicated, a consumer's plain commit taking
    every partition: CoordinatorShard.plain_commit) from the tuples, no
    dict per partition; anything else is commit_request of the request's
    dict, as the codec would have given it."""
    group_id, generation, member_id, instance_id, topics = flat
    known: dict = handlers.catalogue.topics
    for name, partitions in topics:
        topic = known.get(name)
        if topic is None:
            return commit_request(handlers, ctx, commit_dict(flat))
        count = len(topic.partitions)
        for p in partitions:
            index: int = p[0]
            if not 0 <= index < count:
                return commit_request(handlers, ctx, commit_dict(flat))
    runtime = handlers.runtime
    cached: dict = runtime._partitions  # (typed: mypyc's direct dict get)
    shard_index = cached.get(group_id)
    if shard_index is None:
        if not group_id:
            return commit_request(handlers, ctx, commit_dict(flat))
        shard_index = runtime.partition_for(group_id)
    shard = runtime.shards[shard_index]
    if shard.state is not ACTIVE or runtime.replicated:
        return commit_request(handlers, ctx, commit_dict(flat))
    version = ctx.api_version
    taken = shard.core.plain_commit(group_id, generation, member_id, instance_id, topics,
                                    version, int(runtime._time() * 1000))
    if taken is None:
        return commit_request(handlers, ctx, commit_dict(flat))
    result: Any = None
    if taken.__class__ is list:  # a simple group's: the records alone
        records: list = taken
    else:
        result = taken
        records = result.records
    metrics = runtime.metrics
    if metrics is not None:  # observe.events.ServerMetrics
        metrics.offsets_committed(len(records))
    # the answer and the error answer that fails it (one object per shape
    # of commit: not made per commit and kept alive until its round is durable)
    error = flat_answer(version, topics, handlers._commit_bodies)
    response = error.response
    if result is None:
        if not records:
            return shard.finish(Result(records, response=response), error, None)
    else:
        result.response = response
        if not records or result.timers or result.replies:
            return shard.finish(result, error, None)
    # (as commit_request: compact records, their change in memory)
    return _queue_commit(shard, records, response, error)


def commit_error(req: dict, version: int, code: int) -> dict:
    """error_response: every partition gets `code`, except those already
    refused (unknown topics), which keep their own."""
    out = error_response(OFFSET_COMMIT, version, req, code)
    for topic, answer in zip(req["topics"], out["topics"]):
        for p, pa in zip(topic["partitions"], answer["partitions"]):
            if "error_code" in p:
                pa["error_code"] = p["error_code"]
    return out


class FlatCommitError:
    """A flat commit's all-NONE answer (`response`: cached bytes, or a dict
    for several topics) and, called with a code, its error answer when the
    runtime fails the commit (rarely).  It names the same partitions as the
    request, so the request's tuples are freed with the commit instead of
    being held until its round is durable (and freed cold); for a one-topic
    commit it is made once per shape of commit (flat_answer), not per commit."""

    def __init__(self, version: int, response: Any) -> None:
        self.version = version
        self.response = response

    def __call__(self, code: int) -> dict:
        answer: Any = self.response
        if answer.__class__ is not dict:  # the encoded body
            answer = response_codec(OFFSET_COMMIT, self.version)[1](answer, 0)[0]
        topics: list[dict] = answer["topics"]
        req = {"topics": [{"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"]} for p in t["partitions"]]}
            for t in topics]}
        return commit_error(req, self.version, code)


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
    partitions: list[dict] = topic["partitions"]  # (typed: mypyc's direct dict calls)
    return all_none_body(version, topic["name"],
                         tuple([p["partition_index"] for p in partitions]), bodies)


def flat_body(version: int, topics: list[FlatTopic],
              bodies: dict[tuple[int, str, tuple[int, ...]], bytes]) -> Any:
    """commit_body of a flat request."""
    return flat_answer(version, topics, bodies).response


def flat_answer(version: int, topics: list[FlatTopic],
                bodies: dict[tuple[int, str, tuple[int, ...]], bytes]) -> FlatCommitError:
    """The all-NONE answer of a flat request (commit_body) in the error
    answer that fails it; the last of each (version, topic, partition count)
    is checked first, index by index (a consumer commits the same partitions
    again and again: no key tuple of its indexes made and hashed)."""
    if len(topics) != 1:
        return FlatCommitError(version, {"throttle_time_ms": 0, "topics": [
            {"name": name, "partitions": [{"partition_index": p[0], "error_code": 0}
                                          for p in partitions]}
            for name, partitions in topics]})
    name, partitions = topics[0]
    recent_key = (version, name, len(partitions))
    recent = _RECENT_BODIES.get(recent_key)
    if recent is not None:
        indexes: tuple[int, ...] = recent[0]
        i = 0
        for p in partitions:
            index: int = p[0]
            if index != indexes[i]:
                break
            i += 1
        else:
            return recent[1]
    indexes = tuple([p[0] for p in partitions])
    answer = FlatCommitError(version, all_none_body(version, name, indexes, bodies))
    if len(_RECENT_BODIES) >= COMMIT_BODIES_MAX:
        _RECENT_BODIES.clear()
    _RECENT_BODIES[recent_key] = (indexes, answer)
    return answer


def all_none_body(version: int, name: str, indexes: tuple[int, ...],
                  bodies: dict[tuple[int, str, tuple[int, ...]], bytes]) -> bytes:
    """The encoded all-NONE answer for one topic's partitions, cached per
    (version, topic, partition indexes)."""
    key = (version, name, indexes)
    body = bodies.get(key)
    if body is None:
        if len(bodies) >= COMMIT_BODIES_MAX:
            bodies.clear()
        response = {"throttle_time_ms": 0, "topics": [{"name": name, "partitions": [
            {"partition_index": index, "error_code": 0} for index in indexes]}]}
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
