"""Loading a shard: replay of its __consumer_offsets log at start-up.

ShardLoader is the loading half of ShardRuntime (coordinator_runtime.py):
it walks the log in chunks, keeps the latest OffsetCommit of each key and
replays those, and replays every other record in log order.
"""
from __future__ import annotations

import asyncio
import logging
import mmap
import os
import re
import struct
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

from ..coordinator.result import Record
from ..protocol.errors import ProtocolError
from ..protocol.messages.coordinator_records import RECORD_TYPES
from ..protocol.records import (COMPRESSION_MASK, HEADER_SIZE, LOG_OVERHEAD, ZIGZAG1, read_varint,
                                batch_crc_ok, decode_batch, encode_varint, iter_batches)
from ..broker.txn_state import COMMIT, control_type
from ..coordinator.txn_offsets import txn_marker, txn_offset_batch
from ..protocol.record_codec import COMMIT_KEY_PREFIX, decode_record

log = logging.getLogger("kcoord.coordinator")

LOAD_CHUNK_BYTES = 4 << 20
# A shard whose log holds at least this much is scanned in a worker
# process (as Kafka loads partitions on several threads), when the machine
# has more than one core: the worker walks the segment files and returns
# what the replay needs (the latest commit per key between other records,
# and those other records); the shard's own process replays it.
PARALLEL_LOAD_MIN_BYTES = 4 << 20
LOAD_WORKERS = min(os.cpu_count() or 1, 4)


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


# A batch whose records are all OffsetCommits of type 1 with a value, keys
# of one length and values of one length (a group commit of groups with
# ids of one length; the common case) is matched by a regular expression
# built for that shape, which runs in C.  The pattern is "one record, or
# nothing": findall over the batch's records then gives a (key, value)
# pair per record, and an empty match (b"", b"") wherever no record
# starts, which happens exactly once, at the end, when the records fill
# the batch exactly with every length field agreeing with its record.
# Timestamp and offset deltas of one or two bytes are covered; anything
# else (tombstones, other record kinds, mixed shapes, longer deltas) is
# left to _scan_batch.
_ONE = rb"[\x00-\x7f]"               # a one-byte varint
_TWO = rb"[\x80-\xff][\x00-\x7f]"    # a two-byte varint
_MAX_SHAPES = 256
_SHAPES: dict[tuple[int, int], re.Pattern | None] = {}
_NO_RECORD = (b"", b"")


def _shape_pattern(k: int, v: int) -> re.Pattern | None:
    """One record with (key after its type, value) groups, or nothing, for
    records with a k-byte type-1 key and a v-byte value."""
    shape = (k, v)
    if shape in _SHAPES:
        return _SHAPES[shape]
    # k > 2: a record's key group is never empty, so never _NO_RECORD
    if len(_SHAPES) >= _MAX_SHAPES or k <= 2 or v < 0:
        return None
    vk, vv = encode_varint(k), encode_varint(v)
    base = 1 + len(vk) + k + len(vv) + v + 1  # attributes .. headers count, without the deltas
    head = (rb"(?:" + re.escape(encode_varint(base + 2)) + rb"\x00" + _ONE + _ONE
            + rb"|" + re.escape(encode_varint(base + 3)) + rb"\x00(?:" + _ONE + _TWO + rb"|"
            + _TWO + _ONE + rb")"
            + rb"|" + re.escape(encode_varint(base + 4)) + rb"\x00" + _TWO + _TWO + rb")")
    key = re.escape(vk) + rb"\x00\x01"
    record = head + key + rb"(.{%d})" % (k - 2) + re.escape(vv) + rb"(.{%d})\x00" % v
    pattern = _SHAPES[shape] = re.compile(record + rb"|", re.S)
    return pattern


def _first_shape(buf, p: int) -> tuple[int, int]:
    """(key length, value length) of the record at p."""
    _, p = read_varint(buf, p)   # record length
    _, p = read_varint(buf, p + 1)  # after attributes: timestamp delta
    _, p = read_varint(buf, p)   # offset delta
    k, p = read_varint(buf, p)
    v, _ = read_varint(buf, p + max(k, 0))
    return k, v


def _earlier(entry) -> tuple[int, bytes] | None:
    """What a tombstone keeps of the entry it replaces: the key's last
    commit with a value since the previous flush, if any."""
    if entry is None:
        return None
    if entry.__class__ is bytes:
        return (1, entry)
    return entry[2] if entry[1] is None else entry[:2]


