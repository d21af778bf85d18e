"""Authorization of every API kcoord serves, as Kafka's KafkaApis checks it.

`Checks.guard(key, handler)` wraps a handler as it is registered (the
Dispatcher's guard hook): the rule for the API checks the request's
principal (RequestContext.principal, client_host) before the handler runs,
answers Kafka's error where a whole request is refused, takes denied
topics/partitions/groups out of the request and merges their errors back
into the response, or filters the response where Kafka filters.  The
handlers themselves know nothing of ACLs.  When everything is allowed the
handler's own result is returned untouched (OffsetCommit keeps its
pre-encoded fast path).

Authorization comes before existence: an unauthorized caller gets
TOPIC_AUTHORIZATION_FAILED, never UNKNOWN_TOPIC_OR_PARTITION.

Other engineers' APIs: `register_rule(key, rule)` with a rule
`(checks, ctx, req, handler) -> result`; helpers `allowed`,
`transactional_id_allowed` and `group_allowed` for use inside handlers.
An API with no rule is served to super users only (never unchecked).
"""
from __future__ import annotations

import logging
from typing import Callable

from ..protocol.api import APIS, error_item, error_response, response_codec
from ..protocol.errors import Err
from . import audit
from .acl import CLUSTER_NAME, Authorizer, Operation as Op, ResourceType as R

log = logging.getLogger("kcoord.authorizer")

ZERO_UUID = bytes(16)
# APIs with no ACL check in Kafka, or that check inside their own handler
UNCHECKED = {17, 18, 36, 29, 30, 31, 50, 51}
RULES: dict[int, Callable] = {}
OFFSET_FETCH = 9


def rule(key: int):
    def deco(fn):
        RULES[key] = fn
        return fn
    return deco


def then(ctx, result, fn):
    """Apply fn(response dict) to a handler's result, whatever its form
    (dict, pre-encoded bytes, Reply, future or coroutine)."""
    if result is None:
        return None
    if result.__class__ is dict:
        return fn(result)
    if result.__class__ is bytes:
        return fn(_decoded(ctx, result))

    async def later():
        value = await result
        return fn(_decoded(ctx, value) if value.__class__ is bytes else value)
    return later()


def _decoded(ctx, body: bytes) -> dict:
    return response_codec(ctx.api_key, ctx.api_version)[1](body, 0)[0]


class Checks:
    def __init__(self, authorizer: Authorizer) -> None:
        self.az = authorizer
        # set by the server: topic id -> name (or None), for APIs that name topics by id
        self.topic_name: Callable[[bytes], str | None] = lambda _topic_id: None

    # --------------------------------------------------------- decisions
    def allowed(self, ctx, op: int, rtype: int, name: str, audit_denial: bool = True) -> bool:
        """audit_denial False where Kafka passes logIfDenied=false (filtering a listing)."""
        if self.az.authorize(ctx.principal, ctx.client_host, op, rtype, name):
            return True
        if not audit_denial:
            return False
        # Kafka's authorizer audit line (INFO, rate-limited)
        audit.denied(ctx.principal, Op(op).name, ctx.client_host, rtype, name,
                     APIS[ctx.api_key].name if ctx.api_key in APIS else str(ctx.api_key),
                     self.az.deciding_rule(ctx.principal, ctx.client_host, op, rtype, name))
        return False

    def cluster(self, ctx, op: int) -> bool:
        return self.allowed(ctx, op, R.CLUSTER, CLUSTER_NAME)

    def group_allowed(self, ctx, op: int, group_id: str) -> bool:
        return self.allowed(ctx, op, R.GROUP, group_id)

    def transactional_id_allowed(self, ctx, op: int, transactional_id: str | None) -> bool:
        return transactional_id is not None and self.allowed(
            ctx, op, R.TRANSACTIONAL_ID, transactional_id)

    def topic_describable(self, principal: str, host: str, topic: str) -> bool:
        """For the coordinator's regex resolution (CoordinatorConfig.topic_describable)."""
        return self.az.authorize(principal, host, Op.DESCRIBE, R.TOPIC, topic)

    def topic_ops(self, ctx, name: str) -> int:
        return self.az.authorized_operations(ctx.principal, ctx.client_host, R.TOPIC, name)

    def guard(self, key: int, handler):
        if key in UNCHECKED:
            return handler
        fn = RULES.get(key)
        if fn is None:
            name = APIS[key].name if key in APIS else str(key)
            log.warning("API %s has no authorization rule: only super users may call it", name)
            fn = _super_users_only

        def guarded(ctx, req):
            return fn(self, ctx, req, handler)
        guarded.__wrapped__ = handler
        return guarded


def _super_users_only(checks: Checks, ctx, req, handler):
    if ctx.principal in checks.az.super_users:
        return handler(ctx, req)
    return _refused(ctx, req, Err.CLUSTER_AUTHORIZATION_FAILED)


# ------------------------------------------------------------ helpers
def _refused(ctx, req, code: int, message: str | None = None) -> dict:
    """The whole request refused: Kafka's error answer to it (protocol/api)."""
    return error_response(ctx.api_key, ctx.api_version, req, code, message)


def _denied(ctx, req_field: str, items: list, resp_field: str, code: int,
            message: str | None = None) -> list[dict]:
    """The error entries answering the denied `items` of request array `req_field`."""
    return _refused(ctx, {req_field: items}, code, message).get(resp_field, [])


def _serve_or_deny(ctx, req, handler, req_field: str, allowed: list, denied: list,
                   resp_field: str, code: int, **empty):
    """_serve_allowed with the denied items answered `code`."""
    return _serve_allowed(ctx, req, handler, req_field, allowed, resp_field,
                          _denied(ctx, req_field, denied, resp_field, code), **empty)


