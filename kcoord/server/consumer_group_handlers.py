"""ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69): the KIP-848 APIs.

Served only when group.coordinator.rebalance.protocols contains "consumer"
(Kafka's isConsumerGroupProtocolEnabled); otherwise they are not advertised
and a request for them gets UNSUPPORTED_VERSION from the dispatcher.

The core learns the topics from here: every heartbeat carries the current
TopicMetadata (name -> (topic id, partitions), internal topics left out),
and a change in the catalogue (create, delete, add partitions) is pushed to
every loaded shard through `on_topics_changed`, so targets follow at once.
"""
from __future__ import annotations

import asyncio
import logging

from ..coordinator.consumer_group import TopicInfo
from ..protocol.errors import Err
from .coordinator_runtime import CoordinatorRuntime, wall_ms
from .dispatch import Dispatcher, RequestContext

log = logging.getLogger("kcoord.consumer_groups")

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
AUTH_OPS_NOT_REQUESTED = -(2**31)
SHARD_CACHE_MAX = 100_000  # group ids whose shard the heartbeat path remembers


def _client_host(ctx: RequestContext) -> str:
    # Kafka stores InetAddress.toString() of the peer: "/127.0.0.1"
    return "/" + ctx.client_host if ctx.client_host else ""


def _heartbeat_error(code: int, message: str | None = None) -> dict:
    return {"throttle_time_ms": 0, "error_code": int(code), "error_message": message,
            "member_id": None, "member_epoch": 0, "heartbeat_interval_ms": 0, "assignment": None}


