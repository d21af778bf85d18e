"""Zeros written ahead of an active segment's end (LogConfig.preallocate).

Why: on ext4 an fsync of a file whose size changed writes the data, then
the inode (two synchronous I/Os in a row; without a journal nothing merges
them).  An append into blocks that already exist and were made durable
changes no metadata, so fdatasync writes the data alone: about half the I/O
and half the kernel CPU of each durable step (a one-node transaction makes
six in a row).  PostgreSQL zero-fills its WAL segments for the same reason;
posix_fallocate'd space would not do (the first write into each block
converts an unwritten extent, a metadata write again).

How: a `ZeroZone` belongs to one active segment.  One daemon thread, shared
by every log, writes zeros in pieces from the zone's end (`filled`, the
file's size as far as the segment is concerned) up to a target a chunk
ahead of the data, then fdatasyncs them (size and all) while the loop keeps
appending below.  The filler writes only at or past `filled`, under the
zone's lock; an append that stays below `filled` writes without the lock
(the filler never goes back there), one that reaches past it takes the
lock.  A zone starts at a small append after the segment's first flush
(a log of large appends would outrun it at once).  An append that outruns
the zone (the log is written faster than the filler keeps ahead) ends
preallocation for that segment: its writes then extend the file as
before, and nothing is zeroed twice.  The segment keeps its true end in memory; a clean close or a roll
cuts the file back to it, a crash leaves zeros after the last batch, which
recovery cuts (a zero batch length is never a valid batch).

Correctness never waits on the filler: an append past the zeros' durable
end is made durable by its own fdatasync, metadata included.

A log of large appends (a producer's batches, a follower's fetches) gets
no zone; its segment reserves space ahead instead (`reserve_ahead`, on the
loop): one fallocate of SPACE_AHEAD bytes past the data before the write
that would reach past the last.  Its fsyncs convert the blocks they cover
(metadata, as an append that grows the file also writes): not the zone's
gain, but the buffered write itself no longer reserves, maps and records
each 4 KiB block as ext4's delayed allocation does: a 1 MiB write into
reserved space took ~0.11 s of system time per GB against ~0.18 growing
the file (this VM, pages reused).  Reserved space reads as zeros: after a
crash it is what a zone leaves, cut the same way; a roll or a clean close
cuts it too.
"""
from __future__ import annotations

import logging
import os
import threading

from .background import Worker, own_descriptor

log = logging.getLogger(__name__)

CHUNK_BYTES = 256 << 10   # zeros kept ahead of the data (refilled below half of it)
SMALL_APPEND = 32 << 10   # a zone starts only at an append this small (after a flush)
_PIECE = 64 << 10         # zeros written per hold of the zone's lock
_ZEROS = bytes(_PIECE)
SPACE_AHEAD = 4 << 20     # reserved past a large append's end (at most what
                          # recovery takes for zeros a zone left: Segment._zeros_from)


def reserve_ahead(fd: int, reserved: int, end: int, limit: int) -> int:
    """Space for data up to `end` (the file holds data or reserved space up
    to `reserved`): if it reaches past `reserved`, reserve from there to
    SPACE_AHEAD past `end` (not past `limit`, the segment's roll size,
    unless the data does).  -> the new reserved end; `reserved` itself if
    the file system refuses (the write then grows the file as before)."""
    if end <= reserved:
        return reserved
    target = min(end + SPACE_AHEAD, max(end, limit))
    try:
        os.posix_fallocate(fd, reserved, target - reserved)
    except OSError:   # no fallocate here, or no space: the write decides
        return reserved
    return target


class ZeroZone:
    __slots__ = ("lock", "filled", "target", "stopped", "queued", "fills", "_fd", "_limit")

    def __init__(self, fd: int, end: int, limit: int) -> None:
        self.lock = threading.Lock()
        self.filled = end        # the file holds data or zeros up to here
        self.target = end        # what the queued fill aims for
        self.stopped = False
        self.queued = False
        self.fills = 0           # fills done: once ahead, an append past the zeros outran it
        self._fd = fd            # the segment's descriptor (closed only after stop())
        self._limit = limit      # no zeros past the segment's roll size

    def wants_fill(self, end: int) -> bool:
        """After an append ending at `end` (on the loop): is the zone short?"""
        return not self.queued and not self.stopped and self.filled - end < CHUNK_BYTES // 2 \
            and self.filled < self._limit

    def request(self, end: int) -> None:
        """Queue a fill up to a chunk past `end` (on the loop)."""
        self.queued = True
        self.target = min(end + CHUNK_BYTES, self._limit)
        _filler.put(self)

    def stop(self) -> None:
        """No more zeros (under the caller's hold of `lock`)."""
        self.stopped = True

    def fill(self) -> None:
        """In the filler thread: zeros up to `target`, then one fdatasync
        (their blocks and the file's new size), so later appends there are
        made durable by a data-only write."""
        with self.lock:
            self.queued = False
            if self.stopped:
                return
            fd = own_descriptor(self._fd)   # the segment may close its own meanwhile
        try:
            wrote = False
            while True:
                with self.lock:
                    start = self.filled
                    if self.stopped or start >= self.target:
                        break
                    n = min(_PIECE, self.target - start)
                    os.pwrite(fd, _ZEROS[:n], start)
                    self.filled = start + n
                    wrote = True
            if wrote:
                os.fdatasync(fd)
                self.fills += 1
        except OSError:
            # a full disk, say: appends extend the file themselves, as without a zone
            with self.lock:
                self.stopped = True
        finally:
            os.close(fd)


def _failed(zone: ZeroZone) -> None:
    # (no descriptor left, say) the zone stops; the thread serves on
    with zone.lock:
        zone.stopped = True


_filler = Worker("kcoord-prealloc", ZeroZone.fill, _failed)
