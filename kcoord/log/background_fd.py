"""Descriptors for the log's background threads (the zeros written ahead,
the fsync ahead of a roll)."""
from __future__ import annotations

import os


def own_descriptor(fd: int) -> int:
    """A descriptor of the same file on an open file description of its
    own, for an fsync in a background thread.  Not os.dup: Linux reports a
    writeback error once per open file description (errseq), so an fsync on
    a dup'd descriptor that met the error would leave the segment's own next
    fsync answering success over pages that never reached the disk.  On a
    description of its own, the segment's fsync still reports it."""
    try:
        return os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_CLOEXEC)
    except OSError:  # no /proc: the segment's fsync may then miss the background one's error
        return os.dup(fd)
