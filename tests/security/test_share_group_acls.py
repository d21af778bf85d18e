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


def test_describe_offsets_rule():
    az = Authorizer()
    seen = []

    def described(c, r):
        seen.append(r)
        return {"throttle_time_ms": 0, "groups": [{
            "group_id": g["group_id"], "error_code": 0, "error_message": None,
            "topics": [{"topic_name": n, "topic_id": b"\x01" * 16, "partitions": []}
                       for n in ([t["topic_name"] for t in g["topics"]]
                                 if g["topics"] is not None else ["ok", "secret"])]}
            for g in r["groups"]]}
    offsets = Checks(az).guard(90, described)
    az.add(allow(R.GROUP, "g", O.DESCRIBE))
    az.add(allow(R.TOPIC, "ok", O.DESCRIBE))
    r = offsets(ctx(90), {"groups": [
        {"group_id": "g", "topics": None}, {"group_id": "denied", "topics": None}]})
    by_id = {g["group_id"]: g for g in r["groups"]}
    assert [t["topic_name"] for t in by_id["g"]["topics"]] == ["ok"]  # the secret one left out
    assert by_id["denied"]["error_code"] == Err.GROUP_AUTHORIZATION_FAILED
    r = offsets(ctx(90), {"groups": [{"group_id": "g", "topics": [
        {"topic_name": "ok", "partitions": [0]}, {"topic_name": "secret", "partitions": [0, 1]}]}]})
    assert seen[-1]["groups"][0]["topics"] == [{"topic_name": "ok", "partitions": [0]}]
    [g] = r["groups"]
    secret = [t for t in g["topics"] if t["topic_name"] == "secret"][0]
    assert [(p["partition_index"], p["start_offset"], p["error_code"])
            for p in secret["partitions"]] == [(0, -1, Err.TOPIC_AUTHORIZATION_FAILED),
                                               (1, -1, Err.TOPIC_AUTHORIZATION_FAILED)]


def test_alter_offsets_rule():
    az = Authorizer()
    seen = []

    def altered(c, r):
        seen.append(r)
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "responses": [
            {"topic_name": t["topic_name"], "topic_id": b"\x01" * 16, "partitions": []}
            for t in r["topics"]]}
    alter = Checks(az).guard(91, altered)
    req = {"group_id": "g", "topics": [
        {"topic_name": "ok", "partitions": [{"partition_index": 0, "start_offset": 1}]},
        {"topic_name": "secret", "partitions": [{"partition_index": 0, "start_offset": 1}]}]}
    assert alter(ctx(91), req)["error_code"] == Err.GROUP_AUTHORIZATION_FAILED and seen == []
    az.add(allow(R.GROUP, "g", O.READ))
    az.add(allow(R.TOPIC, "ok", O.READ))
    r = alter(ctx(91), req)
    assert [t["topic_name"] for t in seen[-1]["topics"]] == ["ok"]
    secret = [t for t in r["responses"] if t["topic_name"] == "secret"][0]
    assert secret["partitions"][0]["error_code"] == Err.TOPIC_AUTHORIZATION_FAILED
    assert secret["partitions"][0]["error_message"] == "Topic authorization failed."
    # a group the coordinator refuses (members) is answered with that error alone, as KafkaApis
    refusing = Checks(az).guard(91, lambda c, r: {"throttle_time_ms": 0, "error_code":
                                                  Err.NON_EMPTY_GROUP, "error_message":
                                                  "The group is not empty.", "responses": []})
    r = refusing(ctx(91), req)
    assert (r["error_code"], r["responses"]) == (Err.NON_EMPTY_GROUP, [])


def test_delete_offsets_rule():
    az = Authorizer()
    seen = []

    def deleted(c, r):
        seen.append(r)
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "responses": [
            {"topic_name": t["topic_name"], "topic_id": b"\x01" * 16, "error_code": 0,
             "error_message": None} for t in r["topics"]]}
    delete = Checks(az).guard(92, deleted)
    req = {"group_id": "g", "topics": [{"topic_name": "ok"}, {"topic_name": "secret"}]}
    az.add(allow(R.GROUP, "g", O.READ))  # READ is not enough: DELETE is needed
    assert delete(ctx(92), req)["error_code"] == Err.GROUP_AUTHORIZATION_FAILED and seen == []
    az.add(allow(R.GROUP, "g", O.DELETE))
    az.add(allow(R.TOPIC, "ok", O.READ))
    r = delete(ctx(92), req)
    assert [t["topic_name"] for t in seen[-1]["topics"]] == ["ok"]
    assert {t["topic_name"]: t["error_code"] for t in r["responses"]} == {
        "ok": 0, "secret": Err.TOPIC_AUTHORIZATION_FAILED}
    refusing = Checks(az).guard(92, lambda c, r: {"throttle_time_ms": 0, "error_code":
                                                  Err.GROUP_ID_NOT_FOUND, "error_message": None,
                                                  "responses": []})
    r = refusing(ctx(92), req)
    assert (r["error_code"], r["responses"]) == (Err.GROUP_ID_NOT_FOUND, [])
