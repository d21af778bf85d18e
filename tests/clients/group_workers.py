"""What the confluent-kafka group tests share (test_consumer_protocol_clients,
test_group_migration_clients): a bounded wait, the ledger of ownership and
consumption, a consumer thread that commits what it processed, a producer.

Consumers commit explicitly: the offsets they processed, in on_revoke before
a partition is released (so its next owner starts exactly there) and when
asked to stop.  Ownership comes from the on_assign / on_revoke / on_lost
callbacks, timestamped, so a double ownership shows up in time order.
"""
from __future__ import annotations

import threading
import time
from collections import defaultdict


def wait_for(condition, what: str, timeout: float, interval: float = 0.05):
    """Poll `condition` until it returns something true, for at most `timeout` s."""
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
    """One confluent-kafka consumer in its own thread: poll, record, commit on
    revoke and on stop.  `config` adds to the base settings (group.protocol,
    group.remote.assignor, partition.assignment.strategy, ...)."""

    def __init__(self, name: str, bootstrap: str, group: str, topic: str, ledger: Ledger,
                 config: dict) -> None:
        super().__init__(name=name, daemon=True)
        self.ledger, self.topic = ledger, topic
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.errors: list[str] = []
        self.lost: list[list[int]] = []
        self.positions: dict[int, int] = {}  # partition -> next offset to commit
        self.stale_retries = 0  # commits repeated after STALE_MEMBER_EPOCH
        self.config = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                       "enable.auto.commit": False, "auto.offset.reset": "earliest", **config}

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
        closing = threading.Event()

        def on_assign(c, partitions):
            self.ledger.event(self.name, "assign", [tp.partition for tp in partitions])

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
            self.lost.append(ps)
            for p in ps:
                self.positions.pop(p, None)
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
            consumer.close()


def produce(bootstrap: str, topic: str, start: int, count: int, partitions: int) -> None:
    """Records start..start+count-1, keyed by their number, round-robin over partitions."""
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + count):
        producer.produce(topic, key=str(i).encode(), value=f"v{i}".encode(),
                         partition=i % partitions)
    assert producer.flush(60) == 0
