"""Share groups in the group coordinator at the wire level: ShareGroupHeartbeat
(76), ShareGroupDescribe (77), ListGroups, DescribeGroups, DeleteGroups and
the other group APIs against a share group id, on a real `kcoord serve`
(SHARE_GROUPS_REFERENCE sections 1.4 and 2).
"""
from __future__ import annotations

import time

import pytest

from kcoord.protocol.errors import Err
from tests.clients.wire import WireClient, create_topic, metadata
from tests.support import ServerProcess

HEARTBEAT, DESCRIBE = 76, 77
CONSUMER_HEARTBEAT, JOIN, OFFSET_COMMIT, OFFSET_FETCH = 68, 11, 8, 9
LIST_GROUPS, DESCRIBE_GROUPS, DELETE_GROUPS = 16, 15, 42


def hb(group="sg", member_id="m1", epoch=0, names=("t",), rack_id=None) -> dict:
    return {"group_id": group, "member_id": member_id, "member_epoch": epoch,
            "rack_id": rack_id, "subscribed_topic_names": None if names is None else list(names)}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One server for the module: each test uses its own group ids."""
    with ServerProcess(tmp_path_factory.mktemp("share-wire")) as proc:
        yield proc


@pytest.fixture(scope="module")
def client(server):
    with WireClient(server.port) as c:
        create_topic(c, "t", 3)
        yield c


def test_advertised(client):
    keys = {k["api_key"]: (k["min_version"], k["max_version"])
            for k in client.api_versions()["api_keys"]}
    assert keys[HEARTBEAT] == (1, 1) and keys[DESCRIBE] == (1, 1)


def test_join_describe_list_leave_delete(client):
    resp = client.request(HEARTBEAT, 1, hb())
    assert resp["error_code"] == 0 and resp["member_id"] == "m1" and resp["member_epoch"] == 1
    assert resp["heartbeat_interval_ms"] == 5000
    assert resp["assignment"] == {"topic_partitions": []}  # first heartbeat: nothing yet

    [group] = client.request(DESCRIBE, 1, {"group_ids": ["sg"],
                                           "include_authorized_operations": False})["groups"]
    assert group["error_code"] == 0 and group["group_state"] == "Stable"
    assert group["assignor_name"] == "simple" and group["group_epoch"] == 1
    [member] = group["members"]
    assert member["member_id"] == "m1" and member["subscribed_topic_names"] == ["t"]
    assert member["client_host"] == "/127.0.0.1"

    listed = client.request(LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["share"]})
    assert ("sg", "share", "Stable", "share") in [
        (g["group_id"], g["protocol_type"], g["group_state"], g["group_type"])
        for g in listed["groups"]]
    assert "sg" not in [g["group_id"] for g in client.request(LIST_GROUPS, 5, {
        "states_filter": ["empty"], "types_filter": ["share"]})["groups"]]
    assert "sg" not in [g["group_id"] for g in client.request(LIST_GROUPS, 5, {
        "states_filter": [], "types_filter": ["consumer"]})["groups"]]
    # DescribeGroups (v0-5) treats a share group as not found: Dead, no error
    [dg] = client.request(DESCRIBE_GROUPS, 5, {"groups": ["sg"],
                                               "include_authorized_operations": False})["groups"]
    assert dg["error_code"] == 0 and dg["group_state"] == "Dead"

    [res] = client.request(DELETE_GROUPS, 2, {"groups_names": ["sg"]})["results"]
    assert res["error_code"] == Err.NON_EMPTY_GROUP

    resp = client.request(HEARTBEAT, 1, hb(epoch=-1, names=None))
    assert resp["error_code"] == 0 and resp["member_epoch"] == -1
    [group] = client.request(DESCRIBE, 1, {"group_ids": ["sg"],
                                           "include_authorized_operations": False})["groups"]
    assert group["group_state"] == "Empty" and group["members"] == []
    [res] = client.request(DELETE_GROUPS, 2, {"groups_names": ["sg"]})["results"]
    assert res["error_code"] == Err.NONE
    [group] = client.request(DESCRIBE, 1, {"group_ids": ["sg"],
                                           "include_authorized_operations": False})["groups"]
    assert group["error_code"] == Err.GROUP_ID_NOT_FOUND


@pytest.mark.parametrize("body, code", [
    (hb(member_id=""), Err.INVALID_REQUEST),
    (hb(member_id="x" * 37), Err.INVALID_REQUEST),
    (hb(group=""), Err.INVALID_REQUEST),
    (hb(rack_id=""), Err.INVALID_REQUEST),
    (hb(names=None), Err.INVALID_REQUEST),
    (hb(names=()), Err.INVALID_REQUEST),
    (hb(epoch=-2), Err.INVALID_REQUEST),
    (hb(group="none", epoch=3, names=None), Err.GROUP_ID_NOT_FOUND),
    (hb(group="none", epoch=-1, names=None), Err.GROUP_ID_NOT_FOUND),
])
def test_heartbeat_errors(client, body, code):
    resp = client.request(HEARTBEAT, 1, body)
    assert resp["error_code"] == code, resp


def test_fencing(client):
    assert client.request(HEARTBEAT, 1, hb(group="fence"))["member_epoch"] == 1
    assert client.request(HEARTBEAT, 1, hb(group="fence", member_id="m2", epoch=1, names=None))[
        "error_code"] == Err.UNKNOWN_MEMBER_ID
    assert client.request(HEARTBEAT, 1, hb(group="fence", epoch=7, names=None))[
        "error_code"] == Err.FENCED_MEMBER_EPOCH


def test_other_group_types(client):
    """One id namespace: no group type answers for another (section 1.4)."""
    assert client.request(HEARTBEAT, 1, hb(group="other"))["error_code"] == 0
    consumer = client.request(CONSUMER_HEARTBEAT, 0, {
        "group_id": "other", "member_id": "c1", "member_epoch": 0, "instance_id": None,
        "rack_id": None, "rebalance_timeout_ms": 30000, "subscribed_topic_names": ["t"],
        "server_assignor": None, "topic_partitions": []})
    assert consumer["error_code"] == Err.GROUP_ID_NOT_FOUND
    assert consumer["error_message"] == "Group other is not a consumer group."
    [described] = client.request(69, 0, {"group_ids": ["other"],
                                         "include_authorized_operations": False})["groups"]
    assert described["error_code"] == Err.GROUP_ID_NOT_FOUND
    assert described["error_message"] == "Group other is not a consumer group."
    join = client.request(JOIN, 5, {
        "group_id": "other", "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
        "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}]})
    assert join["error_code"] == Err.INCONSISTENT_GROUP_PROTOCOL and join["member_id"] == ""
    commit = client.request(OFFSET_COMMIT, 8, {
        "group_id": "other", "generation_id_or_member_epoch": -1, "member_id": "",
        "group_instance_id": None, "topics": [{"name": "t", "partitions": [{
            "partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
            "committed_metadata": ""}]}]})
    assert commit["topics"][0]["partitions"][0]["error_code"] == Err.GROUP_ID_NOT_FOUND
    fetch = client.request(OFFSET_FETCH, 8, {"groups": [{"group_id": "other", "topics": None}],
                                             "require_stable": False})
    assert fetch["groups"][0]["error_code"] == Err.GROUP_ID_NOT_FOUND
    # and a share heartbeat on a classic group's id
    client.request(OFFSET_COMMIT, 8, {
        "group_id": "classic", "generation_id_or_member_epoch": -1, "member_id": "",
        "group_instance_id": None, "topics": [{"name": "t", "partitions": [{
            "partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
            "committed_metadata": ""}]}]})
    resp = client.request(HEARTBEAT, 1, hb(group="classic"))
    assert resp["error_code"] == Err.GROUP_ID_NOT_FOUND
    assert resp["error_message"] == "Group classic is not a share group."


def test_partitions_assigned_once_initialized(client):
    """The first heartbeat answers no partitions; the share coordinator is asked
    to initialize them and a later heartbeat hands them out; deleting the empty
    group deletes its share state too."""
    resp = client.request(HEARTBEAT, 1, hb(group="init", member_id="a"))
    assert resp["assignment"] == {"topic_partitions": []}
    deadline = time.monotonic() + 10
    epoch = resp["member_epoch"]
    while True:
        resp = client.request(HEARTBEAT, 1, hb(group="init", member_id="a", epoch=epoch,
                                                names=None))
        assert resp["error_code"] == 0, resp
        epoch = resp["member_epoch"]
        if resp["assignment"] is not None and resp["assignment"]["topic_partitions"]:
            break
        assert time.monotonic() < deadline, "no partitions assigned"
        time.sleep(0.05)
    [tp] = resp["assignment"]["topic_partitions"]
    assert tp["partitions"] == [0, 1, 2] and epoch == 2
    # a second member: the three partitions are split (sharing 1)
    resp = client.request(HEARTBEAT, 1, hb(group="init", member_id="b"))
    [tp_b] = resp["assignment"]["topic_partitions"]
    resp = client.request(HEARTBEAT, 1, hb(group="init", member_id="a", epoch=epoch, names=None))
    [tp_a] = resp["assignment"]["topic_partitions"]
    assert sorted(tp_a["partitions"] + tp_b["partitions"]) == [0, 1, 2]
    [topic] = metadata(client, ["t"])["topics"]
    # initialized with StateEpoch = the group epoch of the heartbeat that asked (1)
    assert share_state(client, "init", topic["topic_id"]) == [(0, 1)] * 3
    for m in ("a", "b"):
        assert client.request(HEARTBEAT, 1, hb(group="init", member_id=m, epoch=-1,
                                               names=None))["error_code"] == 0
    [res] = client.request(DELETE_GROUPS, 2, {"groups_names": ["init"]})["results"]
    assert res["error_code"] == Err.NONE
    # the share state went with the group
    assert share_state(client, "init", topic["topic_id"]) == [(0, 0)] * 3  # unknown keys


def share_state(client, group: str, topic_id: bytes) -> list[tuple[int, int]]:
    """(error, state epoch) of each share partition (ReadShareGroupStateSummary)."""
    r = client.request(87, 0, {"group_id": group, "topics": [{"topic_id": topic_id, "partitions": [
        {"partition": p, "leader_epoch": 0} for p in range(3)]}]})
    return [(p["error_code"], p["state_epoch"]) for res in r["results"] for p in res["partitions"]]