class _LoadPool:
    """The worker processes of the loads under way, started with the first
    shard that wants one and stopped when the last load using them ends."""
    pool: ProcessPoolExecutor | None = None
    users = 0

    @classmethod
    def acquire(cls) -> ProcessPoolExecutor:
        if cls.pool is None:
            cls.pool = ProcessPoolExecutor(LOAD_WORKERS, mp_context=get_context("spawn"))
        cls.users += 1
        return cls.pool

    @classmethod
    def release(cls) -> None:
        cls.users -= 1
        if cls.users == 0 and cls.pool is not None:
            cls.pool.shutdown(wait=False, cancel_futures=True)  # none left unless stopping
            cls.pool = None


class _Collector:
    """Stands in for the replay in a worker: keeps what ShardLoader would
    have replayed, in order (dicts of latest commits, (key, value) of
    other records).  Made a ShardLoader below."""

    def __init__(self) -> None:
        self.ops: list = []
        self.records_loaded = 0

    def _replay_latest(self, latest: dict) -> None:
        if latest:
            self.ops.append(dict(latest))
            latest.clear()

    def _replay_raw(self, key: bytes | None, value: bytes | None) -> None:
        self.ops.append((key, value))

    def _replay_txn(self, op: tuple) -> None:
        self.ops.append(op)


def scan_segment_files(files: list[tuple[str, int]]) -> tuple[list, int]:
    """Run in a worker process: scan a shard's segment files (path, size)
    as ShardLoader.load does.  -> (ops to replay in order, commits taken)."""
    collector = _WorkerScan()
    latest: dict = {}
    for path, size in files:
        if size <= 0:
            continue
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_READ) as mm:
            collector._scan_chunk(mm, latest, 0)
    collector._replay_latest(latest)
    return collector.ops, collector.records_loaded


