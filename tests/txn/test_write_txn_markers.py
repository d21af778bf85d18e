"""WriteTxnMarkers (27) against a real kcoord: the leader writes the control
batch for an open transaction (read_committed then sees it), refuses a stale
producer epoch and an unknown partition, and with an authorizer it needs
CLUSTER_ACTION on the cluster (Kafka's guard)."""
from __future__ import annotations

import pytest

from kcoord.protocol.errors import Err
from tests.clients.wire import WireClient, create_topic
from tests.security.conftest import pki  # noqa: F401 (the fixture)
from tests.support import ServerProcess

pytestmark = [pytest.mark.clients, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

WRITE_TXN_MARKERS, DESCRIBE_PRODUCERS = 27, 61


def lso(client, topic: str, partition: int) -> int:
    resp = client.request(2, 7, {"replica_id": -1, "isolation_level": 1, "topics": [
        {"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1,
                                        "current_leader_epoch": -1}]}]})
    return resp["topics"][0]["partitions"][0]["offset"]


def markers(client, pid: int, epoch: int, commit: bool, topic: str, partitions: list[int],
            coordinator_epoch: int = 0, version: int = 1) -> dict:
    resp = client.request(WRITE_TXN_MARKERS, version, {"markers": [
        {"producer_id": pid, "producer_epoch": epoch, "transaction_result": commit,
         "topics": [{"name": topic, "partition_indexes": partitions}],
         "coordinator_epoch": coordinator_epoch}]})
    [m] = resp["markers"]
    assert m["producer_id"] == pid
    return {(t["name"], p["partition_index"]): p["error_code"]
            for t in m["topics"] for p in t["partitions"]}


def test_write_txn_markers_completes_an_open_transaction(tmp_path):
    from confluent_kafka import Producer
    srv = ServerProcess(tmp_path / "data",
                        settings={"group.initial.rebalance.delay.ms": "0"}).start()
    try:
        with WireClient(srv.port) as c:
            assert create_topic(c, "t")["error_code"] == Err.NONE
        p = Producer({"bootstrap.servers": srv.bootstrap, "transactional.id": "m-1",
                      "linger.ms": 1})
        p.init_transactions(30)
        p.begin_transaction()
        for i in range(5):
            p.produce("t", value=b"%d" % i, partition=0)
        assert p.flush(30) == 0
        with WireClient(srv.port) as c:
            assert lso(c, "t", 0) == 0  # LSO pinned
            [topic] = c.request(DESCRIBE_PRODUCERS, 0, {"topics": [
                {"name": "t", "partition_indexes": [0]}]})["topics"]
            [producer] = topic["partitions"][0]["active_producers"]
            pid, epoch = producer["producer_id"], producer["producer_epoch"]
            assert producer["current_txn_start_offset"] == 0
            assert markers(c, pid, epoch - 1, True, "t", [0]) == {
                ("t", 0): Err.INVALID_PRODUCER_EPOCH}
            assert markers(c, pid, epoch, True, "nope", [0]) == {
                ("nope", 0): Err.UNKNOWN_TOPIC_OR_PARTITION}
            assert markers(c, pid, epoch, True, "t", [0], version=0) == {("t", 0): Err.NONE}
            # the COMMIT marker closed the transaction: the LSO is past it
            assert lso(c, "t", 0) == 6
    finally:
        srv.kill()


def test_write_txn_markers_needs_cluster_action(pki, tmp_path):  # noqa: F811
    from tests.security.test_authorization import CLUSTER, acl, create_acls, settings, user
    srv = ServerProcess(tmp_path / "data", settings(pki)).start()
    try:
        with user(srv, "admin") as admin:
            assert create_topic(admin, "t")["error_code"] == Err.NONE
        with user(srv, "alice") as alice:
            assert markers(alice, 7, 0, False, "t", [0]) == {
                ("t", 0): Err.CLUSTER_AUTHORIZATION_FAILED}
        create_acls(srv, acl(CLUSTER, "kafka-cluster", "User:alice", 9))  # CLUSTER_ACTION
        with user(srv, "alice") as alice:
            # a marker for a producer with no open transaction is still written
            assert markers(alice, 7, 0, False, "t", [0]) == {("t", 0): Err.NONE}
    finally:
        srv.kill()
