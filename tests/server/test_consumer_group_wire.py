"""ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69) at the wire level.

Requests are encoded with kcoord's own codecs and sent over a socket to a real
`kcoord serve`; the errors follow KAFKA_REFERENCE.md 1.8 (Kafka's
GroupCoordinatorService and GroupMetadataManager).
"""
from __future__ import annotations

import time

import pytest

from kcoord.protocol.errors import Err
from tests.clients.wire import WireClient, create_topic
from tests.support import ServerProcess

HEARTBEAT, DESCRIBE, OFFSET_COMMIT, OFFSET_FETCH, API_VERSIONS = 68, 69, 8, 9, 18


def hb(group="g", member_id="m1", epoch=0, *, names=("t",), regex=None, owned=(),
       rebalance_timeout_ms=30000, instance_id=None, assignor=None, rack_id=None) -> dict:
    return {"group_id": group, "member_id": member_id, "member_epoch": epoch,
            "instance_id": instance_id, "rack_id": rack_id,
            "rebalance_timeout_ms": rebalance_timeout_ms,
            "subscribed_topic_names": None if names is None else list(names),
            "subscribed_topic_regex": regex, "server_assignor": assignor,
            "topic_partitions": None if owned is None else list(owned)}


@pytest.fixture
def client(server):
    with WireClient(server.port) as c:
        create_topic(c, "t", 4)
        yield c


@pytest.fixture(scope="module")
def stateless_client(module_server):
    """One server for the tests whose requests must write nothing (group "g" never
    exists on it: test_invalid_regular_expression checks so after each of them)."""
    with WireClient(module_server.port) as c:
        create_topic(c, "t", 4)
        yield c


def test_advertised(stateless_client):
    keys = {k["api_key"]: (k["min_version"], k["max_version"])
            for k in stateless_client.api_versions()["api_keys"]}
    assert keys[HEARTBEAT] == (0, 1) and keys[DESCRIBE] == (0, 0)


def test_join_and_heartbeat(client):
    resp = client.request(HEARTBEAT, 1, hb())
    assert resp["error_code"] == 0 and resp["member_id"] == "m1" and resp["member_epoch"] == 1
    assert resp["heartbeat_interval_ms"] == 5000
    [tp] = resp["assignment"]["topic_partitions"]
    assert tp["partitions"] == [0, 1, 2, 3]
    resp = client.request(HEARTBEAT, 1, hb(epoch=1, names=None, owned=[tp],
                                           rebalance_timeout_ms=-1))
    assert resp["error_code"] == 0 and resp["assignment"] is None
    # v0: the coordinator generates the member id
    resp = client.request(HEARTBEAT, 0, hb(member_id=""))
    assert resp["error_code"] == 0 and len(resp["member_id"]) == 22


@pytest.mark.parametrize("version, body, message", [
    (1, hb(member_id=""), "MemberId can't be empty."),
    (0, hb(member_id="", epoch=1), "MemberId can't be empty."),
    (1, hb(group=""), "GroupId can't be empty."),
    (1, hb(instance_id=""), "InstanceId can't be empty."),
    (1, hb(rack_id=""), "RackId can't be empty."),
    (1, hb(rebalance_timeout_ms=-1), "RebalanceTimeoutMs must be provided in first request."),
    (1, hb(owned=None), "TopicPartitions must be empty when (re-)joining."),
    (1, hb(owned=[{"topic_id": bytes(16), "partitions": [0]}]),
     "TopicPartitions must be empty when (re-)joining."),
    (1, hb(names=None), "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null "
                        "when (re-)joining."),
    (1, hb(epoch=-2), "InstanceId can't be null."),
    (1, hb(epoch=-5), "MemberEpoch is invalid."),
])
def test_invalid_request(stateless_client, version, body, message):
    resp = stateless_client.request(HEARTBEAT, version, body)
    assert resp["error_code"] == Err.INVALID_REQUEST
    assert resp["error_message"] == message
    assert resp["member_id"] is None


def test_fenced_member_epoch(client):
    assert client.request(HEARTBEAT, 1, hb())["member_epoch"] == 1
    resp = client.request(HEARTBEAT, 1, hb(epoch=6, names=None, owned=None, rebalance_timeout_ms=-1))
    assert resp["error_code"] == Err.FENCED_MEMBER_EPOCH
    assert "greater member epoch (6)" in resp["error_message"]


