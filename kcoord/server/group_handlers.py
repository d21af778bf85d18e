"""Group and offset APIs: route each group to its shard and run the core there.

Checks that need the rest of the broker (does a topic partition exist?) are
made here, so the core stays free of anything but its own state.
"""
from __future__ import annotations

import asyncio
import logging

from ..coordinator.classic_group import join_error, sync_response
from ..coordinator.result import Timer
from ..protocol.api import response_codec
from ..protocol.errors import Err
from .coordinator_runtime import CoordinatorRuntime, wall_ms
from .dispatch import Dispatcher, Reply, RequestContext

KEY_TYPE_GROUP = 0
PARKED_CHECK_S = 1.0  # how often a parked JoinGroup/SyncGroup checks its shard is still there
HEARTBEAT_SHARDS_MAX = 100_000  # group ids whose shard the heartbeat path remembers
COMMIT_BODIES_MAX = 10_000  # encoded OffsetCommit answers kept (one per version, topic, partitions)

log = logging.getLogger("kcoord.groups")


def _client_host(ctx: RequestContext) -> str:
    # Kafka stores InetAddress.toString() of the peer: "/127.0.0.1"
    return "/" + ctx.client_host if ctx.client_host else ""


def _join_for_version(resp: dict, version: int) -> dict:
    """JoinGroupResponse: ProtocolName is "" below v7 and null (never "") from v7."""
    name = resp.get("protocol_name")
    if version < 7:
        if name is None:
            resp = {**resp, "protocol_name": ""}
    elif name == "":
        resp = {**resp, "protocol_name": None}
    return resp


def _settle(fut: asyncio.Future, task: asyncio.Future) -> None:
    """Copy a finished task's outcome into `fut`."""
    if fut.done():
        return
    if task.cancelled():
        fut.cancel()
    elif task.exception() is not None:
        fut.set_exception(task.exception())
    else:
        fut.set_result(task.result())


