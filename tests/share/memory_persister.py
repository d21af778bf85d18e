"""An in-memory SharePersister for tests: the share coordinator's merge rules
(a write's batches replace what they overlap, batches below the start offset
are pruned) without its log.  `fail_next` makes writes answer an error;
`gate` (an asyncio.Event) holds every write until it is set, so a test can
act while a write is surely out, whatever the machine's load."""
from __future__ import annotations

import asyncio

from kcoord.protocol.errors import Err
from kcoord.share.persister import ShareKey, ShareState, ShareSummary, StateBatch


def merge(old: list[StateBatch], new: list[StateBatch], start: int) -> list[StateBatch]:
    """Newer ranges win over what they overlap; nothing below `start`."""
    cells: dict[int, tuple[int, int]] = {}
    for b in old:
        for o in range(b.first_offset, b.last_offset + 1):
            cells[o] = (b.delivery_state, b.delivery_count)
    for b in new:
        for o in range(b.first_offset, b.last_offset + 1):
            cells[o] = (b.delivery_state, b.delivery_count)
    out: list[list[int]] = []
    for o in sorted(k for k in cells if k >= start):
        s, c = cells[o]
        if out and out[-1][1] + 1 == o and out[-1][2:] == [s, c]:
            out[-1][1] = o
        else:
            out.append([o, o, s, c])
    return [StateBatch(*r) for r in out]


class MemoryPersister:
    def __init__(self, delay: float = 0.0, gate: asyncio.Event | None = None) -> None:
        self.states: dict[ShareKey, ShareState] = {}
        self.writes = 0
        self.writes_started = 0
        self.gate = gate
        self.fail_next = 0            # the next n writes answer fail_code
        self.fail_code = Err.COORDINATOR_NOT_AVAILABLE
        self.delay = delay

    async def _pause(self) -> None:
        if self.delay:
            await asyncio.sleep(self.delay)

    async def initialize(self, key: ShareKey, state_epoch: int, start_offset: int) -> int:
        self.states[key] = ShareState(state_epoch=state_epoch, start_offset=start_offset)
        return Err.NONE

    async def read(self, key: ShareKey, _leader_epoch: int) -> ShareState:
        await self._pause()
        state = self.states.setdefault(key, ShareState())
        return ShareState(state.error_code, state.state_epoch, state.start_offset,
                          state.leader_epoch, list(state.batches))

    async def write(self, key: ShareKey, _state_epoch: int, _leader_epoch: int, start_offset: int,
                    batches: list[StateBatch], _delivery_complete_count: int = -1) -> int:
        self.writes_started += 1
        if self.gate is not None:
            await self.gate.wait()
        await self._pause()
        if self.fail_next:
            self.fail_next -= 1
            return self.fail_code
        self.writes += 1
        state = self.states.setdefault(key, ShareState())
        if start_offset >= 0:
            state.start_offset = start_offset
        state.batches = merge(state.batches, batches, state.start_offset)
        return Err.NONE

    async def delete(self, key: ShareKey) -> int:
        self.states.pop(key, None)
        return Err.NONE

    async def summary(self, key: ShareKey) -> ShareSummary:
        state = self.states.get(key)
        if state is None:
            return ShareSummary()
        return ShareSummary(start_offset=state.start_offset)
