"""The recovery point of a partition's active segment (Kafka's
recovery-point-offset-checkpoint): how far into it a flush has fsynced.

After a crash only the bytes past it can be torn, so opening CRC-checks
only those; below it the segment's index entries counted with the point
(fsynced before it was written) are kept, and batch headers are read only
from the newest of them on.  It is written by a
flush once the active segment has grown RECOVERY_POINT_BYTES past the last
one and holds RECOVERY_POINT_ENTRIES offset-index entries more (about one
per batch of large batches: a log of 1 MB produce batches writes one every
64 MB, not every 4), or has grown RECOVERY_POINT_SPAN times
RECOVERY_POINT_BYTES past it (a few writes per segment, none for a small
log); forgotten before anything cuts the log (bytes below it could be
written again and be lost in a crash).  What a crash leaves to scan is thus
at most 4 MB of small batches (coordinator logs), or 64 batches of large
ones: each point costs four fsyncs (the two indexes, the file, its
directory), which for a log of large batches were half the fsyncs of an
acks=all produce.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

from .checkpoint_file import write_checkpoint

FILE_NAME = "recovery-point"
RECOVERY_POINT_BYTES = 4 << 20
RECOVERY_POINT_ENTRIES = 64
RECOVERY_POINT_SPAN = 16  # at most this many RECOVERY_POINT_BYTES between two points


class RecoveryPoint:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()  # flushes run in worker threads
        self._written = (-1, 0, 0)     # (segment base, position, index entries) last written
        self._generation = 0           # bumped by forget(): a flush begun before writes nothing

    def read(self, base_offset: int, size: int) -> tuple[int, tuple[int, int] | None]:
        """(the trusted position in the active segment at `base_offset` of
        `size` bytes, the (offset index, time index) entries fsynced with
        it or None if not recorded); (0, None): nothing trusted, scan it all."""
        try:
            fields = [int(x) for x in (self.path / FILE_NAME).read_text().split()]
        except (FileNotFoundError, ValueError):
            return 0, None
        if len(fields) not in (2, 4):
            return 0, None
        base, position = fields[:2]
        if base != base_offset or not 0 < position <= size:
            return 0, None
        counts = (fields[2], fields[3]) if len(fields) == 4 else None
        self._written = (base, position, counts[0] if counts else 0)
        return position, counts

    def generation(self) -> int:
        return self._generation

    def flushed(self, base_offset: int, position: int, generation: int,
                counts: tuple[int, int], sync_indexes: Callable[[], None]) -> None:
        """A flush fsynced the segment at `base_offset` up to `position`;
        `generation` as it was before the flush read the position, `counts`
        the segment's (offset index, time index) entries read before it.
        A new point first fsyncs the indexes (sync_indexes), so that
        recovery may keep the counted entries that lie below it."""
        last_base, last, last_entries = self._written
        if last_base != base_offset:
            last = last_entries = 0
        grown = position - last
        if grown < RECOVERY_POINT_BYTES or (counts[0] - last_entries < RECOVERY_POINT_ENTRIES
                                            and grown < RECOVERY_POINT_SPAN * RECOVERY_POINT_BYTES):
            return
        sync_indexes()
        with self._lock:
            if generation != self._generation:
                return
            write_checkpoint(self.path, FILE_NAME,
                             f"{base_offset} {position} {counts[0]} {counts[1]}\n")
            self._written = (base_offset, position, counts[0])

    def forget(self) -> None:
        """Before the log is cut: nothing of the active segment is trusted."""
        with self._lock:
            self._generation += 1
            self._written = (-1, 0, 0)
            (self.path / FILE_NAME).unlink(missing_ok=True)
