"""Issue 3 acceptance: a restart keeps every acknowledged record, and a log
whose last segment was cut in the middle of a batch comes back with all
whole batches.

The restart tests produce with a real client (acks=all), stop the server
(SIGTERM, or SIGKILL: an ack for acks=all must mean the bytes left the
process) and start it again on the same port and data dir
(ServerProcess.restart).  The torn-tail tests work at the wire level so the
batch boundaries are known exactly, and cut the segment file on disk while
the server is down.
"""
from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import pytest

from kcoord.protocol.records import LOG_OVERHEAD, build_batch, iter_batches
from tests.clients.data import PARTITIONS, make_records
from tests.clients.wire import (WireClient, create_topic, list_offset, produce, read_partition,
                                wait_for_log)
from tests.support import ServerProcess

pytestmark = [pytest.mark.clients, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

DEADLINE_S = 120.0


def confluent_produce(bootstrap: str, topic: str, records) -> dict[tuple[int, int], tuple]:
    """Produce with acks=all; returns {(partition, offset): (key, value, headers)} of acked records."""
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "compression.type": "lz4"})
    acked: dict[tuple[int, int], tuple] = {}
    errors = []
    by_key = {r.key: r for r in records}  # keys are unique

    def delivered(err, msg):
        # (delivery reports do not carry the headers: take the record produced)
        if err is not None:
            errors.append(err)
        else:
            r = by_key[msg.key()]
            assert msg.partition() == r.partition
            acked[(msg.partition(), msg.offset())] = (r.key, r.value, list(r.headers))

    for r in records:
        producer.produce(topic, key=r.key, value=r.value, headers=list(r.headers),
                         partition=r.partition, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(DEADLINE_S) == 0
    assert not errors, errors[:5]
    return acked


def confluent_read_all(bootstrap: str, topic: str, partitions: int, expected_count: int
                       ) -> dict[tuple[int, int], tuple]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"unused-{topic}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "fetch.wait.max.ms": 100})
    got: dict[tuple[int, int], tuple] = {}
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < expected_count:
            assert time.monotonic() < deadline, f"read {len(got)} of {expected_count}"
            for m in consumer.consume(num_messages=1000, timeout=0.5):
                assert m.error() is None, m.error()
                got[(m.partition(), m.offset())] = (m.key(), m.value(), list(m.headers() or []))
    finally:
        consumer.close()
    return got


def create_topic_with_admin(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(timeout=DEADLINE_S)


# ------------------------------------------------------------------ restart
@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_restart_keeps_acknowledged_records(server, how):
    topic = "durable"
    records = make_records(4000, seed=7)
    create_topic_with_admin(server.bootstrap, topic, PARTITIONS)
    acked = confluent_produce(server.bootstrap, topic, records)
    assert len(acked) == len(records)
    port = server.port

    if how == "sigterm":
        server.restart()
    else:
        server.kill()
        server.start()
    assert server.port == port

    got = confluent_read_all(server.bootstrap, topic, PARTITIONS, len(acked))
    assert got == acked

    # the log ends where it ended before the restart, and appends continue there
    more = make_records(600, seed=8)
    acked_after = confluent_produce(server.bootstrap, topic, more)
    ends = defaultdict(int)
    for p, o in acked:
        ends[p] = max(ends[p], o + 1)
    first_after = defaultdict(lambda: 1 << 62)
    for p, o in acked_after:
        first_after[p] = min(first_after[p], o)
    assert dict(first_after) == dict(ends)
    with WireClient(server.port) as client:
        for p in range(PARTITIONS):
            expected_end = ends[p] + sum(1 for q, _ in acked_after if q == p)
            assert list_offset(client, topic, p)["offset"] == expected_end


def test_restart_keeps_topics_and_empty_partitions(server):
    with WireClient(server.port) as client:
        assert create_topic(client, "empty-one", 4)["error_code"] == 0
    server.restart()
    with WireClient(server.port) as client:
        for p in range(4):
            assert list_offset(client, "empty-one", p)["offset"] == 0
        assert create_topic(client, "empty-one", 4)["error_code"] == 36  # TOPIC_ALREADY_EXISTS


# ---------------------------------------------------------------- torn tail
TOPIC = "torn"
SEGMENT_BYTES = 4096  # several segments for 40 batches of ~700 bytes


def make_batch(n: int, records: int = 10) -> bytes:
    return build_batch([(f"key-{n}-{i}".encode(), bytes([n % 256, i]) * 300,
                         [("n", str(n).encode())], 1_700_000_000_000 + n) for i in range(records)],
                       base_timestamp=1_700_000_000_000 + n)


def batch_records(header_and_records) -> list[tuple]:
    header, records = header_and_records
    return [(r.offset, r.key, r.value, r.headers) for r in records]


def segment_files(data_dir: Path, topic: str, partition: int) -> list[Path]:
    d = data_dir / f"{topic}-{partition}"
    files = sorted(d.glob("*.log"))
    for f in files:
        assert len(f.stem) == 20 and f.stem.isdigit(), f
    return files


@pytest.fixture
def torn_server(tmp_path):
    proc = ServerProcess(tmp_path / "data", settings={"log.segment.bytes": str(SEGMENT_BYTES)})
    proc.start()
    yield proc
    proc.stop()


def fill(server, batches: int) -> list[list[tuple]]:
    """Produce `batches` batches to partition 0 (and one to partition 1); return what was stored."""
    with WireClient(server.port) as client:
        assert create_topic(client, TOPIC, 2)["error_code"] == 0
        for n in range(batches):
            p = produce(client, TOPIC, 0, make_batch(n))
            assert p["error_code"] == 0 and p["base_offset"] == 10 * n, p
        assert produce(client, TOPIC, 1, make_batch(999))["error_code"] == 0
        stored = [batch_records(b) for b in read_partition(client, TOPIC, 0)]
    assert len(stored) == batches
    return stored


# where to damage the last batch of the last segment, relative to its start
# (size = the batch's size on disk)
DAMAGE = {
    "cut-in-length-field": lambda size: ("cut", 10),
    "cut-in-batch-header": lambda size: ("cut", LOG_OVERHEAD + 20),
    "cut-in-records": lambda size: ("cut", size // 2),
    "cut-one-byte-short": lambda size: ("cut", size - 1),
    "crc-mismatch": lambda size: ("flip", size - 5),
    "zeros-after-last-batch": lambda size: ("zeros", size),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_torn_tail_recovers_whole_batches(torn_server, damage):
    server = torn_server
    stored = fill(server, 40)
    server.kill()  # a crash (no clean-shutdown marker): the restart scans the active tail

    files = segment_files(server.data_dir, TOPIC, 0)
    assert len(files) >= 3, f"expected several segments with log.segment.bytes={SEGMENT_BYTES}"
    last = files[-1]
    data = last.read_bytes()
    positions = [pos for pos, _ in iter_batches(data)]
    assert positions, f"{last} holds no batch"
    start = positions[-1]
    size = len(data) - start
    kind, at = DAMAGE[damage](size)
    torn_batch_index = len(stored) - 1
    if kind == "cut":
        last.write_bytes(data[:start + at])
    elif kind == "flip":
        broken = bytearray(data)
        broken[start + at] ^= 0xFF
        last.write_bytes(bytes(broken))
    else:  # zeros: a preallocated or half-written tail after a whole batch
        last.write_bytes(data + bytes(100))
        torn_batch_index = len(stored)
    kept = stored[:torn_batch_index]
    next_offset = 10 * len(kept)

    since = len(server.log_lines)
    server.start()
    wait_for_log(server, last.name, "truncat", since=since)
    with WireClient(server.port) as client:
        assert list_offset(client, TOPIC, 0)["offset"] == next_offset
        assert [batch_records(b) for b in read_partition(client, TOPIC, 0)] == kept
        # the other partition is untouched
        assert list_offset(client, TOPIC, 1)["offset"] == 10
        # new produces continue right after the last whole batch
        p = produce(client, TOPIC, 0, make_batch(1000))
        assert p["error_code"] == 0 and p["base_offset"] == next_offset, p
        after = [batch_records(b) for b in read_partition(client, TOPIC, 0, start=next_offset)]
    assert [[r[1:] for r in b] for b in after] == [
        [(f"key-1000-{i}".encode(), bytes([1000 % 256, i]) * 300, [("n", b"1000")])
         for i in range(10)]]
    assert [r[0] for r in after[0]] == list(range(next_offset, next_offset + 10))

    # and it all survives another restart
    server.restart()
    with WireClient(server.port) as client:
        assert list_offset(client, TOPIC, 0)["offset"] == next_offset + 10
        assert [batch_records(b) for b in read_partition(client, TOPIC, 0)] == kept + after


def test_torn_first_batch_of_last_segment(torn_server):
    """A cut inside the only batch of the last segment leaves an empty segment;
    the log then ends at that segment's base offset."""
    server = torn_server
    stored = fill(server, 40)
    server.kill()  # a crash (no clean-shutdown marker): the restart scans the active tail
    files = segment_files(server.data_dir, TOPIC, 0)
    last = files[-1]
    data = last.read_bytes()
    # make the last segment hold exactly its first batch, cut in the middle
    first_end = LOG_OVERHEAD + int.from_bytes(data[8:12], "big")
    base = int(last.stem)
    kept_batches = [b for b in stored if b[0][0] < base]
    assert 10 * len(kept_batches) == base
    last.write_bytes(data[:first_end // 2])

    since = len(server.log_lines)
    server.start()
    wait_for_log(server, last.name, "truncat", since=since)
    with WireClient(server.port) as client:
        assert list_offset(client, TOPIC, 0)["offset"] == base
        assert [batch_records(b) for b in read_partition(client, TOPIC, 0)] == kept_batches
        p = produce(client, TOPIC, 0, make_batch(2000))
        assert p["error_code"] == 0 and p["base_offset"] == base, p
