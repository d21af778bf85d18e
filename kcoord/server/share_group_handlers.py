"""ShareGroupHeartbeat (76) and ShareGroupDescribe (77): KIP-932 share groups
in the group coordinator (same shards, runtime and __consumer_offsets log
as the classic and consumer groups; the core is coordinator/share_protocol_handlers.py).

Share-partition initialization is the one step with I/O: a heartbeat whose
answer carries a ShareInitialization is answered once its records are
durable, and then the share coordinator is asked (through the persister,
kcoord/share/persister.py: InitializeShareGroupState with StateEpoch = the
group epoch, StartOffset -1); its outcome is recorded by a later write
(`initialize_done`), after which the next heartbeat hands the partitions out.
DeleteGroups of a share group first deletes its share state the same way.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Callable

from ..coordinator.result import Result
from ..coordinator.share_protocol_handlers import (ShareHeartbeatAnswer, ShareInitialization,
                                                   describe_error, heartbeat_error,
                                                   validate_heartbeat)
from ..protocol.errors import Err
from ..share.persister import SharePersister, ShareKey
from .coordinator_runtime import CoordinatorRuntime
from .dispatch import Dispatcher, Reply, RequestContext, serves
from .group_handlers import client_host, gather

log = logging.getLogger("kcoord.share_groups")


def _heartbeat_op(core, now: int, req: dict, ctx: RequestContext, topics) -> Result:
    return core.share_group_heartbeat(req, ctx.client_id, client_host(ctx), now, topics)


class ShareGroupApi:
    def __init__(self, runtime: CoordinatorRuntime, topic_metadata: Callable[[], dict],
                 persister: Callable[[], SharePersister | None]) -> None:
        self.runtime = runtime
        self.topic_metadata = topic_metadata  # name -> TopicInfo, internal topics left out
        self.persister = persister            # the share coordinator's persister (or None)
        self._tasks: set[asyncio.Task] = set()

    def register(self, d: Dispatcher) -> None:
        d.register_handlers(self)

    # ------------------------------------------------------------ heartbeat
    @serves("ShareGroupHeartbeat")
    def share_group_heartbeat(self, ctx: RequestContext, req: dict):
        invalid = validate_heartbeat(req)
        if invalid is not None:  # not routable, or refused before the shard (as Kafka)
            return heartbeat_error(invalid.code, invalid.message)
        answer = self.runtime.write(req["group_id"], _heartbeat_op, heartbeat_error, req, ctx,
                                    self.topic_metadata())
        if answer.__class__ is Reply:
            return answer.then(self._answered)
        return self._answered(answer)

    def _answered(self, answer):
        """The heartbeat's records are durable: start the initialization it asks for."""
        if answer.__class__ is ShareHeartbeatAnswer:
            self.start(self.initialize(answer.initialize))
            return answer.response
        return answer

    def start(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def initialize(self, init: ShareInitialization) -> bool:
        """Ask the share coordinator to initialize the partitions, then record
        the outcome (all of them initialized, or none: retried later)."""
        keys = [ShareKey(init.group_id, t, p) for t, parts in sorted(init.partitions.items())
                for p in sorted(parts)]
        persister = self.persister()
        ok = False
        if persister is None:
            log.warning("group %s: no share coordinator to initialize %d share partitions",
                        init.group_id, len(keys))
        else:
            try:
                codes = await asyncio.gather(*(persister.initialize(k, init.state_epoch,
                                                                    init.start_offset)
                                               for k in keys))
                failed = [(k, c) for k, c in zip(keys, codes) if c]
                ok = not failed
                if failed:
                    log.warning("group %s: share state initialization failed for %d of %d "
                                "partitions (%s); retried on a later heartbeat", init.group_id,
                                len(failed), len(keys), Err(failed[0][1]).name)
            except Exception:
                log.exception("group %s: share state initialization failed", init.group_id)
        gid = init.group_id
        done = self.runtime.write(gid, lambda core, _now: core.share.initialize_done(
            gid, init.partitions, ok), lambda _code: None)
        if done.__class__ is Reply:
            try:
                await done
            except Exception:  # the shard moved or failed: a later heartbeat retries
                pass
        return ok

    # ------------------------------------------------------------ describe
    @serves("ShareGroupDescribe")
    def share_group_describe(self, _ctx: RequestContext, req: dict):
        include = bool(req.get("include_authorized_operations"))
        answers = [self.runtime.read(
            g, lambda core, _now, g=g: core.share_group_describe([g], include).response[0],
            lambda code, g=g: describe_error(g, code, None))
            if g else describe_error(g, Err.INVALID_GROUP_ID, None) for g in req["group_ids"]]
        return gather(answers, lambda groups: {"throttle_time_ms": 0, "groups": groups})

    # ------------------------------------------------------------ delete
    async def delete_share_state(self, group_id: str, partitions: dict) -> int:
        """DeleteShareGroupState for every share partition of a group being
        deleted: the first error code, or NONE."""
        persister = self.persister()
        if not partitions:
            return Err.NONE
        if persister is None:
            return Err.COORDINATOR_NOT_AVAILABLE
        keys = [ShareKey(group_id, t, p) for t, parts in sorted(partitions.items())
                for p in sorted(parts)]
        try:
            codes = await asyncio.gather(*(persister.delete(k) for k in keys))
        except Exception:
            log.exception("group %s: share state deletion failed", group_id)
            return Err.UNKNOWN_SERVER_ERROR
        # a key with no state is already deleted
        return next((c for c in codes if c not in (Err.NONE, Err.UNKNOWN_TOPIC_OR_PARTITION,
                                                     Err.GROUP_ID_NOT_FOUND)), Err.NONE)
