"""Share-group consumption (issue 20): records/s and server CPU per record of
one confluent-kafka ShareConsumer (implicit acknowledgement: every record
ACCEPTed, durably, on the next poll) reading a backlog of 100-byte records
from a 3-partition topic, beside a KIP-848 consumer group reading the same
topic on kcoord, and beside the librdkafka mock's share groups.

    python -m bench share_consume [--quick] [--records N]

The share consumer first receives probe records from every partition (its
share partitions are loaded: Kafka's `latest` start is behind it), stops
polling while the backlog is produced, then reads it; the consumer group
reads the same backlog from `earliest`.  Goal: kcoord's share groups at
least 50% of its consumer group's rate and ahead of the mock's share groups.
"""
from __future__ import annotations

import itertools
import threading
import time

from .common import CpuMeter, KcoordServer, MockServer, table, timed, write_results

PARTITIONS = 3
VALUE = b"x" * 100
TOPIC = "bench-share"
MOCK_RECORDS = 60_000


def create_topic(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
        fut.result(60)


def produce(bootstrap: str, values, partitioned: bool = False) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 2000})
    for i, v in enumerate(values):
        while True:
            try:
                if partitioned:
                    p.produce(TOPIC, v, partition=i % PARTITIONS)
                else:
                    p.produce(TOPIC, v)
                break
            except BufferError:
                p.poll(0.05)
        if i % 1000 == 999:
            p.poll(0)
    assert p.flush(60) == 0


def share_consumer(bootstrap: str):
    from confluent_kafka import ShareConsumer
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": "bench-share-g"})
    c.subscribe([TOPIC])
    return c


def warm_share(bootstrap: str, consumer, deadline: float) -> None:
    """Probe records until the consumer received one from every partition."""
    seen: set[int] = set()
    counter = itertools.count()
    while seen != set(range(PARTITIONS)):
        if time.monotonic() > deadline:
            raise TimeoutError("the share consumer received no probe records")
        produce(bootstrap, [b"probe-%d" % next(counter) for _ in range(PARTITIONS)], True)
        for m in consumer.poll(0.5) or ():
            if m.error() is None:
                seen.add(m.partition())


def measure_share(peer, records: int, limit: float) -> dict:
    consumer = share_consumer(peer.bootstrap)
    try:
        warm_share(peer.bootstrap, consumer, time.monotonic() + limit)
        consumer.commit_sync()                 # the probes accepted; nothing left acquired
        produce(peer.bootstrap, itertools.repeat(VALUE, records))
        got = 0
        meter = CpuMeter(peer.pid)
        deadline = time.monotonic() + limit
        while got < records and time.monotonic() < deadline:
            for m in consumer.poll(0.5) or ():
                if m.error() is None and m.value() == VALUE:
                    got += 1
        consumer.commit_sync()
        cpu, wall = meter.stop()
    finally:
        consumer.close()
    return summary(got, records, cpu, wall)


def measure_group(peer, records: int, limit: float) -> dict:
    """The same backlog through a KIP-848 consumer: warmed up on probe
    records, paused (no prefetch) while the backlog is produced, then read."""
    from confluent_kafka import Consumer
    consumer = Consumer({"bootstrap.servers": peer.bootstrap, "group.id": "bench-cg",
                         "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    consumer.subscribe([TOPIC])
    deadline = time.monotonic() + limit
    try:
        seen: set[int] = set()
        counter = itertools.count()
        while seen != set(range(PARTITIONS)):
            if time.monotonic() > deadline:
                raise TimeoutError("the consumer received no probe records")
            produce(peer.bootstrap, [b"probe-%d" % next(counter) for _ in range(PARTITIONS)],
                    True)
            for m in consumer.consume(100, 0.5):
                if m.error() is None:
                    seen.add(m.partition())
        assignment = consumer.assignment()
        consumer.pause(assignment)
        while consumer.consume(100, 0.2):
            pass                                  # what was fetched before the pause
        produce(peer.bootstrap, itertools.repeat(VALUE, records))
        got = 0
        meter = CpuMeter(peer.pid)
        consumer.resume(assignment)
        while got < records and time.monotonic() < deadline:
            for m in consumer.consume(500, 0.5):
                if m.error() is None and m.value() == VALUE:
                    got += 1
        cpu, wall = meter.stop()
    finally:
        consumer.close()
    return summary(got, records, cpu, wall)


def summary(got: int, records: int, cpu: float, wall: float) -> dict:
    out = {"records": got, "seconds": wall, "records_per_s": got / wall if wall else 0.0,
           "server_cpu_s": cpu, "cpu_us_per_record": cpu / got * 1e6 if got else float("nan")}
    if got < records:
        out["error"] = f"only {got} of {records} records within the time limit"
    return out


KCOORD_SETTINGS = {"group.share.min.heartbeat.interval.ms": "500",
                   "group.share.heartbeat.interval.ms": "500"}


def run(args) -> None:
    records = getattr(args, "records", None) or (30_000 if getattr(args, "quick", False)
                                                 else 150_000)
    records = int(str(records).split(",")[0])
    mock_records = min(records, MOCK_RECORDS)
    limit = 300.0
    results: dict = {}
    cases = [("kcoord share group", lambda: KcoordServer(KCOORD_SETTINGS), measure_share,
              records),
             ("kcoord consumer group", lambda: KcoordServer(KCOORD_SETTINGS), measure_group,
              records),
             ("librdkafka mock share group",
              lambda: MockServer([(TOPIC, PARTITIONS)]), measure_share, mock_records)]
    for label, make, measure, count in cases:
        with timed(f"share_consume: {label}"):
            peer = make()
            try:
                peer.start()
                if not isinstance(peer, MockServer):
                    create_topic(peer.bootstrap)
                results[label] = measure(peer, count, limit)
            except Exception as exc:  # noqa: BLE001 (reported in the results)
                results[label] = {"error": f"{type(exc).__name__}: {exc}"}
            finally:
                peer.stop()
    rows = [[label, r.get("records_per_s"), r.get("cpu_us_per_record"), r.get("records"),
             r.get("error", "")] for label, r in results.items()]
    share = results["kcoord share group"].get("records_per_s") or 0.0
    group = results["kcoord consumer group"].get("records_per_s") or 0.0
    mock = results["librdkafka mock share group"].get("records_per_s") or 0.0
    sections = [
        f"{records:,} records of 100 bytes on {PARTITIONS} partitions ({mock_records:,} for "
        "the mock, whose throughput collapses on larger backlogs), one consumer each.", "",
        table(["server", "records/s", "server CPU µs/record", "records read", "error"], rows), "",
        f"- kcoord share group / kcoord consumer group: "
        f"{share / group if group else float('nan'):.2f} (goal >= 0.5)",
        f"- kcoord share group / mock share group: "
        f"{share / mock if mock else float('nan'):.2f} (goal > 1)", "",
        "The mock's CPU is its helper process's; kcoord's the server process's.",
        "The share consumer does not fetch while it is not polled (no server CPU while "
        "the backlog is produced), so the time is its reading of the backlog; it is "
        "client-bound (one Python poll loop; kcoord's share path answers a ShareFetch of "
        "a 2,000-record batch in about a millisecond), so server CPU per record is the "
        "server-side comparison.",
    ]
    print(write_results("share_consume", "Share-group consumption", sections, results))


if __name__ == "__main__":
    import argparse
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--records", type=int)
    p.add_argument("--quick", action="store_true")
    run(p.parse_args())
