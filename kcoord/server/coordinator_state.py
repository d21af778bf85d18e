"""One ownership state machine for every coordinator runtime (the group
shards over __consumer_offsets, the transaction coordinator over
__transaction_state, and next the share coordinator): Kafka's
CoordinatorState, INITIAL and CLOSED folded into NOT_OWNED.

    NOT_OWNED --load(epoch)--> LOADING --replayed--> ACTIVE
        ^                        |  \\--failed--> FAILED --load--> LOADING
        +------unload(epoch)-----+---------------------+

A load for an epoch below the current one is ignored; an unload with an
epoch only acts for a newer one (the control plane's leader epochs)."""
from __future__ import annotations

import asyncio
from typing import Any, Callable, Coroutine, Iterable

from ..protocol.errors import Err

NOT_OWNED = "not-owned"   # not this node's: NOT_COORDINATOR
LOADING = "loading"       # replaying its log: COORDINATOR_LOAD_IN_PROGRESS
ACTIVE = "active"         # serving
FAILED = "failed"         # its load failed: NOT_COORDINATOR until loaded again


class CoordinatorState:
    """Whether this node coordinates one partition of a coordinator's log,
    and for which leader epoch."""

    def __init__(self) -> None:
        self.state = NOT_OWNED
        self.epoch = -1
        self._load_task: asyncio.Task | None = None

    @property
    def loaded(self) -> bool:
        return self.state is ACTIVE

    def state_error(self) -> int:
        """NONE while ACTIVE, else the Kafka error a request gets."""
        if self.state is ACTIVE:
            return Err.NONE
        return Err.COORDINATOR_LOAD_IN_PROGRESS if self.state is LOADING else Err.NOT_COORDINATOR

    def take_epoch(self, epoch: int) -> bool:
        """onElection's check: False for an epoch below the current one
        (ignored); else it becomes the current one."""
        if epoch < self.epoch:
            return False
        self.epoch = epoch
        return True

    def start_load(self, replay: Callable[[], Coroutine[Any, Any, None]]) -> asyncio.Task:
        """-> LOADING, with `replay()` running as the load task."""
        self.state = LOADING
        self._load_task = asyncio.get_running_loop().create_task(replay())
        return self._load_task

    def finish_load(self, ok: bool) -> None:
        """The load task ends: ACTIVE, or FAILED."""
        self.state = ACTIVE if ok else FAILED
        self._load_task = None  # (a waiter for loads waits for tasks under way only)

    def take_resignation(self, epoch: int | None) -> bool:
        """onResignation's check: with an epoch, only a newer one counts (it
        becomes the current one); -> whether there is anything to unload."""
        if epoch is not None:
            if epoch <= self.epoch:
                return False
            self.epoch = epoch
        return self.state is not NOT_OWNED

    def stop(self) -> None:
        """-> NOT_OWNED, cancelling a load under way."""
        if self._load_task is not None:
            self._load_task.cancel()
            self._load_task = None
        self.state = NOT_OWNED


async def wait_loaded(states: Iterable[CoordinatorState]) -> None:
    """Until none of `states` is loading (awaiting the load tasks, no polling)."""
    states = list(states)
    while True:
        tasks = [s._load_task for s in states if s._load_task is not None]
        if not tasks:
            return
        await asyncio.gather(*tasks, return_exceptions=True)
