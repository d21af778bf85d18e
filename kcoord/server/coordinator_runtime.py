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
import struct
import time
from typing import Any, Callable

from ..coordinator.partitioner import partition_for
from ..coordinator.result import Record, Result
from ..coordinator.shard import CoordinatorConfig, CoordinatorShard
from ..log import PartitionLog
from ..log.compaction import compact
from ..log.group_sync import ThreadedSync
from ..protocol.messages.coordinator_records import encode_record_key, encode_record_value
from ..protocol.records import (_ATTRIBUTES_OFFSET, _CRC_OFFSET, _HEADER as _BATCH_HEADER,
                                HEADER_SIZE, LOG_OVERHEAD, MAGIC_V2, _UINT32, _crc, _varint)
from .record_codec import _KEY_CODECS, _VALUE_CODECS, _key_codec, _value_codec, decode_record  # noqa: F401
from .shard_loader import ShardLoader

log = logging.getLogger("kcoord.coordinator")

OFFSETS_TOPIC = "__consumer_offsets"


def wall_ms() -> int:
    return int(time.time() * 1000)


def encode_record(record: Record) -> tuple[bytes, bytes | None]:
    if record.type == 1:  # an OffsetCommit: the hot path, precompiled
        encoded = _encode_commit(record)
        if encoded is not None:
            return encoded
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


# OffsetCommit records (type 1) with a v3 value or none, encoded with
# precompiled structs; the same bytes as the schema codecs give
# (tests/server/test_commit_batch.py).  The key's group and topic part is
# encoded once per (group, topic).
_COMMIT_KEY_PREFIXES: dict[tuple[str, str], bytes] = {}
_COMMIT_KEY_PREFIXES_MAX = 100_000
_H = struct.Struct(">h")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_V3 = struct.Struct(">hqih")         # OffsetCommitValue v3 up to the metadata bytes
_V3_EMPTY = struct.Struct(">hqihq")  # ... with empty metadata, and the commit timestamp


def _encode_commit(record: Record) -> tuple[bytes, bytes | None] | None:
    """(key, value) of an OffsetCommit record, or None for what the schema
    codecs must encode (other value versions; anything out of range, which
    they report)."""
    key = record.key
    try:
        group, topic = key["group"], key["topic"]
        prefix = _COMMIT_KEY_PREFIXES.get((group, topic))
        if prefix is None:
            g, t = group.encode(), topic.encode()
            if len(g) > 32767 or len(t) > 32767:
                return None
            prefix = b"\x00\x01" + _H.pack(len(g)) + g + _H.pack(len(t)) + t
            if len(_COMMIT_KEY_PREFIXES) >= _COMMIT_KEY_PREFIXES_MAX:
                _COMMIT_KEY_PREFIXES.clear()
            _COMMIT_KEY_PREFIXES[(group, topic)] = prefix
        k = prefix + _I.pack(key["partition"])
        value = record.value
        if value is None:
            return k, None
        if record.value_version != 3:
            return None
        meta = value["metadata"]
        if not meta:
            return k, _V3_EMPTY.pack(3, value["offset"], value["leader_epoch"], 0,
                                     value["commit_timestamp"])
        m = meta.encode()
        if len(m) > 32767:
            return None
        return k, (_V3.pack(3, value["offset"], value["leader_epoch"], len(m)) + m
                   + _Q.pack(value["commit_timestamp"]))
    except (struct.error, KeyError, TypeError, AttributeError, UnicodeEncodeError):
        return None


# Zigzag varints of 0..16383 (one or two bytes), for the records of a batch,
# and the same after a record's attributes and timestamp delta (both 0).
_ZV_MAX = 1 << 14
_ZV = tuple(_varint(n) for n in range(_ZV_MAX))
_ZV00 = tuple(b"\x00\x00" + z for z in _ZV)
# An OffsetCommit record from its partition on: partition, value length (24,
# as a varint), value v3 with empty metadata, no headers.
_COMMIT_TAIL = struct.Struct(">iBhqihqB")
_COMMIT_TAIL_SIZE = _COMMIT_TAIL.size
# (group, topic) -> key length varint + key up to its partition
_COMMIT_HEADS: dict[tuple[str, str], bytes] = {}


