"""PartitionLog: one partition's append-only log, a directory of segments.

Layout (Kafka's): `<data-dir>/<topic>-<partition>/<20-digit base>.log` with
`.index` and `.timeindex` beside each.  The last segment is the active one;
all others are sealed (immutable, fsynced with their indexes when sealed).

Durability: appends go to the page cache; flush() fsyncs the active segment
(and the directory if segments were created or removed).  The broker calls
flush() before answering acks=-1; flush_interval_messages adds a count-based
flush.  On open only the active segment can hold unsynced bytes, so only it
is verified batch by batch (past its recovery point: recovery_point.py)
and cut at the first torn or corrupt batch;
after a clean shutdown (the data dir's marker, clean_shutdown.py) close()
left it fsynced with its indexes, and it is opened as a sealed one is.
"""
from __future__ import annotations

import bisect
import logging
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Callable

from kcoord.protocol.records import (LOG_OVERHEAD, PARTITION_LEADER_EPOCH_OFFSET, BatchHeader,
                                     assign_offsets, decode_batch, set_partition_leader_epoch)

from .config import LogConfig
from .errors import CorruptSegmentError, InvalidAppend, OffsetOutOfRange
from .index import INT32_MAX
from .epoch_checkpoint import CHECKPOINT, read_epoch_checkpoint
from .checkpoint_file import write_checkpoint
from .leader_epoch import EpochCache
from .recovery_point import RecoveryPoint
from .scan import file_batches, memory_batches
from .start_offset import read_start_offset, write_start_offset
from .presync import MIN_UNSYNCED
from .segment import INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX, Pieces, Segment

log = logging.getLogger(__name__)
_PATCHED = PARTITION_LEADER_EPOCH_OFFSET + 4  # the header bytes an append rewrites
_tuple_new = tuple.__new__


def _base_offset_of(path: Path) -> int | None:
    stem = path.stem
    return int(stem) if len(stem) == 20 and stem.isdigit() else None


def wall_ms() -> int:
    """Wall time in ms: a log's clock when the server gives it none."""
    return int(time.time() * 1000)


