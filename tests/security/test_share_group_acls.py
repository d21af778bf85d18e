"""ShareGroupHeartbeat (76) and ShareGroupDescribe (77) authorization as
KafkaApis (SHARE_GROUPS_REFERENCE 6.1): READ on the group and DESCRIBE on
every subscribed topic for the heartbeat; DESCRIBE on each group, and on the
topics its members hold, for the describe."""
from kcoord.protocol.errors import Err
from kcoord.security.acl import AclBinding, Authorizer, Operation as O, PatternType as P, \
    ResourceType as R
from kcoord.security.checks import Checks
from kcoord.server.dispatch import RequestContext

ALLOW = 3


def allow(rtype, name, op):
    return AclBinding(rtype, name, P.LITERAL, "User:alice", "*", op, ALLOW)


def ctx(api: int) -> RequestContext:
    return RequestContext(api, 1, 1, "c", "127.0.0.1", principal="User:alice")


def test_heartbeat_rule():
    az = Authorizer()
    calls = []
    hb = Checks(az).guard(76, lambda c, r: calls.append(r) or {"error_code": 0})
    req = {"group_id": "g", "member_id": "m", "member_epoch": 0, "rack_id": None,
           "subscribed_topic_names": ["a", "b"]}
    assert hb(ctx(76), req)["error_code"] == Err.GROUP_AUTHORIZATION_FAILED
    az.add(allow(R.GROUP, "g", O.READ))
    az.add(allow(R.TOPIC, "a", O.DESCRIBE))
    r = hb(ctx(76), req)
    assert r["error_code"] == Err.TOPIC_AUTHORIZATION_FAILED and calls == []
    az.add(allow(R.TOPIC, "b", O.DESCRIBE))
    assert hb(ctx(76), req)["error_code"] == 0 and len(calls) == 1
    assert hb(ctx(76), {**req, "subscribed_topic_names": None})["error_code"] == 0


def test_describe_rule():
    az = Authorizer()

    def described(c, r):
        return {"throttle_time_ms": 0, "groups": [{
            "error_code": 0, "error_message": None, "group_id": g, "group_state": "Stable",
            "group_epoch": 3, "assignment_epoch": 3, "assignor_name": "simple",
            "members": [{"member_id": "m", "assignment": {"topic_partitions": [
                {"topic_id": b"\x01" * 16, "topic_name": "secret" if g == "s" else "ok",
                 "partitions": [0]}]}}],
            "authorized_operations": -2**31} for g in r["group_ids"]]}
    describe = Checks(az).guard(77, described)
    az.add(allow(R.GROUP, "g", O.DESCRIBE))
    az.add(allow(R.GROUP, "s", O.DESCRIBE))
    az.add(allow(R.TOPIC, "ok", O.DESCRIBE))
    r = describe(ctx(77), {"group_ids": ["g", "s", "denied"],
                           "include_authorized_operations": False})
    by_id = {g["group_id"]: g for g in r["groups"]}
    assert by_id["g"]["error_code"] == 0 and len(by_id["g"]["members"]) == 1
    assert by_id["s"]["error_code"] == Err.TOPIC_AUTHORIZATION_FAILED and by_id["s"]["members"] == []
    assert by_id["denied"]["error_code"] == Err.GROUP_AUTHORIZATION_FAILED
