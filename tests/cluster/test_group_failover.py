"""Consumer groups of real clients keep consuming and committing while the
coordinator node of their group fails (3 kcoord nodes + etcd on loopback):
SIGKILL, SIGSTOP past the lease, a graceful stop, and power loss (killed,
then its segments cut back before it restarts).  Afterwards every record
was consumed, no partition was owned by two consumers at once, and no
acknowledged commit was lost: every offset a commit call returned for is
at or below what OffsetFetch returns after the failover."""
import os
import signal
import threading
import time
from collections import defaultdict

import pytest

from tests.clients.group_workers import Ledger
from tests.clients.wire import WireClient
from tests.cluster.support import Cluster, wait_until

TOPIC = "failover"
PARTITIONS = 4
BATCH = 200
TTL_MS = 2000


@pytest.fixture
def cluster(etcd, tmp_path):
    c = Cluster(etcd, tmp_path, ttl_ms=TTL_MS, settings={
        "replica.fetch.wait.max.ms": "100", "replica.lag.time.max.ms": "4000",
        "group.consumer.min.heartbeat.interval.ms": "500",
        "group.consumer.heartbeat.interval.ms": "1000",
        "group.consumer.min.session.timeout.ms": "6000",
        "group.consumer.session.timeout.ms": "10000"}).start()
    yield c
    for node in c.nodes.values():
        if node.proc and node.proc.poll() is None:
            os.kill(node.proc.pid, signal.SIGCONT)
    c.stop()


class Acks:
    """Every commit a client acknowledged: partition -> highest offset, and when."""

    def __init__(self):
        self.lock = threading.Lock()
        self.highest: dict[int, int] = {}
        self.times: list[float] = []
        # commits are held while the failover is checked, so the first
        # OffsetFetch on the new coordinator shows what it took over, not
        # what the group committed to it since
        self.open = threading.Event()
        self.open.set()
        self.inflight = 0

    def begin(self) -> bool:
        with self.lock:
            if not self.open.is_set():
                return False
            self.inflight += 1
            return True

    def end(self) -> None:
        with self.lock:
            self.inflight -= 1

    def hold(self) -> None:
        """Stop new commits and wait (bounded) for those under way."""
        self.open.clear()
        wait_until(lambda: self.inflight == 0, "commits under way to finish", timeout=60)

    def commit(self, positions: dict[int, int], partitions, send, failure) -> None:
        """Commit the positions of `partitions` (None: all) with send(offsets);
        recorded as acknowledged only if send returns (failure: the client's
        error type, retried with the next commit)."""
        ps = [p for p in (partitions if partitions is not None else positions)
              if p in positions]
        if not ps:
            return
        offsets = {p: positions[p] for p in ps}
        if not self.begin():
            return
        try:
            send(offsets)
            self.record(offsets)
        except failure:
            pass
        finally:
            self.end()

    def record(self, offsets: dict[int, int]) -> None:
        with self.lock:
            for p, o in offsets.items():
                self.highest[p] = max(self.highest.get(p, -1), o)
            self.times.append(time.monotonic())

    def snapshot(self) -> dict[int, int]:
        with self.lock:
            return dict(self.highest)

    def since(self, t: float) -> int:
        with self.lock:
            return sum(x > t for x in self.times)


