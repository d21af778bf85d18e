"""Wake-ups of long-polling fetches (Kafka's DelayedFetch completion).

A fetch parks on the logs it reads and is woken by news on one of them
(records appended, made durable, or committed by the high watermark);
`notify()` without a log (a role change, a stop) wakes every parked fetch.
Share fetches wait for any news at all (`wait()` without logs).  Keyed
wake-ups matter in a cluster: a follower's fetch covers every partition it
follows on a leader, and waking all of them on every write of any
partition cost each one a full read of its partitions.
"""
from __future__ import annotations

import asyncio

from ..log.waiters import Waiters


class AppendNotifier:
    def __init__(self) -> None:
        self._any = Waiters()
        self._by_log: dict[int, set[asyncio.Future]] = {}   # id(log) -> parked fetches
        # told every news first (plog, or None for all): followers' fetch
        # sessions, which leave idle partitions out until news on them
        self.listener = None

    def wait(self, logs=None) -> asyncio.Future:
        """A future of the next news on one of `logs` (its result: that log,
        or None for a wake-up of all); without logs, of any news."""
        if logs is None:
            return self._any.wait()
        fut = asyncio.get_running_loop().create_future()
        keys = {id(plog) for plog in logs}
        by_log = self._by_log
        for key in keys:
            parked = by_log.get(key)
            if parked is None:
                parked = by_log[key] = set()
            parked.add(fut)

        def forget(done: asyncio.Future) -> None:
            for key in keys:
                parked = by_log.get(key)
                if parked is not None:
                    parked.discard(done)
                    if not parked:
                        del by_log[key]

        fut.add_done_callback(forget)
        return fut

    def notify(self, plog=None) -> None:
        """News on `plog` (None: on everything)."""
        if self.listener is not None:
            self.listener(plog)
        if self._any:
            self._any.wake()
        if plog is None:
            everything, self._by_log = self._by_log, {}
            for parked in everything.values():
                _wake(parked, None)
            return
        parked = self._by_log.pop(id(plog), None)
        if parked:
            _wake(parked, plog)

    def notify_logs(self, logs) -> None:
        for plog in logs:
            self.notify(plog)


def _wake(parked: set, value) -> None:
    for fut in parked:
        if not fut.done():
            fut.set_result(value)
