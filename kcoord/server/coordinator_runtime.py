"""The runtime that drives the deterministic coordinator core.

Per shard (one __consumer_offsets partition): load by replaying the log,
then for each core result replay its records, group them with every other
result of the same loop iteration into one batch, append and fsync that
batch once, and only then release the replies.  A reply never shows state
that is not yet durable: a result without records waits for the writes
queued before it.  Timers are data from the core, armed on the loop here.
"""
from __future__ import annotations

import asyncio
import logging
import struct
import time
from typing import Any, Callable

from ..coordinator.partitioner import partition_for
from ..coordinator.result import Record, Result
from ..coordinator.shard import CoordinatorConfig, CoordinatorShard
from ..log import PartitionLog
from ..log.compaction import compact
from ..protocol.api import SCHEMAS, schema_codec
from ..protocol.errors import ProtocolError
from ..protocol.messages.coordinator_records import (RECORD_TYPES, decode_record_key,
                                                     decode_record_value, encode_record_key,
                                                     encode_record_value)
from ..protocol.records import (COMPRESSION_MASK, HEADER_SIZE, LOG_OVERHEAD, _ZZ1,
                                batch_crc_ok, build_batch, decode_batch, iter_batches)

log = logging.getLogger("kcoord.coordinator")

OFFSETS_TOPIC = "__consumer_offsets"
LOAD_CHUNK_BYTES = 4 << 20


def wall_ms() -> int:
    return int(time.time() * 1000)


# Codecs of the record keys and values seen so far, so that the hot paths
# (a commit writes one record per partition; a load replays millions) skip
# the registry lookups of encode/decode_record_key/value.  Only known types
# and versions get here; everything else takes those functions, which raise
# the right errors.
_INT16 = struct.Struct(">h")
_COMMIT_PREFIX = (b"\x00\x00", b"\x00\x01")  # OffsetCommit keys of record type 0 and 1
_KEY_CODECS: dict[int, tuple[bytes, Callable, Callable]] = {}
_VALUE_CODECS: dict[tuple[int, int], tuple[bytes, Callable, Callable]] = {}


def _key_codec(rtype: int):
    codec = _KEY_CODECS.get(rtype)
    if codec is None and rtype in RECORD_TYPES:
        enc, dec = schema_codec(RECORD_TYPES[rtype][0], rtype)
        codec = _KEY_CODECS[rtype] = (_INT16.pack(rtype), enc, dec)
    return codec


def _value_codec(rtype: int, version: int):
    codec = _VALUE_CODECS.get((rtype, version))
    if codec is None and rtype in RECORD_TYPES:
        name = RECORD_TYPES[rtype][1]
        if version in SCHEMAS[name].versions:
            enc, dec = schema_codec(name, version)
            codec = _VALUE_CODECS[(rtype, version)] = (_INT16.pack(version), enc, dec)
    return codec


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


def decode_record(key: bytes, value: bytes | None) -> Record:
    if len(key) >= 2:
        rtype, = _INT16.unpack_from(key, 0)
        kc = _KEY_CODECS.get(rtype) or _key_codec(rtype)
        if kc is not None:
            key_msg, _ = kc[2](key, 2)
            if value is None:
                return Record(rtype, key_msg, None)
            if len(value) >= 2:
                version, = _INT16.unpack_from(value, 0)
                vc = _VALUE_CODECS.get((rtype, version)) or _value_codec(rtype, version)
                if vc is not None:
                    value_msg, _ = vc[2](value, 2)
                    return Record(rtype, key_msg, value_msg, version)
    # unknown types and versions, short buffers: these raise the right errors
    rtype, key_msg = decode_record_key(key)
    if value is None:
        return Record(rtype, key_msg, None)
    version, value_msg = decode_record_value(rtype, value)
    return Record(rtype, key_msg, value_msg, version)


# One-byte zigzag varint -> length, for the in-place walk of a batch:
# keys of 2..63 bytes (else 0), values of 1..63 bytes, -1 for null (else 0).
_KEY_LEN = bytes(b >> 1 if b < 0x80 and not b & 1 and b >= 4 else 0 for b in range(256))
_VALUE_LEN = tuple(-1 if b == 1 else b >> 1 if b < 0x80 and not b & 1 else 0
                   for b in range(256))
