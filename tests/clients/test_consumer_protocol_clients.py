"""confluent-kafka consumers with group.protocol=consumer (KIP-848) against kcoord.

For each server-side assignor (group.remote.assignor uniform and range): five
consumers share a 12-partition topic and consume every record exactly once;
the group scales down to two and back up to five while records keep coming;
no partition is ever owned by two consumers at once (recorded from the
consumers' on_assign / on_revoke / on_lost callbacks with timestamps); the
committed offsets end at the log end; AdminClient.describe_consumer_groups
(ConsumerGroupDescribe) shows the group, its members and their assignments.

Consumers commit explicitly: the offsets they processed, in on_revoke before
a partition is released (so its next owner starts exactly there) and when
they are asked to stop.  Every wait has a generous deadline and polls for
the condition; nothing sleeps for a fixed time.
"""
from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest

pytestmark = pytest.mark.clients

PARTITIONS = 12
BATCH = 2400
DEADLINE_S = 120.0


def wait_for(condition, what: str, timeout: float = DEADLINE_S, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class Ledger:
    """What every consumer saw: ownership intervals and consumed records."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[float, str, str, int]] = []  # (time, consumer, kind, partition)
        self.consumed: dict[tuple[int, int], list[str]] = defaultdict(list)
        self.owned: dict[str, set[int]] = defaultdict(set)

    def event(self, who: str, kind: str, partitions) -> None:
        now = time.monotonic()
        with self.lock:
            for p in partitions:
                self.events.append((now, who, kind, p))
                if kind == "assign":
                    self.owned[who].add(p)
                else:
                    self.owned[who].discard(p)

    def consume(self, who: str, partition: int, offset: int) -> None:
        with self.lock:
            self.consumed[(partition, offset)].append(who)

    def count(self) -> int:
        with self.lock:
            return len(self.consumed)

    def check_no_partition_owned_twice(self) -> None:
        """Replay the callbacks in time order: an assign of a partition another
        consumer still owns (not yet revoked or lost) is a double ownership."""
        owner: dict[int, str] = {}
        with self.lock:
            events = sorted(self.events, key=lambda e: e[0])
        for t, who, kind, p in events:
            if kind == "assign":
                assert p not in owner or owner[p] == who, (
                    f"partition {p} assigned to {who} at {t:.3f} while {owner[p]} owns it")
                owner[p] = who
            elif owner.get(p) == who:
                del owner[p]


class Worker(threading.Thread):
    """One consumer in its own thread: poll, record, commit on revoke and on stop."""

    def __init__(self, name: str, bootstrap: str, group: str, topic: str, assignor: str,
                 ledger: Ledger) -> None:
        super().__init__(name=name, daemon=True)
        self.ledger = ledger
        self.topic = topic
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.positions: dict[int, int] = {}  # partition -> next offset to commit
        self.config = {
            "bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
            "group.protocol": "consumer", "group.remote.assignor": assignor,
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
        }
        self.ready = threading.Event()
        self.stale_retries = 0  # commits repeated after STALE_MEMBER_EPOCH

    def _commit(self, consumer, partitions) -> None:
        from confluent_kafka import KafkaError, KafkaException, TopicPartition
        offsets = [TopicPartition(self.topic, p, self.positions[p])
                   for p in partitions if p in self.positions]
        if not offsets:
            return
        # A commit sent with the epoch this member had when another member's
        # leave moved it on gets STALE_MEMBER_EPOCH, as from Kafka; the
        # client learns its new epoch from its next heartbeat response (on
        # librdkafka's own thread), so the application commits again, as the
        # Java consumer does.  Bounded: 50 tries, 0.1 s apart.
        for attempt in range(50):
            try:
                consumer.commit(offsets=offsets, asynchronous=False)
                return
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.STALE_MEMBER_EPOCH or attempt == 49:
                    raise
                self.stale_retries += 1
                time.sleep(0.1)

    def run(self) -> None:
        from confluent_kafka import Consumer
        consumer = Consumer(self.config)

        def on_assign(c, partitions):
            self.ledger.event(self.name, "assign", [tp.partition for tp in partitions])

        closing = threading.Event()

        def on_revoke(c, partitions):
            ps = [tp.partition for tp in partitions]
            try:
                if not closing.is_set():  # close() follows a commit of every position
                    self._commit(c, ps)
            except Exception as exc:  # recorded; the test fails on it
                self.errors.append(f"commit on revoke: {exc}")
            for p in ps:
                self.positions.pop(p, None)
            self.ledger.event(self.name, "revoke", ps)

        def on_lost(c, partitions):
            ps = [tp.partition for tp in partitions]
            self.errors.append(f"partitions lost: {ps}")
            self.ledger.event(self.name, "lost", ps)

        consumer.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke,
                           on_lost=on_lost)
        self.ready.set()
        try:
            while not self.stop.is_set():
                msg = consumer.poll(0.1)
                if msg is None:
                    continue
                if msg.error():
                    self.errors.append(str(msg.error()))
                    continue
                self.ledger.consume(self.name, msg.partition(), msg.offset())
                self.positions[msg.partition()] = msg.offset() + 1
            self._commit(consumer, list(self.positions))
        except Exception as exc:
            self.errors.append(repr(exc))
        finally:
            # a synchronous commit from the revoke callback inside close() can
            # race the leave and hang librdkafka 2.16's close(): positions were
            # committed just above, so the callback only records the revoke
            closing.set()
            consumer.close()  # revokes and leaves with epoch -1


def produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + count):
        producer.produce(topic, key=str(i).encode(), value=f"v{i}".encode(),
                         partition=i % PARTITIONS)
    assert producer.flush(60) == 0


def describe(admin, group: str):
    [future] = admin.describe_consumer_groups([group], request_timeout=30).values()
    return future.result()


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_consumer_protocol_scale_down_and_up(server, assignor):
    from confluent_kafka import ConsumerGroupState, ConsumerGroupType, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topic, group = f"kip848-{assignor}", f"group-{assignor}"
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for f in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        f.result(30)
    ledger = Ledger()
    workers: list[Worker] = []

    def start(n: int) -> None:
        for _ in range(n):
            w = Worker(f"{assignor}-c{len(workers)}", server.bootstrap, group, topic, assignor, ledger)
            workers.append(w)
            w.start()
            w.ready.wait(30)

    def live() -> list[Worker]:
        return [w for w in workers if w.is_alive() and not w.stop.is_set()]

    def balanced(n: int):
        """n live consumers own all partitions between them, within one of each other."""
        with ledger.lock:
            counts = [len(ledger.owned[w.name]) for w in live()]
            total = set().union(*(ledger.owned[w.name] for w in live())) if counts else set()
        return len(counts) == n and total == set(range(PARTITIONS)) and max(counts) - min(counts) <= 1 \
            and sum(counts) == PARTITIONS

    # five consumers, then records
    start(5)
    wait_for(lambda: balanced(5), "five consumers to share the partitions")
    produce(server.bootstrap, topic, 0, BATCH)
    wait_for(lambda: ledger.count() >= BATCH, "the first batch to be consumed")

    # the group as the AdminClient sees it (ConsumerGroupDescribe)
    def stable_description():
        d = describe(admin, group)
        return d if d.state == ConsumerGroupState.STABLE and len(d.members) == 5 else None
    desc = wait_for(stable_description, "a stable group of five in describe_consumer_groups")
    assert desc.group_id == group and desc.type == ConsumerGroupType.CONSUMER
    assert desc.partition_assignor == assignor
    described = [tp.partition for m in desc.members for tp in m.assignment.topic_partitions]
    assert sorted(described) == list(range(PARTITIONS))
    assert {m.client_id for m in desc.members} == {w.name for w in live()}
    for m in desc.members:
        assert {tp.partition for tp in m.assignment.topic_partitions} == ledger.owned[m.client_id]
        assert all(tp.topic == topic for tp in m.assignment.topic_partitions)

    # scale down to two while records keep coming
    for w in workers[:3]:
        w.stop.set()
    for w in workers[:3]:
        w.join(DEADLINE_S)
        assert not w.is_alive()
    wait_for(lambda: balanced(2), "two consumers to take over every partition")
    produce(server.bootstrap, topic, BATCH, BATCH)
    wait_for(lambda: ledger.count() >= 2 * BATCH, "the second batch to be consumed")

    # and back up to five
    start(3)
    produce(server.bootstrap, topic, 2 * BATCH, BATCH)
    wait_for(lambda: balanced(5), "five consumers again")
    wait_for(lambda: ledger.count() >= 3 * BATCH, "the third batch to be consumed")

    for w in workers:
        w.stop.set()
    for w in workers:
        w.join(DEADLINE_S)
        assert not w.is_alive()
    errors = [e for w in workers for e in w.errors]
    assert errors == []

    # every record exactly once, no partition ever owned twice
    per_partition = defaultdict(int)
    for i in range(3 * BATCH):
        per_partition[i % PARTITIONS] += 1
    expected = {(p, o) for p, n in per_partition.items() for o in range(n)}
    assert set(ledger.consumed) == expected
    duplicates = {k: v for k, v in ledger.consumed.items() if len(v) > 1}
    assert duplicates == {}
    ledger.check_no_partition_owned_twice()

    # committed offsets are at the log end
    [future] = admin.list_consumer_group_offsets(
        [__import__("confluent_kafka").ConsumerGroupTopicPartitions(group)]).values()
    committed = {tp.partition: tp.offset for tp in future.result(30).topic_partitions}
    assert committed == dict(per_partition)

    # the group is empty now, and still a consumer group
    final = wait_for(lambda: (d := describe(admin, group)).state == ConsumerGroupState.EMPTY and d,
                     "the group to be empty")
    assert final.members == [] and final.type == ConsumerGroupType.CONSUMER


def test_regex_subscription_and_static_member(server):
    """A regex subscription (ConsumerGroupHeartbeat v1) picks up a topic created later;
    a static member that closes (epoch -2) gets its partitions back when it returns."""
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for f in admin.create_topics([NewTopic("rx-a", 3, 1), NewTopic("rx-b", 2, 1),
                                  NewTopic("other", 2, 1)]).values():
        f.result(30)

    def consumer(instance: str):
        assigned: list[tuple[str, int]] = []
        c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "regex-group",
                      "group.protocol": "consumer", "group.instance.id": instance,
                      "client.id": instance})
        c.subscribe(["^rx-.*"], on_assign=lambda _, ps: assigned.extend(
            (tp.topic, tp.partition) for tp in ps))
        return c, assigned

    def poll_until(c, condition, what):
        deadline = time.monotonic() + DEADLINE_S
        while not condition():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            c.poll(0.1)

    c, assigned = consumer("static-1")
    expected = {("rx-a", 0), ("rx-a", 1), ("rx-a", 2), ("rx-b", 0), ("rx-b", 1)}
    poll_until(c, lambda: set(assigned) == expected, "the regex's topics")
    for f in admin.create_topics([NewTopic("rx-c", 2, 1)]).values():
        f.result(30)
    expected |= {("rx-c", 0), ("rx-c", 1)}
    poll_until(c, lambda: set(assigned) == expected, "the new topic matching the regex")
    before = describe(admin, "regex-group")
    [member] = before.members
    assert member.group_instance_id == "static-1"
    assert {(tp.topic, tp.partition) for tp in member.assignment.topic_partitions} == expected
    c.close()  # a static member leaves with epoch -2: it stays in the group

    after_close = describe(admin, "regex-group")
    assert [m.group_instance_id for m in after_close.members] == ["static-1"]
    c, assigned = consumer("static-1")
    poll_until(c, lambda: set(assigned) == expected, "the static member's partitions back")
    [member] = describe(admin, "regex-group").members
    assert member.member_id != before.members[0].member_id  # a new member id, same assignment
    c.close()
