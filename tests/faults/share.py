"""Workload 4, the share queue (opt-in: `--workloads ...,share`): an acks=all
idempotent producer of unique values and two confluent-kafka ShareConsumers
in one share group, explicit acknowledgement (every record ACCEPTed,
committed asynchronously).

History: `share-produce` (ok with the partition and offset, unknown on a
delivery error), `share-deliver` (ok: the record a consumer's poll handed
over, with its delivery count), `share-ack` (one per record: ok when the
acknowledgement commit callback confirms it, unknown when it answers an
error: the broker may have applied it or not).

Checker (Kafka's redelivery rules): a record (partition, offset) whose
ACCEPT was confirmed is never delivered again afterwards; every record
produced ok is delivered at least once (the consumers drain after the
faults heal); a delivery count never exceeds group.share.delivery.count.limit;
one offset never holds two values.
"""
from __future__ import annotations

import threading
import time

from .checkers import _Anomalies, _brief
from .cluster import join_threads, start_threads, until
from .history import FAIL, OK, UNKNOWN, History
from .queue import _Silent, unique_producer
from .wire import connect, find_coordinator

TOPIC = "share-queue"
PARTITIONS = 3
GROUP = "share-faults"
CONSUMERS = 2
INCREMENTAL_ALTER_CONFIGS, GROUP_RESOURCE = 44, 32
DELIVERY_LIMIT = 5          # group.share.delivery.count.limit (Kafka's default)
DRAIN_S = 60.0              # after the faults: every record produced ok delivered, bounded
SETTINGS = {"group.share.min.heartbeat.interval.ms": "500",
            "group.share.heartbeat.interval.ms": "1000",
            "group.share.min.record.lock.duration.ms": "5000",
            "group.share.record.lock.duration.ms": "10000"}


class ShareWorkload:
    name = "share"

    def __init__(self, history: History, bootstrap: str, addrs: dict,
                 rate: float = 40.0) -> None:
        self.history, self.bootstrap, self.addrs, self.rate = history, bootstrap, addrs, rate
        self.stop = threading.Event()        # the producer stops
        self.drained = threading.Event()     # then the consumers, once they drained
        self.threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.produced: set[tuple[int, int]] = set()
        self.delivered: set[tuple[int, int]] = set()

    def start(self) -> None:
        until(self._from_earliest, "the share group reading from the earliest offset", 60)
        self.threads = start_threads([(self._producer, ())] + [
            (self._consumer, (f"share/c{i}",)) for i in range(CONSUMERS)])

    def _from_earliest(self) -> bool:
        """share.auto.offset.reset=earliest on the group (its coordinator's
        IncrementalAlterConfigs): records produced before a share partition's
        first fetch are owed too."""
        code, node = find_coordinator(self.addrs[1], GROUP)
        if code:
            return False
        with connect(self.addrs[node]) as c:
            r = c.request(INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
                "resource_type": GROUP_RESOURCE, "resource_name": GROUP, "configs": [
                    {"name": "share.auto.offset.reset", "config_operation": 0,
                     "value": "earliest"}]}], "validate_only": False})
        return r["responses"][0]["error_code"] == 0

    def join(self, timeout: float = 30.0) -> None:
        self.stop.set()
        self.threads[0].join(timeout)
        deadline = time.monotonic() + DRAIN_S
        while time.monotonic() < deadline:
            with self._lock:
                if self.produced <= self.delivered:
                    break
            time.sleep(0.2)
        join_threads(self.threads[1:], self.drained, timeout)

    def check(self, ops) -> dict:
        return check_share([op for op in ops if op.f.startswith("share-")])

    # ------------------------------------------------------------ producer
    def _producer(self) -> None:
        unique_producer(self.history, self.bootstrap, self.stop, self.rate, TOPIC, PARTITIONS,
                        "share-producer", "share-produce", "s", self._produced)

    def _produced(self, partition: int, offset: int) -> None:
        with self._lock:
            self.produced.add((partition, offset))

    # ------------------------------------------------------------ consumers
    def _consumer(self, name: str) -> None:
        from confluent_kafka import AcknowledgeType, KafkaException, ShareConsumer
        h = self.history
        pending: dict[tuple[int, int], list] = {}     # (p, offset) -> ack ops out

        def committed(offsets, exc) -> None:
            for tp, acked in (offsets or {}).items():
                for offset in acked:
                    for op in pending.pop((tp.partition, offset), []):
                        if exc is None:
                            h.complete(op, OK)
                        else:
                            h.complete(op, UNKNOWN, error=str(exc))
        consumer = ShareConsumer({"bootstrap.servers": self.bootstrap, "group.id": GROUP,
                                  "share.acknowledgement.mode": "explicit",
                                  "logger": _Silent()})
        consumer.set_acknowledgement_commit_callback(committed)
        consumer.subscribe([TOPIC])
        try:
            while not self.drained.is_set():
                try:
                    got = consumer.poll(0.2) or ()
                except KafkaException as exc:
                    # a partition's error surfaced by the client (COORDINATOR_NOT_AVAILABLE
                    # while the share coordinator is out, as from Kafka): poll again
                    op = h.invoke(name, "share-poll-error", None, None)
                    h.complete(op, FAIL, error=str(exc.args[0].code()))
                    continue
                for msg in got:
                    if msg.error() is not None:
                        continue
                    key = (msg.partition(), msg.offset())
                    op = h.invoke(name, "share-deliver", key, msg.value().decode(),
                                  count=msg.delivery_count())
                    h.complete(op, OK)
                    with self._lock:
                        self.delivered.add(key)
                    pending.setdefault(key, []).append(
                        h.invoke(name, "share-ack", key, msg.value().decode()))
                    consumer.acknowledge(msg, AcknowledgeType.ACCEPT)
                consumer.commit_async()
        finally:
            try:
                consumer.close()
            except Exception:  # closing during a fault: nothing left to record
                pass


def check_share(ops) -> dict:
    """Kafka's share-group delivery rules over a share workload's history."""
    bad = _Anomalies()
    acked_at: dict[tuple, float] = {}        # record -> earliest confirmed ACCEPT
    values: dict[tuple, str] = {}
    delivered: set = set()
    for op in ops:
        if op.f == "share-ack" and op.outcome == OK:
            key = tuple(op.key)
            acked_at[key] = min(acked_at.get(key, op.complete), op.complete)
    for op in sorted((o for o in ops if o.f == "share-deliver"), key=lambda o: o.invoke):
        key = tuple(op.key)
        delivered.add(key)
        if values.setdefault(key, op.value) != op.value:
            bad.add("two-values-at-one-offset", _brief(op))
        if op.invoke > acked_at.get(key, float("inf")):
            bad.add("delivered-after-confirmed-accept", _brief(op))
        if op.extra.get("count", 0) > DELIVERY_LIMIT:
            bad.add("delivery-count-over-limit", _brief(op))
    produced = [op for op in ops if op.f == "share-produce" and op.outcome == OK]
    for op in produced:
        key = (op.extra["partition"], op.extra["offset"])
        if key not in delivered:
            bad.add("never-delivered", _brief(op))
        elif values[key] != op.value:
            bad.add("delivered-another-value", _brief(op))
    return bad.result({"produced": len(produced), "records_delivered": len(delivered),
                       "deliveries": sum(1 for o in ops if o.f == "share-deliver"),
                       "acks_confirmed": sum(1 for o in ops if o.f == "share-ack"
                                             and o.outcome == OK),
                       "acks_unknown": sum(1 for o in ops if o.f == "share-ack"
                                           and o.outcome == UNKNOWN)})
