"""Virtual time: the server's clock stands still until kafka.clock.advance(),
which fires every due timer in order; the clients keep their real clocks.
No test here waits for a timeout on the wall clock."""
from __future__ import annotations

import pytest
from confluent_kafka import (TIMESTAMP_LOG_APPEND_TIME, Consumer, KafkaException, Producer,
                             TopicPartition)

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


def _open_transaction(kafka, transactional_id: str, value: bytes):
    """A new topic and a producer whose open transaction (timeout 60 s) has
    written `value` to its partition 0: -> (topic, producer)."""
    topic = kafka.create_topic()
    p = Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": transactional_id,
                  "transaction.timeout.ms": 60000})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, value, partition=0)
    p.flush(30)
    return topic, p


def test_transaction_times_out_and_is_aborted_after_advance(kafka):
    topic, p = _open_transaction(kafka, "tx-timeout", b"never committed")
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


def test_a_transaction_ended_during_a_stall_of_its_coordinator_commits(kafka):
    """The coordinator's process stops past the transaction's timeout while
    the producer sends EndTxn (commit).  On waking the late abort sweep
    fires first (the loop runs due timers before it polls); it waits
    STALL_GRACE_S once, so the queued EndTxn is read first and commits
    (fault runs' pause-txn-coordinator: processors fenced after each pause)."""
    topic, p = _open_transaction(kafka, "tx-stalled", b"committed across the stall")
    kafka.clock.stall(75)       # past the timeout; the 10 s sweep now overdue
    kafka.clock.advance(0)      # the process wakes: the late sweep runs first
    p.commit_transaction(30)    # the EndTxn sent during the stall
    kafka.clock.advance(1)      # the sweep, after its grace: nothing to abort
    kafka.wait_for(lambda: kafka.end_offset(topic, 0) == 2, 30, what="the commit marker")
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": kafka.group_name(),
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = None
        for _ in range(50):
            m = c.poll(0.2)
            if m is not None and not m.error():
                got = m.value()
                break
        assert got == b"committed across the stall"
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


def test_initial_rebalance_delay_waits_for_the_clock():
    with KafkaServer({"group.initial.rebalance.delay.ms": 3000}, virtual_time=True) as server:
        topic, group = server.create_topic(), server.group_name()
        c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": group,
                      "session.timeout.ms": 6000})
        try:
            c.subscribe([topic])
            # the join waits in the delay: however long the wall clock runs
            server.wait_for(lambda: c.poll(0.05) or
                            server.group(group).state == "PreparingRebalance", 30)
            assert server.clock.pending() and min(server.clock.pending()) <= 3.0
            server.clock.advance(2.9)
            assert server.group(group).state == "PreparingRebalance"
            server.clock.advance(0.1)
            server.wait_for(lambda: c.poll(0.05) or server.group(group).state == "Stable", 30)
            assert server.group(group).epoch == 1
        finally:
            c.close()


def test_share_group_record_lock_expires_after_advance():
    from confluent_kafka import ShareConsumer
    fast = {"group.share.min.heartbeat.interval.ms": 200, "group.share.heartbeat.interval.ms": 200}
    with KafkaServer(fast, virtual_time=True) as server:
        topic, group = server.create_topic(), server.group_name()
        p = Producer({"bootstrap.servers": server.bootstrap})

        def share_consumer():
            c = ShareConsumer({"bootstrap.servers": server.bootstrap, "group.id": group,
                               "share.acknowledgement.mode": "explicit"})
            c.subscribe([topic])
            return c

        def records(c):
            return [m for m in c.poll(0.2) or () if m.error() is None]

        def produced_and_held():
            # a share group starts at the latest offset: produce until the holder has one
            p.produce(topic, b"job", partition=0)
            p.flush(30)
            return records(holder)
        holder = share_consumer()
        other = None
        try:
            held = server.wait_for(produced_and_held, 60, what="the holder's records")
            assert {m.delivery_count() for m in held} == {1}
            info = server.group(group)
            assert info.type == "share" and [m.assignment for m in info.members] == [{topic: [0]}]
            # the holder never acknowledges: another member finds nothing to take
            other = share_consumer()
            for _ in range(10):
                assert records(other) == []
            server.clock.advance(29.9)  # group.share.record.lock.duration.ms is 30 s
            assert records(other) == []
            server.clock.advance(0.1)   # the locks expire: the records are available again
            again = server.wait_for(lambda: records(other), 30, what="the redelivery")
            assert {m.delivery_count() for m in again} == {2}
            assert {m.offset() for m in again} <= {m.offset() for m in held}
            # the server's process stops past the new locks: on waking their
            # expiry fires first and waits STALL_GRACE_S, so the
            # acknowledgements sent during the stall are read before it
            server.clock.stall(35)
            server.clock.advance(0)
            for m in again:
                other.acknowledge(m)
            done = other.commit_sync()
            server.clock.advance(1)
            errors = [getattr(tp, "error", None) for tp in (done or ())]
            assert not any(errors), errors
            for _ in range(5):
                assert records(other) == []    # nothing came back for redelivery
        finally:
            holder.close()
            if other is not None:
                other.close()


def test_log_append_time_is_the_servers_virtual_time(kafka):
    # the data plane reads the server's one clock: a LogAppendTime record is
    # stamped with virtual now, a day away from the wall clock here
    topic = kafka.create_topic(config={"message.timestamp.type": "LogAppendTime"})
    kafka.clock.advance(86_400)
    stamped = []
    p = Producer({"bootstrap.servers": kafka.bootstrap})
    p.produce(topic, b"x", partition=0, timestamp=1,
              on_delivery=lambda err, msg: stamped.append((err, msg.timestamp())))
    assert p.flush(30) == 0
    (err, (kind, ts)), = stamped
    assert (err, kind, ts) == (None, TIMESTAMP_LOG_APPEND_TIME, kafka.clock.now_ms())
