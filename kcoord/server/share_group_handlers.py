"""ShareGroupHeartbeat (76) and ShareGroupDescribe (77): KIP-932 share groups
in the group coordinator (same shards, runtime and __consumer_offsets log
as the classic and consumer groups; the core is coordinator/share_group_manager.py).

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
from ..coordinator.share_requests import (ShareHeartbeatAnswer, ShareInitialization,
                                             ShareOffsetsDeletion, alter_offsets_error,
                                             delete_offsets_error, describe_error,
                                             heartbeat_error, validate_heartbeat)
from ..protocol.errors import Err
from ..share.persister import SharePersister, ShareKey
from .coordinator_runtime import CoordinatorRuntime
from .dispatch import Dispatcher, Reply, RequestContext, serves
from .group_handlers import client_host, gather

log = logging.getLogger("kcoord.share_groups")


def _offset_entry(partition: int, start: int, leader_epoch: int, error: int = 0,
                  lag: int = -1) -> dict:
    return {"partition_index": partition, "start_offset": start, "leader_epoch": leader_epoch,
            "lag": lag, "error_code": int(error), "error_message": None}


def _heartbeat_op(core, now: int, req: dict, ctx: RequestContext, topics) -> Result:
    return core.share_group_heartbeat(req, ctx.client_id, client_host(ctx), now, topics)


class ShareGroupApi:
    def __init__(self, runtime: CoordinatorRuntime, topic_metadata: Callable[[], dict],
                 persister: Callable[[], SharePersister | None]) -> None:
        self.runtime = runtime
        self.topic_metadata = topic_metadata  # name -> TopicInfo, internal topics left out
        self.persister = persister            # the share coordinator's persister (or None)
        # (topic name, partition) -> its high watermark, None if unknown here;
        # the server points it at the share partitions' (a replica's in a cluster)
        self.high_watermark: Callable[[str, int], int | None] = lambda _name, _p: None
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

    async def initialize(self, init: ShareInitialization) -> dict[tuple, int]:
        """Ask the share coordinator to initialize the partitions, then record
        the outcome (all of them initialized, or none: retried later).
        -> (topic id, partition) -> error code."""
        keys = [ShareKey(init.group_id, t, p) for t, parts in sorted(init.partitions.items())
                for p in sorted(parts)]
        persister = self.persister()
        if persister is None:
            log.warning("group %s: no share coordinator to initialize %d share partitions",
                        init.group_id, len(keys))
            codes = [Err.COORDINATOR_NOT_AVAILABLE] * len(keys)
        else:
            try:
                codes = await asyncio.gather(*(
                    persister.initialize(k, init.state_epoch, init.start_of(k.topic_id,
                                                                              k.partition))
                    for k in keys))
            except Exception:
                log.exception("group %s: share state initialization failed", init.group_id)
                codes = [Err.UNKNOWN_SERVER_ERROR] * len(keys)
        failed = [(k, c) for k, c in zip(keys, codes) if c]
        if failed:
            log.warning("group %s: share state initialization failed for %d of %d partitions "
                        "(%s); retried on a later heartbeat", init.group_id, len(failed),
                        len(keys), Err(failed[0][1]).name)
        gid = init.group_id
        done = self.runtime.write(gid, lambda core, _now: core.share.initialize_done(
            gid, init.partitions, not failed), lambda _code: None)
        if done.__class__ is Reply:
            try:
                await done
            except Exception:  # the shard moved or failed: a later heartbeat retries
                pass
        return {(k.topic_id, k.partition): c for k, c in zip(keys, codes)}

    # ------------------------------------------------------------ alter offsets
    @serves("AlterShareGroupOffsets")
    def alter_share_group_offsets(self, _ctx: RequestContext, req: dict):
        """SVC alterShareGroupOffsets: the group's record written, then the share
        coordinator asked; a partition it refused carries its error."""
        group_id = req["group_id"]
        if not group_id:
            return alter_offsets_error(Err.INVALID_GROUP_ID)
        topics = self.topic_metadata()
        answer = self.runtime.write(group_id, lambda core, now: core.share_alter_offsets(
            group_id, req["topics"], now, topics), alter_offsets_error)

        async def answered():
            value = (await answer) if answer.__class__ is Reply else answer
            if value.__class__ is not ShareHeartbeatAnswer:
                return value
            codes = await self.initialize(value.initialize)
            response = value.response
            for topic in response["responses"]:
                for p in topic["partitions"]:
                    code = codes.get((topic["topic_id"], p["partition_index"]), Err.NONE)
                    if code and not p["error_code"]:
                        p["error_code"] = code
            return response
        return answered()

    # ------------------------------------------------------------ delete offsets
    @serves("DeleteShareGroupOffsets")
    def delete_share_group_offsets(self, _ctx: RequestContext, req: dict):
        """SVC deleteShareGroupOffsets: the topics' share partitions written as
        deleting, their share state deleted, then the topics that went away
        leave deleting (a topic whose deletion failed carries the error)."""
        group_id = req["group_id"]
        if not group_id:
            return delete_offsets_error(Err.INVALID_GROUP_ID)
        topics = self.topic_metadata()
        names = [t["topic_name"] for t in req["topics"]]
        begun = self.runtime.write(group_id, lambda core, _now: core.share_delete_offsets(
            group_id, names, topics), delete_offsets_error)

        async def answered():
            plan = (await begun) if begun.__class__ is Reply else begun
            if plan.__class__ is not ShareOffsetsDeletion:
                return plan
            responses = list(plan.refused)
            gone = []
            for topic_id, (name, parts) in sorted(plan.partitions.items()):
                code = await self.delete_share_state(group_id, {topic_id: parts})
                if not code:
                    gone.append(topic_id)
                responses.append({"topic_name": name, "topic_id": topic_id,
                                  "error_code": int(code), "error_message": None})
            if gone:
                done = self.runtime.write(group_id, lambda core, _now: core.share.
                                          complete_delete_offsets(group_id, gone),
                                          lambda _code: None)
                if done.__class__ is Reply:
                    await done
            return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                    "responses": responses}
        return answered()

    # ------------------------------------------------------------ describe
    @serves("ShareGroupDescribe")
    def share_group_describe(self, _ctx: RequestContext, req: dict):
        include = bool(req.get("include_authorized_operations"))
        topics = self.topic_metadata()
        answers = [self.runtime.read(
            g, lambda core, _now, g=g: core.share_group_describe([g], include, topics).response[0],
            lambda code, g=g: describe_error(g, code, None))
            if g else describe_error(g, Err.INVALID_GROUP_ID, None) for g in req["group_ids"]]
        return gather(answers, lambda groups: {"throttle_time_ms": 0, "groups": groups})

    # ------------------------------------------------------------ offsets
    @serves("DescribeShareGroupOffsets")
    def describe_share_group_offsets(self, _ctx: RequestContext, req: dict):
        """SVC describeShareGroupOffsets / describeShareGroupAllOffsets: the
        share coordinator's summary of each share partition (start offset,
        leader epoch) and, from v1, Lag = high watermark - start offset -
        delivery complete count (-1 while either is unknown)."""
        async def answer():
            groups = [await self._describe_offsets(g) for g in req["groups"]]
            return {"throttle_time_ms": 0, "groups": groups}
        return answer()

    async def _describe_offsets(self, group: dict) -> dict:
        gid, wanted = group["group_id"], group.get("topics")
        topics = self.topic_metadata()
        out: list[dict] = []
        if wanted is None:
            parts = self.runtime.read(gid, lambda core, _now: core.share.initialized_partitions(
                gid).response, lambda code: code)
            parts = (await parts) if parts.__class__ is Reply else parts
            if isinstance(parts, int):  # the shard did not answer (moved, loading)
                return {"group_id": gid, "topics": [], "error_code": parts,
                        "error_message": None}
            names = {info[0]: name for name, info in topics.items()}
            asked = [(names[t], t, sorted(p)) for t, p in sorted(parts.items()) if t in names]
        else:
            asked = []
            for t in wanted:
                info = topics.get(t["topic_name"])
                if info is None:  # an unknown topic: no offset information, not an error
                    out.append({"topic_name": t["topic_name"], "topic_id": bytes(16),
                                "partitions": [_offset_entry(p, -1, 0) for p in t["partitions"]]})
                else:
                    asked.append((t["topic_name"], info[0], list(t["partitions"])))
        persister = self.persister()
        for name, topic_id, partitions in asked:
            entries = []
            for p in partitions:
                if persister is None:
                    entries.append(_offset_entry(p, -1, 0, Err.COORDINATOR_NOT_AVAILABLE))
                    continue
                summary = await persister.summary(ShareKey(gid, topic_id, p))
                if summary.error_code:  # no share state: absence of data, not an error (SVC)
                    entries.append(_offset_entry(p, -1, 0))
                    continue
                lag = -1
                if summary.start_offset != -1 and summary.delivery_complete_count != -1:
                    end = self.high_watermark(name, p)
                    if end is not None:
                        lag = end - summary.start_offset - summary.delivery_complete_count
                entries.append(_offset_entry(p, summary.start_offset, summary.leader_epoch,
                                             lag=lag))
            out.append({"topic_name": name, "topic_id": topic_id, "partitions": entries})
        return {"group_id": gid, "topics": out, "error_code": 0, "error_message": None}

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
