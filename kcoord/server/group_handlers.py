"""Group and offset APIs: validate, then one call to the coordinator runtime.

Checks that need the rest of the broker (does a topic partition exist?) are
made here, so the core stays free of anything but its own state.  Loading
and unowned shards, durability, parked requests and failed writes are the
runtime's (coordinator_runtime.py); each handler gives it the op to run on
the group's core and how to answer with an error code.  Every handler runs
its op at once, in the order its connection's requests were read.
"""
from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import Any, Callable

from ..protocol.api import API_KEYS, error_item, error_response
from ..protocol.commit_request import FLAT_VERSIONS, decode_flat
from ..protocol.errors import Err
from ..coordinator.txn_offsets import mark_unstable
from .coordinator_runtime import CoordinatorRuntime
from .dispatch import Dispatcher, Reply, RequestContext, serves
from .hot_ops import commit_error, commit_flat, commit_request
from .share_runtime import parse_share_key

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1  # answered by this process's transaction coordinator
KEY_TYPE_SHARE = 2        # a share partition's share coordinator (share_runtime.py)

HEARTBEAT, DESCRIBE_GROUPS = API_KEYS["Heartbeat"], API_KEYS["DescribeGroups"]
OFFSET_COMMIT, OFFSET_FETCH = API_KEYS["OffsetCommit"], API_KEYS["OffsetFetch"]
FIND_COORDINATOR, DELETE_GROUPS = API_KEYS["FindCoordinator"], API_KEYS["DeleteGroups"]
JOIN_GROUP, SYNC_GROUP = API_KEYS["JoinGroup"], API_KEYS["SyncGroup"]

log = logging.getLogger("kcoord.groups")


def client_host(ctx: RequestContext) -> str:
    # Kafka stores InetAddress.toString() of the peer: "/127.0.0.1"
    return "/" + ctx.client_host if ctx.client_host else ""


def _join_for_version(resp: dict, version: int) -> dict:
    """JoinGroupResponse: ProtocolName is "" below v7 and null (never "") from v7."""
    name = resp.get("protocol_name") or None  # absent, null and "" alike: none chosen
    wanted = "" if name is None and version < 7 else name
    if "protocol_name" not in resp or resp["protocol_name"] != wanted:
        resp = {**resp, "protocol_name": wanted}
    return resp


def gather(answers: list, build):
    """build(answers) once every answer is in: at once when none is a Reply."""
    if not any(a.__class__ is Reply for a in answers):
        return build(answers)

    async def wait():
        return build([(await a) if a.__class__ is Reply else a for a in answers])
    return wait()


def _heartbeat_error(code: int) -> dict:
    # Kafka answers a heartbeat to a loading coordinator with NONE
    if code == Err.COORDINATOR_LOAD_IN_PROGRESS:
        code = Err.NONE
    return error_response(HEARTBEAT, 0, {}, code)  # the same fields in every version


def _describe_error(group_id: str, code: int) -> dict:
    return error_item(DESCRIBE_GROUPS, 0, ("groups",), group_id, code)


def _join_error(req: dict, version: int, code: int) -> dict:
    """A JoinGroup refused before or by the runtime: the schema's defaults
    and the request's member id (as Kafka's GroupCoordinatorService)."""
    return _join_for_version(
        {**error_response(JOIN_GROUP, version, req, code), "member_id": req["member_id"]}, version)


def _fetch_error(group_id: str, code: int) -> dict:
    """One group of an OffsetFetch refused (the v8+ item shape; v0-7 take its code)."""
    return error_item(OFFSET_FETCH, 8, ("groups",), {"group_id": group_id}, code)


def _delete_error(group_id: str, code: int) -> dict:
    return error_item(DELETE_GROUPS, 0, ("groups_names",), group_id, code)


def _coordinator_error(key: str, code: int, message: str) -> dict:
    """One FindCoordinator key this node cannot answer for (v4+ item shape)."""
    return error_item(FIND_COORDINATOR, 4, ("coordinator_keys",), key, code, message)