def test_unknown_member_id_and_group(client):
    client.request(HEARTBEAT, 1, hb())
    resp = client.request(HEARTBEAT, 1, hb(member_id="nobody", epoch=1, names=None))
    assert resp["error_code"] == Err.UNKNOWN_MEMBER_ID
    resp = client.request(HEARTBEAT, 1, hb(member_id="nobody", epoch=-1, names=None))
    assert resp["error_code"] == Err.UNKNOWN_MEMBER_ID
    resp = client.request(HEARTBEAT, 1, hb(group="other", epoch=3, names=None))
    assert resp["error_code"] == Err.GROUP_ID_NOT_FOUND


def test_unsupported_assignor(client):
    resp = client.request(HEARTBEAT, 1, hb(assignor="cooperative-sticky"))
    assert resp["error_code"] == Err.UNSUPPORTED_ASSIGNOR
    assert resp["error_message"] == ("ServerAssignor cooperative-sticky is not supported. "
                                     "Supported assignors: uniform, range.")
    assert client.request(HEARTBEAT, 1, hb(assignor="range"))["error_code"] == 0


@pytest.mark.parametrize("regex", ["t[", "(?<=x)t", "(t)\\1", "*t"])
def test_invalid_regular_expression(stateless_client, regex):
    resp = stateless_client.request(HEARTBEAT, 1, hb(names=None, regex=regex))
    assert resp["error_code"] == Err.INVALID_REGULAR_EXPRESSION == 128
    assert resp["error_message"].startswith(f"SubscribedTopicRegex `{regex}` is not a valid")
    describe = stateless_client.request(DESCRIBE, 0, {"group_ids": ["g"], "include_authorized_operations": False})
    assert describe["groups"][0]["error_code"] == Err.GROUP_ID_NOT_FOUND  # nothing was written


def test_regex_subscription(client):
    create_topic(client, "t-extra", 2)
    create_topic(client, "xt", 1)
    resp = client.request(HEARTBEAT, 1, hb(names=None, regex="t.*"))
    assert resp["error_code"] == 0
    assert sorted(len(tp["partitions"]) for tp in resp["assignment"]["topic_partitions"]) == [2, 4]


def test_static_member_errors(client):
    assert client.request(HEARTBEAT, 1, hb(instance_id="i1"))["error_code"] == 0
    resp = client.request(HEARTBEAT, 1, hb(member_id="m2", instance_id="i1"))
    assert resp["error_code"] == Err.UNRELEASED_INSTANCE_ID
    resp = client.request(HEARTBEAT, 1, hb(member_id="m2", epoch=1, instance_id="i1", names=None))
    assert resp["error_code"] == Err.FENCED_INSTANCE_ID
    resp = client.request(HEARTBEAT, 1, hb(epoch=-2, instance_id="i1", names=None, owned=None))
    assert resp["error_code"] == 0 and resp["member_epoch"] == -2
    resp = client.request(HEARTBEAT, 1, hb(member_id="m2", instance_id="i1"))
    assert resp["error_code"] == 0 and resp["member_epoch"] == 1
    assert resp["assignment"]["topic_partitions"][0]["partitions"] == [0, 1, 2, 3]


def test_leave(client):
    client.request(HEARTBEAT, 1, hb())
    resp = client.request(HEARTBEAT, 1, hb(epoch=-1, names=None, owned=None))
    assert (resp["error_code"], resp["member_id"], resp["member_epoch"]) == (0, "m1", -1)
    d = client.request(DESCRIBE, 0, {"group_ids": ["g"], "include_authorized_operations": False})
    assert d["groups"][0]["group_state"] == "Empty" and d["groups"][0]["members"] == []


def test_describe(client):
    client.request(HEARTBEAT, 1, hb())
    d = client.request(DESCRIBE, 0, {"group_ids": ["g", "missing", ""],
                                     "include_authorized_operations": True})
    g, missing, empty = d["groups"]
    assert g["error_code"] == 0 and g["group_state"] == "Stable" and g["assignor_name"] == "uniform"
    assert g["authorized_operations"] == 3400
    [m] = g["members"]
    assert m["member_id"] == "m1" and m["client_id"] == "kcoord-tests"
    assert m["client_host"] == "/127.0.0.1" and m["subscribed_topic_names"] == ["t"]
    assert m["assignment"]["topic_partitions"][0]["topic_name"] == "t"
    assert missing["error_code"] == Err.GROUP_ID_NOT_FOUND
    assert empty["error_code"] == Err.INVALID_GROUP_ID
    # the classic APIs see the group too
    listed = client.request(16, 5, {"states_filter": [], "types_filter": ["consumer"]})
    assert listed["groups"] == [{"group_id": "g", "protocol_type": "consumer",
                                 "group_state": "Stable", "group_type": "consumer"}]
    described = client.request(15, 5, {"groups": ["g"], "include_authorized_operations": False})
    assert described["groups"][0]["group_state"] == "Dead"


