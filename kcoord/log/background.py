"""The log's background threads (the zeros written ahead of a segment,
the fsync ahead of a roll): one worker thread each, started on first use,
and the descriptors they write and fsync through."""
from __future__ import annotations

import logging
import os
import queue
import threading
from typing import Callable

log = logging.getLogger(__name__)


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


class Worker:
    """A daemon thread, started by the first `put`, that calls `run(job)`
    for each job in turn.  A job reports its own errors; anything it lets
    escape is logged and handed to `failed(job)`, and the thread serves on."""

    def __init__(self, name: str, run: Callable, failed: Callable) -> None:
        self.name = name
        self._run = run
        self._failed = failed
        self._queue: "queue.SimpleQueue | None" = None
        self._lock = threading.Lock()

    def put(self, job) -> None:
        q = self._queue
        if q is None:
            with self._lock:
                if self._queue is None:
                    self._queue = queue.SimpleQueue()
                    threading.Thread(target=self._serve, args=(self._queue,),
                                     name=self.name, daemon=True).start()
                q = self._queue
        q.put(job)

    def _serve(self, q: "queue.SimpleQueue") -> None:
        while True:
            job = q.get()
            try:
                self._run(job)
            except Exception:
                log.exception("%s: a job failed", self.name)
                self._failed(job)