def _merge_topics(response: dict, field: str, denied: list[dict]) -> dict:
    response[field] = list(response.get(field) or []) + denied
    return response


def _serve_allowed(ctx, req, handler, req_field: str, allowed: list, resp_field: str,
                   errors: list[dict], **empty):
    """The handler for the allowed items alone, the denied items' errors
    joined to its response; nothing allowed: the errors alone, with `empty`'s
    fields (no handler call)."""
    if not allowed:
        return {"throttle_time_ms": 0, **empty, resp_field: errors}
    return then(ctx, handler(ctx, {**req, req_field: allowed}),
                lambda r: _merge_topics(r, resp_field, errors))


def _split(items: list, ok: Callable) -> tuple[list, list]:
    yes, no = [], []
    for item in items:
        (yes if ok(item) else no).append(item)
    return yes, no


# --------------------------------------------------------------- Produce
@rule(0)
def _produce(c: Checks, ctx, req, handler):
    tid = req.get("transactional_id")
    topics = req["topic_data"]
    if tid is not None and not c.transactional_id_allowed(ctx, Op.WRITE, tid):
        if req["acks"] == 0:
            raise ConnectionAbortedError("acks=0 produce without TRANSACTIONAL_ID WRITE permission")
        return _refused(ctx, req, Err.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    ok, denied = _split(topics, lambda t: c.allowed(ctx, Op.WRITE, R.TOPIC, t["name"]))
    if not denied:
        return handler(ctx, req)
    if req["acks"] == 0:
        # Kafka closes the connection on any acks=0 error
        raise ConnectionAbortedError("acks=0 produce to a topic without WRITE permission")
    return _serve_or_deny(ctx, req, handler, "topic_data", ok, denied, "responses",
                          Err.TOPIC_AUTHORIZATION_FAILED)


# ----------------------------------------------------------------- Fetch
@rule(1)
def _fetch(c: Checks, ctx, req, handler):
    replica = req.get("replica_id", -1)
    state = req.get("replica_state") or {}
    if replica >= 0 or (state and state.get("replica_id", -1) >= 0):
        if c.cluster(ctx, Op.CLUSTER_ACTION):
            return handler(ctx, req)
        return _refused(ctx, {}, Err.CLUSTER_AUTHORIZATION_FAILED)  # no partition answered
    by_id = ctx.api_version >= 13

    def name_of(t):
        return c.topic_name(t["topic_id"]) if by_id else t["topic"]

    def ok_topic(t):
        name = name_of(t)
        if name is None:
            return True  # unknown topic id: UNKNOWN_TOPIC_ID before authorization
        return c.allowed(ctx, Op.READ, R.TOPIC, name)
    ok, denied = _split(req["topics"], ok_topic)
    if not denied:
        return handler(ctx, req)
    return _serve_or_deny(ctx, req, handler, "topics", ok, denied, "responses",
                          Err.TOPIC_AUTHORIZATION_FAILED, error_code=Err.NONE, session_id=0)


# ------------------------------------------------------------ ListOffsets
@rule(2)
def _list_offsets(c: Checks, ctx, req, handler):
    ok, denied = _split(req["topics"], lambda t: c.allowed(ctx, Op.DESCRIBE, R.TOPIC, t["name"]))
    if not denied:
        return handler(ctx, req)
    return _serve_or_deny(ctx, req, handler, "topics", ok, denied, "topics",
                          Err.TOPIC_AUTHORIZATION_FAILED)


# --------------------------------------------------------------- Metadata
@rule(3)
def _metadata(c: Checks, ctx, req, handler):
    requested = req["topics"]
    all_topics = requested is None or (ctx.api_version == 0 and not requested)
    want_topic_ops = req.get("include_topic_authorized_operations", False)
    want_cluster_ops = req.get("include_cluster_authorized_operations", False)
    denied: list[dict] = []
    create_denied: set[str] = set()
    if not all_topics:
        keep = []
        for t in requested:
            name = t.get("name")
            if name is None:
                name = c.topic_name(t.get("topic_id"))
                if name is None:
                    keep.append(t)  # unknown id: the handler says UNKNOWN_TOPIC_ID
                    continue
                if not c.allowed(ctx, Op.DESCRIBE, R.TOPIC, name):
                    denied.append(t)
                    continue
                keep.append(t)
                continue
            if not c.allowed(ctx, Op.DESCRIBE, R.TOPIC, name):
                denied.append(t)
                continue
            keep.append(t)
            if not c.allowed(ctx, Op.CREATE, R.CLUSTER, CLUSTER_NAME, audit_denial=False) \
                    and not c.allowed(ctx, Op.CREATE, R.TOPIC, name):
                create_denied.add(name)
        if denied:
            req = {**req, "topics": keep}
        if create_denied and req.get("allow_auto_topic_creation", True):
            # auto-creation needs CLUSTER CREATE or TOPIC CREATE; a topic it
            # would have created answers TOPIC_AUTHORIZATION_FAILED instead
            req = {**req, "allow_auto_topic_creation": False}
        else:
            create_denied = set()
        if not keep and denied:
            req = {**req, "topics": [{"name": "\0kcoord-none", "topic_id": ZERO_UUID}]}

    def fix(resp: dict) -> dict:
        topics = []
        for t in resp.get("topics") or []:
            name = t.get("name")
            if name == "\0kcoord-none":
                continue
            if all_topics and name is not None and not c.allowed(ctx, Op.DESCRIBE, R.TOPIC, name,
                                                                 audit_denial=False):
                continue  # all-topics requests silently omit what may not be described
            if name in create_denied and t.get("error_code") == Err.UNKNOWN_TOPIC_OR_PARTITION:
                t = {**t, "error_code": Err.TOPIC_AUTHORIZATION_FAILED}
            elif want_topic_ops and name is not None and t.get("error_code") == Err.NONE:
                t = {**t, "topic_authorized_operations": c.topic_ops(ctx, name)}
            topics.append(t)
        resp["topics"] = topics + _denied(ctx, "topics", denied, "topics",
                                          Err.TOPIC_AUTHORIZATION_FAILED)
        if want_cluster_ops and ctx.api_version <= 10:
            resp["cluster_authorized_operations"] = (
                c.az.authorized_operations(ctx.principal, ctx.client_host, R.CLUSTER,
                                           CLUSTER_NAME)
                if c.cluster(ctx, Op.DESCRIBE) else 0)
        return resp
    return then(ctx, handler(ctx, req), fix)


# ------------------------------------------------------------ OffsetCommit
def _commit_errors(topics, code):
    return [{"name": t["name"], "partitions": [
        {"partition_index": p["partition_index"], "error_code": code}
        for p in t["partitions"]]} for t in topics]


@rule(8)
def _offset_commit(c: Checks, ctx, req, handler):
    if not c.group_allowed(ctx, Op.READ, req["group_id"]):
        return _refused(ctx, req, Err.GROUP_AUTHORIZATION_FAILED)
    ok, denied = _split(req["topics"], lambda t: c.allowed(ctx, Op.READ, R.TOPIC, t["name"]))
    if not denied:
        return handler(ctx, req)  # the hot path: the handler's own (pre-encoded) answer
    return _serve_or_deny(ctx, req, handler, "topics", ok, denied, "topics",
                          Err.TOPIC_AUTHORIZATION_FAILED)


# ------------------------------------------------------------- OffsetFetch
def _fetch_partition_errors(topics, code):
    # a denied topic's partitions: the same entry in every version (v1's error answer)
    return error_response(OFFSET_FETCH, 1, {"topics": topics}, code)["topics"]


def _offset_fetch_group(c: Checks, ctx, topics):
    """(topics to ask the handler for, error entries for listed denied
    topics, whether all topics were asked for)"""
    if topics is None:
        return None, [], True
    ok, denied = _split(topics, lambda t: c.allowed(ctx, Op.DESCRIBE, R.TOPIC, t["name"]))
    return ok, _fetch_partition_errors(denied, Err.TOPIC_AUTHORIZATION_FAILED), False


def _filter_fetched(c: Checks, ctx, topics, extra, all_topics):
    out = [t for t in (topics or [])
           if not all_topics or c.allowed(ctx, Op.DESCRIBE, R.TOPIC, t["name"])]
    return out + extra


@rule(9)
def _offset_fetch(c: Checks, ctx, req, handler):
    if ctx.api_version >= 8:
        groups = req["groups"]
        denied_groups = [g for g in groups if not c.group_allowed(ctx, Op.DESCRIBE, g["group_id"])]
        keep, plan = [], {}
        for g in groups:
            if g in denied_groups:
                continue
            ok, extra, all_topics = _offset_fetch_group(c, ctx, g["topics"])
            plan[g["group_id"]] = (extra, all_topics)
            keep.append({**g, "topics": ok})
        if not denied_groups and not any(extra for extra, _ in plan.values()) and \
                not any(a for _, a in plan.values()):
            return handler(ctx, req)
        denied_entries = _denied(ctx, "groups", denied_groups, "groups",
                                 Err.GROUP_AUTHORIZATION_FAILED)

        def fix(resp):
            for g in resp.get("groups") or []:
                extra, all_topics = plan.get(g["group_id"], ([], False))
                g["topics"] = _filter_fetched(c, ctx, g.get("topics"), extra, all_topics)
            resp["groups"] = list(resp.get("groups") or []) + denied_entries
            return resp
        if not keep:
            return {"throttle_time_ms": 0, "groups": denied_entries}
        return then(ctx, handler(ctx, {**req, "groups": keep}), fix)
    if not c.group_allowed(ctx, Op.DESCRIBE, req["group_id"]):
        return _refused(ctx, req, Err.GROUP_AUTHORIZATION_FAILED)
    ok, extra, all_topics = _offset_fetch_group(c, ctx, req["topics"])
    if not extra and not all_topics:
        return handler(ctx, req)

    def fix_one(resp):
        resp["topics"] = _filter_fetched(c, ctx, resp.get("topics"), extra, all_topics)
        return resp
    if not all_topics and not ok:
        return {"throttle_time_ms": 0, "error_code": Err.NONE, "topics": extra}
    return then(ctx, handler(ctx, {**req, "topics": ok}), fix_one)


# --------------------------------------------------------- FindCoordinator
KEY_TYPE_ERRORS = {0: (R.GROUP, Err.GROUP_AUTHORIZATION_FAILED),
                   1: (R.TRANSACTIONAL_ID, Err.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)}


KEY_TYPE_SHARE = 2  # brokers finding a share coordinator: CLUSTER_ACTION on the cluster


@rule(10)
def _find_coordinator(c: Checks, ctx, req, handler):
    if req.get("key_type", 0) == KEY_TYPE_SHARE and not c.cluster(ctx, Op.CLUSTER_ACTION):
        # the whole request fails (Kafka's getCoordinator)
        return _refused(ctx, req, Err.CLUSTER_AUTHORIZATION_FAILED)
    rtype, code = KEY_TYPE_ERRORS.get(req.get("key_type", 0), (None, None))
    if rtype is None:
        return handler(ctx, req)
    if ctx.api_version < 4:
        if c.allowed(ctx, Op.DESCRIBE, rtype, req["key"]):
            return handler(ctx, req)
        return _refused(ctx, req, code)
    ok, denied = _split(req["coordinator_keys"],
                        lambda k: c.allowed(ctx, Op.DESCRIBE, rtype, k))
    if not denied:
        return handler(ctx, req)
    return _serve_or_deny(ctx, req, handler, "coordinator_keys", ok, denied, "coordinators", code)


# ----------------------------------------- Join/Heartbeat/Leave/Sync (READ)
def _group_read(c: Checks, ctx, req, handler):
    if c.group_allowed(ctx, Op.READ, req["group_id"]):
        return handler(ctx, req)
    return _refused(ctx, req, Err.GROUP_AUTHORIZATION_FAILED)


for _key in (11, 12, 13, 14):
    RULES[_key] = _group_read


@rule(68)
@rule(76)
def _group_heartbeat(c: Checks, ctx, req, handler):
    """KafkaApis handleConsumerGroupHeartbeat and handleShareGroupHeartbeat
    check the same: READ on the group, DESCRIBE on every subscribed topic
    (else only TOPIC_AUTHORIZATION_FAILED at top level)."""
    if not c.group_allowed(ctx, Op.READ, req["group_id"]):
        return _refused(ctx, req, Err.GROUP_AUTHORIZATION_FAILED)
    for name in req.get("subscribed_topic_names") or ():
        if not c.allowed(ctx, Op.DESCRIBE, R.TOPIC, name):
            return _refused(ctx, req, Err.TOPIC_AUTHORIZATION_FAILED,
                            f"Topic {name} is not authorized")
    return handler(ctx, req)


@rule(69)
def _consumer_group_describe(c: Checks, ctx, req, handler):
    ok, denied = _split(req["group_ids"], lambda g: c.group_allowed(ctx, Op.DESCRIBE, g))
    errors = _denied(ctx, "group_ids", denied, "groups", Err.GROUP_AUTHORIZATION_FAILED)
    want_ops = req.get("include_authorized_operations", False)

    def fix(resp):
        groups = []
        for g in resp.get("groups") or []:
            if g.get("error_code") == Err.NONE:
                # Kafka 4.0 (KAFKA-18813): every topic of the members' current and
                # target assignments must be describable, else the group is withheld
                topics = {tp["topic_name"] for m in g.get("members") or ()
                          for a in (m.get("assignment"), m.get("target_assignment")) if a
                          for tp in a.get("topic_partitions") or ()}
                hidden = sorted(t for t in topics
                                if not c.allowed(ctx, Op.DESCRIBE, R.TOPIC, t))
                if hidden:
                    g = _denied(ctx, "group_ids", [g["group_id"]], "groups",
                                Err.TOPIC_AUTHORIZATION_FAILED,
                                f"The described group uses topics that the client "
                                f"is not authorized to describe: {hidden}")[0]
                elif want_ops:
                    g["authorized_operations"] = c.az.authorized_operations(
                        ctx.principal, ctx.client_host, R.GROUP, g["group_id"])
            groups.append(g)
        resp["groups"] = groups + errors
        return resp
    if not ok:
        return {"throttle_time_ms": 0, "groups": errors}
    return then(ctx, handler(ctx, {**req, "group_ids": ok}), fix)


@rule(77)
def _share_group_describe(c: Checks, ctx, req, handler):
    """KafkaApis handleShareGroupDescribe: DESCRIBE on each group; a group whose
    members hold a topic the client may not DESCRIBE is answered
    TOPIC_AUTHORIZATION_FAILED with no members."""
    ok, denied = _split(req["group_ids"], lambda g: c.group_allowed(ctx, Op.DESCRIBE, g))
    errors = _denied(ctx, "group_ids", denied, "groups", Err.GROUP_AUTHORIZATION_FAILED)
    want_ops = req.get("include_authorized_operations", False)

    def fix(resp):
        for g in resp.get("groups") or []:
            if g.get("error_code") != Err.NONE:
                continue
            topics = {tp["topic_name"] for m in g.get("members") or ()
                      for tp in (m.get("assignment") or {}).get("topic_partitions") or ()}
            hidden = sorted(t for t in topics if not c.allowed(ctx, Op.DESCRIBE, R.TOPIC, t))
            if hidden:
                g.update(error_code=Err.TOPIC_AUTHORIZATION_FAILED, members=[],
                         error_message=f"The group has described topic partitions that the "
                                       f"client is not authorized to describe: {hidden}")
            elif want_ops:
                g["authorized_operations"] = c.az.authorized_operations(
                    ctx.principal, ctx.client_host, R.GROUP, g["group_id"])
        resp["groups"] = (resp.get("groups") or []) + errors
        return resp
    if not ok:
        return {"throttle_time_ms": 0, "groups": errors}
    return then(ctx, handler(ctx, {**req, "group_ids": ok}), fix)


# Kafka's Errors messages, which KafkaApis sets on the share offsets APIs' refusals
TOPIC_DENIED = "Topic authorization failed."
GROUP_DENIED = "Group authorization failed."


@rule(90)
def _describe_share_group_offsets(c: Checks, ctx, req, handler):
    """KafkaApis handleDescribeShareGroupOffsetsRequest: DESCRIBE on each group
    (else that group GROUP_AUTHORIZATION_FAILED); a listed topic without
    DESCRIBE answers StartOffset -1 / TOPIC_AUTHORIZATION_FAILED, and with all
    topics (null) the undescribable ones are left out."""
    ok, denied = _split(req["groups"], lambda g: c.group_allowed(ctx, Op.DESCRIBE, g["group_id"]))
    hidden: dict[str, list[dict]] = {}  # group -> its listed topics the client may not describe
    asked = []
    for g in ok:
        if g.get("topics") is None:
            asked.append(g)
            continue
        shown, secret = _split(g["topics"],
                               lambda t: c.allowed(ctx, Op.DESCRIBE, R.TOPIC, t["topic_name"]))
        hidden[g["group_id"]] = [{
            "topic_name": t["topic_name"], "topic_id": bytes(16), "partitions": [
                {"partition_index": p, "start_offset": -1, "leader_epoch": 0, "lag": -1,
                 "error_code": Err.TOPIC_AUTHORIZATION_FAILED, "error_message": TOPIC_DENIED}
                for p in t["partitions"]]} for t in secret]
        asked.append({**g, "topics": shown})

    def fix(resp):
        for g in resp.get("groups") or []:
            if g.get("error_code"):  # a group the coordinator refused answers its error only
                continue
            if g["group_id"] in hidden:
                g["topics"] = (g.get("topics") or []) + hidden[g["group_id"]]
            else:
                g["topics"] = [t for t in g.get("topics") or ()
                               if c.allowed(ctx, Op.DESCRIBE, R.TOPIC, t["topic_name"])]
        resp["groups"] = (resp.get("groups") or []) + _denied(
            ctx, "groups", denied, "groups", Err.GROUP_AUTHORIZATION_FAILED)
        return resp
    if not asked:
        return fix({"throttle_time_ms": 0, "groups": []})
    return then(ctx, handler(ctx, {**req, "groups": asked}), fix)


@rule(91)
def _alter_share_group_offsets(c: Checks, ctx, req, handler):
    """KafkaApis handleAlterShareGroupOffsetsRequest: READ on the group (top
    level), READ on each topic (its partitions TOPIC_AUTHORIZATION_FAILED)."""
    if not c.group_allowed(ctx, Op.READ, req["group_id"]):
        return _refused(ctx, req, Err.GROUP_AUTHORIZATION_FAILED, GROUP_DENIED)
    ok, denied = _split(req["topics"], lambda t: c.allowed(ctx, Op.READ, R.TOPIC, t["topic_name"]))
    refused = [{"topic_name": t["topic_name"], "topic_id": bytes(16), "partitions": [
        {"partition_index": p["partition_index"], "error_code": Err.TOPIC_AUTHORIZATION_FAILED,
         "error_message": TOPIC_DENIED} for p in t["partitions"]]} for t in denied]

    def fix(resp):
        if not resp.get("error_code"):  # a top-level error is answered alone, as Kafka
            resp["responses"] = refused + (resp.get("responses") or [])
        return resp
    return then(ctx, handler(ctx, {**req, "topics": ok}), fix)


@rule(92)
def _delete_share_group_offsets(c: Checks, ctx, req, handler):
    """KafkaApis handleDeleteShareGroupOffsetsRequest: DELETE on the group (top
    level), READ on each topic (that topic TOPIC_AUTHORIZATION_FAILED)."""
    if not c.group_allowed(ctx, Op.DELETE, req["group_id"]):
        return _refused(ctx, req, Err.GROUP_AUTHORIZATION_FAILED, GROUP_DENIED)
    ok, denied = _split(req["topics"], lambda t: c.allowed(ctx, Op.READ, R.TOPIC, t["topic_name"]))
    refused = [{"topic_name": t["topic_name"], "topic_id": bytes(16),
                "error_code": Err.TOPIC_AUTHORIZATION_FAILED, "error_message": TOPIC_DENIED}
               for t in denied]

    def fix(resp):
        if not resp.get("error_code"):  # a top-level error is answered alone, as Kafka
            resp["responses"] = refused + (resp.get("responses") or [])
        return resp
    return then(ctx, handler(ctx, {**req, "topics": ok}), fix)


# ------------------------------------------------------- group admin APIs
@rule(15)
def _describe_groups(c: Checks, ctx, req, handler):
    ok, denied = _split(req["groups"], lambda g: c.group_allowed(ctx, Op.DESCRIBE, g))
    want_ops = req.get("include_authorized_operations", False)
    errors = _denied(ctx, "groups", denied, "groups", Err.GROUP_AUTHORIZATION_FAILED)

    def fix(resp):
        for g in resp.get("groups") or []:
            if want_ops:
                g["authorized_operations"] = c.az.authorized_operations(
                    ctx.principal, ctx.client_host, R.GROUP, g["group_id"])
        resp["groups"] = list(resp.get("groups") or []) + errors
        return resp
    if not ok:
        return {"throttle_time_ms": 0, "groups": errors}
    if not denied and not want_ops:
        return handler(ctx, req)
    return then(ctx, handler(ctx, {**req, "groups": ok}), fix)


@rule(16)
def _list_groups(c: Checks, ctx, req, handler):
    if c.cluster(ctx, Op.DESCRIBE):
        return handler(ctx, req)

    def fix(resp):
        resp["groups"] = [g for g in resp.get("groups") or []
                          if c.group_allowed(ctx, Op.DESCRIBE, g["group_id"])]
        return resp
    return then(ctx, handler(ctx, req), fix)


@rule(42)
def _delete_groups(c: Checks, ctx, req, handler):
    ok, denied = _split(req["groups_names"], lambda g: c.group_allowed(ctx, Op.DELETE, g))
    if not denied:
        return handler(ctx, req)
    return _serve_or_deny(ctx, req, handler, "groups_names", ok, denied, "results",
                          Err.GROUP_AUTHORIZATION_FAILED)


@rule(47)
def _offset_delete(c: Checks, ctx, req, handler):
    if not c.group_allowed(ctx, Op.DELETE, req["group_id"]):
        return _refused(ctx, req, Err.GROUP_AUTHORIZATION_FAILED)
    ok, denied = _split(req["topics"], lambda t: c.allowed(ctx, Op.READ, R.TOPIC, t["name"]))
    if not denied:
        return handler(ctx, req)
    errors = _commit_errors(denied, Err.TOPIC_AUTHORIZATION_FAILED)
    return _serve_allowed(ctx, req, handler, "topics", ok, "topics", errors, error_code=Err.NONE)


# ------------------------------------------------------------- topic admin
@rule(19)
def _create_topics(c: Checks, ctx, req, handler):
    may_all = c.cluster(ctx, Op.CREATE)
    ok, denied = _split(req["topics"], lambda t: may_all or c.allowed(
        ctx, Op.CREATE, R.TOPIC, t["name"]))
    errors = _denied(ctx, "topics", denied, "topics", Err.TOPIC_AUTHORIZATION_FAILED,
                     "Authorization failed.")  # Kafka's message

    def fix(resp):
        for t in resp.get("topics") or []:
            if t.get("error_code") == Err.NONE and not c.allowed(
                    ctx, Op.DESCRIBE_CONFIGS, R.TOPIC, t["name"]):
                t["topic_config_error_code"] = Err.TOPIC_AUTHORIZATION_FAILED
                t["configs"] = None if ctx.api_version >= 5 else t.get("configs")
        resp["topics"] = list(resp.get("topics") or []) + errors
        return resp
    if not ok:
        return {"throttle_time_ms": 0, "topics": errors}
    return then(ctx, handler(ctx, {**req, "topics": ok}), fix)


@rule(20)
def _delete_topics(c: Checks, ctx, req, handler):
    if c.cluster(ctx, Op.DELETE):
        return handler(ctx, req)
    v6 = ctx.api_version >= 6
    items = req["topics"] if v6 else [{"name": n, "topic_id": ZERO_UUID}
                                      for n in req["topic_names"]]
    ok, errors = [], []
    for t in items:
        name = t.get("name") or c.topic_name(t.get("topic_id"))
        if name is None:
            ok.append(t)
            continue
        if not c.allowed(ctx, Op.DESCRIBE, R.TOPIC, name):
            errors.append({"name": t.get("name"), "topic_id": t.get("topic_id", ZERO_UUID),
                           "error_code": Err.TOPIC_AUTHORIZATION_FAILED, "error_message": None})
        elif not c.allowed(ctx, Op.DELETE, R.TOPIC, name):
            errors.append({"name": name, "topic_id": t.get("topic_id", ZERO_UUID),
                           "error_code": Err.TOPIC_AUTHORIZATION_FAILED, "error_message": None})
        else:
            ok.append(t)
    if not errors:
        return handler(ctx, req)
    if not ok:
        return {"throttle_time_ms": 0, "responses": errors}
    sub = {**req, "topics": ok} if v6 else {**req, "topic_names": [t["name"] for t in ok]}
    return then(ctx, handler(ctx, sub), lambda r: _merge_topics(r, "responses", errors))


@rule(37)
def _create_partitions(c: Checks, ctx, req, handler):
    ok, denied = _split(req["topics"], lambda t: c.allowed(ctx, Op.ALTER, R.TOPIC, t["name"]))
    if not denied:
        return handler(ctx, req)
    return _serve_or_deny(ctx, req, handler, "topics", ok, denied, "results",
                          Err.TOPIC_AUTHORIZATION_FAILED)


@rule(22)
def _init_producer_id(c: Checks, ctx, req, handler):
    tid = req.get("transactional_id")
    if tid is not None:
        if c.transactional_id_allowed(ctx, Op.WRITE, tid):
            return handler(ctx, req)
        code = Err.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    else:
        if c.cluster(ctx, Op.IDEMPOTENT_WRITE) or c.az.authorize_by_resource_type(
                ctx.principal, ctx.client_host, Op.WRITE, R.TOPIC):
            return handler(ctx, req)
        code = Err.CLUSTER_AUTHORIZATION_FAILED
    return _refused(ctx, req, code)


# ----------------------------------------------------- config and admin APIs
# ConfigResource types: TOPIC 2, BROKER 4, BROKER_LOGGER 8, CLIENT_METRICS 16, GROUP 32
_CONFIG_TARGET = {2: (R.TOPIC, Err.TOPIC_AUTHORIZATION_FAILED),
                  32: (R.GROUP, Err.GROUP_AUTHORIZATION_FAILED)}


def _config_rule(op: int, field: str):
    def check(c: Checks, ctx, req, handler):
        def ok(res):
            rtype, _ = _CONFIG_TARGET.get(res["resource_type"], (R.CLUSTER, None))
            name = res["resource_name"] if rtype != R.CLUSTER else CLUSTER_NAME
            return c.allowed(ctx, op, rtype, name)
        allowed, denied = _split(req["resources"], ok)
        if not denied:
            return handler(ctx, req)
        errors = [error_item(ctx.api_key, ctx.api_version, ("resources",), r, _CONFIG_TARGET.get(
            r["resource_type"], (None, Err.CLUSTER_AUTHORIZATION_FAILED))[1]) for r in denied]
        return _serve_allowed(ctx, req, handler, "resources", allowed, field, errors)
    return check


RULES[32] = _config_rule(Op.DESCRIBE_CONFIGS, "results")
RULES[33] = _config_rule(Op.ALTER_CONFIGS, "responses")
RULES[44] = _config_rule(Op.ALTER_CONFIGS, "responses")


@rule(21)
def _delete_records(c: Checks, ctx, req, handler):
    ok, denied = _split(req["topics"], lambda t: c.allowed(ctx, Op.DELETE, R.TOPIC, t["name"]))
    if not denied:
        return handler(ctx, req)
    return _serve_or_deny(ctx, req, handler, "topics", ok, denied, "topics",
                          Err.TOPIC_AUTHORIZATION_FAILED)


@rule(35)
def _describe_log_dirs(c: Checks, ctx, req, handler):
    if c.cluster(ctx, Op.DESCRIBE):
        return handler(ctx, req)
    return _refused(ctx, req, Err.CLUSTER_AUTHORIZATION_FAILED)


@rule(43)
def _elect_leaders(c: Checks, ctx, req, handler):
    if c.cluster(ctx, Op.ALTER):
        return handler(ctx, req)
    return _refused(ctx, req, Err.CLUSTER_AUTHORIZATION_FAILED)


@rule(48)
def _describe_client_quotas(c: Checks, ctx, req, handler):
    if c.cluster(ctx, Op.DESCRIBE_CONFIGS):
        return handler(ctx, req)
    return _refused(ctx, req, Err.CLUSTER_AUTHORIZATION_FAILED)


@rule(60)
def _describe_cluster(c: Checks, ctx, req, handler):
    if not req.get("include_cluster_authorized_operations"):
        return handler(ctx, req)

    def fix(resp):
        resp["cluster_authorized_operations"] = (
            c.az.authorized_operations(ctx.principal, ctx.client_host, R.CLUSTER, CLUSTER_NAME)
            if c.cluster(ctx, Op.DESCRIBE) else 0)
        return resp
    return then(ctx, handler(ctx, req), fix)


@rule(75)
def _describe_topic_partitions(c: Checks, ctx, req, handler):
    asked = req["topics"]
    ok, denied = _split(asked, lambda t: c.allowed(ctx, Op.DESCRIBE, R.TOPIC, t["name"]))
    errors = _denied(ctx, "topics", denied, "topics", Err.TOPIC_AUTHORIZATION_FAILED)

    def fix(resp):
        topics = [t for t in resp.get("topics") or []
                  if asked or c.allowed(ctx, Op.DESCRIBE, R.TOPIC, t["name"])]
        resp["topics"] = topics + errors
        return resp
    if asked and not denied:
        return handler(ctx, req)
    if asked and not ok:
        return {"throttle_time_ms": 0, "topics": errors, "next_cursor": None}
    return then(ctx, handler(ctx, {**req, "topics": ok}), fix)


# ------------------------------------------------------------- replication
@rule(23)
def _offset_for_leader_epoch(c: Checks, ctx, req, handler):
    if c.cluster(ctx, Op.CLUSTER_ACTION):
        return handler(ctx, req)
    ok, denied = _split(req["topics"], lambda t: c.allowed(ctx, Op.DESCRIBE, R.TOPIC, t["topic"]))
    if not denied:
        return handler(ctx, req)
    return _serve_or_deny(ctx, req, handler, "topics", ok, denied, "topics",
                          Err.TOPIC_AUTHORIZATION_FAILED)


# ------------------------------------------------------------ transactions
def _txn_partition_results(topics, code_of):
    return [{"name": t["name"], "results_by_partition": [
        {"partition_index": p, "partition_error_code": code_of(t["name"])}
        for p in t["partitions"]]} for t in topics]


@rule(24)
def _add_partitions_to_txn(c: Checks, ctx, req, handler):
    if ctx.api_version >= 4:  # broker to broker only
        if c.cluster(ctx, Op.CLUSTER_ACTION):
            return handler(ctx, req)
        return _refused(ctx, req, Err.CLUSTER_AUTHORIZATION_FAILED)
    topics = req["v3_and_below_topics"]
    if not c.transactional_id_allowed(ctx, Op.WRITE, req["v3_and_below_transactional_id"]):
        return _refused(ctx, req, Err.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    denied = {t["name"] for t in topics if not c.allowed(ctx, Op.WRITE, R.TOPIC, t["name"])}
    if not denied:
        return handler(ctx, req)
    # one failure adds nothing: the rest are OPERATION_NOT_ATTEMPTED
    return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": _txn_partition_results(
        topics, lambda name: Err.TOPIC_AUTHORIZATION_FAILED if name in denied
        else Err.OPERATION_NOT_ATTEMPTED)}


