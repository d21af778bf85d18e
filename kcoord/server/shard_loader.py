"""Loading a shard: replay of its __consumer_offsets log at start-up.

ShardLoader is the loading half of ShardRuntime (coordinator_runtime.py).
LogScan walks the log in chunks, keeps the latest OffsetCommit of each key
and hands those, and every other record in log order, to a sink: CoreReplay
replays them into the shard's core, CollectSink keeps them (a worker process).
"""
from __future__ import annotations

import asyncio
import gc
import logging
import os
import struct
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Protocol

from .. import native_build
from ..coordinator.result import Record
from ..coordinator.snapshot import decode_state
from ..protocol import commit_runs
from ..protocol.errors import ProtocolError
from ..protocol.messages.coordinator_records import RECORD_TYPES
from ..protocol.records import (COMPRESSION_MASK, HEADER_SIZE, LOG_OVERHEAD,
                                MIN_BATCH_LENGTH, batch_crc_ok, decode_batch, iter_batches,
                                read_record_spans, records_section, uniform_records)
from ..broker.txn_state import COMMIT, control_type
from ..protocol.record_codec import COMMIT_KEY_PREFIX, decode_record
from .malloc_tuning import keep_freed_buffers
from .shard_snapshot import read_snapshot

log = logging.getLogger("kcoord.coordinator")

LOAD_CHUNK_BYTES = 4 << 20
# A shard whose log holds at least this much is scanned in a worker
# process (as Kafka loads partitions on several threads), when the machine
# has more than one core: the worker walks the segment files and returns
# what the replay needs (the latest commit per key between other records,
# and those other records); the shard's own process replays it.
PARALLEL_LOAD_MIN_BYTES = 4 << 20
LOAD_WORKERS = min(os.cpu_count() or 1, 4)
# a worker reads its segment files in pieces of about this size (whole batches):
# under the worker's mmap threshold (malloc_tuning.MMAP_THRESHOLD, set by the
# pool's initializer), so each piece's buffer reuses the heap pages the last
# one freed instead of faulting in new ones
WORKER_PIECE_BYTES = 16 << 20
# Runs of plain OffsetCommit batches go through commit_runs' walk when it is
# compiled; interpreted, the one-shape pattern (match_batch) is faster.
TAKE_RUNS = native_build.is_compiled(commit_runs)
# a flush of at least this many latest commits replays with the cyclic GC paused
GC_PAUSE_MIN_KEYS = 1000


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
            # a worker keeps the pages of each piece it frees for the next
            # (malloc_tuning.py): without, every piece's read faults in fresh
            # zeroed pages (a sixth of a worker's CPU)
            cls.pool = ProcessPoolExecutor(LOAD_WORKERS, mp_context=get_context("spawn"),
                                           initializer=keep_freed_buffers)
        cls.users += 1
        return cls.pool

    @classmethod
    def release(cls) -> None:
        cls.users -= 1
        if cls.users == 0 and cls.pool is not None:
            cls.pool.shutdown(wait=False, cancel_futures=True)  # none left unless stopping
            cls.pool = None


def scan_segment_files(files: list[tuple[str, int]]) -> tuple[list, int]:
    """Run in a worker process: scan a shard's segment files (path, size)
    as ShardLoader.load does.  -> (ops to replay in order, commits taken)."""
    sink = CollectSink()
    scan = LogScan(sink)
    latest: dict = {}
    for path, size in files:
        if size <= 0:
            continue
        with open(path, "rb") as fh:
            for piece in file_pieces(fh.fileno(), size, WORKER_PIECE_BYTES):
                scan.scan_chunk(piece, latest, 0)
    sink.latest(latest)
    return sink.ops, sink.records_loaded


def file_pieces(fd: int, size: int, piece: int):
    """The file's first `size` bytes read (pread: no mapping to fault in) in
    pieces of about `piece` bytes, each ending with whole batches and
    perhaps the torn start of the next, which the scan stops at quietly and
    the next piece reads again; a batch longer than `piece`, a torn tail or
    a bad length goes whole into the last piece, where the scan stops at it
    or reports it."""
    pos = 0
    while pos < size:
        data = os.pread(fd, min(piece, size - pos), pos)
        n = len(data)
        if n == 0 or pos + n >= size:  # the rest of the file
            yield data
            return
        end = 0
        while n - end >= LOG_OVERHEAD:
            length, = _I.unpack_from(data, end + 8)
            if length < MIN_BATCH_LENGTH or pos + end + LOG_OVERHEAD + length > size:
                yield data  # a bad length or a torn tail: the scan's to judge
                return
            if end + LOG_OVERHEAD + length > n:
                break
            end += LOG_OVERHEAD + length
        if end == 0:  # one batch longer than a piece: the rest as it is
            yield os.pread(fd, size - pos, pos)
            return
        yield data
        pos += end


