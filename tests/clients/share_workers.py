"""confluent-kafka ShareConsumers for the share-group client tests: a consumer
thread that records every delivery (partition, offset, value, delivery
count) and every acknowledgement the broker confirmed (the acknowledgement
commit callback), a producer of numbered records, and a consumer in a
process of its own (to be SIGKILLed while it holds records).
"""
from __future__ import annotations

import subprocess
import sys
import threading
from collections import defaultdict

from tests.clients.group_workers import wait_for  # noqa: F401 (re-exported for the tests)


class Deliveries:
    """What every consumer received and what the broker confirmed."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.received: dict[bytes, list[tuple[str, int]]] = defaultdict(list)  # value -> (who, count)
        self.where: dict[tuple[int, int], bytes] = {}                          # (p, offset) -> value
        self.confirmed: dict[tuple[int, int], int] = defaultdict(int)          # acks confirmed
        # acks answered with an error (a leader killed with the request in
        # flight): applied or not, the client cannot know
        self.unknown: set[tuple[int, int]] = set()
        self.errors: list[str] = []

    def got(self, who: str, msg) -> None:
        with self.lock:
            self.received[msg.value()].append((who, msg.delivery_count()))
            self.where[(msg.partition(), msg.offset())] = msg.value()

    def committed(self, offsets, exc) -> None:
        with self.lock:
            if exc is not None:
                self.errors.append(str(exc))
                self.unknown.update((tp.partition, o) for tp, acked in (offsets or {}).items()
                                    for o in acked)
                return
            for tp, acked in offsets.items():
                for offset in acked:
                    self.confirmed[(tp.partition, offset)] += 1

    def values(self) -> set[bytes]:
        with self.lock:
            return set(self.received)

    def confirmed_values(self) -> set[bytes]:
        with self.lock:
            return {self.where[k] for k in self.confirmed if k in self.where}

    def answered_values(self) -> set[bytes]:
        """Records whose acknowledgement was confirmed or answered an error."""
        with self.lock:
            return {self.where[k] for k in self.unknown | set(self.confirmed) if k in self.where}


class ShareWorker(threading.Thread):
    """One ShareConsumer in its own thread.  decide(msg) -> AcknowledgeType in
    explicit mode (None: implicit mode, every record accepted)."""

    def __init__(self, name: str, bootstrap: str, group: str, topic: str, log: Deliveries,
                 decide=None) -> None:
        super().__init__(name=name, daemon=True)
        self.log, self.topic, self.decide = log, topic, decide
        self.stop = threading.Event()
        self.config = {"bootstrap.servers": bootstrap, "group.id": group,
                       "share.acknowledgement.mode": "explicit" if decide else "implicit"}
        self.failure: BaseException | None = None

    def run(self) -> None:
        from confluent_kafka import ShareConsumer
        consumer = ShareConsumer(self.config)
        consumer.set_acknowledgement_commit_callback(self.log.committed)
        try:
            consumer.subscribe([self.topic])
            while not self.stop.is_set():
                for msg in consumer.poll(0.2) or ():
                    if msg.error() is not None:
                        continue
                    self.log.got(self.name, msg)
                    if self.decide is not None:
                        consumer.acknowledge(msg, self.decide(msg))
                if self.decide is not None:
                    consumer.commit_async()
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            self.failure = exc
        finally:
            consumer.close()

    def finish(self, timeout: float = 60.0) -> None:
        self.stop.set()
        self.join(timeout)
        assert not self.is_alive(), f"{self.name} did not stop"
        assert self.failure is None, f"{self.name} failed: {self.failure!r}"


def produce(bootstrap: str, topic: str, values: list[bytes], partitions: int) -> None:
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, value in enumerate(values):
        producer.produce(topic, value, partition=i % partitions)
        if i % 500 == 499:
            producer.poll(0)
    assert producer.flush(30) == 0, "records left unsent"


_HOLDER = r"""
import sys
from confluent_kafka import ShareConsumer
c = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                   "share.acknowledgement.mode": "explicit"})
c.subscribe([sys.argv[3]])
while True:
    for m in c.poll(0.2) or ():
        if m.error() is None:
            print(m.partition(), m.offset(), flush=True)
"""


def start_holder(bootstrap: str, group: str, topic: str) -> subprocess.Popen:
    """A share consumer in its own process that acquires records and never
    acknowledges them; prints "partition offset" for each."""
    return subprocess.Popen([sys.executable, "-c", _HOLDER, bootstrap, group, topic],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
