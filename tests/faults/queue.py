"""Workload 2, the queue: an acks=all (idempotent) producer of unique
values, and two consumer groups of real clients (confluent-kafka), one
classic and one KIP-848, that consume and commit what they consumed
(synchronously, offset + 1 of the last record of each partition).

A delivery report with an error is an unknown outcome (librdkafka gives up
on a record that may have been appended); a commit refused with a fencing
error is a failure, any other error unknown."""
from __future__ import annotations

import collections
import random
import threading
import time
from pathlib import Path

from .checkers import FENCING_ERRORS, check_queue
from .cluster import join_threads, start_threads
from .history import FAIL, OK, UNKNOWN, History
from .reads import committed_offsets, read_log

TOPIC = "queue"
PARTITIONS = 3
GROUPS = {"q-classic": "classic", "q-848": "consumer"}
CONSUMERS_PER_GROUP = 2


class QueueWorkload:
    name = "queue"

    def __init__(self, history: History, bootstrap: str, addrs: dict, seed: int = 0,
                 rate: float = 40.0, log_dir: Path | None = None) -> None:
        self.history, self.bootstrap, self.addrs = history, bootstrap, addrs
        # where the KIP-848 consumers' client logs go at the end (seed 261:
        # what the client waited for is not in the server's logs)
        self.log_dir = log_dir
        self.rng = random.Random(seed)
        self.rate = rate
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.final_log: dict = {}
        self.final_epochs: dict = {}
        self.final_committed: dict = {}

    def start(self) -> None:
        self.threads = start_threads([(self._producer, ())] + [
            (self._consumer, (group, protocol, f"{group}/c{i}"))
            for group, protocol in GROUPS.items() for i in range(CONSUMERS_PER_GROUP)])

    def join(self, timeout: float = 30.0) -> None:
        join_threads(self.threads, self.stop, timeout)
        self.final_log = read_log(self.addrs, TOPIC, PARTITIONS, epochs=self.final_epochs)
        for group in GROUPS:
            for p, o in committed_offsets(self.addrs, group, TOPIC, PARTITIONS).items():
                self.final_committed[(group, p)] = max(o, 0)

    def check(self, ops) -> dict:
        mine = [op for op in ops if op.f in ("produce", "consume", "commit")]
        return check_queue(mine, self.final_log, self.final_committed, self.final_epochs)

    # ------------------------------------------------------------ producer
    def _producer(self) -> None:
        unique_producer(self.history, self.bootstrap, self.stop, self.rate, TOPIC, PARTITIONS,
                        "producer", "produce", "q")

    # ------------------------------------------------------------ consumers
    def _consumer(self, group: str, protocol: str, name: str) -> None:
        from confluent_kafka import Consumer, KafkaException, TopicPartition
        h = self.history
        conf = {"bootstrap.servers": self.bootstrap, "group.id": group,
                "enable.auto.commit": False, "auto.offset.reset": "earliest",
                "group.protocol": protocol, "logger": _Silent()}  # a fault run is noisy
        if protocol == "classic":
            conf.update({"session.timeout.ms": 10000, "heartbeat.interval.ms": 1000,
                         "partition.assignment.strategy": "range"})
        tail = None
        if protocol == "consumer" and self.log_dir is not None:
            tail = _Tail()  # the group protocol's client log, kept for a look after the run
            conf.update({"debug": "cgrp", "logger": tail})
        consumer = Consumer(conf)
        pending: dict[int, int] = {}

        def revoked(_consumer, parts):
            # not ours any more: what was consumed but not committed is redelivered
            for tp in parts:
                pending.pop(tp.partition, None)
        consumer.subscribe([TOPIC], on_revoke=revoked, on_lost=revoked)
        last_commit = time.monotonic()
        try:
            while not self.stop.is_set():
                msg = consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    now = time.monotonic()
                    op = h.invoke(name, "consume", (group, msg.partition()),
                                  msg.value().decode(), offset=msg.offset())
                    op.invoke = now
                    h.complete(op, OK)
                    pending[msg.partition()] = msg.offset() + 1
                if pending and (time.monotonic() - last_commit > 0.5 or len(pending) > 2):
                    for p, offset in sorted(pending.items()):
                        op = h.invoke(name, "commit", (group, p), offset)
                        try:
                            consumer.commit(offsets=[TopicPartition(TOPIC, p, offset)],
                                            asynchronous=False)
                            h.complete(op, OK)
                        except KafkaException as exc:
                            code = exc.args[0].code()
                            h.complete(op, FAIL if code in FENCING_ERRORS else UNKNOWN,
                                       error=code)
                    pending.clear()
                    last_commit = time.monotonic()
        finally:
            try:
                consumer.close()
            except Exception:  # closing during a fault: nothing left to record
                pass
            if tail is not None:
                tail.write(self.log_dir / f"client-{name.replace('/', '-')}.log")


def unique_producer(h: History, bootstrap: str, stop: threading.Event, rate: float,
                    topic: str, partitions: int, process: str, f: str, prefix: str,
                    on_ok=None) -> None:
    """acks=all idempotent produce of `prefix`1, 2, ... round robin over the
    partitions at `rate`/s until `stop`: each an operation `f`, ok with its
    partition and offset (then on_ok(partition, offset)), unknown on a
    delivery error, failed when the client's queue is full."""
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5,
                         "message.timeout.ms": 120000, "logger": _Silent()})
    n = 0

    def report(op):
        def done(err, msg):
            if err is None:
                h.complete(op, OK, partition=msg.partition(), offset=msg.offset())
                if on_ok is not None:
                    on_ok(msg.partition(), msg.offset())
            else:
                h.complete(op, UNKNOWN, error=str(err.code()))
        return done
    while not stop.is_set():
        n += 1
        value = f"{prefix}{n}"
        p = n % partitions
        op = h.invoke(process, f, None, value, partition=p)
        try:
            producer.produce(topic, value.encode(), partition=p, on_delivery=report(op))
        except BufferError:
            h.complete(op, FAIL, error="queue full")  # never handed to the client
        producer.poll(0)
        time.sleep(1.0 / rate)
    producer.flush(30)


class _Tail:
    """A logging.Logger stand-in that keeps librdkafka's last TAIL_LINES
    lines, each stamped with this host's monotonic clock (the history's) when
    the consumer's thread served it: confluent-kafka forwards the log from
    its poll and commit calls, so lines logged while the thread sat in a
    synchronous commit carry the commit's return time."""
    TAIL_LINES = 200_000

    def __init__(self) -> None:
        self.lines: collections.deque = collections.deque(maxlen=self.TAIL_LINES)

    def log(self, _level, fmt, *args) -> None:
        self.lines.append(f"{time.monotonic():.3f} {fmt % args if args else fmt}")

    def __getattr__(self, name):
        return lambda *a, **k: None

    def write(self, path: Path) -> None:
        try:
            path.write_text("\n".join(self.lines) + "\n")
        except OSError:  # a look after the run only
            pass


class _Silent:
    """A logging.Logger stand-in for librdkafka's logs."""

    def log(self, *args, **kwargs) -> None:
        pass

    def __getattr__(self, name):
        return lambda *a, **k: None