class ShardLoader:
    """Mixin of ShardRuntime: needs self.index, plog, core, records_loaded
    and load_errors."""

    _last_shape: re.Pattern | None = None

    async def replay_log(self) -> None:
        """Replay the shard's log into its (fresh) core.

        Offset commits are mostly overwritten by later commits of the same
        key, so they are not replayed one by one: the scan keeps the latest
        commit of each key (OffsetCommit keys of type 0 and 1 are the same
        key) and replays those when it meets a record of another kind and
        at the end, in the order the keys first appeared.  The state is the
        one a record-by-record replay gives: committed offsets are last
        write wins, and a commit's other effect (a simple group for its
        group id, created if absent) is kept by replaying, before a final
        tombstone, the key's last commit with a value since the previous
        flush.  Uncompressed batches are matched whole by a pattern of
        their shape or walked in place for their keys and values (after
        the CRC check); anything else goes through decode_batch."""
        start = time.monotonic()
        self.replayed_end = self.plog.log_end_offset  # what this load replays (up to)
        if not (LOAD_WORKERS > 1 and self.plog.size_bytes >= PARALLEL_LOAD_MIN_BYTES
                and await self._load_in_worker()):
            offset = self.plog.log_start_offset
            end = self.plog.log_end_offset
            # OffsetCommit key fields -> (type, value, earlier (type, value)), or
            # just the value for a type-1 commit with a value and nothing earlier
            latest: dict = {}
            first = True
            while offset < end:
                if not first:
                    await asyncio.sleep(0)  # let other shards and requests run
                first = False
                chunk = self.plog.read(offset, LOAD_CHUNK_BYTES, min_one=True)
                if not chunk:
                    break
                offset = self._scan_chunk(chunk, latest, offset)
            self._replay_latest(latest)
        took = time.monotonic() - start
        if self.records_loaded:
            self.events.shard_loaded(self.index, self.records_loaded, took)

    async def _load_in_worker(self) -> bool:
        """Scan the log in a worker process and replay what it returns.
        False (nothing replayed) if the worker failed: the caller loads
        in this process instead."""
        files = [(str(path), size) for path, size in self.plog.segment_files()]
        pool = _LoadPool.acquire()
        try:
            ops, taken = await asyncio.get_running_loop().run_in_executor(
                pool, scan_segment_files, files)
        except Exception as exc:  # a worker that died, a file it could not read
            log.warning("shard %d: loading in a worker failed (%r); loading here", self.index, exc)
            return False
        finally:
            _LoadPool.release()
        self.records_loaded += taken
        for op in ops:
            if op.__class__ is dict:
                self._replay_latest(op)
            elif len(op) == 3:
                self._replay_txn(op)
            else:
                self._replay_raw(*op)
        return True

    def _scan_chunk(self, chunk, latest: dict, offset: int) -> int:
        """Take every batch of `chunk` (whole batches); -> the offset after
        the last one (`offset` if there is none)."""
        match, scan = self._match_batch, self._scan_batch
        for pos, header in iter_batches(chunk):
            offset = header.base_offset + header.last_offset_delta + 1
            if header.attributes & 0x30:  # transactional offsets or a marker (txn_offsets.py)
                self._replay_latest(latest)
                self._take_transactional(chunk, pos, header)
                continue
            if (header.attributes & COMPRESSION_MASK or not batch_crc_ok(chunk, pos, header)
                    or not (match(chunk, pos, header, latest)
                            or scan(chunk, pos, header, latest))):
                _, records = decode_batch(chunk, pos)
                for rec in records:
                    self._take(rec.key, rec.value, latest)
        return offset

    def _match_batch(self, buf: bytes, pos: int, header, latest: dict) -> bool:
        """Take a CRC-checked uncompressed batch of type-1 OffsetCommits with
        values, all of one key length and one value length, with the
        pattern of that shape.  False (nothing taken) for anything else."""
        start = pos + HEADER_SIZE
        end = pos + LOG_OVERHEAD + header.batch_length
        count = header.records_count
        pattern = self._last_shape  # batches in a row mostly share a shape
        if pattern is not None:
            found = pattern.findall(buf, start, end)
            # whole: `count` records, then the one empty match at the end
            if len(found) == count + 1 and found[-1] == _NO_RECORD and \
                    found.count(_NO_RECORD) == 1:
                found.pop()
                latest.update(found)
                self.records_loaded += count
                return True
        try:
            k, v = _first_shape(buf, start)
        except (IndexError, ProtocolError):
            return False
        shape = _SHAPES.get((k, v)) or _shape_pattern(k, v)
        if shape is None or shape is pattern:
            return False
        found = shape.findall(buf, start, end)
        if len(found) != count + 1 or found[-1] != _NO_RECORD or found.count(_NO_RECORD) != 1:
            return False
        self._last_shape = shape
        found.pop()
        latest.update(found)
        self.records_loaded += count
        return True

    def _scan_batch(self, buf: bytes, pos: int, header, latest: dict) -> bool:
        """Take the records of a CRC-checked uncompressed batch of
        OffsetCommits, reading keys and values in place.  False when the
        batch needs decode_batch: a record of another kind, anything
        unexpected (which decode_batch reports).  Commits taken before such
        a stop are taken again from decode_batch's records; taking a run of
        commits twice leaves `latest` as taking it once."""
        end = pos + LOG_OVERHEAD + header.batch_length
        count = header.records_count
        if count < 0 or count * 7 > end - pos - HEADER_SIZE:
            return False
        p = pos + HEADER_SIZE
        zz1 = ZIGZAG1
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
                    latest[key] = (rtype, None, _earlier(get(key)))
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
            if value is not None:
                latest[key[2:]] = (key[1], value, None)
            else:
                latest[key[2:]] = (key[1], None, _earlier(latest.get(key[2:])))
            self.records_loaded += 1
            return
        self._replay_latest(latest)
        self._replay_raw(key, value)

    def _take_transactional(self, buf, pos: int, header) -> None:
        _, records = decode_batch(buf, pos)
        if header.attributes & 0x20:
            kind = control_type(buf, pos)
            if kind is not None:
                self._replay_txn((header.producer_id, header.producer_epoch, kind == COMMIT))
        else:
            self._replay_txn((header.producer_id, header.producer_epoch,
                              [(None if r.key is None else bytes(r.key),
                                None if r.value is None else bytes(r.value)) for r in records]))

    def _replay_txn(self, op: tuple) -> None:
        """(pid, epoch, commit) for a marker, (pid, epoch, [(key, value)]) for
        a transactional batch of OffsetCommit records."""
        pid, epoch, what = op
        if what.__class__ is bool:
            self.core.replay(txn_marker(pid, epoch, what))
            self.records_loaded += 1
            return
        records = []
        for key, value in what:
            try:
                record = decode_record(key, value)
            except ProtocolError as exc:
                self.load_errors += 1
                log.warning("shard %d: skipping undecodable record: %s", self.index, exc)
                continue
            if record.type in (0, 1):
                records.append(record)
        self.core.replay(txn_offset_batch(pid, epoch, records))
        self.records_loaded += len(records)

    def _replay_latest(self, latest: dict) -> None:
        """Replay the latest commit of each key taken since the last flush."""
        replay = self.core.replay
        for key, entry in latest.items():
            if entry.__class__ is bytes:
                commits = ((1, entry),)
            else:
                rtype, value, earlier = entry
                commits = ((rtype, value),) if earlier is None else (earlier, (rtype, value))
            for rtype, value in commits:
                try:
                    record = (_decode_commit(rtype, key, value)
                              or decode_record(COMMIT_KEY_PREFIX[rtype] + key, value))
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


class _WorkerScan(_Collector, ShardLoader):
    """ShardLoader's scan with _Collector's stand-ins for the replay."""
