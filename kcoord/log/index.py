"""Sparse offset index and time index files, in Kafka's on-disk layout.

`<base>.index`     entries of (relative offset int32, file position int32)
`<base>.timeindex` entries of (timestamp int64, relative offset int32)

Both big-endian, relative to the segment's base offset, appended in
increasing order.  Unlike Kafka we do not preallocate and mmap the files:
entries are appended with pwrite and binary-searched with pread, so an index
costs no memory however large the log, and the file size is always exactly
entries * entry size (which is what the recovery sanity check relies on).
"""
from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Callable

INT32_MAX = 2**31 - 1


class _IndexFile:
    ENTRY = struct.Struct(">ii")  # overridden

    def __init__(self, path: Path, base_offset: int):
        self.path = path
        self.base_offset = base_offset
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        size = os.fstat(self._fd).st_size
        self.file_size = size
        self.entries = size // self.ENTRY.size

    def _entry(self, i: int) -> tuple:
        return self.ENTRY.unpack(os.pread(self._fd, self.ENTRY.size, i * self.ENTRY.size))

    def _count_le(self, key: Callable[[tuple], int], target: int, strict: bool,
                  hi: int | None = None) -> int:
        """How many of the first `hi` entries (all by default) have a key
        <= target (< target if strict); keys increase along the file."""
        lo, hi = 0, self.entries if hi is None else min(hi, self.entries)
        while lo < hi:
            mid = (lo + hi) // 2
            k = key(self._entry(mid))
            if k < target or (not strict and k == target):
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _last_le(self, key: Callable[[tuple], int], target: int, strict: bool) -> tuple | None:
        """The last entry whose key is <= target (< target if strict)."""
        n = self._count_le(key, target, strict)
        return self._entry(n - 1) if n else None

    def _append(self, *values: int) -> None:
        os.pwrite(self._fd, self.ENTRY.pack(*values), self.entries * self.ENTRY.size)
        self.entries += 1
        self.file_size = self.entries * self.ENTRY.size

    def last(self) -> tuple | None:
        return self._entry(self.entries - 1) if self.entries else None

    def size_ok(self) -> bool:
        return self.file_size % self.ENTRY.size == 0

    def reset(self) -> None:
        self.keep(0)

    def keep(self, entries: int) -> None:
        """Drop every entry after the first `entries`."""
        os.ftruncate(self._fd, entries * self.ENTRY.size)
        self.entries = entries
        self.file_size = entries * self.ENTRY.size

    def flush(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class OffsetIndex(_IndexFile):
    """Maps an offset to the file position of a batch at or before it.

    Each entry is (last offset of a batch, position of that batch), so the
    batch containing offset X starts at or after lookup(X).
    """

    ENTRY = struct.Struct(">ii")

    def append(self, offset: int, position: int) -> None:
        self._append(offset - self.base_offset, position)

    def lookup(self, offset: int) -> int:
        entry = self._last_le(lambda e: e[0], offset - self.base_offset, strict=False)
        return entry[1] if entry else 0

    def count_below(self, position: int, among: int) -> int:
        """How many of the first `among` entries point below file `position`."""
        return self._count_le(lambda e: e[1], position, strict=True, hi=among)

    def sane(self, log_size: int) -> bool:
        if not self.size_ok():
            return False
        last = self.last()
        return last is None or (0 <= last[0] and 0 <= last[1] < log_size)


class TimeIndex(_IndexFile):
    """Maps a timestamp to an offset before which every timestamp is smaller.

    Each entry is (max timestamp so far in the segment, offset of the batch
    where it was reached); timestamps strictly increase across entries.
    """

    ENTRY = struct.Struct(">qi")

    def __init__(self, path: Path, base_offset: int):
        super().__init__(path, base_offset)
        last = self.last() if self.size_ok() else None
        self._last_ts = last[0] if last else -1

    def maybe_append(self, timestamp: int, offset: int) -> None:
        # Only a new maximum is worth an entry; it keeps entries sorted.
        if timestamp > self._last_ts:
            self._append(timestamp, offset - self.base_offset)
            self._last_ts = timestamp

    def lookup(self, timestamp: int) -> int | None:
        """An offset whose batch and everything before it is older than
        `timestamp` (a safe place to start scanning), or None."""
        entry = self._last_le(lambda e: e[0], timestamp, strict=True)
        return self.base_offset + entry[1] if entry else None

    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, absolute offset) of the newest entry."""
        last = self.last()
        return (last[0], self.base_offset + last[1]) if last else None

    def keep(self, entries: int) -> None:
        super().keep(entries)
        last = self.last()
        self._last_ts = last[0] if last else -1

    def count_up_to(self, offset: int, among: int) -> int:
        """How many of the first `among` entries name an offset <= `offset`."""
        return self._count_le(lambda e: e[1], offset - self.base_offset, strict=False, hi=among)

    def sane(self) -> bool:
        if not self.size_ok():
            return False
        last = self.last()
        return last is None or last[1] >= 0
