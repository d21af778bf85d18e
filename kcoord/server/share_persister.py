"""The single node's SharePersister: the local share coordinator, called
through the coordinator runtime (share_runtime.py), no RPC.

Every call is one operation on the key's shard; it returns once the
operation's records are durable (fsynced: the runtime answers a write only
then), so a share partition that persisted an acknowledgement through it
can answer the acknowledgement as done.  A shard still loading (the topic
was just created, or the server just started) is waited for and asked
again; any other error code is returned to the caller as Kafka's
persister returns it.  The server makes one (`Server.share_persister`).
"""
from __future__ import annotations

from ..protocol.errors import Err
from ..share.coordinator import batches_from_rows
from ..share.persister import ShareKey, ShareState, ShareSummary, StateBatch
from .share_runtime import ShareCoordinatorRuntime, answered

LOAD_RETRIES = 20  # loads under way waited for before the code is returned


class AnswerPersister:
    """The SharePersister methods over `_call(op, key, *args)`, which answers
    the share coordinator's per-partition answer (the RPCs' partition rows):
    the local and the routed persister differ only in how they reach it."""

    async def _call(self, op: str, key: ShareKey, *args) -> dict:
        raise NotImplementedError

    async def initialize(self, key: ShareKey, state_epoch: int, start_offset: int) -> int:
        return (await self._call("initialize", key, state_epoch, start_offset))["error_code"]

    async def read(self, key: ShareKey, leader_epoch: int) -> ShareState:
        """The stored state; pass the partition's leader epoch (0 on a single
        node): as Kafka's, a stored epoch above the request's (-1 included)
        answers FENCED_LEADER_EPOCH."""
        a = await self._call("read", key, leader_epoch)
        return ShareState(a["error_code"], a["state_epoch"], a["start_offset"], leader_epoch,
                          batches_from_rows(a["state_batches"]))

    async def write(self, key: ShareKey, state_epoch: int, leader_epoch: int,
                    start_offset: int, batches: list[StateBatch],
                    delivery_complete_count: int = -1) -> int:
        a = await self._call("write", key, state_epoch, leader_epoch, start_offset,
                             delivery_complete_count, list(batches))
        return a["error_code"]

    async def delete(self, key: ShareKey) -> int:
        return (await self._call("delete", key))["error_code"]

    async def summary(self, key: ShareKey) -> ShareSummary:
        a = await self._call("summary", key, -1)
        return ShareSummary(a["error_code"], a["state_epoch"], a["leader_epoch"],
                            a["start_offset"], a["delivery_complete_count"])


class LocalSharePersister(AnswerPersister):
    """SharePersister (kcoord/share/persister.py) over this node's share coordinator."""

    def __init__(self, runtime: ShareCoordinatorRuntime) -> None:
        self.runtime = runtime

    async def _call(self, op: str, key: ShareKey, *args) -> dict:
        for _ in range(LOAD_RETRIES):
            answer = await answered(self.runtime.call(op, key.group_id, key.topic_id,
                                                      key.partition, *args))
            if answer["error_code"] != Err.COORDINATOR_LOAD_IN_PROGRESS:
                return answer
            await self.runtime.wait_loaded()
        return answer
