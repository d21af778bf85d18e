"""A full segment's data fsynced in a background thread before its roll.

Why: a roll seals the old segment with an fdatasync on the event loop
(Segment.seal: a reopen then trusts it without a scan).  For a log written
with acks=1 nothing has fsynced the segment before, so that one fdatasync
writes the whole segment back while the loop waits: 19-84 ms for a 32 MiB
segment, 120-140 ms for 256 MiB on this VM, 909 ms for 1 GiB (load ~18;
with presyncs: 2.2 ms).  Kafka flushes a rolled segment from its scheduler
instead.

How: once the active segment is three quarters full and holds at least
MIN_UNSYNCED bytes not yet fsynced, a `Presync` fdatasyncs them in a daemon
thread (on a descriptor of its own) while the loop keeps appending.  A roll
for size alone then waits for it (PartitionLog._roll_later): the segment
takes appends past segment.bytes, by at most a quarter of it, until a
presync is done and what it did not cover is under MIN_UNSYNCED; the seal's
fdatasync on the loop then writes that tail only.  A presync is only an
early flush: it changes nothing in what a crash may keep or what recovery
does (the seal still fsyncs before the segment counts as sealed).  Logs
that are fsynced often (acks=all, the coordinators) hold little unsynced
data and roll at once, as before; so do small segments.
"""
from __future__ import annotations

import logging
import os
from typing import Callable

from .background import Worker, own_descriptor

log = logging.getLogger(__name__)

MIN_UNSYNCED = 4 << 20    # a presync starts only for this much, and a roll waits only past it


class Presync:
    """One background fdatasync of a segment's data up to `covers` bytes."""

    __slots__ = ("covers", "done", "_fd", "_journal")

    def __init__(self, fd: int, covers: int, journal: Callable[[int], None] | None) -> None:
        self.covers = covers
        self.done = False
        self._fd = own_descriptor(fd)   # the segment may close its own meanwhile
        self._journal = journal

    def run(self) -> None:
        try:
            os.fdatasync(self._fd)
            if self._journal is not None:
                self._journal(self.covers)
        except OSError as exc:   # the seal's own fsync will meet (and raise) it
            log.warning("fsync ahead of a roll failed: %r", exc)
        finally:
            os.close(self._fd)
            self.done = True


def _failed(job: Presync) -> None:
    job.done = True


_worker = Worker("kcoord-presync", Presync.run, _failed)


def start(job: Presync) -> None:
    """Queue the job for the presync thread (started on first use)."""
    _worker.put(job)