_H = struct.Struct(">h")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_V3 = struct.Struct(">hqih")  # OffsetCommitValue v3: version, offset, leader epoch, metadata length
_V1 = struct.Struct(">hqh")   # OffsetCommitValue v1: version, offset, metadata length
_QQ = struct.Struct(">qq")


def _decode_commit(rtype: int, key: bytes, value: bytes | None) -> Record | None:
    """An OffsetCommit record (key without its 2-byte type; value v3, v1 or
    a tombstone) decoded with precompiled structs, exactly as decode_record
    decodes it; None for anything else or anything malformed, which
    decode_record then decodes (or reports)."""
    try:
        glen, = _H.unpack_from(key, 0)
        p = 2 + glen
        tlen, = _H.unpack_from(key, p)
        q = p + 2 + tlen
        if glen < 0 or tlen < 0 or q + 4 > len(key):
            return None
        k = {"group": key[2:p].decode(), "topic": key[p + 2:q].decode(),
             "partition": _I.unpack_from(key, q)[0]}
        if value is None:
            return Record(rtype, k, None)
        if value[:2] == b"\x00\x03":
            _, offset, epoch, mlen = _V3.unpack_from(value, 0)
            if mlen < 0 or 16 + mlen + 8 > len(value):
                return None
            return Record(rtype, k, {"offset": offset, "leader_epoch": epoch,
                                     "metadata": value[16:16 + mlen].decode(),
                                     "commit_timestamp": _Q.unpack_from(value, 16 + mlen)[0],
                                     "expire_timestamp": -1}, 3)
        if value[:2] == b"\x00\x01":
            _, offset, mlen = _V1.unpack_from(value, 0)
            if mlen < 0 or 12 + mlen + 16 > len(value):
                return None
            ts, expire = _QQ.unpack_from(value, 12 + mlen)
            return Record(rtype, k, {"offset": offset, "leader_epoch": -1,
                                     "metadata": value[12:12 + mlen].decode(),
                                     "commit_timestamp": ts, "expire_timestamp": expire}, 1)
    except (struct.error, UnicodeDecodeError):
        pass
    return None


