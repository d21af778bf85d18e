"""ShareFetch / ShareAcknowledge authorization as KafkaApis: READ on the
group (top level GROUP_AUTHORIZATION_FAILED), READ on each topic (its
partitions TOPIC_AUTHORIZATION_FAILED, acknowledgements too), the handler
still run so the session epoch moves on."""
import asyncio

from kcoord.protocol.errors import Err
from kcoord.security.acl import AclBinding, Authorizer, Operation as O, PatternType as P, \
    ResourceType as R
from kcoord.security.checks import RULES, Checks
from kcoord.share.partition import ACCEPT

from .harness import Harness, acquired, partitions

ALLOW = 3


def allow(rtype, name, op):
    return AclBinding(rtype, name, P.LITERAL, "User:alice", "*", op, ALLOW)


def test_share_rules(tmp_path):
    h = Harness(tmp_path)
    az = Authorizer()
    checks = Checks(az)
    names = {}
    checks.topic_name = names.get
    fetch = checks.guard(78, h.handlers.share_fetch)
    ack = checks.guard(79, h.handlers.share_acknowledge)
    assert 78 in RULES and 79 in RULES

    async def call(handler, api, req):
        ctx = h.ctx(api)
        ctx.principal = "User:alice"
        result = handler(ctx, req)
        return await result if not isinstance(result, dict) else result

    async def scenario():
        ok, secret = h.topic("ok"), h.topic("secret")
        names.update({ok: "ok", secret: "secret"})
        h.produce("ok", count=2)
        h.produce("secret", count=2)
        req = {"group_id": "g", "member_id": "m1", "share_session_epoch": 0, "max_wait_ms": 0,
               "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 100, "batch_size": 100,
               "topics": [{"topic_id": t, "partitions": [{"partition_index": 0,
                                                          "acknowledgement_batches": []}]}
                          for t in (ok, secret)], "forgotten_topics_data": []}
        r = await call(fetch, 78, req)
        assert r["error_code"] == Err.GROUP_AUTHORIZATION_FAILED and not r.get("responses")
        az.add(allow(R.GROUP, "g", O.READ))
        az.add(allow(R.TOPIC, "ok", O.READ))
        r = await call(fetch, 78, req)
        assert r["error_code"] == 0
        assert acquired(r, (ok, 0)) == [(0, 1, 1)]
        assert partitions(r)[(secret, 0)]["error_code"] == Err.TOPIC_AUTHORIZATION_FAILED
        assert (secret, 0) not in h.handlers.sessions.get("g", "m1").partitions
        acks = {"group_id": "g", "member_id": "m1", "share_session_epoch": 1, "topics": [
            {"topic_id": t, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
                {"first_offset": 0, "last_offset": 1, "acknowledge_types": [ACCEPT]}]}]}
            for t in (ok, secret)]}
        r = await call(ack, 79, acks)
        assert partitions(r)[(ok, 0)]["error_code"] == 0
        assert partitions(r)[(secret, 0)]["error_code"] == Err.TOPIC_AUTHORIZATION_FAILED
        assert h.handlers.sessions.get("g", "m1").epoch == 2
    asyncio.run(scenario())
