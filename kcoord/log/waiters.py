"""The one waiter type: futures waiting for the next occurrence of an event
(an fsync round, an append, a role change), all released together."""
from __future__ import annotations

import asyncio


class Waiters:
    def __init__(self) -> None:
        self._futures: set[asyncio.Future] = set()

    def __bool__(self) -> bool:
        return bool(self._futures)

    def wait(self) -> asyncio.Future:
        """A future of the next wake() or fail(); a cancelled one leaves at once."""
        fut = asyncio.get_running_loop().create_future()
        self._futures.add(fut)
        fut.add_done_callback(self._futures.discard)
        return fut

    def wake(self, value=None) -> None:
        """Every waiting future gets `value`."""
        futures, self._futures = self._futures, set()
        for fut in futures:
            if not fut.done():
                fut.set_result(value)

    def fail(self, exc: BaseException) -> None:
        """Every waiting future gets `exc` (a failed fsync: never an acknowledgement)."""
        futures, self._futures = self._futures, set()
        for fut in futures:
            if not fut.done():
                fut.set_exception(exc)
