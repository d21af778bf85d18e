"""The recovery point of a partition's active segment (Kafka's
recovery-point-offset-checkpoint): how far into it a flush has fsynced.

After a crash only the bytes past it can be torn, so opening CRC-checks
only those (the rest is indexed from batch headers).  It is written by a
flush once the active segment has grown RECOVERY_POINT_BYTES past the
last one (a few writes per segment, none for a small log), and forgotten
before anything cuts the log (bytes below it could be written again and
be lost in a crash).
"""
from __future__ import annotations

import threading
from pathlib import Path

from .checkpoint_file import write_checkpoint

FILE_NAME = "recovery-point"
RECOVERY_POINT_BYTES = 4 << 20


class RecoveryPoint:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()  # flushes run in worker threads
        self._written = (-1, 0)        # (segment base, position) last written
        self._generation = 0           # bumped by forget(): a flush begun before writes nothing

    def read(self, base_offset: int, size: int) -> int:
        """The trusted position in the active segment at `base_offset` of
        `size` bytes (0: nothing trusted, scan it all)."""
        try:
            base, position = (int(x) for x in (self.path / FILE_NAME).read_text().split())
        except (FileNotFoundError, ValueError):
            return 0
        if base != base_offset or not 0 < position <= size:
            return 0
        self._written = (base, position)
        return position

    def generation(self) -> int:
        return self._generation

    def flushed(self, base_offset: int, position: int, generation: int) -> None:
        """A flush fsynced the segment at `base_offset` up to `position`;
        `generation` as it was before the flush read the position."""
        last_base, last = self._written
        if position - (last if last_base == base_offset else 0) < RECOVERY_POINT_BYTES:
            return
        with self._lock:
            if generation != self._generation:
                return
            write_checkpoint(self.path, FILE_NAME, f"{base_offset} {position}\n")
            self._written = (base_offset, position)

    def forget(self) -> None:
        """Before the log is cut: nothing of the active segment is trusted."""
        with self._lock:
            self._generation += 1
            self._written = (-1, 0)
            (self.path / FILE_NAME).unlink(missing_ok=True)