def _classic_heartbeat_op(core, now: int, req: dict, version: int):
    return core.classic.heartbeat(req, version, now)


class GroupHandlers:
    def __init__(self, runtime: CoordinatorRuntime, catalogue, config) -> None:
        self.runtime = runtime
        self.catalogue = catalogue
        self.config = config
        self._commit_bodies: dict = {}  # encoded all-NONE OffsetCommit answers (hot_ops.commit_body)
        self.cluster = None  # cluster mode: kcoord/cluster/node.py routes groups
        # the share coordinator's persister (kcoord/share/persister.py), or None
        self.share_persister: Callable[[], Any] = lambda: None
        self.share_groups = None  # ShareGroupApi (APIs 76 and 77), made by register
        self.share = None    # the share coordinator's runtime (share_runtime.py), set by the server

    def register(self, d: Dispatcher) -> None:
        d.register_handlers(self)
        # OffsetCommit v8-v9 decoded to tuples, no dict per partition (a
        # partial: no interpreted frame between the network layer and hot_ops)
        d.register_flat(OFFSET_COMMIT, FLAT_VERSIONS[0], FLAT_VERSIONS[-1], decode_flat,
                        partial(commit_flat, self))
        from .consumer_group_handlers import ConsumerGroupApi  # KIP-848: APIs 68 and 69
        from .share_group_handlers import ShareGroupApi       # KIP-932: APIs 76 and 77
        consumer = ConsumerGroupApi(self.runtime, self.catalogue, self.config)
        consumer.register(d)
        self.share_groups = ShareGroupApi(self.runtime, consumer.topic_metadata,
                                          lambda: self.share_persister())
        self.share_groups.register(d)

    # ------------------------------------------------------ FindCoordinator
    @serves("FindCoordinator")
    def find_coordinator(self, ctx: RequestContext, req: dict) -> dict:
        host, port = self.config.advertised_for(ctx.listener)
        node = self.config["node.id"]

        def locate(key: str) -> dict:
            if req.get("key_type", 0) == KEY_TYPE_SHARE:
                problem = self._share_key_problem(key, ctx.api_version)
                if problem is not None:
                    return problem
            if self.cluster is not None:
                return self.cluster.find_coordinator(key, req.get("key_type", 0), ctx.listener)
            if req.get("key_type", 0) == KEY_TYPE_SHARE and not self.share.ready:
                self.share.open_topic()  # created (and loaded) on first use, as Kafka's
                return _coordinator_error(key, Err.COORDINATOR_NOT_AVAILABLE,
                                          "the __share_group_state topic is being created")
            if req.get("key_type", 0) not in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION,
                                              KEY_TYPE_SHARE):
                return _coordinator_error(key, Err.COORDINATOR_NOT_AVAILABLE,
                                          "only group and transaction coordinators are served")
            return {"key": key, "node_id": node, "host": host, "port": port,
                    "error_code": Err.NONE, "error_message": None}

        if ctx.api_version >= 4:
            return {"throttle_time_ms": 0,
                    "coordinators": [locate(k) for k in req["coordinator_keys"]]}
        found = locate(req["key"])
        return {"throttle_time_ms": 0, "error_code": found["error_code"],
                "error_message": found["error_message"], "node_id": found["node_id"],
                "host": found["host"], "port": found["port"]}

    def _share_key_problem(self, key: str, version: int) -> dict | None:
        """Key type 2 (a share partition's share coordinator): FindCoordinator
        v6+ only, key "groupId:topicId:partition"; else INVALID_REQUEST."""
        if version >= 6 and parse_share_key(key) is not None and self.share is not None:
            return None
        return _coordinator_error(key, Err.INVALID_REQUEST,
                                  "share coordinator keys need FindCoordinator v6" if version < 6
                                  else f"malformed share coordinator key {key!r}")

    # --------------------------------------------------------- OffsetCommit
    def mark_unknown_partitions(self, topics: list[dict]) -> None:
        for t in topics:
            topic = self.catalogue.get(t["name"])
            count = -1 if topic is None else len(topic.partitions)
            for p in t["partitions"]:
                if not 0 <= p["partition_index"] < count:
                    p["error_code"] = Err.UNKNOWN_TOPIC_OR_PARTITION

    # error_response with the refused partitions' own codes (hot_ops)
    commit_error = staticmethod(commit_error)

    @serves("OffsetCommit")
    def offset_commit(self, ctx: RequestContext, req: dict):
        # compiled with the runtime's write path inlined (the hot path: CPU
        # per commit is benched); the same steps as mark_unknown_partitions,
        # then runtime.write_checked of hot_ops.commit_op
        return commit_request(self, ctx, req)

    # ---------------------------------------------------------- OffsetFetch
    def _fetch_group(self, group_id: str, topics, member_id: str | None = None,
                     member_epoch: int = -1, require_stable: bool = False):
        """The group's answer, read now; sent once the writes it may show are durable."""
        error = partial(_fetch_error, group_id)
        if not group_id:
            return error(Err.INVALID_GROUP_ID)

        def op(core, _now):
            code, out = core.offset_fetch(group_id, topics, member_id, member_epoch)
            if require_stable and not code and core.txn_offsets.has_open(group_id):
                mark_unstable(core.txn_offsets, group_id, out)
            return {"group_id": group_id, "topics": out, "error_code": code}
        return self.runtime.read(group_id, op, error)

    @serves("OffsetFetch")
    def offset_fetch(self, ctx: RequestContext, req: dict):
        if ctx.api_version >= 8:
            stable = req.get("require_stable", False)
            answers = [self._fetch_group(g["group_id"], g["topics"], g.get("member_id"),
                                         g.get("member_epoch", -1), stable)
                       for g in req["groups"]]
            return gather(answers, lambda groups: {"throttle_time_ms": 0, "groups": groups})
        topics = req["topics"]
        if ctx.api_version < 2 and not topics:
            topics = None if topics is None else []
        version = ctx.api_version

        def build(answers: list) -> dict:
            result = answers[0]
            code = result["error_code"]
            out_topics = result.get("topics", [])
            if code and version < 2:
                # v0-1 have no top-level error: report it on every requested partition
                out_topics = error_response(OFFSET_FETCH, version, req, code).get("topics", [])
            return {"throttle_time_ms": 0, "topics": out_topics, "error_code": code}
        return gather([self._fetch_group(req["group_id"], topics,
                                         require_stable=req.get("require_stable", False))], build)

    # --------------------------------------------------------- OffsetDelete
    @serves("OffsetDelete")
    def offset_delete(self, ctx: RequestContext, req: dict):
        group_id = req["group_id"]

        def error(code: int) -> dict:
            return error_response(ctx.api_key, ctx.api_version, req, code)
        if not group_id:
            return error(Err.INVALID_GROUP_ID)
        self.mark_unknown_partitions(req["topics"])

        return self.runtime.write(group_id, lambda core, _now: core.offset_delete(req), error)

    # ------------------------------------------------------------ group admin
    @serves("ListGroups")
    def list_groups(self, _ctx: RequestContext, req: dict) -> dict:
        states, types = req.get("states_filter") or [], req.get("types_filter") or []
        answers, error = self.runtime.read_all(lambda core, _now: core.list_groups(states, types))
        return {"throttle_time_ms": 0, "error_code": error,
                "groups": [g for groups in answers for g in groups]}

    @serves("DeleteGroups")
    def delete_groups(self, _ctx: RequestContext, req: dict):
        answers = [self._delete_group(group_id) if group_id
                   else _delete_error(group_id, Err.INVALID_GROUP_ID)
                   for group_id in req["groups_names"]]
        return gather(answers, lambda results: {"throttle_time_ms": 0, "results": results})

    def _delete_group(self, group_id: str):
        error = partial(_delete_error, group_id)

        def op(core, _now):
            return core.delete_group(group_id)

        if self.share_groups is None:
            return self.runtime.write(group_id, op, error)
        # a share group's share state goes first (SVC deleteGroups); its
        # partitions are written as deleting, so nothing assigns them meanwhile
        partitions = self.runtime.write(group_id, lambda core, _now: core.share.begin_delete(
            group_id), error)
        if partitions is None:
            return self.runtime.write(group_id, op, error)

        async def share_group_delete():
            parts = await partitions if partitions.__class__ is Reply else partitions
            if parts is not None and parts.__class__ is dict and "error_code" in parts:
                return parts  # the shard could not take the write
            if parts:  # a failure keeps the group (its partitions stay deleting)
                code = await self.share_groups.delete_share_state(group_id, parts)
                if code:
                    return error(code)
            answer = self.runtime.write(group_id, op, error)
            return (await answer) if answer.__class__ is Reply else answer
        reply = Reply()
        task = asyncio.get_running_loop().create_task(share_group_delete())
        task.add_done_callback(lambda t: reply.set_exception(t.exception()) if t.exception()
                               else reply.set_result(t.result()))
        return reply

    @serves("DescribeGroups")
    def describe_groups(self, _ctx: RequestContext, req: dict):
        answers = [self.runtime.read(group_id,
                                     lambda core, _now, g=group_id: core.describe_group(g),
                                     lambda code, g=group_id: _describe_error(g, code))
                   if group_id else _describe_error(group_id, Err.INVALID_GROUP_ID)
                   for group_id in req["groups"]]
        return gather(answers, lambda groups: {"throttle_time_ms": 0, "groups": groups})

    # ---------------------------------------------------- classic membership
    @serves("JoinGroup")
    def join_group(self, ctx: RequestContext, req: dict):
        version = ctx.api_version
        group_id = req["group_id"]
        if not group_id:
            return _join_error(req, version, Err.INVALID_GROUP_ID)
        cid, host = ctx.client_id, client_host(ctx)
        answer = self.runtime.write_parked(
            group_id, lambda core, now, token: core.join_group(req, version, cid, host, token, now),
            partial(_join_error, req, version))
        if answer.__class__ is Reply:
            return answer.then(lambda resp: _join_for_version(resp, version))
        return _join_for_version(answer, version)

    @serves("SyncGroup")
    def sync_group(self, ctx: RequestContext, req: dict):
        version = ctx.api_version
        error = partial(error_response, SYNC_GROUP, version, req)
        if version >= 5 and (req["protocol_type"] is None or req["protocol_name"] is None):
            return error(Err.INCONSISTENT_GROUP_PROTOCOL)  # checked before anything else
        group_id = req["group_id"]
        if not group_id:
            return error(Err.INVALID_GROUP_ID)
        return self.runtime.write_parked(
            group_id, lambda core, now, token: core.sync_group(req, version, token, now), error)

    @serves("Heartbeat")
    def heartbeat(self, ctx: RequestContext, req: dict):
        """Answered at once unless writes are in flight (then after them)."""
        group_id = req["group_id"]
        version = ctx.api_version
        if not group_id:
            return error_response(HEARTBEAT, version, req, Err.INVALID_GROUP_ID)
        # the classic manager routes (core.heartbeat would add a call); the op
        # is a function given its arguments, not a closure made per heartbeat
        return self.runtime.write(group_id, _classic_heartbeat_op, _heartbeat_error, req, version)

    @serves("LeaveGroup")
    def leave_group(self, ctx: RequestContext, req: dict):
        group_id = req["group_id"]
        version = ctx.api_version

        def error(code: int) -> dict:
            return error_response(ctx.api_key, version, req, code)
        if not group_id:
            return error(Err.INVALID_GROUP_ID)

        return self.runtime.write(
            group_id, lambda core, now: core.leave_group(req, version, now), error)