class LogChunks:
    """A log read from `offset` to its end (as it was when the walk began) in
    chunks of whole batches; the reader sets `offset` past each chunk's last
    batch, and other tasks run between chunks."""

    def __init__(self, plog, offset: int) -> None:
        self.plog = plog
        self.offset = offset
        self.end = plog.log_end_offset

    async def __aiter__(self):
        first = True
        while self.offset < self.end:
            if not first:
                await asyncio.sleep(0)  # let other shards and requests run
            first = False
            chunk = self.plog.read(self.offset, LOAD_CHUNK_BYTES, min_one=True)
            if not chunk:
                return
            yield chunk


class ShardLoader:
    """Mixin of ShardRuntime: needs self.index, plog, core, config,
    records_loaded, load_errors and snapshots (None: no snapshots).  The
    scan (LogScan) hands what it reads to a sink: CoreReplay here,
    CollectSink in a worker process."""

    async def replay_log(self) -> None:
        """Replay the shard's log into its (fresh) core, or, when the
        shard's coordinator snapshot agrees with the log, make the snapshot
        the core and replay only the records after it.

        Offset commits are mostly overwritten by later commits of the same
        key, so they are not replayed one by one: the scan keeps the latest
        commit of each key (OffsetCommit keys of type 0 and 1 are the same
        key) and replays those when it meets a record of another kind and
        at the end, in the order the keys first appeared.  The state is the
        one a record-by-record replay gives: committed offsets are last
        write wins, and a commit's other effect (a simple group for its
        group id, created if absent) is kept by replaying, before a final
        tombstone, the key's last commit with a value since the previous
        flush.  Batches go through the protocol's record reader: a
        CRC-checked uncompressed batch of one shape through its one-shape
        fast path (uniform_records), any other through read_record_spans
        (keys and values read in place; a compressed batch decompressed)."""
        start = time.monotonic()
        mark = self.core_from_snapshot()  # the snapshot's core, or the fresh one
        sink = CoreReplay(self.core, self.index)
        self.replayed_end = self.plog.log_end_offset  # what this load replays (up to)
        try:
            if mark is None:
                await self._replay_into(sink)
            else:
                await self._scan_from(sink, mark.end)
        finally:  # counted also when the load ends early (a corrupt batch)
            self.records_loaded += sink.records_loaded
            self.load_errors += sink.load_errors
        took = time.monotonic() - start
        if mark is not None:
            log.info("shard %d: loaded from the snapshot at offset %d and %d records after it "
                     "in %.2fs", self.index, mark.end, sink.records_loaded, took)
        if self.records_loaded:
            self.events.shard_loaded(self.index, self.records_loaded, took)

    def core_from_snapshot(self):
        """Make the shard's snapshot its core if the snapshot agrees with the
        log and this code can read it; -> what it covers, or None (the core
        stays fresh: a full replay)."""
        self.snapshot_mark = None
        if self.snapshots is None:
            return None
        found = read_snapshot(self.plog, self.index)
        if found is None:
            return None
        mark, payload = found
        try:
            self.core = decode_state(payload, self.config)
        except Exception as exc:  # another version's, or unreadable: the log is the truth
            log.warning("shard %d: ignoring the coordinator snapshot (%s); replaying the "
                        "whole log", self.index, exc)
            return None
        self.snapshot_mark = mark
        return mark

    async def _replay_into(self, sink: "CoreReplay") -> None:
        if not (LOAD_WORKERS > 1 and self.plog.size_bytes >= PARALLEL_LOAD_MIN_BYTES
                and await self._load_in_worker(sink)):
            await self._scan_from(sink, self.plog.log_start_offset)

    async def _scan_from(self, sink: "CoreReplay", offset: int) -> None:
        """Scan the log from `offset` (a batch boundary) to its end, in chunks."""
        scan = LogScan(sink)
        # OffsetCommit key fields -> (type, value, earlier (type, value)), or
        # just the value for a type-1 commit with a value and nothing earlier
        latest: dict = {}
        chunks = LogChunks(self.plog, offset)
        async for chunk in chunks:
            chunks.offset = scan.scan_chunk(chunk, latest, chunks.offset)
        sink.latest(latest)


    async def _load_in_worker(self, sink: "CoreReplay") -> bool:
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
        sink.records_loaded += taken
        for op in ops:
            if op.__class__ is dict:
                sink.latest(op)
            elif len(op) == 3:
                sink.txn(op)
            else:
                sink.raw(*op)
        return True

