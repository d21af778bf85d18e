"""A cluster's SharePersister (Kafka's DefaultStatePersister with its
PersisterStateManager): each share partition's state lives with the share
coordinator that owns its key, the leader of the key's __share_group_state
partition (FindCoordinator key type 2).  A key owned here is asked of the
local share coordinator directly; any other goes by the inter-broker RPCs
83-87 to its owner.  Calls to the same node, API and group made in the same
loop turn go as one request (Kafka batches per coordinator node the same
way).  NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
COORDINATOR_NOT_AVAILABLE and a lost connection find the owner again and
retry with exponential backoff, a bounded number of times; what still fails
is answered as its code, as Kafka's persister does.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

from ..protocol.errors import Err
from ..share.coordinator import batch_rows
from ..share.persister import ShareKey
from .share_persister import AnswerPersister
from .share_runtime import share_key

log = logging.getLogger("kcoord.share")

# op -> (API key, version, the request's per-partition fields from the call's args)
_APIS: dict[str, tuple[int, int, Callable[..., dict]]] = {
    "initialize": (83, 0, lambda state_epoch, start: {"state_epoch": state_epoch,
                                                       "start_offset": start}),
    "read": (84, 0, lambda leader_epoch: {"leader_epoch": leader_epoch}),
    "write": (85, 1, lambda state_epoch, leader_epoch, start, complete, batches: {
        "state_epoch": state_epoch, "leader_epoch": leader_epoch, "start_offset": start,
        "delivery_complete_count": complete,
        "state_batches": batch_rows(batches)}),
    "delete": (86, 0, lambda: {}),
    "summary": (87, 1, lambda leader_epoch: {"leader_epoch": leader_epoch}),
}
# the answer's fields beside partition and error code, for an error made here
_DEFAULTS = {"read": {"state_epoch": 0, "start_offset": -1, "state_batches": []},
             "summary": {"state_epoch": 0, "leader_epoch": 0, "start_offset": -1,
                         "delivery_complete_count": -1}}
RETRIABLE = {Err.NOT_COORDINATOR, Err.COORDINATOR_LOAD_IN_PROGRESS,
             Err.COORDINATOR_NOT_AVAILABLE, Err.REQUEST_TIMED_OUT}
ATTEMPTS = 10                     # retries of a retriable answer before it is returned
BACKOFF_FIRST_S, BACKOFF_MAX_S = 0.05, 2.0

Route = Callable[[str], int | None]          # coordinator key -> owner node id, None: none yet
Send = Callable[[int, int, int, dict], Awaitable[dict]]   # node, API key, version, body


def _answer(op: str, partition: int, code: int) -> dict:
    return {"partition": partition, "error_code": code, "error_message": None,
            **_DEFAULTS.get(op, {})}


class RoutedSharePersister(AnswerPersister):
    def __init__(self, node_id: int, local: AnswerPersister, route: Route, send: Send,
                 sleep: Callable[[float], Awaitable] = asyncio.sleep) -> None:
        self.node_id = node_id
        self.local = local         # this node's share coordinator (LocalSharePersister)
        self.route = route
        self.send = send
        self.sleep = sleep         # the backoff's wait (a test's clock)
        # (node, op, group) -> the batches waiting for this loop turn's flush
        self._pending: dict[tuple, list[list]] = {}
        self.requests_sent = 0     # RPCs sent (batches), for tests and metrics

    async def _call(self, op: str, key: ShareKey, *args) -> dict:
        delay = BACKOFF_FIRST_S
        answer = _answer(op, key.partition, Err.COORDINATOR_NOT_AVAILABLE)
        for attempt in range(ATTEMPTS):
            if attempt:
                await self.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX_S)
            node = self.route(share_key(key.group_id, key.topic_id, key.partition))
            if node is None:
                answer = _answer(op, key.partition, Err.COORDINATOR_NOT_AVAILABLE)
            elif node == self.node_id:
                answer = await self.local._call(op, key, *args)
            else:
                answer = await self._remote(node, op, key, args)
            if answer["error_code"] not in RETRIABLE:
                return answer
        return answer

    # ------------------------------------------------------------ batching
    def _remote(self, node: int, op: str, key: ShareKey, args: tuple) -> asyncio.Future:
        """Queue the key for this loop turn's request to `node` (a second call
        for a key already queued goes in the next request of the turn)."""
        fut = asyncio.get_running_loop().create_future()
        slot = (node, op, key.group_id)
        batches = self._pending.get(slot)
        if batches is None:
            batches = self._pending[slot] = []
            asyncio.get_running_loop().call_soon(self._flush, slot)
        batch = next((b for b in batches if all(e[0] != key for e in b)), None)
        if batch is None:
            batch = []
            batches.append(batch)
        batch.append((key, args, fut))
        return fut

    def _flush(self, slot: tuple) -> None:
        for batch in self._pending.pop(slot, []):
            asyncio.ensure_future(self._send_batch(slot, batch))

    async def _send_batch(self, slot: tuple, batch: list) -> None:
        node, op, group_id = slot
        api_key, version, fields = _APIS[op]
        topics: dict[bytes, list] = {}
        for key, args, _ in batch:
            topics.setdefault(key.topic_id, []).append({"partition": key.partition,
                                                        **fields(*args)})
        body = {"group_id": group_id,
                "topics": [{"topic_id": t, "partitions": ps} for t, ps in topics.items()]}
        answers: dict = {}
        self.requests_sent += 1
        try:
            resp = await self.send(node, api_key, version, body)
            for t in resp["results"]:
                for p in t["partitions"]:
                    answers[(t["topic_id"], p["partition"])] = p
        except Exception as exc:   # down, moved, refused: found again and retried
            log.info("share state %s to node %d failed: %s", op, node, exc)
        for key, _, fut in batch:
            if not fut.done():
                fut.set_result(answers.get((key.topic_id, key.partition))
                               or _answer(op, key.partition, Err.REQUEST_TIMED_OUT))
