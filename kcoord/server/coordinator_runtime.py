"""The runtime that drives the deterministic coordinator core.

Per shard (one __consumer_offsets partition): load by replaying the log
(shard_loader.py), then for each core result replay its records, group them with every other
result of the same loop iteration into one batch, append and fsync that
batch once, and only then release the replies.  A reply never shows state
that is not yet durable: a result without records waits for the writes
queued before it.  Timers are data from the core, armed on the loop here.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

from ..coordinator.partitioner import partition_for
from ..coordinator.result import Record, Result
from ..coordinator.shard import CoordinatorConfig, CoordinatorShard
from ..log import PartitionLog
from ..log.compaction import compact
from ..protocol.messages.coordinator_records import encode_record_key, encode_record_value
from ..protocol.records import build_batch
from .record_codec import _KEY_CODECS, _VALUE_CODECS, _key_codec, _value_codec, decode_record  # noqa: F401
from .shard_loader import ShardLoader

log = logging.getLogger("kcoord.coordinator")

OFFSETS_TOPIC = "__consumer_offsets"


def wall_ms() -> int:
    return int(time.time() * 1000)


def encode_record(record: Record) -> tuple[bytes, bytes | None]:
    kc = _KEY_CODECS.get(record.type) or _key_codec(record.type)
    if kc is None:
        return encode_record_key(record.type, record.key), None  # raises
    key = kc[0] + kc[1](record.key)
    if record.value is None:
        return key, None
    vc = (_VALUE_CODECS.get((record.type, record.value_version))
          or _value_codec(record.type, record.value_version))
    if vc is None:
        return key, encode_record_value(record.type, record.value_version, record.value)
    return key, vc[0] + vc[1](record.value)


class ShardRuntime(ShardLoader):
    def __init__(self, index: int, plog: PartitionLog, config: CoordinatorConfig,
                 linger_ms: int) -> None:
        self.index = index
        self.plog = plog
        self.config = config
        self.core = CoordinatorShard(index, config)
        self.loaded = False
        self.linger = linger_ms / 1000.0
        self._pending: list[Record] = []
        self._waiters: list[asyncio.Future] = []
        self._scheduled = False
        self._last_write: asyncio.Future | None = None
        self._timers: dict[tuple, asyncio.TimerHandle] = {}
        self.records_loaded = 0
        self.load_errors = 0
        self.compacted_upto = -1  # active segment base at the last compaction

    # ------------------------------------------------------------- loading
    def write(self, records: list[Record]) -> asyncio.Future | None:
        """Replay records now, append them durably soon; the future says when.

        With no records, returns the future of the last write still in
        flight (or None), so replies keep their order behind writes."""
        if not records:
            if self._last_write is not None and not self._last_write.done():
                return self._last_write
            return None
        for record in records:
            self.core.replay(record)
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._pending.extend(records)
        self._waiters.append(fut)
        self._last_write = fut
        if not self._scheduled:
            self._scheduled = True
            if self.linger > 0:
                loop.call_later(self.linger, self._flush)
            else:
                loop.call_soon(self._flush)
        return fut

    def _flush(self) -> None:
        records, waiters = self._pending, self._waiters
        self._pending, self._waiters, self._scheduled = [], [], False
        now = wall_ms()
        try:
            batch = build_batch([(*encode_record(r), [], now) for r in records])
            self.plog.append(batch)
            self.plog.flush()
        except Exception as exc:
            log.exception("shard %d: append failed; reloading the shard from its log", self.index)
            for fut in waiters:
                if not fut.done():
                    fut.set_exception(exc)
            self.reload()
            return
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def reload(self) -> None:
        """Throw away memory that may be ahead of the log and replay the log again."""
        self.core = CoordinatorShard(self.index, self.config)
        self.loaded = False
        asyncio.get_running_loop().create_task(self.load())

    async def apply(self, result: Result) -> None:
        """Write a result's records, arm its timers, then deliver its replies."""
        fut = self.write(result.records)
        self.arm_timers(result.timers)
        if result.replies:
            if fut is not None:
                try:
                    await fut
                except Exception as exc:
                    for token, _ in result.replies:
                        if isinstance(token, asyncio.Future) and not token.done():
                            token.set_exception(exc)
                    return
            for token, response in result.replies:
                if isinstance(token, asyncio.Future) and not token.done():
                    token.set_result(response)

    # -------------------------------------------------------------- timers
    def arm_timers(self, timers) -> None:
        if not timers:
            return
        loop = asyncio.get_running_loop()
        now = wall_ms()
        for key, deadline in timers:
            handle = self._timers.pop(key, None)
            if handle is not None:
                handle.cancel()
            if deadline is not None:
                delay = max(deadline - now, 0) / 1000.0
                self._timers[key] = loop.call_later(delay, self._fire, key)

    def _fire(self, key: tuple) -> None:
        self._timers.pop(key, None)
        handler: Callable[[tuple, int], Result] | None = getattr(self.core, "on_timer", None)
        if handler is None or not self.loaded:
            return
        result = handler(key, wall_ms())
        # Replay the records now, not in a task: a request handled before the task
        # ran would be computed from state that misses them.
        self.write(result.records)
        self.arm_timers(result.timers)
        if result.replies:  # delivered once the write is durable
            asyncio.get_running_loop().create_task(self.apply(Result(replies=result.replies)))

    def cancel_all_timers(self) -> None:
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()