class ReplaySink(Protocol):
    """What LogScan hands what it takes to, in log order (CoreReplay,
    CollectSink; the declared seam for any other replay target)."""

    records_loaded: int

    def latest(self, latest: dict) -> None:
        """The latest OffsetCommit per key taken since the last call (clears it)."""

    def raw(self, key: bytes | None, value: bytes | None) -> None:
        """Any other record (key None: a record without a key)."""

    def txn(self, op: tuple) -> None:
        """(pid, epoch, commit) of a marker, or (pid, epoch, [(key, value)])
        of a transactional batch."""


class LogScan:
    """The loader's walk of a shard's log: batches to records, the latest
    OffsetCommit of each key kept (ShardLoader.replay_log says why), and
    everything it takes handed to `sink` in log order: sink.latest(dict of
    latest commits), sink.raw(key, value), sink.txn(op); the sink counts
    records_loaded (commits taken are counted here, when taken)."""

    def __init__(self, sink: ReplaySink) -> None:
        self.sink = sink

    def scan_chunk(self, chunk, latest: dict, offset: int, runs: bool | None = None) -> int:
        """Take every batch of `chunk` (whole batches); -> the offset after
        the last one (`offset` if there is none).  `runs` (default
        TAKE_RUNS): runs of plain commit batches through commit_runs' walk."""
        if (TAKE_RUNS if runs is None else runs) and chunk.__class__ is bytes:
            return self._scan_runs(chunk, latest, offset)
        for pos, header in iter_batches(chunk):
            offset = header.base_offset + header.last_offset_delta + 1
            self._take_batch(chunk, pos, header, latest)
        return offset

    def _scan_runs(self, chunk: bytes, latest: dict, offset: int) -> int:
        """scan_chunk by commit_runs' walk, each batch it stops at taken
        the general way (_take_batch) before the walk goes on."""
        pos = 0
        while True:
            pos, taken, after = commit_runs.take_commit_runs(chunk, pos, latest)
            if taken:
                self.sink.records_loaded += taken
                offset = after
            for _, header in iter_batches(chunk, pos):  # the batch the walk stopped at
                offset = header.base_offset + header.last_offset_delta + 1
                self._take_batch(chunk, pos, header, latest)
                pos += LOG_OVERHEAD + header.batch_length
                break
            else:
                return offset

    def _take_batch(self, chunk, pos: int, header, latest: dict) -> None:
        """One batch of the scan: transactional ones apart, a plain one
        through the one-shape pattern, any other through the record walk."""
        if header.attributes & 0x30:  # transactional offsets or a marker (txn_offsets.py)
            self.sink.latest(latest)
            self._take_transactional(chunk, pos, header)
            return
        crc_ok = not header.attributes & COMPRESSION_MASK and batch_crc_ok(chunk, pos, header)
        if not (crc_ok and self.match_batch(chunk, pos, header, latest)):
            # CorruptRecordError here (a bad CRC, a malformed record) ends the load
            data, start, end = records_section(chunk, pos, header, verify_crc=not crc_ok)
            self._take_spans(data, read_record_spans(data, header.records_count,
                                                     start, end), latest)

    def match_batch(self, buf, pos: int, header, latest: dict) -> bool:
        """Take a CRC-checked uncompressed batch of type-1 OffsetCommits with
        values, all of one shape, through the record reader's one-shape fast
        path.  False (nothing taken) for anything else."""
        found = uniform_records(buf, header.records_count, pos + HEADER_SIZE,
                                pos + LOG_OVERHEAD + header.batch_length, COMMIT_KEY_PREFIX[1])
        if found is None:
            return False
        latest.update(found)
        self.sink.records_loaded += len(found)
        return True

    def _take_spans(self, data, spans: list, latest: dict) -> None:
        """The records of one batch, as read_record_spans gives them: an
        OffsetCommit joins `latest` (its key without the 2-byte type, read
        in place), any other record first replays `latest`, then itself."""
        get = latest.get
        taken = 0
        for ks, ke, vs, ve in spans:
            if ke - ks >= 2 and data[ks] == 0 and (rtype := data[ks + 1]) < 2:
                key = data[ks + 2:ke]
                if vs >= 0:
                    latest[key] = (rtype, data[vs:ve], None)
                else:
                    latest[key] = (rtype, None, _earlier(get(key)))
                taken += 1
            else:
                self.sink.latest(latest)
                self.sink.raw(None if ks < 0 else data[ks:ke], None if vs < 0 else data[vs:ve])
        self.sink.records_loaded += taken

    def _take_transactional(self, buf, pos: int, header) -> None:
        _, records = decode_batch(buf, pos)
        if header.attributes & 0x20:
            kind = control_type(buf, pos)
            if kind is not None:
                self.sink.txn((header.producer_id, header.producer_epoch, kind == COMMIT))
        else:
            self.sink.txn((header.producer_id, header.producer_epoch,
                              [(None if r.key is None else bytes(r.key),
                                None if r.value is None else bytes(r.value)) for r in records]))

