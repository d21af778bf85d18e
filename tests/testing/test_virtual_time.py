"""Virtual time: the server's clock stands still until kafka.clock.advance(),
which fires every due timer in order; the clients keep their real clocks.
No test here waits for a timeout on the wall clock."""
from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from kcoord.server.clock import VirtualClock
from kcoord.testing import KafkaServer


def test_virtual_clock_fires_due_timers_in_deadline_order():
    clock = VirtualClock(start_ms=1_000)
    seen = []
    clock.call_later(3, lambda: seen.append(("c", clock.ms())))
    clock.call_later(1, lambda: seen.append(("a", clock.ms())))
    late = clock.call_later(2, lambda: seen.append(("cancelled", clock.ms())))
    late.cancel()
    # a timer armed by a firing one is fired too when it falls due in the step
    clock.call_later(1.5, lambda: clock.call_later(0.5, lambda: seen.append(("b", clock.ms()))))
    assert clock.advance(2.9) == 3 and seen == [("a", 2_000), ("b", 3_000)]
    assert clock.ms() == 3_900
    assert clock.advance(0.1) == 1 and seen[-1] == ("c", 4_000)
    assert clock.pending() == []


@pytest.fixture(scope="module")
def kafka():
    with KafkaServer({"offsets.retention.minutes": 1,
                      "offsets.retention.check.interval.ms": 1000},
                     virtual_time=True) as server:
        yield server


@pytest.fixture(autouse=True)
def clean(kafka):
    kafka.reset()
    yield
    kafka.reset()


def test_consumer_protocol_member_fenced_after_advance_45(kafka):
    topic, group = kafka.create_topic(partitions=2), kafka.group_name()
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group,
                  "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    try:
        c.subscribe([topic])
        kafka.wait_for(lambda: c.poll(0.05) or (
            (g := kafka.group(group)).type == "consumer" and len(g.members) == 1
            and sorted(g.members[0].assignment.get(topic, [])) == [0, 1]), 60,
            what="the member owning both partitions")
        epoch = kafka.group(group).epoch
        # the member stops heartbeating: its heartbeats never reach the coordinator
        kafka.faults.park("ConsumerGroupHeartbeat", group=group)
        kafka.clock.advance(44.9)
        assert len(kafka.group(group).members) == 1
        kafka.clock.advance(0.1)  # 45 s (group.consumer.session.timeout.ms) after its last one
        fenced = kafka.group(group)
        # fenced: gone from the group (an empty group without offsets is then
        # deleted by the retention check, every virtual second here)
        assert fenced.members == []
        assert fenced.epoch > epoch or fenced.type == ""
    finally:
        kafka.faults.reset()
        c.close()


def test_transaction_times_out_and_is_aborted_after_advance(kafka):
    topic = kafka.create_topic()
    p = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": "tx-timeout",
                  "transaction.timeout.ms": 60000})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"never committed", partition=0)
    p.flush(30)
    assert kafka.end_offset(topic, 0) == 1
    kafka.clock.advance(59)
    assert kafka.end_offset(topic, 0) == 1  # still open
    kafka.clock.advance(11)  # past the timeout, and a sweep (every 10 s) later
    # the coordinator aborted it: an ABORT marker follows the record
    kafka.wait_for(lambda: kafka.end_offset(topic, 0) == 2, 30, what="the abort marker")
    with pytest.raises(KafkaException):
        p.commit_transaction(30)  # the client learns its transaction is gone
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": kafka.group_name(),
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        assert hi == 2
        polled = [m for m in (c.poll(0.2) for _ in range(5)) if m is not None and not m.error()]
        assert polled == []  # read_committed sees nothing of it
    finally:
        c.close()


def test_offset_expires_after_advance_retention(kafka):
    topic, group = kafka.create_topic(), kafka.group_name()
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
    finally:
        c.close()
    assert kafka.committed(group, topic, 0) == 5
    kafka.clock.advance(59)  # offsets.retention.minutes=1, checked every second
    assert kafka.committed(group, topic, 0) == 5
    kafka.clock.advance(2)
    assert kafka.committed(group, topic, 0) is None
