"""The recovery point of a partition's active segment (Kafka's
recovery-point-offset-checkpoint): how far into it a flush has fsynced.

After a crash only the bytes past it can be torn, so opening CRC-checks
only those; below it the segment's index entries counted with the point
(fsynced before it was written) are kept, and batch headers are read only
from the newest of them on.  It is written by a
flush once the active segment has grown RECOVERY_POINT_BYTES past the
last one (a few writes per segment, none for a small log), and forgotten
before anything cuts the log (bytes below it could be written again and
be lost in a crash).
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

from .checkpoint_file import write_checkpoint

FILE_NAME = "recovery-point"
RECOVERY_POINT_BYTES = 4 << 20


class RecoveryPoint:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()  # flushes run in worker threads
        self._written = (-1, 0)        # (segment base, position) last written
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
        self._written = (base, position)
        counts = (fields[2], fields[3]) if len(fields) == 4 else None
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
        last_base, last = self._written
        if position - (last if last_base == base_offset else 0) < RECOVERY_POINT_BYTES:
            return
        sync_indexes()
        with self._lock:
            if generation != self._generation:
                return
            write_checkpoint(self.path, FILE_NAME,
                             f"{base_offset} {position} {counts[0]} {counts[1]}\n")
            self._written = (base_offset, position)

    def forget(self) -> None:
        """Before the log is cut: nothing of the active segment is trusted."""
        with self._lock:
            self._generation += 1
            self._written = (-1, 0)
            (self.path / FILE_NAME).unlink(missing_ok=True)
