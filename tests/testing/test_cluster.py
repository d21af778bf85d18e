"""KafkaServer(nodes=3): an in-process cluster (etcd from the cluster extra),
coordinator and leader moves, node stop and restart, faults per node."""
from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kcoord.cluster.etcd_server import etcd_binary
from kcoord.testing import KafkaServer

pytestmark = pytest.mark.skipif(etcd_binary() is None, reason="etcd (the cluster extra) missing")


def commit(cluster, group, topic, offset):
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                  "client.id": "committer"})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        c.close()


def test_moves_and_node_restarts_reach_the_clients():
    with KafkaServer(nodes=3) as cluster:
        topic, group = cluster.create_topic(partitions=1), cluster.group_name()
        commit(cluster, group, topic, 3)
        first = cluster.coordinator(group)
        target = next(i for i in (1, 2, 3) if i != first)
        cluster.move_coordinator(group, target)
        assert cluster.coordinator(group) == target
        assert cluster.committed(group, topic, 0) == 3  # replicated, read on the new node
        commit(cluster, group, topic, 4)  # the client finds the new coordinator
        assert cluster.committed(group, topic, 0) == 4
        # a fault on one node only: the old coordinator refuses nothing now
        fault = cluster.faults.fail("OffsetCommit", "NOT_COORDINATOR", node=first)
        commit(cluster, group, topic, 5)
        assert fault.fired == 0 and cluster.committed(group, topic, 0) == 5
        fault.remove()

        leader = next(i for i in (1, 2, 3) if i != target)
        cluster.move_leader(topic, 0, leader)
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        p.produce(topic, b"v", partition=0)
        assert p.flush(30) == 0
        assert {r.node for r in cluster.requests("Produce") if r.error_code == 0} == {leader}

        cluster.node(target).stop()  # a clean stop hands the group over
        cluster.wait_for(lambda: cluster.coordinator(group) not in (None, target), 60)
        assert cluster.committed(group, topic, 0) == 5
        cluster.node(target).restart()
        assert cluster.node(target).running
        cluster.move_coordinator(group, target)
        assert cluster.committed(group, topic, 0) == 5
