"""One segment: `<base>.log` plus its `<base>.index` and `<base>.timeindex`.

A segment knows its batches only through headers; it never decodes records.
All reads are os.pread on a file descriptor kept open for the segment's
lifetime, so reads cost no seeks and no buffered-file state.
"""
from __future__ import annotations

import logging
import os
from collections import deque
from itertools import chain
from pathlib import Path

from kcoord.protocol.records import HEADER_SIZE, LOG_OVERHEAD, batch_crc_ok

from .config import LogConfig
from .errors import CorruptSegmentError
from .index import INT32_MAX, OffsetIndex, TimeIndex
from .preallocate import SMALL_APPEND, ZeroZone, reserve_ahead
from .presync import Presync, start as start_presync
from .scan import file_batches, parse_header, pread_exact, whole_batches_prefix

log = logging.getLogger(__name__)

LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX = ".log", ".index", ".timeindex"


def file_stem(base_offset: int) -> str:
    return f"{base_offset:020d}"


# Set by the fault harness, which cuts a killed node's segments back to what
# was fsynced (power loss): each segment fsync appends "<path> <size>" to it.
_FSYNC_JOURNAL = os.environ.get("KCOORD_TEST_FSYNC_JOURNAL")


def _journal_fsync(path: Path, size: int) -> None:
    fd = os.open(_FSYNC_JOURNAL, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{path} {size}\n".encode())  # one write: lines never interleave
    finally:
        os.close(fd)


def _pwrite_all(fd: int, data, position: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, position)
        view, position = view[n:], position + n


_IOV_MAX = 1024  # the kernel's limit of buffers per pwritev
# The newest batches of a segment, kept by position: a follower or a
# consumer at the log end reads from one of them, found without walking the
# headers from the last index entry (a pread and up to index.interval.bytes
# of headers per read, for every follower fetch of every write).
_TAIL_BATCHES = 16


class Pieces:
    """Batches to append as a list of buffers (patched headers beside
    views of the request's payload) and their total length."""
    __slots__ = ("buffers", "size")

    def __init__(self, buffers: list, size: int) -> None:
        self.buffers = buffers
        self.size = size

    def __len__(self) -> int:
        return self.size


def _pwritev_all(fd: int, pieces: Pieces, position: int) -> None:
    buffers = pieces.buffers
    n = os.pwritev(fd, buffers, position) if len(buffers) <= _IOV_MAX else 0
    if n < pieces.size:  # a short write (or too many buffers): the rest in one piece
        _pwrite_all(fd, memoryview(b"".join(buffers))[n:], position + n)


class Segment:
    def __init__(self, directory: Path, base_offset: int, config: LogConfig):
        """Open (creating if missing) the files of one segment.  Callers must
        then call recover(), open_clean() or load_sealed() to set the in-memory state."""
        stem = file_stem(base_offset)
        self.base_offset = base_offset
        self.config = config
        self.log_path = directory / (stem + LOG_SUFFIX)
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        self.size = os.fstat(self._fd).st_size
        index_path = directory / (stem + INDEX_SUFFIX)
        time_path = directory / (stem + TIMEINDEX_SUFFIX)
        # A missing index file next to a non-empty log means the index was
        # lost, not that it is empty: remember that for the sanity check.
        self._indexes_existed = index_path.exists() and time_path.exists()
        self.index = OffsetIndex(index_path, base_offset)
        self.time_index = TimeIndex(time_path, base_offset)
        self.created_ms = -1  # set by its log from the server's clock (segment.ms ages)
        # zeros written ahead of the end (preallocate.py): the active segment
        # of a log with config.preallocate, from its first flush on
        self._zone: ZeroZone | None = None
        self._flushed = False   # a flush happened: the log is made durable, zeros pay off
        self._no_zone = False   # appends outran the zeros: this segment grows as it goes
        # the file's end: past the data while space is reserved ahead of
        # large appends (preallocate.reserve_ahead)
        self._reserved = self.size
        self._no_reserve = False  # sealed, or the file system refused: no more reserving
        self._synced_to = self.size  # bytes the newest fsync of its own covers
        self._presync: Presync | None = None  # the newest fsync ahead of a roll (presync.py)
        self._reset_state()

    def _reset_state(self) -> None:
        self.next_offset = self.base_offset      # one past the last batch's last offset
        self.max_timestamp = -1                  # largest batch maxTimestamp seen
        self.offset_of_max_timestamp = -1        # last offset of the batch that set it
        self.first_timestamp: int | None = None  # for time-based rolls (log.roll.ms)
        self._bytes_since_index = 0
        self.walked_from = 0                     # where opening began reading batch headers
        # (position, header) of the newest batches tracked, a suffix of the
        # segment's batches (see locate)
        self._tail: deque = deque(maxlen=_TAIL_BATCHES)

    # ----------------------------------------------------------- indexing

    def _track(self, position: int, header) -> None:
        """Account one batch written at `position`: indexes and summaries.

        As in Kafka, an index entry is added once more than
        index_interval_bytes were written since the previous one; the entry
        names the batch's last offset, so lookup(X) lands at or before the
        batch containing X.
        """
        last = header.base_offset + header.last_offset_delta
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = last
        if self.first_timestamp is None:
            self.first_timestamp = header.max_timestamp
        if self._bytes_since_index > self.config.index_interval_bytes:
            self.index.append(last, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index = 0
        self._bytes_since_index += LOG_OVERHEAD + header.batch_length
        self.next_offset = last + 1
        self._tail.append((position, header))

    def _reindex(self, *, verify: bool, trusted: int = 0, start: int | None = None) -> int:
        """Rebuild both indexes and the summaries from the .log file, or
        from file position `start` on, where _resume_index left them.

        With verify=True (the active segment after a possible crash) every
        batch's CRC and offset order are checked from file position
        `trusted` on (a batch boundary a flush fsynced up to) and the file
        is cut at the first bad batch.  Returns the number of bytes dropped.
        """
        self._tail.clear()      # rebuilt by _track from here: still a suffix
        if start is None:
            self.index.reset()
            self.time_index.reset()
            self._reset_state()
            start = 0
        self.walked_from = start
        end, reason = start, None
        trusted = max(trusted, start)
        try:
            for batch in chain(file_batches(self._fd, start, trusted, bodies=False),
                               file_batches(self._fd, trusted, self.size, bodies=verify)):
                header = batch.header
                if verify:
                    if header.base_offset < self.next_offset:
                        raise CorruptSegmentError(
                            batch.position,
                            f"base offset {header.base_offset} below {self.next_offset}")
                    if batch.position >= trusted and \
                            not batch_crc_ok(batch.buf, batch.offset, header):
                        raise CorruptSegmentError(batch.position, "CRC mismatch")
                self._track(batch.position, header)
                end = batch.position + LOG_OVERHEAD + header.batch_length
        except CorruptSegmentError as exc:
            reason = exc
        if reason is None:
            return 0
        dropped = self.size - end
        if verify:
            if self._zeros_from(end):   # what a crash leaves of preallocate.py's zeros
                log.warning("%s: truncating %d bytes of zeros after the last batch "
                            "(preallocated space, or a torn write)", self.log_path, dropped)
            else:
                log.warning("%s: %s; truncating %d bytes", self.log_path, reason, dropped)
            os.ftruncate(self._fd, end)
            self.size = self._reserved = end
            self._fsync()
        else:
            # Sealed data is never cut (later segments depend on it); reads
            # that reach the bad bytes will raise.
            log.error("%s: %s; indexed only the first %d bytes", self.log_path, reason, end)
        return dropped

    def _zeros_from(self, position: int) -> bool:
        """Is the file all zeros from `position` to its end?  (A preallocated
        tail after a crash; a short read of a torn tail says no.)"""
        left = self.size - position
        if left > 4 * (1 << 20):    # more than any zone: not ours
            return False
        data = os.pread(self._fd, left, position)
        return len(data) == left and not data.strip(b"\0")

    def recover(self, trusted: int = 0, counts: tuple[int, int] | None = None) -> int:
        """Open as the active segment: verify every batch from file position
        `trusted` on, cut a torn or corrupt tail.  `counts`: how many
        offset- and time-index entries were fsynced with the recovery point
        at `trusted`; the indexes are then kept below it and only the
        batches from its newest entry on are walked.  Returns the bytes dropped."""
        start = self._resume_index(trusted, counts) if counts and trusted else None
        return self._reindex(verify=True, trusted=trusted, start=start)

    def _resume_index(self, trusted: int, counts: tuple[int, int]) -> int | None:
        """Cut both indexes to the entries fsynced below `trusted` and set
        the summaries as they were at the newest kept offset-index entry:
        -> the position of that entry's batch, where the walk resumes;
        None (nothing kept) if the indexes do not hold what was fsynced."""
        n_index, n_time = counts
        # (entries past the counted ones may be torn: they are cut below)
        if not (self._indexes_existed and self.index.entries >= n_index
                and self.time_index.entries >= n_time):
            return None
        # The flush counted the offset index, then the time index, while an
        # append may have been adding to both: the last counted offset entry
        # may lack its time entry, so it is left to the walk.
        kept = self.index.count_below(trusted, n_index - 1)
        if kept == 0:
            return None
        self.index.keep(kept)
        relative, position = self.index.last()
        try:
            header = parse_header(self.pread(position, HEADER_SIZE), 0, position)
            first = parse_header(self.pread(0, HEADER_SIZE), 0, 0)
        except CorruptSegmentError:
            return None
        if header.base_offset + header.last_offset_delta != self.base_offset + relative:
            return None
        # Time entries up to that offset: the newest is the max timestamp there.
        self.time_index.keep(self.time_index.count_up_to(self.base_offset + relative, n_time))
        self._reset_state()
        newest = self.time_index.last_entry()
        if newest is not None:
            self.max_timestamp, self.offset_of_max_timestamp = newest
        self.first_timestamp = first.max_timestamp
        self.next_offset = header.base_offset
        return position

    def index_counts(self) -> tuple[int, int]:
        """Entries in the offset and time indexes, in that order."""
        return self.index.entries, self.time_index.entries

    def sync_indexes(self) -> None:
        self.index.flush()
        self.time_index.flush()

    def open_clean(self) -> bool:
        """Open as the active segment after a clean shutdown (the close
        fsynced it and its indexes, with a final time-index entry): trust
        it as load_sealed does, walking only the headers after the newest
        index entry, with no CRC scan.  False if the indexes do not look
        sane: the caller then recover()s it as after a crash."""
        last = self.index.last() if self.index.size_ok() else None
        sane = (self.index.sane(self.size) and self.time_index.sane()
                and (self._indexes_existed or self.size == 0)
                and self._load_tail())
        if not sane:
            log.warning("%s: index files missing or damaged after a clean shutdown; "
                        "recovering", self.log_path)
            return False
        newest = self.time_index.last_entry()
        if newest is not None:
            self.max_timestamp, self.offset_of_max_timestamp = newest
        # what _track would hold after appending every batch of the file:
        # the bytes since the batch of the newest index entry, and the
        # first batch's timestamp (time-based rolls)
        self._bytes_since_index = self.size - (last[1] if last else 0)
        if self.size:
            first = next(iter(file_batches(self._fd, 0, self.size, bodies=False,
                                           chunk=HEADER_SIZE)))
            self.first_timestamp = first.header.max_timestamp
        return True

    def load_sealed(self) -> None:
        """Open as a sealed segment: trust its indexes if they look sane
        (they were fsynced when the segment was sealed), else rebuild them."""
        sane = (self.index.sane(self.size) and self.time_index.sane()
                and (self._indexes_existed or self.size == 0)
                and self._load_tail())
        if not sane:
            log.warning("%s: index files missing or damaged; rebuilding", self.log_path)
            self._reindex(verify=False)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.index.flush()
            self.time_index.flush()
            return
        # Sealing wrote a final time-index entry, so the last entry is the
        # segment's max timestamp.
        last = self.time_index.last_entry()
        if last is not None:
            self.max_timestamp, self.offset_of_max_timestamp = last

    def _load_tail(self) -> bool:
        """Walk the headers after the newest offset-index entry (about an
        index interval of bytes) to find next_offset.  The walk doubles as a
        sanity check: the entry must point at a batch holding its offset,
        and the bytes after it must be whole batches."""
        last = self.index.last()
        position = last[1] if last else 0
        try:
            for i, batch in enumerate(self._header_walk(position)):
                header = batch.header
                if i == 0 and last and header.base_offset + header.last_offset_delta != (
                        self.base_offset + last[0]):
                    return False
                self.next_offset = header.base_offset + header.last_offset_delta + 1
        except CorruptSegmentError:
            return False
        return True

    def seal(self) -> None:
        """Called when the segment stops being active: record its max
        timestamp in the time index and make everything durable, so that a
        reopen can trust this segment without scanning it."""
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self._end_zone()
        self._end_reserved()
        self._fsync()
        self.index.flush()
        self.time_index.flush()

    def _end_reserved(self) -> None:
        """Cut space reserved past the data, and reserve no more."""
        if self._reserved > self.size:   # (after _end_zone: no filler writes here)
            os.ftruncate(self._fd, self.size)
        self._reserved = self.size
        self._no_reserve = True

    def _end_zone(self) -> None:
        """Stop writing zeros ahead and cut the file back to its data."""
        zone = self._zone
        if zone is None:
            return
        with zone.lock:
            zone.stop()
            if zone.filled > self.size:
                os.ftruncate(self._fd, self.size)
        self._zone = None

    # -------------------------------------------------------------- writes

    def fits_offsets(self, last_offset: int) -> bool:
        """Relative offsets are int32 in both indexes."""
        return last_offset - self.base_offset <= INT32_MAX

    def append(self, data, batches) -> None:
        """Write whole batches `data` (with (pos, header) list `batches`,
        offsets already final) at the end of the file."""
        start = self.size
        end = start + len(data)
        zone = self._zone
        if zone is None:
            reserved = self._reserved
            if (end > reserved and len(data) > SMALL_APPEND and self.config.preallocate
                    and not self._no_reserve):
                # a large append (no zone will start): reserve space first,
                # so the write lands in allocated blocks (preallocate.py)
                self._reserved = reserve_ahead(self._fd, reserved, end,
                                               self.config.segment_bytes)
                self._no_reserve = self._reserved == reserved  # refused: grow as we go
            self._pwrite(data, start)
            if (self._flushed and self.config.preallocate and not self._no_zone
                    and len(data) <= SMALL_APPEND):
                # (a log of large appends would outrun the zeros at once: it
                # never starts a zone, and writes no zeros it would not use)
                self._zone = zone = ZeroZone(self._fd, end, self.config.segment_bytes)
        elif end <= zone.filled:
            self._pwrite(data, start)    # into zeros: the filler is past them
        else:
            with zone.lock:              # past the zeros: not while the filler writes
                self._pwrite(data, start)
                zone.filled = max(zone.filled, end)
                if zone.fills:           # the zeros were ahead, and the log outran them:
                    zone.stop()          # faster than the filler, grow as we go
            if zone.stopped:
                self._zone, self._no_zone = None, True
        self.size = end
        if end > self._reserved:
            self._reserved = end
        for pos, header in batches:
            self._track(start + pos, header)
        if zone is not None and zone.wants_fill(end):
            zone.request(end)

    def _pwrite(self, data, position: int) -> None:
        if data.__class__ is Pieces:
            _pwritev_all(self._fd, data, position)
        else:
            _pwrite_all(self._fd, data, position)

    def truncate_at(self, position: int) -> None:
        """Drop everything from `position` (a batch boundary) on."""
        zone = self._zone
        self._presync = None        # it covered bytes that are cut now
        self._reserved = position   # the file's end again; an active segment reserves
        self._no_reserve = False
        if zone is None:
            os.ftruncate(self._fd, position)
        else:
            with zone.lock:     # the zeros ahead go too; the filler starts again here
                os.ftruncate(self._fd, position)
                zone.filled = position
        self.size = position
        self._tail.clear()
        self._reindex(verify=False)
        self._fsync()

    def flush(self) -> None:
        self._fsync()

    def unsynced(self) -> int:
        """Bytes written past what the newest finished fsync covers (a
        presync's included)."""
        covered = self._synced_to
        job = self._presync
        if job is not None and job.done and job.covers > covered:
            covered = job.covers
        return self.size - covered

    def presync_under_way(self) -> bool:
        job = self._presync
        return job is not None and not job.done

    def presync(self) -> None:
        """fdatasync what is written so far in the presync thread (presync.py)."""
        journal = None
        if _FSYNC_JOURNAL:
            path = self.log_path
            journal = lambda size: _journal_fsync(path, size)  # noqa: E731
        job = self._presync = Presync(self._fd, self.size, journal)
        start_presync(job)

    def _fsync(self) -> None:
        size = self.size  # bytes written before the fsync are the ones it covers
        # fdatasync: the data and whatever metadata reading it back needs (a
        # new size); not the times.  Into preallocated zeros: the data alone.
        os.fdatasync(self._fd)
        self._flushed = True
        self._synced_to = size
        if _FSYNC_JOURNAL:
            _journal_fsync(self.log_path, size)

    # --------------------------------------------------------------- reads

    def _header_walk(self, position: int):
        # Headers only; the chunk covers an index interval so that finding a
        # batch from its index entry usually costs a single pread.
        chunk = max(8192, 2 * self.config.index_interval_bytes)
        return file_batches(self._fd, position, self.size, bodies=False, chunk=chunk)

    def locate(self, offset: int):
        """(position, header) of the first batch whose last offset >= offset,
        or None if the segment ends before it."""
        tail = self._tail
        if tail and offset >= tail[0][1].base_offset:
            # every batch before the tail ends below `offset`: the answer is
            # in the tail, or past the segment's end
            for position, header in tail:
                if header.base_offset + header.last_offset_delta >= offset:
                    return position, header
            return None
        for batch in self._header_walk(self.index.lookup(offset)):
            if batch.header.base_offset + batch.header.last_offset_delta >= offset:
                return batch.position, batch.header
        return None

    def read(self, offset: int, max_bytes: int, min_one: bool) -> bytes | None:
        """Whole batches from the one containing `offset`, at most max_bytes
        (but the first batch regardless if min_one).  None if this segment
        holds nothing at or after `offset`."""
        found = self.locate(offset)
        if found is None:
            return None
        position, header = found
        first = LOG_OVERHEAD + header.batch_length
        if first > max_bytes:
            return self.pread(position, first) if min_one else b""
        data = self.pread(position, min(max_bytes, self.size - position))
        end = whole_batches_prefix(data)
        return data if end == len(data) else data[:end]

    def find_timestamp(self, timestamp: int):
        """(position, header) of the first batch with maxTimestamp >=
        timestamp, or None."""
        start = self.time_index.lookup(timestamp)
        position = 0 if start is None else self.index.lookup(start)
        for batch in self._header_walk(position):
            if batch.header.max_timestamp >= timestamp:
                return batch.position, batch.header
        return None

    def pread(self, position: int, size: int) -> bytes:
        return pread_exact(self._fd, size, position)

    def retention_timestamp(self) -> int:
        """The segment's newest timestamp for time retention; like Kafka, the
        file's mtime when no batch carries a timestamp."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return int(os.fstat(self._fd).st_mtime * 1000)

    # ----------------------------------------------------------- lifecycle

    def close(self) -> None:
        zone = self._zone
        if zone is not None:    # the filler must be done with our descriptor
            with zone.lock:
                zone.stop()
            self._zone = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self.index.close()
        self.time_index.close()

    def delete(self) -> None:
        self.close()
        # The .log goes first: a crash midway leaves orphan index files,
        # which the next open removes, never a log without its place.
        for path in (self.log_path, self.index.path, self.time_index.path):
            path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return f"Segment({self.log_path.name}, size={self.size})"