class ConfluentMember(threading.Thread):
    """confluent-kafka consumer: commits synchronously after every few
    records (and what it processed before giving a partition up)."""

    def __init__(self, name, bootstrap, group, protocol, ledger, acks):
        super().__init__(name=name, daemon=True)
        self.ledger, self.acks = ledger, acks
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.positions: dict[int, int] = {}
        self.config = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                       "enable.auto.commit": False, "auto.offset.reset": "earliest",
                       "topic.metadata.refresh.interval.ms": 1000}
        if protocol == "consumer":
            self.config["group.protocol"] = "consumer"
        else:
            self.config.update({"session.timeout.ms": 10000, "heartbeat.interval.ms": 1000,
                                "partition.assignment.strategy": "cooperative-sticky"})

    def commit(self, consumer, partitions=None) -> None:
        from confluent_kafka import KafkaException, TopicPartition
        self.acks.commit(self.positions, partitions, lambda offsets: consumer.commit(
            offsets=[TopicPartition(TOPIC, p, o) for p, o in offsets.items()],
            asynchronous=False), KafkaException)

    def run(self):
        from confluent_kafka import Consumer
        consumer = Consumer(self.config)

        def on_assign(c, partitions):
            self.ledger.event(self.name, "assign", [tp.partition for tp in partitions])

        def on_revoke(c, partitions):
            ps = [tp.partition for tp in partitions]
            self.commit(c, ps)
            for p in ps:
                self.positions.pop(p, None)
            self.ledger.event(self.name, "revoke", ps)

        def on_lost(c, partitions):
            ps = [tp.partition for tp in partitions]
            for p in ps:
                self.positions.pop(p, None)
            self.ledger.event(self.name, "lost", ps)

        consumer.subscribe([TOPIC], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
        since_commit = 0
        try:
            while not self.stop.is_set():
                msg = consumer.poll(0.1)
                if msg is None or msg.error():
                    continue
                self.ledger.consume(self.name, msg.partition(), msg.offset())
                self.positions[msg.partition()] = msg.offset() + 1
                since_commit += 1
                if since_commit >= 5:
                    self.commit(consumer)
                    since_commit = 0
            self.commit(consumer)
        except Exception as exc:
            self.errors.append(repr(exc))
        finally:
            consumer.close()


class KafkaPythonMember(threading.Thread):
    """kafka-python consumer (classic protocol), committing synchronously
    after each poll."""

    def __init__(self, name, bootstrap, group, protocol, ledger, acks):
        super().__init__(name=name, daemon=True)
        self.bootstrap, self.group = bootstrap, group
        self.ledger, self.acks = ledger, acks
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.positions: dict[int, int] = {}

    def commit(self, consumer, partitions=None) -> None:
        from kafka import TopicPartition
        from kafka.errors import KafkaError
        from kafka.structs import OffsetAndMetadata
        self.acks.commit(self.positions, partitions, lambda offsets: consumer.commit(
            {TopicPartition(TOPIC, p): OffsetAndMetadata(o, "", -1)
             for p, o in offsets.items()}), KafkaError)

    def run(self):
        from kafka import ConsumerRebalanceListener, KafkaConsumer
        member = self
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.group,
                                 client_id=self.name, enable_auto_commit=False,
                                 auto_offset_reset="earliest", session_timeout_ms=10000,
                                 heartbeat_interval_ms=1000, metadata_max_age_ms=1000,
                                 request_timeout_ms=15000, retry_backoff_ms=100)

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                # kafka-python 3 refuses a blocking commit from its own IO
                # thread: what was not committed is read again by the next owner
                ps = [tp.partition for tp in revoked]
                for p in ps:
                    member.positions.pop(p, None)
                member.ledger.event(member.name, "revoke", ps)

            def on_partitions_assigned(self, assigned):
                member.ledger.event(member.name, "assign", [tp.partition for tp in assigned])

        # the topic's partitions known before the first join: kafka-python 3.0.12
        # loses the second, metadata-started rebalance a join without them leads
        # to when poll()'s timeout ends mid JoinGroup/SyncGroup (examples/orders_app)
        consumer.partitions_for_topic(TOPIC)
        consumer.subscribe([TOPIC], listener=Listener())
        try:
            while not self.stop.is_set():
                batch = consumer.poll(timeout_ms=100)
                for tp, records in batch.items():
                    for r in records:
                        self.ledger.consume(self.name, tp.partition, r.offset)
                        self.positions[tp.partition] = r.offset + 1
                if batch:
                    self.commit(consumer)
            self.commit(consumer)
        except Exception as exc:
            self.errors.append(repr(exc))
        finally:
            consumer.close(autocommit=False)


def produce(bootstrap, start, count):
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "message.timeout.ms": 60000})
    for i in range(start, start + count):
        producer.produce(TOPIC, key=str(i).encode(), value=b"v%d" % i, partition=i % PARTITIONS)
    assert producer.flush(90) == 0


def committed(cluster, node_id, group) -> dict[int, int] | None:
    """OffsetFetch through the group's coordinator (asked on node_id)."""
    answer = cluster.find_coordinators(node_id, [group])[group]
    if answer["error_code"]:
        return None
    with WireClient(answer["port"]) as c:
        r = c.request(9, 7, {"group_id": group, "topics": [
            {"name": TOPIC, "partition_indexes": list(range(PARTITIONS))}],
            "require_stable": False})
    if r["error_code"]:
        return None
    parts = r["topics"][0]["partitions"]
    if any(p["error_code"] for p in parts):
        return None
    return {p["partition_index"]: p["committed_offset"] for p in parts}


