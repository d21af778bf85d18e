"""The leader-epoch cache: Kafka's `leader-epoch-checkpoint` (KIP-101).

Each entry (epoch, start offset) says the leader of `epoch` wrote its first
record at `start offset`; an epoch ends where the next one starts (the
latest ends at the log end).  Followers compare these with the leader's
(OffsetForLeaderEpoch) to find where their logs diverge.

Pure data: no files here.  The partition log owns one, assigns entries as
batches are appended, cuts it on truncation and writes it to its checkpoint
file (text, Kafka's layout: a version line "0", a count line, then one
"epoch start_offset" line per entry).
"""
from __future__ import annotations

import bisect

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
CHECKPOINT_VERSION = 0


class EpochCache:
    __slots__ = ("_epochs", "_starts")

    def __init__(self, entries=()) -> None:
        self._epochs: list[int] = []
        self._starts: list[int] = []
        for epoch, start in entries:
            self.assign(epoch, start)

    # -------------------------------------------------------------- reading

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._starts))

    @property
    def latest_epoch(self) -> int:
        """The newest epoch, UNDEFINED_EPOCH when the cache is empty."""
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def end_offset_for(self, requested: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch, Kafka's rules: the
        largest epoch <= `requested` and the start of the first epoch after
        it; the latest epoch ends at the log end; an epoch below every known
        one maps to (requested, first known start); unknown or undefined ->
        (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)."""
        if requested == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested == self._epochs[-1]:
            return requested, log_end_offset
        higher = bisect.bisect_right(self._epochs, requested)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested, self._starts[0]
        return self._epochs[higher - 1], self._starts[higher]

    def epoch_end_offset(self, requested: int, log_end_offset: int) -> tuple[int, int] | None:
        """As end_offset_for, None instead of an undefined offset (Kafka's
        UnifiedLog.endOffsetForEpoch)."""
        epoch, offset = self.end_offset_for(requested, log_end_offset)
        return None if offset == UNDEFINED_EPOCH_OFFSET else (epoch, offset)

    # ------------------------------------------------------------- changing

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset` (a batch appended in
        a new epoch, or a leader taking over at its log end).  Entries that
        would break monotonicity (same or later epoch, same or later start)
        are dropped first.  -> whether the cache changed."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"epoch entry ({epoch}, {start_offset}) must not be negative")
        if self._epochs and epoch == self._epochs[-1] and start_offset >= self._starts[-1]:
            return False
        while self._epochs and (self._epochs[-1] >= epoch or self._starts[-1] >= start_offset):
            self._epochs.pop()
            self._starts.pop()
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """The log was cut at `end_offset`: drop epochs starting at or after it."""
        changed = False
        while self._starts and self._starts[-1] >= end_offset:
            self._epochs.pop()
            self._starts.pop()
            changed = True
        return changed

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log now starts at `start_offset`: drop epochs that start at or
        before it, keeping the last of them re-based at `start_offset`."""
        i = bisect.bisect_right(self._starts, start_offset)
        if i == 0:
            return False
        last_epoch = self._epochs[i - 1]
        if i == 1 and self._starts[0] == start_offset:
            return False
        del self._epochs[:i], self._starts[:i]
        self._epochs.insert(0, last_epoch)
        self._starts.insert(0, start_offset)
        return True

    def clear(self) -> None:
        self._epochs.clear()
        self._starts.clear()

    def copy(self) -> "EpochCache":
        return EpochCache(self.entries)

    # ------------------------------------------------------------ checkpoint

    def to_text(self) -> str:
        lines = [str(CHECKPOINT_VERSION), str(len(self._epochs))]
        lines += [f"{e} {s}" for e, s in zip(self._epochs, self._starts)]
        return "\n".join(lines) + "\n"

    @classmethod
    def from_text(cls, text: str) -> "EpochCache":
        """Parse a checkpoint; ValueError when it is malformed."""
        lines = text.splitlines()
        if len(lines) < 2 or lines[0].strip() != str(CHECKPOINT_VERSION):
            raise ValueError("not a version 0 leader-epoch checkpoint")
        count = int(lines[1])
        if count != len(lines) - 2:
            raise ValueError(f"checkpoint says {count} entries, holds {len(lines) - 2}")
        cache = cls()
        for line in lines[2:]:
            epoch_text, start_text = line.split()
            epoch, start = int(epoch_text), int(start_text)
            if cache._epochs and (epoch <= cache._epochs[-1] or start < cache._starts[-1]):
                raise ValueError(f"checkpoint entries out of order at {line!r}")
            cache.assign(epoch, start)
        return cache

    def __eq__(self, other) -> bool:
        return isinstance(other, EpochCache) and self.entries == other.entries

    def __repr__(self) -> str:
        return f"EpochCache({self.entries})"
