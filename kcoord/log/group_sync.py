"""Group commit of fsyncs on an asyncio loop.

Every log that asks for durability during one loop iteration is flushed
once, after all the requests read in that iteration were appended; their
waiters are then released together.  One fsync serves many requests.
"""
from __future__ import annotations

import asyncio
import logging

log = logging.getLogger("kcoord.group_sync")


class GroupSync:
    def __init__(self, linger_ms: float = 0.0) -> None:
        self.linger = linger_ms / 1000.0
        self._dirty: dict[int, object] = {}
        self._waiters: list[asyncio.Future] = []
        self._scheduled = False
        self.flushes = 0  # fsync rounds so far (exposed for metrics and tests)

    def sync(self, logs) -> asyncio.Future:
        """A future that completes once every log in `logs` is on disk."""
        loop = asyncio.get_running_loop()
        for plog in logs:
            self._dirty[id(plog)] = plog
        fut = loop.create_future()
        self._waiters.append(fut)
        if not self._scheduled:
            self._scheduled = True
            if self.linger > 0:
                loop.call_later(self.linger, self._run)
            else:
                loop.call_soon(self._run)
        return fut

    def _run(self) -> None:
        dirty, waiters = self._dirty, self._waiters
        self._dirty, self._waiters, self._scheduled = {}, [], False
        self.flushes += 1
        try:
            for plog in dirty.values():
                plog.flush()
        except Exception as exc:  # a failed fsync must fail every waiter, never ack
            log.exception("fsync failed")
            for fut in waiters:
                if not fut.done():
                    fut.set_exception(exc)
            return
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)