class CoordinatorRuntime:
    def __init__(self, catalogue, config) -> None:
        self.catalogue = catalogue
        self.config = config
        self.core_config = CoordinatorConfig.from_values(config.values)
        wanted = config["offsets.topic.num.partitions"]
        topic = catalogue.get(OFFSETS_TOPIC)
        if topic is None:
            topic = catalogue.create(OFFSETS_TOPIC, wanted, {
                "cleanup.policy": "compact",
                "segment.bytes": str(config["offsets.topic.segment.bytes"])})
        elif len(topic.partitions) != wanted:
            log.warning("%s has %d partitions; offsets.topic.num.partitions=%d is ignored",
                        OFFSETS_TOPIC, len(topic.partitions), wanted)
        linger = config["group.coordinator.append.linger.ms"]
        self.shards = [ShardRuntime(i, plog, self.core_config, linger)
                       for i, plog in enumerate(topic.partitions)]
        self._tasks: list[asyncio.Task] = []
        self._cleanup: asyncio.TimerHandle | None = None

    def shard_for(self, group_id: str) -> ShardRuntime:
        return self.shards[partition_for(group_id, len(self.shards))]

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        # shards load independently; each answers COORDINATOR_LOAD_IN_PROGRESS until done
        self._tasks = [loop.create_task(s.load()) for s in self.shards]
        self._loaded_task = loop.create_task(self._log_all_loaded(time.monotonic()))
        self._schedule_cleanup()

    async def _log_all_loaded(self, start: float) -> None:
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if all(s.loaded for s in self.shards):
            log.info("all shards loaded: %d records in %.2fs",
                     sum(s.records_loaded for s in self.shards), time.monotonic() - start)

    async def wait_loaded(self) -> None:
        await asyncio.gather(*self._tasks)

    def _schedule_cleanup(self) -> None:
        interval = self.core_config.offsets_retention_check_interval_ms / 1000.0
        self._cleanup = asyncio.get_running_loop().call_later(interval, self._run_cleanup)

    def _run_cleanup(self) -> None:
        now = wall_ms()
        delete_retention = self.config["log.cleaner.delete.retention.ms"]
        for shard in self.shards:
            if not shard.loaded:
                continue
            records = shard.core.cleanup(now)
            if records:
                log.info("shard %d: expiring %d records", shard.index, len(records))
                shard.write(records)
            # compact once per newly sealed segment; records stay replayable
            # (latest per key), so live and reloaded state stay equal
            plog = shard.plog
            if plog.sealed_segments() and plog.active.base_offset > shard.compacted_upto:
                try:
                    compact(plog, now, delete_retention)
                except Exception:
                    log.exception("shard %d: compaction failed", shard.index)
                shard.compacted_upto = plog.active.base_offset
        self._schedule_cleanup()

    def stop(self) -> None:
        if self._cleanup is not None:
            self._cleanup.cancel()
        for task in self._tasks:
            task.cancel()
        if getattr(self, "_loaded_task", None) is not None:
            self._loaded_task.cancel()
        for shard in self.shards:
            shard.cancel_all_timers()
            if shard._pending:
                shard._flush()