@rule(25)
def _add_offsets_to_txn(c: Checks, ctx, req, handler):
    if not c.transactional_id_allowed(ctx, Op.WRITE, req["transactional_id"]):
        return _refused(ctx, req, Err.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not c.group_allowed(ctx, Op.READ, req["group_id"]):
        return _refused(ctx, req, Err.GROUP_AUTHORIZATION_FAILED)
    return handler(ctx, req)


@rule(26)
def _end_txn(c: Checks, ctx, req, handler):
    if c.transactional_id_allowed(ctx, Op.WRITE, req["transactional_id"]):
        return handler(ctx, req)
    return _refused(ctx, req, Err.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)


@rule(27)
def _write_txn_markers(c: Checks, ctx, req, handler):
    """Coordinator to partition leader only (Kafka: CLUSTER_ACTION on the
    cluster, else every partition answers CLUSTER_AUTHORIZATION_FAILED)."""
    if c.cluster(ctx, Op.CLUSTER_ACTION):
        return handler(ctx, req)
    return _refused(ctx, req, Err.CLUSTER_AUTHORIZATION_FAILED)


def _share_state_rpc(c: Checks, ctx, req, handler):
    """The share-state RPCs 83-87, broker to share coordinator (Kafka:
    CLUSTER_ACTION on the cluster, else every partition answers
    CLUSTER_AUTHORIZATION_FAILED)."""
    if c.cluster(ctx, Op.CLUSTER_ACTION):
        return handler(ctx, req)
    return _refused(ctx, req, Err.CLUSTER_AUTHORIZATION_FAILED)


for _key in (83, 84, 85, 86, 87):
    RULES[_key] = _share_state_rpc


@rule(28)
def _txn_offset_commit(c: Checks, ctx, req, handler):
    if not c.transactional_id_allowed(ctx, Op.WRITE, req["transactional_id"]):
        return _refused(ctx, req, Err.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not c.group_allowed(ctx, Op.READ, req["group_id"]):
        return _refused(ctx, req, Err.GROUP_AUTHORIZATION_FAILED)
    ok, denied = _split(req["topics"], lambda t: c.allowed(ctx, Op.READ, R.TOPIC, t["name"]))
    if not denied:
        return handler(ctx, req)
    return _serve_or_deny(ctx, req, handler, "topics", ok, denied, "topics",
                          Err.TOPIC_AUTHORIZATION_FAILED)


@rule(61)
def _describe_producers(c: Checks, ctx, req, handler):
    ok, denied = _split(req["topics"], lambda t: c.allowed(ctx, Op.READ, R.TOPIC, t["name"]))
    if not denied:
        return handler(ctx, req)
    return _serve_or_deny(ctx, req, handler, "topics", ok, denied, "topics",
                          Err.TOPIC_AUTHORIZATION_FAILED)


@rule(65)
def _describe_transactions(c: Checks, ctx, req, handler):
    ok, denied = _split(req["transactional_ids"],
                        lambda t: c.transactional_id_allowed(ctx, Op.DESCRIBE, t))
    errors = error_response(ctx.api_key, ctx.api_version, {"transactional_ids": denied},
                            Err.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)["transaction_states"]

    def fix(resp):
        for s in resp.get("transaction_states") or []:
            # partitions of topics the caller may not describe are left out
            s["topics"] = [t for t in s.get("topics") or []
                           if c.allowed(ctx, Op.DESCRIBE, R.TOPIC, t["topic"])]
        resp["transaction_states"] = list(resp.get("transaction_states") or []) + errors
        return resp
    if not ok:
        return {"throttle_time_ms": 0, "transaction_states": errors}
    return then(ctx, handler(ctx, {**req, "transactional_ids": ok}), fix)


@rule(66)
def _list_transactions(c: Checks, ctx, req, handler):
    def fix(resp):
        resp["transaction_states"] = [
            s for s in resp.get("transaction_states") or []
            if c.transactional_id_allowed(ctx, Op.DESCRIBE, s["transactional_id"])]
        return resp
    return then(ctx, handler(ctx, req), fix)


@rule(46)
def _list_partition_reassignments(c: Checks, ctx, req, handler):
    if c.cluster(ctx, Op.DESCRIBE):
        return handler(ctx, req)
    return _refused(ctx, req, Err.CLUSTER_AUTHORIZATION_FAILED)


# ------------------------------------------ ShareFetch / ShareAcknowledge
def _share_rule(fetch: bool):
    """READ on the GROUP (top-level GROUP_AUTHORIZATION_FAILED), READ on each
    TOPIC (its partitions answered TOPIC_AUTHORIZATION_FAILED, for their
    fetch and their acknowledgements); an unknown topic id passes, for the
    handler's UNKNOWN_TOPIC_ID.  The handler always runs when the group is
    allowed: the session epoch moves on whatever topics were denied."""
    def check(c: Checks, ctx, req, handler):
        if req.get("group_id") is None or not c.group_allowed(ctx, Op.READ, req["group_id"]):
            return _refused(ctx, req, Err.GROUP_AUTHORIZATION_FAILED)

        def ok_topic(t):
            name = c.topic_name(t["topic_id"])
            return name is None or c.allowed(ctx, Op.READ, R.TOPIC, name)
        ok, denied = _split(req["topics"], ok_topic)
        if not denied:
            return handler(ctx, req)
        code = Err.TOPIC_AUTHORIZATION_FAILED
        errors = [{"topic_id": t["topic_id"], "partitions": [
            ({"partition_index": p["partition_index"], "error_code": code, "error_message": None,
              "acknowledge_error_code": code if p.get("acknowledgement_batches") else Err.NONE,
              "acknowledge_error_message": None, "current_leader": {"leader_id": -1,
                                                                    "leader_epoch": -1},
              "records": b"", "acquired_records": []} if fetch else
             {"partition_index": p["partition_index"], "error_code": code,
              "error_message": None, "current_leader": {"leader_id": -1, "leader_epoch": -1}})
            for p in t["partitions"]]} for t in denied]

        def fix(resp):
            if resp.get("error_code"):
                return resp          # a session error: no partitions
            return _merge_topics(resp, "responses", errors)
        return then(ctx, handler(ctx, {**req, "topics": ok}), fix)
    return check


RULES[78] = _share_rule(fetch=True)
RULES[79] = _share_rule(fetch=False)
