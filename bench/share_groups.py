"""Share-group consumption (KIP-932): records/s and server CPU per record of
confluent-kafka ShareConsumers on kcoord, beside a consumer group reading
the same topic on kcoord and beside share groups on the librdkafka mock
cluster, in one run.  Goal: kcoord's share groups at least 50% of its
consumer group's rate and ahead of the mock's share groups.

    python -m bench share_groups [--quick] [--records N] [--peers kcoord,mock]

For each server the same steps:
1. a 3-partition topic; `members` ShareConsumers (implicit acknowledgement:
   each poll accepts the previous poll's records) join one group and poll;
   a warm-up record is produced to each partition until each has been
   delivered (the share partitions are loaded, their start offsets fixed:
   share.auto.offset.reset is Kafka's `latest` on both servers);
2. the members close (their acknowledgements sent), and `records` records
   of 100 bytes are produced with nobody consuming;
3. the same number of new members join and consume the backlog: the rate
   is records / (last record's arrival - first record's arrival), the
   server's CPU (utime+stime from /proc) is taken over the whole phase,
   joining included, per record consumed.
The consumer-group row on kcoord: `members` KIP-848 Consumers
(group.protocol=consumer) read the same topic from the earliest offset
until each holds a partition, pause, the same number of records is
produced, and the rate and CPU are measured from the resume (its steady
state: no join or rebalance inside the measure, which the share group's
phase does include in its CPU).
"""
from __future__ import annotations

import threading
import time

from .common import (CpuMeter, KcoordServer, MockServer, table, timed, write_results)

TOPIC = "bench-share"
PARTITIONS = 3
MEMBERS = 3
VALUE = b"x" * 100