class GroupHandlers:
    def __init__(self, runtime: CoordinatorRuntime, catalogue, config) -> None:
        self.runtime = runtime
        self.catalogue = catalogue
        self.config = config
        self._heartbeat_shards: dict = {}  # group id -> shard (see heartbeat)
        self._commit_bodies: dict = {}  # encoded all-NONE OffsetCommit answers (_commit_body)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._dispatcher: Dispatcher | None = None
        self._commit_batch: list | None = None  # commits waiting for one loop callback
        self._commit_calls: int | None = None  # dispatcher.calls at the last commit
        self.cluster = None  # cluster mode: kcoord/cluster/node.py routes groups

    def register(self, d: Dispatcher) -> None:
        self._dispatcher = d
        d.register(10, self.find_coordinator)
        d.register(8, self.offset_commit)
        d.register(9, self.offset_fetch)
        d.register(47, self.offset_delete)
        d.register(15, self.describe_groups)
        d.register(16, self.list_groups)
        d.register(42, self.delete_groups)
        from .consumer_group_handlers import ConsumerGroupApi  # KIP-848: APIs 68 and 69
        ConsumerGroupApi(self.runtime, self.catalogue, self.config).register(d)
        d.register(11, self.join_group)
        d.register(12, self.heartbeat)
        d.register(13, self.leave_group)
        d.register(14, self.sync_group)

    def _ready_shard(self, group_id: str):
        """(shard, error): the group's shard, or why it cannot answer yet."""
        shard = self.runtime.shard_for(group_id)
        if not shard.loaded:
            return None, Err.COORDINATOR_LOAD_IN_PROGRESS
        return shard, Err.NONE

    # ------------------------------------------------------ FindCoordinator
    def find_coordinator(self, ctx: RequestContext, req: dict) -> dict:
        host, port = self.config.advertised_for(ctx.listener)
        node = self.config["node.id"]

        def locate(key: str) -> dict:
            if self.cluster is not None:
                return self.cluster.find_coordinator(key, req.get("key_type", 0))
            if req.get("key_type", 0) != KEY_TYPE_GROUP:
                return {"key": key, "node_id": -1, "host": "", "port": -1,
                        "error_code": Err.COORDINATOR_NOT_AVAILABLE,
                        "error_message": "only group coordinators are served"}
            return {"key": key, "node_id": node, "host": host, "port": port,
                    "error_code": Err.NONE, "error_message": None}

        if ctx.api_version >= 4:
            return {"throttle_time_ms": 0,
                    "coordinators": [locate(k) for k in req["coordinator_keys"]]}
        found = locate(req["key"])
        return {"throttle_time_ms": 0, "error_code": found["error_code"],
                "error_message": found["error_message"], "node_id": found["node_id"],
                "host": found["host"], "port": found["port"]}

    # --------------------------------------------------------- OffsetCommit
    def _mark_unknown_partitions(self, topics: list[dict]) -> None:
        for t in topics:
            topic = self.catalogue.get(t["name"])
            count = -1 if topic is None else len(topic.partitions)
            for p in t["partitions"]:
                if not 0 <= p["partition_index"] < count:
                    p["error_code"] = Err.UNKNOWN_TOPIC_OR_PARTITION

    @staticmethod
    def _commit_error(req: dict, code: int) -> dict:
        """Every partition gets `code`, except those already refused (unknown topics)."""
        return {"throttle_time_ms": 0, "topics": [
            {"name": t["name"], "partitions": [
                {"partition_index": p["partition_index"], "error_code": p.get("error_code", code)}
                for p in t["partitions"]]} for t in req["topics"]]}

    def offset_commit(self, ctx: RequestContext, req: dict) -> Reply:
        """A Reply of the response, resolved once the commit's records are
        durable (by the group commit itself: no task, no future per request).

        The commit runs in a loop callback, not here: callbacks and the first
        steps of the tasks of other requests run in the order the requests
        were read, so a commit still sees the state every request read before
        it left (as when it was a coroutine).  Commits handed out one right
        after the other (no other request in between, dispatcher.calls) share
        one callback, which runs them in order."""
        reply = Reply()
        loop = self._loop
        if loop is None or not loop.is_running():
            loop = self._loop = asyncio.get_running_loop()
            self._commit_batch = None  # one left by a loop that stopped never runs
        d = self._dispatcher
        calls = d.calls if d is not None else None
        batch = self._commit_batch
        if batch is not None and calls is not None and calls == self._commit_calls + 1:
            batch.append((ctx, req, reply))
        else:
            batch = self._commit_batch = [(ctx, req, reply)]
            loop.call_soon(self._commit_all, batch)
        self._commit_calls = calls
        return reply

    def _commit_all(self, batch: list) -> None:
        if self._commit_batch is batch:
            self._commit_batch = None
        commit = self._commit
        for ctx, req, reply in batch:
            try:
                commit(ctx, req, reply)
            except Exception as exc:  # as when a handler raises: that connection closes
                if not reply.done():
                    reply.set_exception(exc)

    def _commit(self, ctx: RequestContext, req: dict, fut: Reply) -> None:
        try:
            # Kafka answers unknown topics before it asks the group coordinator
            self._mark_unknown_partitions(req["topics"])
            if not req["group_id"]:
                fut.set_result(self._commit_error(req, Err.INVALID_GROUP_ID))
                return
            shard, error = self._ready_shard(req["group_id"])
            if error:
                fut.set_result(self._commit_error(req, error))
                return
            response, result = shard.core.offset_commit_result(req, ctx.api_version, wall_ms())
            if shard.metrics is not None:
                shard.metrics.offsets_committed(len(result.records))
            if result.records and not result.replies:
                shard.write(result.records, self._commit_body(ctx.api_version, req, response,
                                                              len(result.records)), fut)
                if result.timers:  # a refreshed member session
                    shard.arm_timers(result.timers)
                return
        except Exception as exc:  # the connection closes, as when a handler raises
            fut.set_exception(exc)
            return
        task = asyncio.ensure_future(self._commit_after(shard, result, response))
        task.add_done_callback(lambda t: _settle(fut, t))

    def _commit_body(self, version: int, req: dict, response: dict, taken: int):
        """The response as cached encoded bytes when every partition of a
        one-topic commit was taken (each taken partition gives one record,
        so the answer is all NONE and depends only on the version, the
        topic and the partition indexes), else the response dict."""
        topics = req["topics"]
        if len(topics) != 1:
            return response
        topic = topics[0]
        partitions = topic["partitions"]
        if len(partitions) != taken:
            return response
        key = (version, topic["name"], tuple([p["partition_index"] for p in partitions]))
        body = self._commit_bodies.get(key)
        if body is None:
            if len(self._commit_bodies) >= COMMIT_BODIES_MAX:
                self._commit_bodies.clear()
            body = self._commit_bodies[key] = bytes(
                response_codec(8, version)[0](response, bytearray()))
        return body

    async def _commit_after(self, shard, result, response: dict) -> dict:
        await self._apply(shard, result)  # the records, and a refreshed member session
        return response

    # ---------------------------------------------------------- OffsetFetch
    def _fetch_group(self, group_id: str, topics, member_id: str | None = None,
                     member_epoch: int = -1):
        """(answer, pending write or None). The answer is read now, in request
        order; it is sent only once the writes it may show are durable."""
        if not group_id:
            return {"group_id": group_id, "topics": [], "error_code": Err.INVALID_GROUP_ID}, None
        shard, error = self._ready_shard(group_id)
        if error:
            return {"group_id": group_id, "topics": [], "error_code": error}, None
        code, out = shard.core.offset_fetch(group_id, topics, member_id, member_epoch)
        return {"group_id": group_id, "topics": out, "error_code": code}, shard.write([])

    @staticmethod
    async def _when_durable(pending: list) -> None:
        for fut in pending:
            if fut is not None:
                await fut

    async def offset_fetch(self, ctx: RequestContext, req: dict) -> dict:
        if ctx.api_version >= 8:
            answers = [self._fetch_group(g["group_id"], g["topics"], g.get("member_id"),
                                         g.get("member_epoch", -1)) for g in req["groups"]]
            await self._when_durable([p for _, p in answers])
            return {"throttle_time_ms": 0, "groups": [a for a, _ in answers]}
        topics = req["topics"]
        if ctx.api_version < 2 and not topics:
            topics = None if topics is None else []
        result, pending = self._fetch_group(req["group_id"], topics)
        await self._when_durable([pending])
        code = result["error_code"]
        out_topics = result["topics"]
        if code and ctx.api_version < 2:
            # v0-1 have no top-level error: report it on every requested partition
            out_topics = [{"name": t["name"], "partitions": [
                {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1,
                 "metadata": "", "error_code": code} for p in t["partition_indexes"]]}
                for t in (req["topics"] or [])]
        return {"throttle_time_ms": 0, "topics": out_topics, "error_code": code}

    # --------------------------------------------------------- OffsetDelete
    async def offset_delete(self, ctx: RequestContext, req: dict) -> dict:
        if not req["group_id"]:
            return {"error_code": Err.INVALID_GROUP_ID, "throttle_time_ms": 0, "topics": []}
        shard, error = self._ready_shard(req["group_id"])
        if error:
            return {"error_code": error, "throttle_time_ms": 0, "topics": []}
        self._mark_unknown_partitions(req["topics"])
        response, records = shard.core.offset_delete(req)
        fut = shard.write(records)
        if fut is not None:
            await fut
        return response

    # ------------------------------------------------------------ group admin
    async def list_groups(self, ctx: RequestContext, req: dict) -> dict:
        groups = []
        error = Err.NONE
        for shard in self.runtime.shards:
            if not shard.loaded:
                error = Err.COORDINATOR_LOAD_IN_PROGRESS
                continue
            groups.extend(shard.core.list_groups(req.get("states_filter") or [],
                                                 req.get("types_filter") or []))
        return {"throttle_time_ms": 0, "error_code": error, "groups": groups}

    async def delete_groups(self, ctx: RequestContext, req: dict) -> dict:
        results = []
        waits = []
        for group_id in req["groups_names"]:
            if not group_id:
                results.append({"group_id": group_id, "error_code": Err.INVALID_GROUP_ID})
                continue
            shard, error = self._ready_shard(group_id)
            if not error:
                error, records = shard.core.delete_group(group_id)
                fut = shard.write(records)
                if fut is not None:
                    waits.append(fut)
            results.append({"group_id": group_id, "error_code": error})
        for fut in waits:
            await fut
        return {"throttle_time_ms": 0, "results": results}

    async def describe_groups(self, ctx: RequestContext, req: dict) -> dict:
        groups = []
        waits = []
        for group_id in req["groups"]:
            shard, error = self._ready_shard(group_id)
            if error:
                groups.append({"error_code": error, "group_id": group_id, "group_state": "",
                               "protocol_type": "", "protocol_data": "", "members": [],
                               "authorized_operations": -(2**31)})
                continue
            groups.append(shard.core.describe_group(group_id))
            waits.append(shard.write([]))
        await self._when_durable(waits)
        return {"throttle_time_ms": 0, "groups": groups}

    # ---------------------------------------------------- classic membership
    @staticmethod
    async def _apply(shard, result) -> None:
        """Like ShardRuntime.apply, but always waits until the records (and any
        write queued before them) are durable, and raises if that failed."""
        fut = shard.write(result.records)
        shard.arm_timers(result.timers)
        try:
            if fut is not None:
                await fut
        except Exception as exc:
            for token, _ in result.replies:
                if isinstance(token, asyncio.Future) and not token.done():
                    token.set_exception(exc)
            raise
        for token, response in result.replies:
            if isinstance(token, asyncio.Future) and not token.done():
                token.set_result(response)

    async def _parked(self, shard, run, error_response, unloaded_response) -> dict:
        """Run a core handler that answers through a token, possibly much later
        (a JoinGroup waiting for the rebalance, a SyncGroup for the leader)."""
        token = asyncio.get_running_loop().create_future()
        core = shard.core
        result = run(token)
        try:
            await self._apply(shard, result)
            while True:
                done, _ = await asyncio.wait((token,), timeout=PARKED_CHECK_S)
                if done:
                    return token.result()
                if shard.core is not core:
                    # the shard reloaded after a failed write: requests parked in the
                    # old core are gone with it (Kafka: NOT_COORDINATOR on unload)
                    return unloaded_response
        except Exception as exc:  # the write failed: the shard is reloading
            log.warning("group write failed: %s", exc)
            if token.done() and not token.cancelled():
                token.exception()  # consumed here: this request answers with an error
            return error_response

    async def join_group(self, ctx: RequestContext, req: dict) -> dict:
        version = ctx.api_version
        group_id = req["group_id"]
        if group_id:
            shard, error = self._ready_shard(group_id)
            if error:
                return _join_for_version(join_error(error, req["member_id"]), version)
        else:  # the core answers INVALID_GROUP_ID
            shard = self.runtime.shards[0]
        resp = await self._parked(
            shard, lambda token: shard.core.join_group(
                req, version, ctx.client_id, _client_host(ctx), token, wall_ms()),
            join_error(Err.COORDINATOR_NOT_AVAILABLE, req["member_id"]),
            join_error(Err.NOT_COORDINATOR, req["member_id"]))
        return _join_for_version(resp, version)

    async def sync_group(self, ctx: RequestContext, req: dict) -> dict:
        group_id = req["group_id"]
        if ctx.api_version >= 5 and (req["protocol_type"] is None or req["protocol_name"] is None):
            return sync_response(Err.INCONSISTENT_GROUP_PROTOCOL)  # checked before anything else
        if group_id:
            shard, error = self._ready_shard(group_id)
            if error:
                return sync_response(error)
        else:
            shard = self.runtime.shards[0]
        return await self._parked(
            shard, lambda token: shard.core.sync_group(req, ctx.api_version, token, wall_ms()),
            sync_response(Err.COORDINATOR_NOT_AVAILABLE), sync_response(Err.NOT_COORDINATOR))

    def heartbeat(self, ctx: RequestContext, req: dict):
        """Answered at once unless writes are in flight (then after them).

        The hot path of a classic group (bench/classic_heartbeat.py):
        - the group's shard is remembered per group id (partition_for hashes
          the id in a Python loop);
        - the member's session timer is re-armed only if the runtime's armed
          handle for it would fire after the new deadline.  A handle that
          fires earlier is harmless: the core's on_timer re-arms a timer that
          fires before its current deadline.  So a member costs one timer
          firing per session timeout instead of a cancel and a call_later on
          every heartbeat."""
        group_id = req["group_id"]
        shard = self._heartbeat_shards.get(group_id)
        if shard is None:
            if not group_id:
                return {"throttle_time_ms": 0, "error_code": Err.INVALID_GROUP_ID}
            shard = self.runtime.shard_for(group_id)
            if len(self._heartbeat_shards) >= HEARTBEAT_SHARDS_MAX:
                self._heartbeat_shards.clear()
            self._heartbeat_shards[group_id] = shard
        if not shard.loaded:
            # Kafka answers a heartbeat to a loading coordinator with NONE
            return {"throttle_time_ms": 0, "error_code": Err.NONE}
        now = wall_ms()
        response, timer = shard.core.heartbeat_fast(req, ctx.api_version, now)
        if type(timer) is list:  # a classic member of a consumer group: its timers as given
            shard.arm_timers(timer)
        elif timer is not None:
            armed = getattr(shard, "_timers", None)  # ShardRuntime's live handles by key
            handle = armed.get(timer[0]) if armed else None
            if handle is None or handle.cancelled():
                shard.arm_timers((Timer(*timer),))
            else:
                loop = self._loop
                if loop is None or not loop.is_running():
                    loop = self._loop = asyncio.get_running_loop()
                if handle.when() > loop.time() + (timer[1] - now) / 1000.0:
                    shard.arm_timers((Timer(*timer),))
        pending = shard.write([])
        if pending is None:
            return response
        return self._after(pending, response)

    @staticmethod
    async def _after(pending, response: dict) -> dict:
        try:
            await pending
        except Exception:
            return {"throttle_time_ms": 0, "error_code": Err.COORDINATOR_NOT_AVAILABLE}
        return response

    async def leave_group(self, ctx: RequestContext, req: dict) -> dict:
        group_id = req["group_id"]
        if group_id:
            shard, error = self._ready_shard(group_id)
            if error:
                return {"throttle_time_ms": 0, "error_code": error, "members": []}
        else:
            shard = self.runtime.shards[0]
        response, result = shard.core.leave_group(req, ctx.api_version, wall_ms())
        try:
            await self._apply(shard, result)
        except Exception:
            return {"throttle_time_ms": 0, "error_code": Err.COORDINATOR_NOT_AVAILABLE,
                    "members": []}
        return response
