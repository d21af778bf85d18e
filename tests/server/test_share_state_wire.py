"""The share coordinator over the wire: FindCoordinator key type 2 and the
share-state RPCs 83-87 against a real `kcoord serve`, whose state survives a
SIGKILL (answered = fsynced)."""
import time

import pytest

from kcoord.protocol.errors import Err
from kcoord.server.share_runtime import share_key
from tests.clients.wire import WireClient, create_topic, metadata
from tests.support import ServerProcess

FIND, INIT, READ, WRITE, DELETE, SUMMARY = 10, 83, 84, 85, 86, 87


@pytest.fixture
def share_server(tmp_path):
    proc = ServerProcess(tmp_path / "data", settings={
        "share.coordinator.state.topic.num.partitions": "3",
        "share.coordinator.snapshot.update.records.per.snapshot": "2"})
    proc.start()
    yield proc
    proc.stop()


def _topic_id(client, name: str) -> bytes:
    [t] = metadata(client, [name])["topics"]
    return t["topic_id"]


def _one(resp: dict) -> dict:
    [t] = resp["results"]
    [p] = t["partitions"]
    return p


def _req(group: str, topic_id: bytes, **partition) -> dict:
    return {"group_id": group, "topics": [{"topic_id": topic_id, "partitions": [partition]}]}


def _until_coordinator(client, key: str) -> dict:
    deadline = time.monotonic() + 20
    while True:
        [c] = client.request(FIND, 6, {"key_type": 2, "coordinator_keys": [key]})["coordinators"]
        if c["error_code"] != Err.COORDINATOR_NOT_AVAILABLE or time.monotonic() > deadline:
            return c
        time.sleep(0.05)


def _read_until_loaded(client, body: dict) -> dict:
    deadline = time.monotonic() + 20
    while True:
        p = _one(client.request(READ, 0, body))
        if p["error_code"] != Err.COORDINATOR_LOAD_IN_PROGRESS or time.monotonic() > deadline:
            return p
        time.sleep(0.05)


def test_find_coordinator_for_a_share_partition(share_server):
    with WireClient(share_server.port) as c:
        create_topic(c, "t", 3)
        key = share_key("g:with:colons", _topic_id(c, "t"), 2)
        found = _until_coordinator(c, key)
        assert found["error_code"] == 0 and found["port"] == share_server.port
        assert "created topic __share_group_state with 3 partitions" in share_server.log_text()
        [bad] = c.request(FIND, 6, {"key_type": 2, "coordinator_keys": ["g:nope:1"]})[
            "coordinators"]
        assert bad["error_code"] == Err.INVALID_REQUEST
        [old] = c.request(FIND, 5, {"key_type": 2, "coordinator_keys": [key]})["coordinators"]
        assert old["error_code"] == Err.INVALID_REQUEST
        # the topic is internal: listed as such, refused to producers
        [t] = metadata(c, ["__share_group_state"], allow_auto_create=False)["topics"]
        assert t["is_internal"]


def test_share_state_rpcs_survive_a_kill(share_server):
    with WireClient(share_server.port) as c:
        create_topic(c, "t", 3)
        tid = _topic_id(c, "t")
        assert _until_coordinator(c, share_key("g", tid, 1))["error_code"] == 0
        assert _one(c.request(INIT, 0, _req("g", tid, partition=1, state_epoch=1,
                                               start_offset=0)))["error_code"] == 0
        assert _one(c.request(INIT, 0, _req("g", tid, partition=1, state_epoch=0,
                                               start_offset=0)))["error_code"] == \
            Err.FENCED_STATE_EPOCH
        for i, batches in enumerate(([(0, 9, 0, 1)], [(0, 4, 2, 1)], [(5, 5, 4, 5)],
                                     [(6, 7, 2, 2)])):
            body = _req("g", tid, partition=1, state_epoch=1, leader_epoch=0,
                        start_offset=3 if i == 3 else -1, delivery_complete_count=4,
                        state_batches=[{"first_offset": f, "last_offset": last,
                                        "delivery_state": s, "delivery_count": n}
                                       for f, last, s, n in batches])
            assert _one(c.request(WRITE, 1, body))["error_code"] == 0
        [summary] = c.request(SUMMARY, 1, _req("g", tid, partition=1, leader_epoch=0))[
            "results"][0]["partitions"]
        assert (summary["start_offset"], summary["delivery_complete_count"],
                summary["state_epoch"]) == (3, 4, 1)
        unknown = _req("g", b"\x07" * 16, partition=0)
        assert _one(c.request(DELETE, 0, unknown))["error_code"] == \
            Err.UNKNOWN_TOPIC_OR_PARTITION
        # Kafka's order: a read of a key never initialized is INVALID_REQUEST first
        assert _one(c.request(READ, 0, {**unknown, "topics": [
            {"topic_id": tid, "partitions": [{"partition": 0, "leader_epoch": 0}]}]}))[
            "error_code"] == Err.INVALID_REQUEST
        assert c.request(READ, 0, {"group_id": "", "topics": []}) == {"results": []}
    expected = [{"first_offset": 3, "last_offset": 4, "delivery_state": 2, "delivery_count": 1},
                {"first_offset": 5, "last_offset": 5, "delivery_state": 4, "delivery_count": 5},
                {"first_offset": 6, "last_offset": 7, "delivery_state": 2, "delivery_count": 2},
                {"first_offset": 8, "last_offset": 9, "delivery_state": 0, "delivery_count": 1}]
    share_server.kill()
    share_server.start()
    with WireClient(share_server.port) as c:
        read = _read_until_loaded(c, _req("g", tid, partition=1, leader_epoch=0))
        assert read["error_code"] == 0
        assert (read["state_epoch"], read["start_offset"]) == (1, 3)
        assert read["state_batches"] == expected
        # a newer leader epoch fences the old leader's writes
        assert _one(c.request(READ, 0, _req("g", tid, partition=1, leader_epoch=2)))[
            "error_code"] == 0
        stale = _req("g", tid, partition=1, state_epoch=1, leader_epoch=1, start_offset=-1,
                     state_batches=[])
        assert _one(c.request(WRITE, 0, stale))["error_code"] == Err.FENCED_LEADER_EPOCH
        assert _one(c.request(DELETE, 0, _req("g", tid, partition=1)))["error_code"] == 0
        assert _one(c.request(READ, 0, _req("g", tid, partition=1, leader_epoch=2)))[
            "error_code"] == Err.INVALID_REQUEST