class ConsumerGroupApi:
    def __init__(self, runtime: CoordinatorRuntime, catalogue, config) -> None:
        self.runtime = runtime
        self.catalogue = catalogue
        self.config = config
        self._topics: dict[str, TopicInfo] = {}
        self._topics_version: object = None
        self._shards: dict = {}  # group id -> its ShardRuntime (the heartbeat's cache)
        listeners = getattr(catalogue, "listeners", None)
        if listeners is not None and self.enabled:
            listeners.append(self._on_catalogue_change)

    @property
    def enabled(self) -> bool:
        protocols = self.config["group.coordinator.rebalance.protocols"]
        return "consumer" in [p.strip().lower() for p in protocols]

    def register(self, d: Dispatcher) -> None:
        if self.enabled:
            d.register(68, self.consumer_group_heartbeat)
            d.register(69, self.consumer_group_describe)
        else:  # Kafka answers UNSUPPORTED_VERSION and does not advertise them
            d.register(68, self._disabled_heartbeat)
            d.register(69, self._disabled_describe)
            d.hidden.update((68, 69))

    @staticmethod
    def _disabled_heartbeat(ctx: RequestContext, req: dict) -> dict:
        return _heartbeat_error(Err.UNSUPPORTED_VERSION)

    @staticmethod
    def _disabled_describe(ctx: RequestContext, req: dict) -> dict:
        return {"throttle_time_ms": 0, "groups": [
            {"error_code": Err.UNSUPPORTED_VERSION, "error_message": None, "group_id": g,
             "group_state": "", "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "",
             "members": [], "authorized_operations": AUTH_OPS_NOT_REQUESTED}
            for g in req["group_ids"]]}

    # ------------------------------------------------------------ topics
    def topic_metadata(self) -> dict[str, TopicInfo]:
        """The catalogue as TopicMetadata, rebuilt only when the catalogue changed."""
        version = getattr(self.catalogue, "version", None)
        if version is None or version != self._topics_version:
            self._topics = {name: TopicInfo(t.topic_id, len(t.partitions))
                            for name, t in self.catalogue.topics.items()
                            if name not in INTERNAL_TOPICS}
            self._topics_version = version
        return self._topics

    def _on_catalogue_change(self) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # not serving (a tool or a test using the catalogue)
            return
        topics = self.topic_metadata()
        now = wall_ms()
        for shard in self.runtime.shards:
            if not shard.loaded:
                continue
            try:
                result = shard.core.on_topics_changed(topics, now)
            except Exception:  # never let one shard break topic administration
                log.exception("shard %d: on_topics_changed failed", shard.index)
                continue
            # written (and so replayed) now: a heartbeat handled before a task ran
            # would compute from state that misses these records
            shard.write(result.records)
            shard.arm_timers(result.timers)

    # ------------------------------------------------------------ heartbeat
    def consumer_group_heartbeat(self, ctx: RequestContext, req: dict):
        """The response dict at once when the heartbeat wrote nothing and no
        write is in flight (a steady heartbeat); otherwise a coroutine that
        answers once the records are durable.

        Hot path (bench/consumer_heartbeat.py): an answer returned at once
        joins the other answers of the same read in one transport write
        (an awaited one costs a task and a write of its own), and the
        group's shard is remembered per group id (partition_for hashes the
        id in a Python loop)."""
        group_id = req["group_id"]
        shard = self._shards.get(group_id)
        if shard is None:
            if group_id:
                shard = self.runtime.shard_for(group_id)
                if len(self._shards) >= SHARD_CACHE_MAX:
                    self._shards.clear()
                self._shards[group_id] = shard
            else:  # the core answers INVALID_REQUEST
                shard = self.runtime.shards[0]
        if group_id and not shard.loaded:
            return _heartbeat_error(Err.COORDINATOR_LOAD_IN_PROGRESS)
        now = wall_ms()
        host = _client_host(ctx)
        steady = shard.core.consumer.steady_heartbeat(req, ctx.client_id or "", host, now,
                                                      self.topic_metadata())
        if steady is not None:  # a steady heartbeat: nothing to write
            response, timer = steady
            if timer is not None:
                shard.arm_timers((timer,))
            pending = shard.write(())  # the writes queued before it, if any
            if pending is None:
                return response
            return self._after(pending, response)
        token = object()
        result = shard.core.consumer_group_heartbeat(
            token, req, ctx.api_version, ctx.client_id, host, now, self.topic_metadata())
        fut = shard.write(result.records)
        if result.timers:
            shard.arm_timers(result.timers)
        if fut is None:
            return self._reply(result, token)
        return self._durable_reply(fut, result, token)

    @staticmethod
    def _reply(result, token) -> dict:
        for tok, response in result.replies:
            if tok is token:
                return response
        return _heartbeat_error(Err.UNKNOWN_SERVER_ERROR)

    @staticmethod
    async def _after(pending, response: dict) -> dict:
        try:
            await pending
        except Exception as exc:  # the append failed: the shard reloads from its log
            log.warning("consumer group heartbeat write failed: %s", exc)
            return _heartbeat_error(Err.COORDINATOR_NOT_AVAILABLE)
        return response

    async def _durable_reply(self, fut, result, token) -> dict:
        try:
            await fut
        except Exception as exc:  # the append failed: the shard reloads from its log
            log.warning("consumer group heartbeat write failed: %s", exc)
            return _heartbeat_error(Err.COORDINATOR_NOT_AVAILABLE)
        return self._reply(result, token)

    # ------------------------------------------------------------ describe
    async def consumer_group_describe(self, ctx: RequestContext, req: dict) -> dict:
        include = bool(req.get("include_authorized_operations"))
        groups = []
        for group_id in req["group_ids"]:
            if not group_id:
                groups.extend(self.runtime.shards[0].core.consumer_group_describe([group_id], include))
                continue
            shard = self.runtime.shard_for(group_id)
            if not shard.loaded:
                groups.append({"error_code": Err.COORDINATOR_LOAD_IN_PROGRESS, "error_message": None,
                               "group_id": group_id, "group_state": "", "group_epoch": 0,
                               "assignment_epoch": 0, "assignor_name": "", "members": [],
                               "authorized_operations": AUTH_OPS_NOT_REQUESTED})
                continue
            pending = shard.write([])  # answer from durable state only
            if pending is not None:
                try:
                    await pending
                except Exception:
                    pass
            groups.extend(shard.core.consumer_group_describe([group_id], include))
        return {"throttle_time_ms": 0, "groups": groups}