class PartitionLog:
    def __init__(self, path: Path, config: LogConfig | None = None, *,
                 clean_shutdown: bool = False, now_ms: Callable[[], int] | None = None):
        """clean_shutdown: the data dir's clean-shutdown marker was found
        (clean_shutdown.py), so the active segment is trusted as closed,
        not scanned for a torn tail.  now_ms: the server's clock (segment.ms
        ages; default wall time)."""
        self.path = Path(path)
        self.now_ms = now_ms or wall_ms
        self._config = config or LogConfig()
        self.path.mkdir(parents=True, exist_ok=True)
        self._segments: list[Segment] = []
        self._bases: list[int] = []   # base offsets, parallel to _segments, for bisect
        self._size = 0
        self._unflushed_messages = 0
        self._dir_dirty = False       # segment files created/removed since the last flush
        self._closed = False
        self.recovery_scanned = False  # whether opening CRC-scanned the active segment
        self.recovery_point = RecoveryPoint(self.path)  # how far a flush fsynced the active one
        self._open_segments(clean_shutdown)
        # raised by DeleteRecords (advance_log_start) above the first segment's base
        self._start_floor = read_start_offset(self.path)
        # The end of what the last successful flush made durable (what opening
        # found counts): readers that must never see a write that could still
        # be lost (the coordinator log's high watermark) stop here.
        self.durable_end_offset = self.log_end_offset
        self._cuts = 0  # truncations so far: a flush racing one (in a worker thread) claims nothing
        # The epoch checkpoint is written on the loop for most changes, and in
        # an fsync thread for a new leader's epoch (assign_epoch, then
        # settle_epochs): versions keep an older text from landing after a
        # newer one, the lock keeps two writers off the one temp file.
        self._epochs_version = 0     # bumped on every change of the cache
        self._epochs_written = 0     # the version the checkpoint file holds
        self._epochs_lock = threading.Lock()
        self.epochs = self._load_epochs()
        # Set by replication while this node leads the partition: appends
        # that name no epoch (the coordinator's writes) are stamped with it.
        self.stamp_epoch: int | None = None

    def _load_epochs(self) -> EpochCache:
        """The leader-epoch cache (replication): the checkpoint cut to what the
        log holds; after a crash the active segment's batches fill in an
        epoch whose checkpoint write the crash beat (Kafka re-assigns epochs
        while recovering unflushed segments)."""
        cache = read_epoch_checkpoint(self.path)
        before = cache.entries
        cache.truncate_from_end(self.log_end_offset)
        cache.truncate_from_start(self.log_start_offset)
        if self.recovery_scanned:
            # below where opening walked, a flush fsynced the recovery point
            # only after the epochs of its batches were checkpointed (_write)
            active = self.active
            with open(active.log_path, "rb") as fh:
                for batch in file_batches(fh.fileno(), active.walked_from, active.size,
                                          bodies=False):
                    if batch.header.partition_leader_epoch >= 0:
                        cache.assign(batch.header.partition_leader_epoch, batch.header.base_offset)
        if cache.entries != before:
            self._epochs_version += 1
            self._store_epochs(self._epochs_version, cache.to_text())
        return cache

    def _write_epochs(self) -> None:
        """The cache changed: make the checkpoint say so now (on the caller's thread)."""
        self._epochs_version += 1
        self._store_epochs(self._epochs_version, self.epochs.to_text())

    def _store_epochs(self, version: int, text: str) -> None:
        with self._epochs_lock:
            if version > self._epochs_written:
                write_checkpoint(self.path, CHECKPOINT, text)
                self._epochs_written = version

    @property
    def epochs_durable(self) -> bool:
        """Does the checkpoint file hold the cache as it is?"""
        return self._epochs_written >= self._epochs_version

    def epochs_snapshot(self) -> tuple[int, str]:
        """(version, checkpoint text) of the cache now, taken on the loop for
        store_epochs to write in an fsync thread."""
        return self._epochs_version, self.epochs.to_text()

    def store_epochs(self, version: int, text: str) -> None:
        """Write a snapshot to the checkpoint (in an fsync thread: a file
        fsync, a rename and a directory fsync), unless a newer one is there."""
        self._store_epochs(version, text)

    def epochs_pending(self) -> tuple[int, str, tuple[int, int, int]] | None:
        """On the loop, after appends with defer_epochs: None when the
        checkpoint holds the cache, else (version, text, where): store_epochs
        (version, text) in a thread, then on_epochs_stored(version, where)."""
        if self.epochs_durable:
            return None
        where = (self.active.base_offset, self.active.size, self._cuts)
        return self._epochs_version, self.epochs.to_text(), where

    def on_epochs_stored(self, version: int, where: tuple[int, int, int]) -> None:
        """On the loop: the snapshot of `version`, taken at `where`, is in the
        checkpoint: a recovery point may name the bytes appended before it
        (unless a truncation or a roll came between)."""
        base, size, cuts = where
        if (self._closed or self._epochs_written < version or cuts != self._cuts
                or base != self.active.base_offset):
            return
        settled_base, settled = self._settled
        if settled_base != base or settled < size:
            self._settled = (base, min(size, self.active.size))

    # ------------------------------------------------------------ opening

    def _open_segments(self, clean_shutdown: bool) -> None:
        bases = set()
        for entry in self.path.iterdir():
            if entry.suffix == LOG_SUFFIX:
                base = _base_offset_of(entry)
                if base is None:
                    log.warning("%s: ignoring unexpected file", entry)
                else:
                    bases.add(base)
        # Index files whose log is gone: left by a crash in the middle of a
        # segment deletion.
        for entry in self.path.iterdir():
            if entry.suffix in (INDEX_SUFFIX, TIMEINDEX_SUFFIX):
                base = _base_offset_of(entry)
                if base is not None and base not in bases:
                    entry.unlink()
        ordered = sorted(bases) or [0]
        for base in ordered[:-1]:
            seg = Segment(self.path, base, self.config)
            seg.load_sealed()
            self._segments.append(seg)
        active = Segment(self.path, ordered[-1], self.config)
        active.created_ms = self.now_ms()
        if not (clean_shutdown and active.open_clean()):
            # logs a warning with the bytes dropped, if any; CRC-checks only
            # past the recovery point (below it a flush fsynced every byte,
            # and the index entries it counted)
            active.recover(*self.recovery_point.read(active.base_offset, active.size))
            self.recovery_scanned = True
        self._segments.append(active)
        # (segment base, size) at the end of the last append: its batches'
        # epochs are checkpointed, so a recovery point may name it
        self._settled = (active.base_offset, active.size)
        self._bases = [s.base_offset for s in self._segments]
        self._size = sum(s.size for s in self._segments)

    # --------------------------------------------------------- properties

    @property
    def config(self) -> LogConfig:
        return self._config

    @config.setter
    def config(self, config: LogConfig) -> None:
        """Topic configs can change at runtime (AlterConfigs); new values
        apply from the next append or retention pass."""
        self._config = config
        for seg in self._segments:
            seg.config = config

    @property
    def active(self) -> Segment:
        return self._segments[-1]

    @property
    def log_start_offset(self) -> int:
        base = self._segments[0].base_offset
        return base if base >= self._start_floor else min(self._start_floor,
                                                          self.log_end_offset)

    @property
    def log_end_offset(self) -> int:
        """The next offset to assign (the high watermark: one node, no
        replication lag)."""
        return self.active.next_offset

    @property
    def flushed_offset(self) -> int:
        """Offsets below it are on disk (replication's name for durable_end_offset)."""
        return self.durable_end_offset

    @property
    def size_bytes(self) -> int:
        return self._size

    @property
    def segment_base_offsets(self) -> list[int]:
        return list(self._bases)

    def segment_files(self) -> list[tuple[Path, int]]:
        """(.log path, size) of every segment, oldest first: what a reader
        in another process may scan while nothing is appended."""
        return [(seg.log_path, seg.size) for seg in self._segments]

    # ------------------------------------------------------------- append

    def append(self, batches, leader_epoch: int | None = None) -> tuple[int, int]:
        """Append whole v2 batches (CRC already checked by the caller),
        assigning offsets from log_end_offset, and stamping `leader_epoch`
        into each (as Kafka's leader does; the CRC does not cover it).
        -> (first offset, last offset)."""
        parsed = self._parse(batches)
        if leader_epoch is None:
            leader_epoch = self.stamp_epoch
        first = next_offset = self.log_end_offset
        # Only each batch's first 16 bytes (baseOffset, length, leader epoch)
        # change: they are copied and patched, the payload is written from
        # the caller's buffer as it is (one pwritev, no copy of the records).
        view = memoryview(batches)
        pieces = []
        for i, (pos, header) in enumerate(parsed):
            head = bytearray(view[pos:pos + _PATCHED])
            assign_offsets(head, 0, next_offset)
            # the header patched as the bytes are: one tuple built, not a
            # namedtuple _replace per field (~2 us each, 8 appends per txn)
            if leader_epoch is not None:
                set_partition_leader_epoch(head, 0, leader_epoch)
                header = _tuple_new(BatchHeader,
                                    (next_offset, header[1], leader_epoch) + header[3:])
            else:
                header = _tuple_new(BatchHeader, (next_offset,) + header[1:])
            pieces.append(head)
            pieces.append(view[pos + _PATCHED:pos + LOG_OVERHEAD + header.batch_length])
            parsed[i] = (pos, header)
            next_offset += header.last_offset_delta + 1
        end = parsed[-1][0] + LOG_OVERHEAD + parsed[-1][1].batch_length
        self._write(Pieces(pieces, end), parsed, first, next_offset - 1)
        return first, next_offset - 1

    def append_raw(self, batches, *, defer_epochs: bool = False) -> tuple[int, int]:
        """Append whole batches keeping their offsets (replica fetches,
        compaction rewrites).  Offsets must increase and start at or after
        log_end_offset; gaps are allowed.  -> (first offset, last offset).
        defer_epochs: a new leader epoch in them is checkpointed later, by
        the caller off the loop (epochs_pending / store_epochs /
        on_epochs_stored), not here (a file fsync, a rename and a directory
        fsync: 15-40 ms on a busy disk, for every follower partition of a
        leader that moved)."""
        parsed = self._parse(batches)
        expected = self.log_end_offset
        for _, header in parsed:
            if header.base_offset < expected:
                raise InvalidAppend(
                    f"batch base offset {header.base_offset} below expected {expected}")
            expected = header.base_offset + header.last_offset_delta + 1
        first = parsed[0][1].base_offset
        self._write(batches, parsed, first, expected - 1, defer_epochs)
        return first, expected - 1

    @staticmethod
    def _parse(data) -> list:
        try:
            parsed = memory_batches(data)
        except CorruptSegmentError as exc:
            raise InvalidAppend(f"not a run of whole v2 batches: {exc}") from None
        if not parsed:
            raise InvalidAppend("no batches to append")
        return parsed

    def _write(self, data, parsed, first: int, last: int, defer_epochs: bool = False) -> None:
        self._check_open()
        if last - first > INT32_MAX:
            raise InvalidAppend(f"offsets {first}..{last} span more than one segment can index")
        active = self.active
        if active.size == 0 and not active.fits_offsets(last):
            # An empty segment is never rolled, but one whose base offset is
            # too far behind for int32 relative offsets is replaced.
            self._drop_segment(self._segments.pop())
            self._bases.pop()
            self._add_segment(first)
        elif self._should_roll(len(data), last) and not self._roll_later(len(data), last):
            self._roll(first)
        self.active.append(data, parsed)
        self._size += len(data)
        self._maybe_presync()
        changed = False
        for _, header in parsed:
            if header.partition_leader_epoch >= 0:
                changed |= self.epochs.assign(header.partition_leader_epoch, header.base_offset)
        if changed:
            self._epochs_version += 1
        if not self.epochs_durable and not defer_epochs:
            self._store_epochs(self._epochs_version, self.epochs.to_text())
        if self.epochs_durable:
            # a recovery point may name only bytes whose epochs are checkpointed:
            # a crash then walks the rest, taking their epochs from the batches
            self._settled = (self.active.base_offset, self.active.size)
        if self.config.flush_interval_messages is not None:
            self._unflushed_messages += sum(h.records_count for _, h in parsed)
            if self._unflushed_messages >= self.config.flush_interval_messages:
                self.flush()

    def _should_roll(self, size: int, last_offset: int) -> bool:
        active = self.active
        if active.size == 0:
            return False  # rolling would only leave an empty segment behind
        if active.size + size > self.config.segment_bytes:
            return True
        if not active.fits_offsets(last_offset):
            return True
        return self._aged()

    def _aged(self) -> bool:
        """Is the active segment older than segment.ms?"""
        segment_ms = self.config.segment_ms
        if segment_ms is None:
            return False
        active = self.active
        # Kafka measures a segment's age from its first batch's timestamp,
        # or from its creation when the batch has none.
        since = active.first_timestamp
        if since is None or since < 0:
            since = active.created_ms
        return self.now_ms() - since > segment_ms

    def _roll_later(self, size: int, last_offset: int) -> bool:
        """Should a roll due for size wait (the segment takes this append)?
        Yes while a presync of the full segment is under way, or when it
        holds more than MIN_UNSYNCED bytes no fsync covers (one starts now),
        up to a quarter past segment.bytes: the seal's fsync on the loop then
        writes a short tail only (presync.py).  Never for offsets or age."""
        active = self.active
        limit = self.config.segment_bytes
        end = active.size + size
        if end > limit + limit // 4 or end > INT32_MAX or not active.fits_offsets(last_offset) \
                or self._aged():
            return False
        if active.presync_under_way():
            return True
        if active.unsynced() > MIN_UNSYNCED:
            active.presync()
            return True
        return False

    def _maybe_presync(self) -> None:
        """Once the active segment is three quarters full, fsync what no
        fsync covers yet in the background, ahead of its roll (presync.py)."""
        active = self.active
        limit = self.config.segment_bytes
        if active.size >= limit - limit // 4 and active.unsynced() >= MIN_UNSYNCED \
                and not active.presync_under_way():
            active.presync()

    def _roll(self, new_base: int) -> None:
        if not self.epochs_durable:
            # a crash walks only the active segment for epochs the checkpoint lacks
            self._store_epochs(self._epochs_version, self.epochs.to_text())
        self.active.seal()
        self._add_segment(new_base)

    def _add_segment(self, base: int) -> None:
        seg = Segment(self.path, base, self.config)
        seg.recover()  # normally a fresh, empty file: this just sets its state
        seg.created_ms = self.now_ms()
        self._segments.append(seg)
        self._bases.append(base)
        self._size += seg.size
        self._dir_dirty = True

    # --------------------------------------------------------------- read

    def read(self, offset: int, max_bytes: int, *, min_one: bool = True) -> bytes:
        """Whole batches starting with the one containing `offset`, up to
        max_bytes (at least one batch if min_one).  Batches may start before
        `offset`: as with Kafka, the reader skips records it did not ask for.
        Reads stay within one segment; the caller asks again for more."""
        self._check_open()
        start, end = self.log_start_offset, self.log_end_offset
        if offset < start or offset > end:
            raise OffsetOutOfRange(offset, start, end)
        if offset == end:
            return b""
        i = bisect.bisect_right(self._bases, offset) - 1
        for seg in self._segments[i:]:
            data = seg.read(offset, max_bytes, min_one)
            if data is not None:
                return data
            # `offset` fell in a gap at the end of a segment (compaction or a
            # replica's gap): the next segment's first batch is the answer.
        return b""

    # ---------------------------------------------------------- timestamps

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the earliest record with timestamp >=
        `timestamp` (ListOffsets), or None if there is none."""
        self._check_open()
        for seg in self._segments:
            if seg.max_timestamp < timestamp:
                continue  # every batch in it is older; no need to look inside
            found = seg.find_timestamp(timestamp)
            if found is None:
                continue
            position, header = found
            if header.timestamp_type_log_append:
                return header.base_offset, header.max_timestamp
            # Only this one candidate batch is decoded.
            _, records = decode_batch(seg.pread(position, header.size), 0)
            for record in records:
                if record.timestamp >= timestamp:
                    return record.offset, record.timestamp
            return header.base_offset, header.max_timestamp
        return None

    def max_timestamp_offset(self) -> tuple[int, int]:
        """(offset, timestamp) of the record with the largest timestamp, the
        earliest one on ties (ListOffsets -3); (-1, -1) if no record has a
        timestamp."""
        self._check_open()
        best = None
        for seg in self._segments:
            if seg.max_timestamp >= 0 and (best is None or seg.max_timestamp > best.max_timestamp):
                best = seg
        if best is None:
            return -1, -1
        found = best.locate(best.offset_of_max_timestamp)
        if found is None:
            return -1, -1
        position, header = found
        if header.timestamp_type_log_append:
            return header.base_offset, header.max_timestamp
        _, records = decode_batch(best.pread(position, header.size), 0)
        for record in records:
            if record.timestamp == header.max_timestamp:
                return record.offset, record.timestamp
        return header.base_offset + header.last_offset_delta, header.max_timestamp

    # ------------------------------------------------------- durability

    def flush(self) -> None:
        """fsync the active segment, and the directory if segment files were
        created or removed (sealed segments were fsynced when sealed)."""
        self._check_open()
        end = self.log_end_offset  # read first: appends racing the fsync are not covered
        cuts = self._cuts
        active, generation = self.active, self.recovery_point.generation()
        counts = active.index_counts()  # before the size: recovery drops entries past it
        base, settled = self._settled
        position = min(settled, active.size) if base == active.base_offset else 0
        active.flush()
        self.recovery_point.flushed(active.base_offset, position, generation, counts,
                                    active.sync_indexes)
        if self._dir_dirty:
            self._fsync_dir()
        self._unflushed_messages = 0
        if end > self.durable_end_offset and cuts == self._cuts:
            self.durable_end_offset = end

    def _fsync_dir(self) -> None:
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self._dir_dirty = False

    # ---------------------------------------------------- retention, truncation

    def apply_retention(self, now_ms: int) -> int:
        """Delete the oldest sealed segments that are past retention_ms or
        that take the log beyond retention_bytes (keeping at least
        retention_bytes, as Kafka does).  Never the active segment.
        Returns the number of segments deleted."""
        self._check_open()
        deleted = 0
        retention_ms = self.config.retention_ms
        if retention_ms is not None and retention_ms >= 0:
            while (len(self._segments) > 1
                   and now_ms - self._segments[0].retention_timestamp() > retention_ms):
                self._delete_oldest()
                deleted += 1
        retention_bytes = self.config.retention_bytes
        if retention_bytes is not None and retention_bytes >= 0:
            excess = self._size - retention_bytes
            while len(self._segments) > 1 and excess - self._segments[0].size >= 0:
                excess -= self._segments[0].size
                self._delete_oldest()
                deleted += 1
        if deleted:
            self._cut_epochs_from_start()
        return deleted

    def _cut_epochs_from_start(self) -> None:
        if self.epochs.truncate_from_start(self.log_start_offset):
            self._write_epochs()

    def _delete_oldest(self) -> None:
        seg = self._segments.pop(0)
        self._bases.pop(0)
        self._drop_segment(seg)

    def _drop_segment(self, seg: Segment) -> None:
        self._size -= seg.size
        seg.delete()
        self._dir_dirty = True

    def advance_log_start(self, offset: int) -> int:
        """Move the log start offset forward to `offset` (at most the log
        end; never backwards), durably, then delete the segments wholly
        below it.  -> the new log start offset."""
        self._check_open()
        offset = min(offset, self.log_end_offset)
        if offset <= self.log_start_offset:
            return self.log_start_offset
        write_start_offset(self.path, offset)
        self._start_floor = offset
        while len(self._segments) > 1 and self._bases[1] <= offset:
            self._delete_oldest()
        if self._dir_dirty:
            self._fsync_dir()
        self._cut_epochs_from_start()
        return self.log_start_offset

    def truncate_to(self, offset: int) -> None:
        """Remove every batch holding offsets >= `offset`.  A batch that
        straddles `offset` is removed whole, so log_end_offset becomes that
        batch's base offset.  If `offset` is before the log start, the log is
        emptied and restarts at `offset`.  Leader epochs starting at or after
        the new end go too (also when nothing else is cut: an epoch a
        leader took without writing in it, Kafka's UnifiedLog.truncateTo)."""
        self._check_open()
        if offset >= self.log_end_offset:
            if self.epochs.truncate_from_end(offset):
                self._write_epochs()
            return
        self.recovery_point.forget()  # bytes below it may be written again
        # Newest first: a crash midway leaves a shorter but consistent log.
        while len(self._segments) > 1 and self._bases[-1] >= offset:
            self._drop_segment(self._segments.pop())
            self._bases.pop()
        seg = self.active
        if seg.base_offset > offset:
            self._drop_segment(self._segments.pop())
            self._bases.pop()
            self._add_segment(offset)
        else:
            # Truncating at the end when nothing is found still reindexes:
            # a formerly sealed segment becomes the active one.
            found = seg.locate(offset)
            position = found[0] if found is not None else seg.size
            self._size -= seg.size - position
            seg.truncate_at(position)
        if self._start_floor > self.log_end_offset:  # the log now restarts at its end
            write_start_offset(self.path, self.log_end_offset)
            self._start_floor = self.log_end_offset
        self._cuts += 1
        if not self.epochs_durable:
            # a follower's epoch not checkpointed yet (defer_epochs) may start below
            # the new end: checkpoint it before a recovery point can name its bytes
            self.epochs.truncate_from_end(self.log_end_offset)
            self._write_epochs()
        self._settled = (self.active.base_offset, self.active.size)
        self.durable_end_offset = min(self.durable_end_offset, self.log_end_offset)
        self.flush()
        if self.epochs.truncate_from_end(self.log_end_offset):
            self._write_epochs()

    def reset_to(self, offset: int) -> None:
        """Empty the log and restart it at `offset` (a follower behind its
        leader's log start: Kafka's truncateFullyAndStartAt)."""
        self._check_open()
        self.recovery_point.forget()
        while len(self._segments) > 1:
            self._drop_segment(self._segments.pop())
            self._bases.pop()
        self._drop_segment(self._segments.pop())
        self._bases.pop()
        self._add_segment(offset)
        if self._start_floor > offset:
            write_start_offset(self.path, offset)
            self._start_floor = offset
        self._cuts += 1
        self._settled = (self.active.base_offset, self.active.size)
        self.durable_end_offset = offset
        self.flush()
        self.epochs.clear()
        self._write_epochs()

    def assign_epoch(self, epoch: int, start_offset: int) -> None:
        """Record that leader `epoch` starts at `start_offset` (a new leader
        takes its epoch at its log end before writing anything), in memory:
        settle_epochs (in an fsync thread) makes it durable, and the leader
        appends nothing in the epoch until then (Replica.on_epoch_settled)."""
        self._check_open()
        if self.epochs.assign(epoch, start_offset):
            self._epochs_version += 1

    # ---------------------------------------------------------- compaction

    def sealed_segments(self) -> list[Segment]:
        return self._segments[:-1]

    def replace_sealed(self, base: int, data: bytes) -> None:
        """Swap a sealed segment's contents for `data` (whole batches that keep
        their original offsets, all within the old segment's range).

        The new file is written and fsynced beside the old one, the old
        indexes are removed, then a rename swaps the files: a crash at any
        point leaves either segment whole, and missing indexes are rebuilt
        on open."""
        self._check_open()
        i = self._bases.index(base)
        if i == len(self._segments) - 1:
            raise InvalidAppend("the active segment cannot be replaced")
        old = self._segments[i]
        tmp = old.log_path.with_name(old.log_path.name + ".cleaned")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        old.close()
        for suffix in (INDEX_SUFFIX, TIMEINDEX_SUFFIX):
            old.log_path.with_suffix(suffix).unlink(missing_ok=True)
        os.replace(tmp, old.log_path)
        self._fsync_dir()
        seg = Segment(self.path, base, self.config)
        seg.load_sealed()
        self._segments[i] = seg
        self._size += seg.size - old.size

    # ---------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Flush and close.  The active segment is made durable as a sealed
        one is (final time-index entry, indexes fsynced), so that after a
        clean shutdown it can be opened without a recovery scan."""
        if self._closed:
            return
        if not self.epochs_durable:     # (deferred by a follower's append)
            self._store_epochs(self._epochs_version, self.epochs.to_text())
        self.flush()
        self.active.seal()
        for seg in self._segments:
            seg.close()
        self._closed = True

    def delete(self) -> None:
        """Close and remove the partition's directory."""
        if not self._closed:
            for seg in self._segments:
                seg.close()
            self._closed = True
        shutil.rmtree(self.path, ignore_errors=True)

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"{self.path}: log is closed")

    def __enter__(self) -> "PartitionLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"PartitionLog({str(self.path)!r}, start={self.log_start_offset}, "
                f"end={self.log_end_offset}, segments={len(self._segments)})")