def produce(bootstrap: str, count: int, start: int = 0) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                  "queue.buffering.max.messages": 1_000_000})
    for i in range(start, start + count):
        while True:
            try:
                p.produce(TOPIC, VALUE, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0, "records not delivered"


def create_topic(bootstrap: str, replication: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"min.insync.replicas": "2"} if replication > 1 else {}
    for fut in admin.create_topics([NewTopic(TOPIC, PARTITIONS, replication,
                                             config=config)]).values():
        fut.result(60)


class Readers:
    """`n` consumers (ShareConsumers, or KIP-848 Consumers) polling in threads;
    counts records and the first and last arrival."""

    def __init__(self, bootstrap: str, n: int, share: bool, group: str) -> None:
        self.count = 0
        self.first = self.last = None
        self.partitions: set[int] = set()
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.errors: list[str] = []
        self.hold = threading.Event()       # consumer groups: pause every assigned partition
        self.held: dict[int, bool] = {}     # thread -> paused with a whole assignment
        self.assigned: dict[int, int] = {}  # thread -> partitions assigned
        self.threads = [threading.Thread(target=self._run, args=(bootstrap, share, group),
                                         daemon=True) for _ in range(n)]
        for t in self.threads:
            t.start()

    def _run(self, bootstrap: str, share: bool, group: str) -> None:
        from confluent_kafka import Consumer, ShareConsumer
        conf = {"bootstrap.servers": bootstrap, "group.id": group}
        if share:
            c = ShareConsumer(conf)
        else:
            c = Consumer({**conf, "group.protocol": "consumer", "auto.offset.reset": "earliest",
                          "enable.auto.commit": False})
        c.subscribe([TOPIC])
        me, paused = threading.get_ident(), False
        try:
            while not self.stopping.is_set():
                if not share:
                    assignment = c.assignment()
                    self.assigned[me] = len(assignment)
                    if self.hold.is_set() != paused:
                        paused = self.hold.is_set()
                        (c.pause if paused else c.resume)(assignment)
                    self.held[me] = paused and bool(assignment)
                got = c.poll(0.5) if share else c.consume(500, 0.5)
                records = [m for m in got if m.error() is None]
                if not records:
                    errors = [m.error() for m in got if m.error() is not None]
                    if errors:
                        self.errors.append(str(errors[0]))
                    continue
                now = time.monotonic()
                with self.lock:
                    self.count += len(records)
                    self.first = self.first or now
                    self.last = now
                    self.partitions.update(m.partition() for m in records)
        finally:
            c.close()

    def wait(self, condition, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if condition(self):
                    return True
            time.sleep(0.02)
        return False

    def stop(self) -> None:
        self.stopping.set()
        for t in self.threads:
            t.join(60)


def measure(server, share: bool, records: int, group: str, timeout: float = 300) -> dict:
    """The backlog of `records` consumed by MEMBERS new members: rate and CPU."""
    meter = CpuMeter(server.pid)
    readers = Readers(server.bootstrap, MEMBERS, share, group)
    done = readers.wait(lambda r: r.count >= records, timeout)
    cpu, wall = meter.stop()
    readers.stop()
    return summary(readers, records, done, cpu, wall)


def consumer_group_run(server, records: int, existing: int) -> dict:
    """The consumer group's rate in its steady state: MEMBERS consumers read
    the topic from the earliest offset (all `existing` records) until each
    holds a partition, pause,
    `records` more are produced, and the measure runs from the resume until
    they are read (no join or rebalance inside it)."""
    readers = Readers(server.bootstrap, MEMBERS, False, "bench-consumer-group")
    try:
        if not readers.wait(lambda r: sum(r.assigned.values()) == PARTITIONS
                            and len(r.assigned) == MEMBERS and all(r.assigned.values())
                            and r.count >= existing, 300):
            return {"error": "the consumer group never settled"}
        readers.hold.set()
        if not readers.wait(lambda r: len(r.held) == MEMBERS and all(r.held.values()), 60):
            return {"error": "the consumers did not pause"}
        produce(server.bootstrap, records)
        with readers.lock:
            readers.count, readers.first, readers.last = 0, None, None
        meter = CpuMeter(server.pid)
        readers.hold.clear()
        done = readers.wait(lambda r: r.count >= records, 300)
        cpu, wall = meter.stop()
    finally:
        readers.stop()
    return summary(readers, records, done, cpu, wall)


def summary(readers: Readers, records: int, done: bool, cpu: float, wall: float) -> dict:
    span = (readers.last - readers.first) if readers.first and readers.last else float("nan")
    return {"records": readers.count, "complete": done, "span_s": span,
            "records_per_s": readers.count / span if span == span and span > 0 else 0.0,
            "phase_s": wall, "server_cpu_s": cpu,
            "cpu_us_per_record": cpu / max(readers.count, 1) * 1e6,
            "errors": readers.errors[:3]}


def share_run(server, records: int, timeout: float = 300) -> dict:
    """Steps 1-3 of the module doc on one server."""
    group = f"bench-share-group-{records}"
    warm = Readers(server.bootstrap, MEMBERS, True, group)
    sent = 0
    deadline = time.monotonic() + 120
    while not warm.wait(lambda r: len(r.partitions) == PARTITIONS, 1.0):
        if time.monotonic() > deadline:
            warm.stop()
            return {"error": "the share partitions were never delivered a record"}
        produce(server.bootstrap, PARTITIONS, sent)
        sent += PARTITIONS
    warm.stop()
    produce(server.bootstrap, records, sent)
    return {**measure(server, True, records, group, timeout), "produced": sent + records}


MOCK_TIMEOUT_S = 120  # the mock slows down on large backlogs: bounded


def run(args) -> dict:
    if args.records:
        sizes = [int(args.records.split(",")[0])]
    else:
        sizes = [20_000] if args.quick else [20_000, 200_000]
    peers = [p for p in args.peers if p in ("kcoord", "mock")]
    raw: dict = {"sizes": sizes, "members": MEMBERS, "partitions": PARTITIONS, "runs": {}}
    for records in sizes:
        if "kcoord" in peers:
            with timed(f"kcoord share group and consumer group, {records:,} records"):
                server = KcoordServer()
                server.start()
                try:
                    create_topic(server.bootstrap)
                    share = raw["runs"][f"kcoord share group, {records:,}"] = \
                        share_run(server, records)
                    raw["runs"][f"kcoord consumer group, {records:,}"] = consumer_group_run(
                        server, records, share.get("produced", 0))
                finally:
                    server.stop()
        if "mock" in peers:
            with timed(f"librdkafka mock share group, {records:,} records"):
                server = MockServer(topics=[(TOPIC, PARTITIONS)])
                server.start()
                try:
                    raw["runs"][f"librdkafka mock share group, {records:,}"] = share_run(
                        server, records, MOCK_TIMEOUT_S)
                finally:
                    server.stop()
    rows = [[name, r.get("records"), r.get("records_per_s"), r.get("cpu_us_per_record"),
             r.get("span_s"), r.get("phase_s"), "yes" if r.get("complete") else "NO"]
            for name, r in raw["runs"].items()]
    sections = [
        f"Records of 100 bytes on a {PARTITIONS}-partition topic, read by {MEMBERS} members "
        "(confluent-kafka 2.16.1, one thread each, in the bench process); see "
        "bench/share_groups.py for the steps. records/s: first to last record; CPU: "
        "the server's utime+stime over the phase (the share groups' phase includes "
        "their members joining; the consumer group's starts in its steady state).", "",
        table(["run", "records read", "records/s", "server CPU us/record", "first-to-last s",
               "phase s", "all read"], rows), ""]
    runs = raw["runs"]
    for records in sizes:
        share = runs.get(f"kcoord share group, {records:,}", {})
        group = runs.get(f"kcoord consumer group, {records:,}", {})
        mock = runs.get(f"librdkafka mock share group, {records:,}", {})
        if share.get("records_per_s") and group.get("records_per_s"):
            sections.append(f"- {records:,}: kcoord share group / kcoord consumer group: "
                            f"{share['records_per_s'] / group['records_per_s']:.2f}x "
                            "(goal >= 0.5)")
        if share.get("records_per_s") and mock.get("records_per_s"):
            sections.append(f"- {records:,}: kcoord share group / librdkafka mock share group: "
                            f"{share['records_per_s'] / mock['records_per_s']:.2f}x (goal > 1)"
                            + ("" if mock.get("complete") else
                               f"; the mock read {mock.get('records'):,} of {records:,} "
                               f"in {MOCK_TIMEOUT_S} s"))
    sections.append("")
    write_results("share_groups", "Share groups: consumption rate and server CPU", sections, raw)
    return raw