def test_topic_created_later_reaches_the_assignment(client):
    resp = client.request(HEARTBEAT, 1, hb(names=["later"]))
    assert resp["assignment"]["topic_partitions"] == []
    create_topic(client, "later", 3)
    deadline = time.monotonic() + 10
    while True:
        resp = client.request(HEARTBEAT, 1, hb(epoch=resp["member_epoch"], names=None, owned=[],
                                               rebalance_timeout_ms=-1))
        assert resp["error_code"] == 0
        if resp["assignment"] is not None and resp["assignment"]["topic_partitions"]:
            break
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert resp["assignment"]["topic_partitions"][0]["partitions"] == [0, 1, 2]


def commit(client, version, member_id, epoch):
    body = {"group_id": "g", "generation_id_or_member_epoch": epoch, "member_id": member_id,
            "group_instance_id": None, "retention_time_ms": -1,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 5,
                                                     "committed_leader_epoch": -1,
                                                     "committed_metadata": ""}]}]}
    return client.request(OFFSET_COMMIT, version, body)["topics"][0]["partitions"][0]["error_code"]


def test_offset_commit_and_fetch_by_member_epoch(client):
    client.request(HEARTBEAT, 1, hb())
    assert commit(client, 9, "m1", 1) == 0
    assert commit(client, 9, "m1", 2) == Err.STALE_MEMBER_EPOCH
    assert commit(client, 9, "m9", 1) == Err.UNKNOWN_MEMBER_ID
    assert commit(client, 8, "m1", 1) == Err.UNSUPPORTED_VERSION
    fetch = {"groups": [{"group_id": "g", "member_id": "m1", "member_epoch": 1,
                         "topics": [{"name": "t", "partition_indexes": [0]}]}],
             "require_stable": False}
    resp = client.request(OFFSET_FETCH, 9, fetch)["groups"][0]
    assert resp["error_code"] == 0 and resp["topics"][0]["partitions"][0]["committed_offset"] == 5
    fetch["groups"][0]["member_epoch"] = 7
    assert client.request(OFFSET_FETCH, 9, fetch)["groups"][0]["error_code"] == Err.STALE_MEMBER_EPOCH


def test_state_survives_restart(server):
    with WireClient(server.port) as c:
        create_topic(c, "t", 4)
        c.request(HEARTBEAT, 1, hb(instance_id="i1"))
        c.request(HEARTBEAT, 1, hb(member_id="m2"))
        before = c.request(DESCRIBE, 0, {"group_ids": ["g"], "include_authorized_operations": False})
    server.restart()
    with WireClient(server.port) as c:
        deadline = time.monotonic() + 30
        while True:
            after = c.request(DESCRIBE, 0, {"group_ids": ["g"], "include_authorized_operations": False})
            if after["groups"][0]["error_code"] != Err.COORDINATOR_LOAD_IN_PROGRESS:
                break
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert after == before
        resp = c.request(HEARTBEAT, 1, hb(epoch=before["groups"][0]["members"][0]["member_epoch"],
                                          instance_id="i1", names=None, owned=None))
        assert resp["error_code"] == 0


def test_disabled_when_consumer_protocol_is_off(tmp_path):
    settings = {"group.coordinator.rebalance.protocols": "classic"}
    with ServerProcess(tmp_path / "data", settings) as srv, WireClient(srv.port) as c:
        keys = {k["api_key"] for k in c.api_versions()["api_keys"]}
        assert HEARTBEAT not in keys and DESCRIBE not in keys
        assert c.request(HEARTBEAT, 1, hb())["error_code"] == Err.UNSUPPORTED_VERSION
        d = c.request(DESCRIBE, 0, {"group_ids": ["g"], "include_authorized_operations": False})
        assert d["groups"][0]["error_code"] == Err.UNSUPPORTED_VERSION


def test_session_timeout_from_config(tmp_path):
    settings = {"group.consumer.heartbeat.interval.ms": "250",
                "group.consumer.min.heartbeat.interval.ms": "250",
                "group.consumer.session.timeout.ms": "1000",
                "group.consumer.min.session.timeout.ms": "1000",
                "group.initial.rebalance.delay.ms": "0"}
    with ServerProcess(tmp_path / "data", settings) as srv, WireClient(srv.port) as c:
        create_topic(c, "t", 2)
        assert c.request(HEARTBEAT, 1, hb())["heartbeat_interval_ms"] == 250
        deadline = time.monotonic() + 20
        while True:  # the silent member is fenced when its session expires
            d = c.request(DESCRIBE, 0, {"group_ids": ["g"], "include_authorized_operations": False})
            if d["groups"][0]["members"] == []:
                break
            assert time.monotonic() < deadline
            time.sleep(0.1)