def cut_segments(data_dir):
    """Power loss: what a kill -9 leaves in the page cache but was never
    fsynced is gone.  Each partition's active segment loses its tail from a
    batch boundary in its last quarter (more than a power loss may take:
    fsynced bytes too; the in-sync replicas still hold every acknowledged
    record)."""
    from kcoord.log.scan import segment_data_end
    from kcoord.protocol.records import iter_batches
    for seg_dir in data_dir.iterdir():
        logs = sorted(seg_dir.glob("*.log")) if seg_dir.is_dir() else []
        if not logs:
            continue
        data = logs[-1].read_bytes()[:segment_data_end(logs[-1])]  # (not its zeros ahead)
        ends = [pos for pos, _ in iter_batches(data)]
        if len(ends) < 4:
            continue
        cut = ends[len(ends) - max(1, len(ends) // 4)]
        with open(logs[-1], "r+b") as f:
            f.truncate(cut)


SCENARIOS = [
    ("confluent", "classic", "sigkill"),
    ("confluent", "consumer", "sigstop"),
    ("kafka-python", "classic", "graceful"),
    ("confluent", "consumer", "power-loss"),
]


@pytest.mark.parametrize("client,protocol,fault", SCENARIOS,
                         ids=["-".join(s) for s in SCENARIOS])
def test_group_survives_its_coordinators_failure(cluster, client, protocol, fault):
    bootstrap = ",".join(n.bootstrap for n in cluster.nodes.values())
    group = f"failover-{client}-{protocol}-{fault}"
    with WireClient(cluster.nodes[1].port) as c:
        r = c.request(19, 7, {"topics": [{"name": TOPIC, "num_partitions": PARTITIONS,
                                          "replication_factor": 3, "assignments": [],
                                          "configs": [{"name": "min.insync.replicas",
                                                       "value": "2"}]}],
                              "timeout_ms": 30000, "validate_only": False})
        assert r["topics"][0]["error_code"] == 0, r
    produce(bootstrap, 0, BATCH)
    ledger, acks = Ledger(), Acks()
    member = ConfluentMember if client == "confluent" else KafkaPythonMember
    members = [member(f"m{i}", bootstrap, group, protocol, ledger, acks) for i in range(2)]
    for m in members:
        m.start()
    try:
        wait_until(lambda: ledger.count() >= BATCH // 2 and acks.snapshot(), "consuming",
                   timeout=90)
        coordinator = wait_until(
            lambda: (a := cluster.find_coordinators(1, [group])[group])["error_code"] == 0
            and a["node_id"], "the group's coordinator")
        survivor = next(i for i in cluster.nodes if i != coordinator)
        node = cluster.nodes[coordinator]
        acks.hold()
        before = acks.snapshot()
        t_fault = time.monotonic()
        if fault == "sigstop":
            os.kill(node.proc.pid, signal.SIGSTOP)
        elif fault == "graceful":
            node.stop()
        else:
            node.kill()
        moved = wait_until(
            lambda: (a := cluster.find_coordinators(survivor, [group])[group])["error_code"] == 0
            and a["node_id"] != coordinator and a["node_id"], "a new coordinator", timeout=60)
        if fault == "power-loss":
            cut_segments(node.data_dir)
        # the new coordinator has every commit acknowledged before the failure
        after = wait_until(lambda: committed(cluster, survivor, group), "OffsetFetch", timeout=60)
        lost = {p: (o, after.get(p)) for p, o in before.items() if after.get(p, -1) < o}
        assert not lost, f"acknowledged commits lost on node {moved}: {lost}"
        acks.open.set()
        produce(bootstrap, BATCH, BATCH)
        wait_until(lambda: acks.since(t_fault) > 0, "a commit after the failover", timeout=90)
        # the failed node comes back (as a follower) while the group carries on
        if fault == "sigstop":
            os.kill(node.proc.pid, signal.SIGCONT)
        else:
            node.start()
        wait_until(lambda: ledger.count() >= 2 * BATCH, "every record consumed", timeout=120)
    finally:
        for m in members:
            m.stop.set()
        for m in members:
            m.join(60)
    assert not [e for m in members for e in m.errors], [m.errors for m in members]
    consumed = defaultdict(set)
    for (p, o) in ledger.consumed:
        consumed[p].add(o)
    for p in range(PARTITIONS):  # every acknowledged record, with no gap
        assert len(consumed[p]) >= 2 * BATCH // PARTITIONS, (p, len(consumed[p]))
        assert consumed[p] == set(range(max(consumed[p]) + 1)), f"partition {p} has a gap"
    ledger.check_no_partition_owned_twice()
    final = wait_until(lambda: committed(cluster, survivor, group), "final OffsetFetch")
    highest = acks.snapshot()
    assert all(final.get(p, -1) >= o for p, o in highest.items()), (final, highest)
