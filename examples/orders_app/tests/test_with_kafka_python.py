from conftest import assert_all_committed, seed, totals
from orders import with_kafka_python


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
