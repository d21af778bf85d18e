"""InitProducerId for idempotent (non-transactional) producers."""
from __future__ import annotations

import time

from ..protocol.api import error_response
from ..protocol.errors import Err

NODE_BITS = 10
NODE_MASK = (1 << NODE_BITS) - 1


class ProducerIds:
    def __init__(self, node_id: int | None = None) -> None:
        # ids stay unique across restarts without persisting a counter:
        # the start time in ms leaves room for 1000 ids per ms of uptime.
        # Wall time, not the server's clock: only real time grows across restarts
        self._next = int(time.time() * 1000) * 1000
        # a cluster's node: its id in the low 10 bits keeps nodes' ids apart
        self._node = None if node_id is None else node_id & NODE_MASK

    def next_id(self) -> int:
        pid = self._next
        self._next += 1
        if self._node is not None:
            return (pid << NODE_BITS) | self._node  # fits int64 until about 2250
        return pid

    def init_producer_id(self, ctx, req: dict) -> dict:
        if req["transactional_id"] is not None:
            # answered by the transaction coordinator (server/txn_handlers.py)
            return error_response(ctx.api_key, ctx.api_version, req, Err.COORDINATOR_NOT_AVAILABLE)
        if req.get("producer_id", -1) >= 0:
            # an idempotent producer bumping its epoch keeps its id
            return {"throttle_time_ms": 0, "error_code": Err.NONE,
                    "producer_id": req["producer_id"],
                    "producer_epoch": (req["producer_epoch"] + 1) & 0x7FFF}
        pid = self.next_id()
        return {"throttle_time_ms": 0, "error_code": Err.NONE, "producer_id": pid,
                "producer_epoch": 0}