class ShardRuntime:
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
    async def load(self) -> None:
        """Replay the shard's log into a fresh core.

        Offset commits are mostly overwritten by later commits of the same
        key, so they are not replayed one by one: the scan keeps the latest
        commit of each key (OffsetCommit keys of type 0 and 1 are the same
        key) and replays those when it meets a record of another kind and
        at the end, in the order the keys first appeared.  The state is the
        one a record-by-record replay gives: committed offsets are last
        write wins, and a commit's other effect (a simple group for its
        group id, created if absent) is kept by replaying, before a final
        tombstone, the key's last commit with a value since the previous
        flush.  Uncompressed batches are walked in place for their keys and
        values (after the CRC check); anything else goes through
        decode_batch as before."""
        start = time.monotonic()
        offset = self.plog.log_start_offset
        end = self.plog.log_end_offset
        latest: dict = {}  # OffsetCommit key fields -> (type, value, earlier (type, value))
        while offset < end:
            chunk = self.plog.read(offset, LOAD_CHUNK_BYTES, min_one=True)
            if not chunk:
                break
            for pos, header in iter_batches(chunk):
                offset = header.base_offset + header.last_offset_delta + 1
                if header.attributes & 0x20:  # control batch: no group records
                    continue
                if header.attributes & COMPRESSION_MASK or not self._scan_batch(
                        chunk, pos, header, latest):
                    _, records = decode_batch(chunk, pos)
                    for rec in records:
                        self._take(rec.key, rec.value, latest)
            await asyncio.sleep(0)  # let other shards and requests run
        self._replay_latest(latest)
        self.loaded = True
        took = time.monotonic() - start
        if self.records_loaded:
            log.info("loaded shard %d: %d records in %.2fs", self.index, self.records_loaded, took)
        on_loaded: Callable[[int], Result] | None = getattr(self.core, "on_loaded", None)
        if on_loaded is not None:  # e.g. restart the sessions of loaded group members
            await self.apply(on_loaded(wall_ms()))

    def _scan_batch(self, buf: bytes, pos: int, header, latest: dict) -> bool:
        """Take the records of an uncompressed batch of OffsetCommits, reading
        keys and values in place.  False when the batch needs decode_batch:
        a CRC mismatch, a record of another kind, anything unexpected
        (which decode_batch reports).  Commits taken before such a stop are
        taken again from decode_batch's records; taking a run of commits
        twice leaves `latest` as taking it once."""
        if not batch_crc_ok(buf, pos, header):
            return False
        end = pos + LOG_OVERHEAD + header.batch_length
        count = header.records_count
        if count < 0 or count * 7 > end - pos - HEADER_SIZE:
            return False
        p = pos + HEADER_SIZE
        zz1 = _ZZ1
        klen, vlen = _KEY_LEN, _VALUE_LEN
        get = latest.get
        try:
            for _ in range(count):
                b = buf[p]
                if b < 0x80:
                    length = zz1[b]
                    p += 1
                elif (c := buf[p + 1]) < 0x80:  # records of 64..8191 bytes
                    z = (b & 0x7F) | (c << 7)
                    length = (z >> 1) ^ -(z & 1)
                    p += 2
                else:
                    return False
                rend = p + length
                p += 1  # attributes
                while buf[p] & 0x80:  # timestamp delta
                    p += 1
                p += 1
                while buf[p] & 0x80:  # offset delta
                    p += 1
                kpos = p + 2
                # key length: a one-byte varint for any OffsetCommit key < 64 bytes
                p = kpos + klen[buf[p + 1]]
                rtype = buf[kpos + 1]
                if p == kpos or buf[kpos] or rtype > 1 or rend > end:
                    return False  # a long or null key, or not an OffsetCommit key
                q = p + 1
                n = vlen[buf[p]]  # value length
                if n > 0:
                    if q + n > rend:
                        return False
                    latest[buf[kpos + 2:p]] = (rtype, buf[q:q + n], None)
                elif n < 0 and q <= rend:  # null value: a tombstone
                    key = buf[kpos + 2:p]
                    entry = get(key)
                    latest[key] = (rtype, None, None if entry is None else
                                   entry[2] if entry[1] is None else entry[:2])
                else:
                    return False  # an empty or long value is no OffsetCommit value
                p = rend
        except IndexError:
            return False
        if p != end:
            return False
        self.records_loaded += count
        return True

    def _take(self, key: bytes | None, value: bytes | None, latest: dict) -> None:
        """One record of the log: an OffsetCommit joins `latest`, any other
        record first replays `latest`, then itself."""
        if key is not None and len(key) >= 2 and key[0] == 0 and key[1] < 2:
            key = bytes(key)
            entry = latest.get(key[2:])
            if value is not None:
                latest[key[2:]] = (key[1], value, None)
            elif entry is None:
                latest[key[2:]] = (key[1], None, None)
            else:
                latest[key[2:]] = (key[1], None, entry[2] if entry[1] is None else entry[:2])
            self.records_loaded += 1
            return
        self._replay_latest(latest)
        self._replay_raw(key, value)

    def _replay_latest(self, latest: dict) -> None:
        """Replay the latest commit of each key taken since the last flush."""
        replay = self.core.replay
        for key, (rtype, value, earlier) in latest.items():
            for rtype, value in ((earlier or (None, None)), (rtype, value)):
                if rtype is None:
                    continue
                try:
                    record = (_decode_commit(rtype, key, value)
                              or decode_record(_COMMIT_PREFIX[rtype] + key, value))
                except ProtocolError as exc:
                    self.load_errors += 1
                    self.records_loaded -= 1
                    log.warning("shard %d: skipping undecodable record: %s", self.index, exc)
                    continue
                replay(record)
        latest.clear()

    def _replay_raw(self, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            self.load_errors += 1
            return
        try:
            record = decode_record(key, value)
        except ProtocolError as exc:
            self.load_errors += 1
            log.warning("shard %d: skipping undecodable record: %s", self.index, exc)
            return
        if record.type not in RECORD_TYPES:
            return
        self.core.replay(record)
        self.records_loaded += 1

    # -------------------------------------------------------------- writes
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
