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
    # the share offsets admin APIs refuse it the same way (GroupMetadataManager.shareGroup)
    altered = client.request(91, 0, {"group_id": "classic", "topics": [
        {"topic_name": "t", "partitions": [{"partition_index": 0, "start_offset": 0}]}]})
    assert (altered["error_code"], altered["error_message"], altered["responses"]) == (
        Err.GROUP_ID_NOT_FOUND, "Group classic is not a share group.", [])
    deleted = client.request(92, 0, {"group_id": "classic", "topics": [{"topic_name": "t"}]})
    assert (deleted["error_code"], deleted["responses"]) == (Err.GROUP_ID_NOT_FOUND, [])
    [described] = client.request(90, 1, {"groups": [{"group_id": "classic",
                                                     "topics": None}]})["groups"]
    assert (described["error_code"], described["topics"]) == (0, [])  # no share state: none


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
    # DescribeShareGroupOffsets: every initialized partition (Topics null), start offset
    # not decided yet (no fetch loaded it): -1, lag -1; a named unknown topic: zero id, -1
    [g] = client.request(90, 1, {"groups": [{"group_id": "init", "topics": None}]})["groups"]
    assert g["error_code"] == 0
    assert [(t["topic_name"], t["topic_id"], [(p["partition_index"], p["start_offset"], p["lag"])
                                              for p in t["partitions"]]) for t in g["topics"]] == [
        ("t", topic["topic_id"], [(0, -1, -1), (1, -1, -1), (2, -1, -1)])]
    [g] = client.request(90, 0, {"groups": [{"group_id": "init", "topics": [
        {"topic_name": "nope", "partitions": [0]}]}]})["groups"]
    assert g["topics"] == [{"topic_name": "nope", "topic_id": bytes(16), "partitions": [
        {"partition_index": 0, "start_offset": -1, "leader_epoch": 0, "lag": -1,
         "error_code": 0, "error_message": None}]}]
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


def test_share_group_survives_a_server_kill(tmp_path):
    """The share group is durable in __consumer_offsets: after a SIGKILL and a
    restart the members, epochs and assignments are back (replayed), the
    member heartbeats on at its epoch, and its session runs again."""
    with ServerProcess(tmp_path / "data", {"group.share.min.session.timeout.ms": "3000",
                                           "group.share.session.timeout.ms": "3000",
                                           "group.share.min.heartbeat.interval.ms": "100",
                                           "group.share.heartbeat.interval.ms": "100"}) as proc:
        with WireClient(proc.port) as c:
            create_topic(c, "t", 3)
            epoch = c.request(HEARTBEAT, 1, hb(group="dur"))["member_epoch"]
            deadline = time.monotonic() + 10
            while True:
                resp = c.request(HEARTBEAT, 1, hb(group="dur", epoch=epoch, names=None))
                epoch = resp["member_epoch"]
                if resp["assignment"] is not None and resp["assignment"]["topic_partitions"]:
                    break
                assert time.monotonic() < deadline
                time.sleep(0.05)
            before = c.request(DESCRIBE, 1, {"group_ids": ["dur"],
                                             "include_authorized_operations": False})["groups"]
        proc.kill()
        proc.start()
        with WireClient(proc.port) as c:
            deadline = time.monotonic() + 10
            while True:
                after = c.request(DESCRIBE, 1, {"group_ids": ["dur"],
                                                "include_authorized_operations": False})["groups"]
                if after[0]["error_code"] != Err.COORDINATOR_LOAD_IN_PROGRESS:
                    break
                assert time.monotonic() < deadline
                time.sleep(0.05)
            assert after == before
            resp = c.request(HEARTBEAT, 1, hb(group="dur", epoch=epoch, names=None))
            assert resp["error_code"] == 0 and resp["member_epoch"] == epoch
            deadline = time.monotonic() + 15
            while c.request(DESCRIBE, 1, {"group_ids": ["dur"], "include_authorized_operations":
                                          False})["groups"][0]["members"]:
                assert time.monotonic() < deadline, "the session did not expire"
                time.sleep(0.1)


