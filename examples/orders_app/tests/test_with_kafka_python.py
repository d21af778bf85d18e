import logging

import pytest
from conftest import assert_all_committed, seed, totals
from orders import with_kafka_python


def _not_a_poll_check(record: logging.LogRecord) -> bool:
    # logged by every pass of the consumer's poll loop (thousands a second
    # while it has no partitions): it would bury the rest
    return not record.getMessage().startswith("need_rejoin: False")


@pytest.fixture(autouse=True)
def client_debug_log():
    """kafka-python's DEBUG log, which pytest shows only when a test fails:
    what the client waited for is in it (its own heartbeat loop included)."""
    log, coordinator = logging.getLogger("kafka"), logging.getLogger("kafka.coordinator.consumer")
    old = log.level
    log.setLevel(logging.DEBUG)
    coordinator.addFilter(_not_a_poll_check)
    yield
    coordinator.removeFilter(_not_a_poll_check)
    log.setLevel(old)


def test_every_order_totalled_and_committed(kafka, topics):
    orders, out, group = topics
    seed(kafka.bootstrap, orders, 8)
    assert with_kafka_python.run(kafka.bootstrap, group, orders, out, 8) == 8
    assert totals(kafka, out) == {i: 2.5 for i in range(8)}
    assert_all_committed(kafka, group, orders, 8)


def test_slow_commits_still_land(kafka, topics):
    orders, out, group = topics
    seed(kafka.bootstrap, orders, 3)
    slow = kafka.faults.delay("OffsetCommit", 200, group=group)
    assert with_kafka_python.run(kafka.bootstrap, group, orders, out, 3) == 3
    assert slow.fired == 3
    assert_all_committed(kafka, group, orders, 3)


def test_a_rebalance_slower_than_a_poll_still_lands(kafka, topics):
    # each SyncGroup outlasts the app's poll(timeout_ms=200): later polls
    # must take the same join up (kafka-python 3.0.12 dropped a second,
    # metadata-started one; the app now avoids that rebalance)
    orders, out, group = topics
    seed(kafka.bootstrap, orders, 3)
    slow = kafka.faults.delay("SyncGroup", 600, group=group)
    assert with_kafka_python.run(kafka.bootstrap, group, orders, out, 3) == 3
    assert slow.fired >= 1
    assert totals(kafka, out) == {i: 2.5 for i in range(3)}
    assert_all_committed(kafka, group, orders, 3)


def test_offsets_right_after_a_not_coordinator_storm(kafka, topics):
    orders, out, group = topics
    seed(kafka.bootstrap, orders, 6)
    storm = kafka.faults.fail("OffsetCommit", "NOT_COORDINATOR", count=5, group=group)
    assert with_kafka_python.run(kafka.bootstrap, group, orders, out, 6) == 6
    assert storm.fired == 5
    # the client looked the coordinator up again after each refusal
    assert len(kafka.requests("FindCoordinator", client_id="orders-kafka-python")) >= 6
    assert sorted(totals(kafka, out)) == list(range(6))  # every order once
    assert_all_committed(kafka, group, orders, 6)
