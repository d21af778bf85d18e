import threading

import pytest
from confluent_kafka import Consumer

from conftest import assert_all_committed, seed, totals
from orders import with_confluent


def test_every_order_totalled_and_committed(kafka, topics):
    orders, out, group = topics
    seed(kafka.bootstrap, orders, 10)
    assert with_confluent.run(kafka.bootstrap, group, orders, out, 10) == 10
    assert totals(kafka, out) == {i: 2.5 for i in range(10)}
    assert_all_committed(kafka, group, orders, 10)
    assert sum(kafka.committed(group, orders, p) for p in (0, 1)) == 10


def test_offsets_right_after_a_load_in_progress_storm(kafka, topics):
    orders, out, group = topics
    seed(kafka.bootstrap, orders, 6)
    # the coordinator answers as one still loading its shard, five times
    storm = kafka.faults.fail("OffsetCommit", "COORDINATOR_LOAD_IN_PROGRESS", count=5,
                              group=group)
    assert with_confluent.run(kafka.bootstrap, group, orders, out, 6) == 6
    assert storm.fired == 5
    assert sorted(totals(kafka, out)) == list(range(6))
    assert_all_committed(kafka, group, orders, 6)


@pytest.mark.kafka_config(virtual_time=True)
def test_a_stalled_kip848_member_is_fenced_without_waiting(kafka, topics):
    orders, _, group = topics
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group,
                  "group.protocol": "consumer"})
    try:
        c.subscribe([orders])
        kafka.wait_for(lambda: c.poll(0.05) or len(kafka.group(group).members) == 1, 60)
        kafka.faults.park("ConsumerGroupHeartbeat", group=group)  # the member stalls
        kafka.clock.advance(45)  # group.consumer.session.timeout.ms, on the server's clock
        assert kafka.group(group).members == []
    finally:
        kafka.faults.reset()
        c.close()


def test_survives_a_coordinator_failover(kafka_server_factory):
    cluster = kafka_server_factory(nodes=3)
    orders, out = cluster.create_topic(partitions=2), cluster.create_topic()
    group = cluster.group_name()
    seed(cluster.bootstrap, orders, 10)
    done = []
    app = threading.Thread(target=lambda: done.append(
        with_confluent.run(cluster.bootstrap, group, orders, out, 20, timeout=120)))
    app.start()
    try:
        cluster.wait_for(lambda: sum(cluster.committed(group, orders, p) or 0
                                     for p in (0, 1)) >= 10, 60, what="the first ten")
        old = cluster.coordinator(group)
        cluster.node(old).kill()  # the group's coordinator crashes mid-run
        seed(cluster.bootstrap, orders, 10, start=10)
    finally:
        app.join(150)
    assert done == [20]
    assert cluster.coordinator(group) != old
    assert sorted(totals(cluster, out)) == list(range(20))
    assert sum(cluster.committed(group, orders, p) for p in (0, 1)) == 20
