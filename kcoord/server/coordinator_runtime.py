"""The runtime that drives the deterministic coordinator core.

Per shard (one __consumer_offsets partition): load by replaying the log
(shard_loader.py), then for each core result replay its records and queue
them for the group commit (GroupCommit): one round appends every shard's
pending records as one batch per shard and fsyncs all those shards
together in worker threads; only then are the replies released.  A reply
never shows state that is not yet durable: a result without records waits
for the writes queued before it.  Timers are data from the core, armed on
the loop here.
"""
from __future__ import annotations

import asyncio
import gc
import logging
import time
from typing import Any, Callable

from ..coordinator.partitioner import partition_for
from ..coordinator.result import Record, Result
from ..coordinator.shard import CoordinatorConfig, CoordinatorShard
from ..log import PartitionLog
from ..log.compaction import compact
from ..admin.events import GroupEventLog, ServerMetrics
from .group_commit import GroupCommit, wall_ms
from .record_batch import build_records_batch
from .shard_loader import ShardLoader

log = logging.getLogger("kcoord.coordinator")

OFFSETS_TOPIC = "__consumer_offsets"


class ShardRuntime(ShardLoader):
    def __init__(self, index: int, plog: PartitionLog, config: CoordinatorConfig,
                 linger_ms: int, commit: GroupCommit | None = None,
                 events: GroupEventLog | None = None) -> None:
        self.index = index
        # logs rebalances, expiries and loads; a ServerMetrics also counts them
        self.events = events if events is not None else GroupEventLog()
        self.metrics = self.events if isinstance(self.events, ServerMetrics) else None
        self.plog = plog
        self.config = config
        self.core = CoordinatorShard(index, config)
        self.loaded = False
        self.linger = linger_ms / 1000.0
        self.commit = commit if commit is not None else GroupCommit(linger_ms)
        self._pending: list[Record] = []
        self._waiters: list[asyncio.Future] = []
        self._replies: list = []  # what each waiter's future resolves to
        self._queued = False  # in the group commit's queue
        self._last_write: asyncio.Future | None = None
        self._timers: dict[tuple, asyncio.TimerHandle] = {}
        self.records_loaded = 0
        self.load_errors = 0
        self.compacted_upto = -1  # active segment base at the last compaction

    # -------------------------------------------------------------- writes
    def write(self, records: list[Record], reply: Any = None,
              fut: asyncio.Future | None = None) -> asyncio.Future | None:
        """Replay records now, append them durably soon; the future (`fut`,
        or a new one) says when, and resolves to `reply` (a handler can
        return it as its response).

        With no records, returns the future of the last write still in
        flight (or None), so replies keep their order behind writes."""
        if not records:
            if self._last_write is not None and not self._last_write.done():
                return self._last_write
            return None
        self.core.replay_all(records)
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
        self._pending += records
        self._waiters.append(fut)
        self._replies.append(reply)
        self._last_write = fut
        if not self._queued:
            self._queued = True
            self.commit.add(self)
        return fut

    def _append(self, now: int):
        """Append the pending records as one batch (no fsync); -> (waiters,
        replies) to release once the log is flushed, or None if the append
        failed (the waiters failed, the shard reloads)."""
        records, waiters, replies = self._pending, self._waiters, self._replies
        self._pending, self._waiters, self._replies = [], [], []
        self._queued = False
        if not records:
            return None
        try:
            if self.metrics is None:
                self.plog.append(build_records_batch(records, now))
            else:
                started = time.perf_counter()
                self.plog.append(build_records_batch(records, now))
                self.metrics.appended(time.perf_counter() - started)
        except Exception as exc:
            log.exception("shard %d: append failed; reloading the shard from its log", self.index)
            self._fail(waiters, exc)
            return None
        return waiters, replies

    def _synced(self, waiters: list, replies: list, error: BaseException | None) -> None:
        if error is not None:
            log.error("shard %d: fsync failed (%s); reloading the shard from its log",
                      self.index, error)
            # writes made since were computed from memory that is ahead of the log
            later, self._waiters = self._waiters, []
            self._pending, self._replies = [], []
            self._fail(waiters + later, error)
            return
        for fut, reply in zip(reversed(waiters), reversed(replies)):
            if not fut.done():
                fut.set_result(reply)

    def _fail(self, waiters: list, exc: BaseException) -> None:
        for fut in waiters:
            if not fut.done():
                fut.set_exception(exc)
        self.reload()

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


# Young-generation size of the cyclic garbage collector while serving.  A
# commit allocates some 80 dicts, lists and tuples, nearly all freed by
# reference counting within a round; with Python's default (700) the
# collector runs every few commits and walks every young object still in
# flight (hundreds of pipelined requests), measured at 15-20% of the server's
# CPU under the OffsetCommit bench.  Cycles are still collected, just in
# fewer, larger passes.
GC_GEN0_THRESHOLD = 50_000


def tune_gc() -> None:
    gen0, gen1, gen2 = gc.get_threshold()
    if 0 < gen0 < GC_GEN0_THRESHOLD:  # 0: collection disabled by the embedder, leave it
        gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


class CoordinatorRuntime:
    def __init__(self, catalogue, config, events: GroupEventLog | None = None) -> None:
        self.catalogue = catalogue
        self.config = config
        self.events = events if events is not None else GroupEventLog()
        metrics = self.events if isinstance(self.events, ServerMetrics) else None
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
        self.commit = GroupCommit(linger, metrics=metrics)  # one group commit for every shard
        self.shards = [ShardRuntime(i, plog, self.core_config, linger, self.commit, self.events)
                       for i, plog in enumerate(topic.partitions)]
        self._tasks: list[asyncio.Task] = []
        self._cleanup: asyncio.TimerHandle | None = None

    def shard_for(self, group_id: str) -> ShardRuntime:
        return self.shards[partition_for(group_id, len(self.shards))]

    def start(self) -> None:
        tune_gc()
        loop = asyncio.get_running_loop()
        # shards load independently; each answers COORDINATOR_LOAD_IN_PROGRESS until done
        self._tasks = [loop.create_task(s.load()) for s in self.shards]
        self._loaded_task = loop.create_task(self._log_all_loaded(time.monotonic()))
        self._schedule_cleanup()

    async def _log_all_loaded(self, start: float) -> None:
        await asyncio.gather(*self._tasks, return_exceptions=True)
        gc.freeze()  # the loaded state is long-lived: keep it out of later collections
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
                self.events.offsets_expired(sum(1 for r in records if r.type in (0, 1)))
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
        self.commit.close()
