"""A real-process check of seed 261's fix (tests/server/test_lapse_sessions.py
pins it on a virtual clock): 3 kcoord nodes and a real etcd; a KIP-848
member stops heartbeating while etcd is paused past every lease and past
the member's session timeout, then heartbeats again once the nodes are back.
Its coordinator lapsed for the whole pause, so it expired nobody on its own
clock, and restarted the member's session when it served again: the member
is still known (before, its session expired during the lapse and the
heartbeat was answered UNKNOWN_MEMBER_ID)."""
import os
import signal
import time

import pytest

from kcoord.protocol.errors import Err
from tests.clients.wire import WireClient
from tests.cluster.support import Cluster, wait_until

SESSION_MS = 6000
TTL_MS = 2000


@pytest.fixture
def cluster(etcd, tmp_path):
    c = Cluster(etcd, tmp_path, ttl_ms=TTL_MS, settings={
        "group.consumer.min.heartbeat.interval.ms": "500",
        "group.consumer.heartbeat.interval.ms": "1000",
        "group.consumer.min.session.timeout.ms": str(SESSION_MS),
        "group.consumer.session.timeout.ms": str(SESSION_MS)}).start()
    yield c
    if etcd.proc.poll() is None:
        os.kill(etcd.proc.pid, signal.SIGCONT)
    c.stop()


def heartbeat(port: int, member_id: str, epoch: int, owned=None) -> dict:
    joining = epoch == 0
    with WireClient(port) as c:
        return c.request(68, 0, {
            "group_id": "lapse", "member_id": member_id, "member_epoch": epoch,
            "instance_id": None, "rack_id": None,
            "rebalance_timeout_ms": 30000 if joining else -1,
            "subscribed_topic_names": ["lapse-t"] if joining else None,
            "server_assignor": None, "topic_partitions": [] if joining else owned})


def test_a_member_silent_through_its_coordinators_lapse_is_not_expired(cluster, etcd):
    with WireClient(cluster.nodes[1].port) as c:
        r = c.request(19, 7, {"topics": [{"name": "lapse-t", "num_partitions": 2,
                                          "replication_factor": 3, "assignments": [],
                                          "configs": []}],
                              "timeout_ms": 30000, "validate_only": False})
        assert r["topics"][0]["error_code"] == 0, r
    coordinator = wait_until(
        lambda: (a := cluster.find_coordinators(1, ["lapse"])["lapse"])["error_code"] == 0
        and a["node_id"], "the group's coordinator")
    port = cluster.nodes[coordinator].port
    member = "m-lapse"
    first = wait_until(lambda: (r := heartbeat(port, member, 0))["error_code"] == 0 and r,
                       "the member joined")
    owned = [{"topic_id": tp["topic_id"], "partitions": tp["partitions"]}
             for tp in first["assignment"]["topic_partitions"]]
    epoch = heartbeat(port, member, first["member_epoch"], owned)["member_epoch"]
    # etcd pauses past every lease and past the member's session; the member
    # sends nothing meanwhile (as a client whose answers the lapse held)
    os.kill(etcd.proc.pid, signal.SIGSTOP)
    time.sleep((SESSION_MS + 3 * TTL_MS) / 1000)
    os.kill(etcd.proc.pid, signal.SIGCONT)
    # once the coordinator serves again, the member is still known
    answer = wait_until(
        lambda: (r := heartbeat(port, member, epoch, owned))["error_code"]
        not in (Err.COORDINATOR_NOT_AVAILABLE, Err.NOT_COORDINATOR,
                Err.COORDINATOR_LOAD_IN_PROGRESS) and r,
        "an answer from the coordinator", timeout=30)
    assert answer["error_code"] == Err.NONE, answer