def build_records_batch(records: list[Record], now: int) -> bytearray:
    """One uncompressed v2 batch of `records`, every record stamped `now`,
    offset deltas 0..n-1, and one CRC for all of them: the bytes build_batch
    gives for [(*encode_record(r), [], now) for r in records], built with
    fewer steps per record.  An OffsetCommit with a v3 value and no metadata
    (what consumers commit) is one struct pack after its (group, topic)
    part, which is encoded once."""
    zv, zv00, zmax, varint = _ZV, _ZV00, _ZV_MAX, _varint
    heads = _COMMIT_HEADS
    pack_tail, tail_size = _COMMIT_TAIL.pack, _COMMIT_TAIL_SIZE
    out = [bytes(HEADER_SIZE)]
    append = out.append
    for delta, record in enumerate(records):
        rtype, key, value, version = record
        if rtype == 1 and version == 3 and value is not None and delta < zmax \
                and not value["metadata"]:
            head = heads.get((key["group"], key["topic"]))
            if head is None:
                encoded = _encode_commit(record)
                if encoded is not None:
                    k = encoded[0][:-4]  # without the partition
                    n = len(k) + 4
                    head = heads[(key["group"], key["topic"])] = (
                        zv[n] if n < zmax else varint(n)) + k
                    if len(heads) > _COMMIT_KEY_PREFIXES_MAX:
                        heads.clear()
            if head is not None:
                try:
                    tail = pack_tail(key["partition"], 48, 3, value["offset"],
                                     value["leader_epoch"], 0, value["commit_timestamp"], 0)
                except (struct.error, KeyError):  # the schema codec encodes or reports it
                    pass
                else:
                    od = zv00[delta]
                    n = len(od) + len(head) + tail_size
                    out += (zv[n] if n < zmax else varint(n)), od, head, tail
                    continue
        k, v = encode_record(record)
        n = len(k)
        head = b"\x00\x00" + (zv[delta] if delta < zmax else varint(delta)) + (
            zv[n] if n < zmax else varint(n))
        if v is None:
            rec = head + k + b"\x01\x00"
        else:
            n = len(v)
            rec = head + k + (zv[n] if n < zmax else varint(n)) + v + b"\x00"
        n = len(rec)
        append(zv[n] if n < zmax else varint(n))
        append(rec)
    batch = bytearray().join(out)
    count = len(records)
    _BATCH_HEADER.pack_into(batch, 0, 0, len(batch) - LOG_OVERHEAD, -1, MAGIC_V2, 0, 0,
                            max(count - 1, 0), now, now, -1, -1, -1, count)
    _UINT32.pack_into(batch, _CRC_OFFSET, _crc(memoryview(batch)[_ATTRIBUTES_OFFSET:]))
    return batch


class GroupCommit:
    """Group commit across every shard of the runtime.

    A shard with records to write joins the next round.  A round starts
    `group.coordinator.append.linger.ms` after its first write (at once when
    the linger is 0), or as soon as the round before it is durable, so at
    most one round is under way: each shard of the round appends its
    pending records as one batch (on the loop, to the page cache), then the
    fsyncs of all of them run together in worker threads (ThreadedSync) and
    the loop serves meanwhile; once they are all done the waiting writes
    are released, shard by shard (a shard whose append or fsync failed fails
    its writes and reloads).  Everything written during a round joins the
    next one."""

    def __init__(self, linger_ms: float, sync: ThreadedSync | None = None) -> None:
        self.linger = linger_ms / 1000.0
        self.sync = sync or ThreadedSync()
        self._queue: list["ShardRuntime"] = []
        self._scheduled = False
        self._in_flight = False
        self.rounds = 0  # rounds begun (metrics and tests)

    def add(self, shard: "ShardRuntime") -> None:
        self._queue.append(shard)
        if not self._scheduled and not self._in_flight:
            self._scheduled = True
            loop = asyncio.get_running_loop()
            if self.linger > 0:
                loop.call_later(self.linger, self._round)
            else:
                loop.call_soon(self._round)

    def _round(self) -> None:
        self._scheduled = False
        if self._in_flight or not self._queue:
            return
        if self.sync.closed:  # stopping: write and fsync right here
            self.flush_now()
            return
        shards, self._queue = self._queue, []
        now = wall_ms()
        jobs = []
        for shard in shards:
            taken = shard._append(now)
            if taken is not None:
                jobs.append((shard, *taken))
        if not jobs:
            return
        self._in_flight = True
        self.rounds += 1
        self.sync.sync([job[0].plog for job in jobs], lambda errors: self._synced(jobs, errors))

    def _synced(self, jobs: list, errors: list) -> None:
        self._in_flight = False
        # Released last request first: a connection's answers then wait for
        # its earliest one and leave in one write (network.py writes the
        # finished answers at the head of its queue after each completion).
        for (shard, waiters, replies), error in zip(reversed(jobs), reversed(errors)):
            shard._synced(waiters, replies, error)
        if self._queue and not self._scheduled:
            self._round()  # what was written meanwhile has waited long enough

    def flush_now(self) -> None:
        """Append and fsync every pending write on the caller's thread (stop)."""
        shards, self._queue = self._queue, []
        now = wall_ms()
        for shard in shards:
            taken = shard._append(now)
            if taken is None:
                continue
            try:
                shard.plog.flush()
            except Exception as exc:
                shard._synced(*taken, exc)
            else:
                shard._synced(*taken, None)

    def close(self) -> None:
        """Wait for the fsyncs under way, then write what is pending."""
        self.sync.close()
        self.flush_now()


class ShardRuntime(ShardLoader):
    def __init__(self, index: int, plog: PartitionLog, config: CoordinatorConfig,
                 linger_ms: int, commit: GroupCommit | None = None) -> None:
        self.index = index
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
            self.plog.append(build_records_batch(records, now))
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
        self.commit = GroupCommit(linger)  # one group commit for every shard
        self.shards = [ShardRuntime(i, plog, self.core_config, linger, self.commit)
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