class CoreReplay:
    """The sink that replays what LogScan takes into a coordinator core
    (a CoordinatorShard), counting records loaded and load errors."""

    def __init__(self, core, index: int) -> None:
        self.core = core
        self.index = index
        self.records_loaded = 0
        self.load_errors = 0

    def txn(self, op: tuple) -> None:
        """(pid, epoch, commit) for a marker, (pid, epoch, [(key, value)]) for
        a transactional batch of OffsetCommit records."""
        pid, epoch, what = op
        if what.__class__ is bool:
            self.core.replay_txn_marker(pid, epoch, what)
            self.records_loaded += 1
            return
        records = []
        for key, value in what:
            record = self._decode(key, value)
            if record is not None and record.type in (0, 1):
                records.append(record)
        self.core.replay_txn_offsets(pid, epoch, records)
        self.records_loaded += len(records)

    def latest(self, latest: dict) -> None:
        """Replay the latest commit of each key taken since the last flush.
        A large flush pauses the cyclic GC: it makes only live objects (the
        offsets, their dicts, simple groups), and the collections it would
        set off walk the whole loaded state for nothing (about half its
        CPU on a 100 M-record log)."""
        pause = len(latest) >= GC_PAUSE_MIN_KEYS and gc.isenabled()
        if pause:
            gc.disable()
        try:
            self._latest(latest)
        finally:
            if pause:
                gc.enable()
        latest.clear()

    def _latest(self, latest: dict) -> None:
        # plain commits (a bare v3 value) read straight to their fields when
        # commit_runs is compiled (interpreted, _decode_commit is faster)
        plain = commit_runs.plain_commits(latest) if TAKE_RUNS and latest else None
        if plain is not None and None not in plain:  # the usual case: all of them
            self.core.replay_plain_commits(plain)
            return
        replay = self.core.replay
        for i, (key, entry) in enumerate(latest.items()):
            if entry.__class__ is bytes:
                if plain is not None and plain[i] is not None:
                    self.core.replay_plain_commits(plain[i:i + 1])
                    continue
                commits = ((1, entry),)
            else:
                rtype, value, earlier = entry
                commits = ((rtype, value),) if earlier is None else (earlier, (rtype, value))
            for rtype, value in commits:
                record = (_decode_commit(rtype, key, value)
                          or self._decode(COMMIT_KEY_PREFIX[rtype] + key, value))
                if record is None:
                    self.records_loaded -= 1  # counted when taken
                    continue
                replay(record)

    def raw(self, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            self.load_errors += 1
            return
        record = self._decode(key, value)
        if record is None or record.type not in RECORD_TYPES:
            return
        self.core.replay(record)
        self.records_loaded += 1

    def _decode(self, key: bytes, value: bytes | None) -> Record | None:
        """decode_record, or None for an undecodable record (counted in
        load_errors and logged: the load goes on without it)."""
        try:
            return decode_record(key, value)
        except ProtocolError as exc:
            self.load_errors += 1
            log.warning("shard %d: skipping undecodable record: %s", self.index, exc)
            return None




class CollectSink:
    """The sink of a worker process: keeps what CoreReplay would replay, in
    order (dicts of latest commits, (key, value) of other records, txn
    ops), for the shard's own process to replay."""

    def __init__(self) -> None:
        self.ops: list = []
        self.records_loaded = 0

    def latest(self, latest: dict) -> None:
        if latest:
            self.ops.append(dict(latest))
            latest.clear()

    def raw(self, key: bytes | None, value: bytes | None) -> None:
        self.ops.append((key, value))

    def txn(self, op: tuple) -> None:
        self.ops.append(op)