def test_alter_share_group_offsets(client):
    """AlterShareGroupOffsets: a new (empty) group's share partitions are
    initialized at the given start offsets (read back with
    DescribeShareGroupOffsets); unknown topics and partitions are refused per
    partition; a group with members is refused."""
    r = client.request(91, 0, {"group_id": "alter", "topics": [
        {"topic_name": "t", "partitions": [{"partition_index": 0, "start_offset": 5},
                                           {"partition_index": 7, "start_offset": 1}]},
        {"topic_name": "nope", "partitions": [{"partition_index": 0, "start_offset": 1}]}]})
    assert r["error_code"] == 0
    by_topic = {t["topic_name"]: [(p["partition_index"], p["error_code"]) for p in t["partitions"]]
                for t in r["responses"]}
    assert by_topic == {"t": [(0, 0), (7, Err.UNKNOWN_TOPIC_OR_PARTITION)],
                        "nope": [(0, Err.UNKNOWN_TOPIC_OR_PARTITION)]}
    [g] = client.request(90, 1, {"groups": [{"group_id": "alter", "topics": None}]})["groups"]
    assert [(p["partition_index"], p["start_offset"]) for t in g["topics"]
            for p in t["partitions"]] == [(0, 5)]
    [d] = client.request(DESCRIBE, 1, {"group_ids": ["alter"],
                                       "include_authorized_operations": False})["groups"]
    assert d["error_code"] == 0 and d["group_state"] == "Empty"  # the group exists now
    assert client.request(HEARTBEAT, 1, hb(group="alter"))["error_code"] == 0
    r = client.request(91, 0, {"group_id": "alter", "topics": [
        {"topic_name": "t", "partitions": [{"partition_index": 1, "start_offset": 0}]}]})
    assert r["error_code"] == Err.NON_EMPTY_GROUP
    assert client.request(91, 0, {"group_id": "", "topics": []})["error_code"] == \
        Err.INVALID_GROUP_ID


def test_delete_share_group_offsets(client):
    """DeleteShareGroupOffsets: an empty group's share state of the named
    topics is deleted (the topic is no longer initialized); a topic with no
    share state and an unknown topic are refused; unknown or non-empty groups."""
    r = client.request(91, 0, {"group_id": "delo", "topics": [
        {"topic_name": "t", "partitions": [{"partition_index": p, "start_offset": 3}
                                           for p in range(3)]}]})
    assert r["error_code"] == 0
    [topic] = metadata(client, ["t"])["topics"]
    assert share_state(client, "delo", topic["topic_id"]) == [(0, 0)] * 3  # group epoch 0
    create_topic(client, "t2", 1)
    r = client.request(92, 0, {"group_id": "delo", "topics": [
        {"topic_name": "t"}, {"topic_name": "t2"}, {"topic_name": "nope"}]})
    assert r["error_code"] == 0
    got = {t["topic_name"]: (t["error_code"], t["error_message"]) for t in r["responses"]}
    assert got == {"t": (0, None),
                   "t2": (Err.UNKNOWN_TOPIC_OR_PARTITION,
                          "There is no offset information to delete."),
                   "nope": (Err.UNKNOWN_TOPIC_OR_PARTITION,
                            "This server does not host this topic-partition.")}
    [g] = client.request(90, 1, {"groups": [{"group_id": "delo", "topics": None}]})["groups"]
    assert g["topics"] == []  # nothing initialized any more
    r = client.request(90, 1, {"groups": [{"group_id": "delo", "topics": [
        {"topic_name": "t", "partitions": [0]}]}]})
    assert r["groups"][0]["topics"][0]["partitions"][0]["start_offset"] == -1  # state gone
    refused = client.request(92, 0, {"group_id": "nobody", "topics": [{"topic_name": "t"}]})
    assert (refused["error_code"], refused["error_message"]) == (
        Err.GROUP_ID_NOT_FOUND, "Group nobody not found.")  # GroupMetadataManager.group()
    [unknown] = client.request(DESCRIBE, 1, {"group_ids": ["nobody"],
                                             "include_authorized_operations": False})["groups"]
    assert (unknown["error_code"], unknown["error_message"]) == (
        Err.GROUP_ID_NOT_FOUND, "Group nobody not found.")
    assert client.request(HEARTBEAT, 1, hb(group="delo"))["error_code"] == 0
    assert client.request(92, 0, {"group_id": "delo", "topics": [{"topic_name": "t"}]})[
        "error_code"] == Err.NON_EMPTY_GROUP
