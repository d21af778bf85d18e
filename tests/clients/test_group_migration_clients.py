"""Classic <-> consumer group migration with real confluent-kafka consumers.

Two classic consumers (group.protocol=classic, range or cooperative-sticky)
share a topic; a consumer with group.protocol=consumer joins: the group
becomes a KIP-848 consumer group (online upgrade) with the classic consumers
inside it; then the consumer-protocol member leaves and the group goes back
to a classic group (online downgrade) whose members carry on.  Throughout:
every record is consumed, no partition is owned by two consumers at once
(from the rebalance callbacks, in time order), and the committed offsets end
at the log end.  Every wait polls a condition under a deadline.
"""
from __future__ import annotations

import threading
from collections import defaultdict

import pytest

from tests.clients import group_workers
from tests.clients.group_workers import Ledger, Worker
from tests.support import ServerProcess

pytestmark = pytest.mark.clients

PARTITIONS = 6
BATCH = 1200
DEADLINE_S = 60.0


def wait_for(condition, what: str, timeout: float = DEADLINE_S, interval: float = 0.05):
    return group_workers.wait_for(condition, what, timeout, interval)


def confluent_worker(name: str, bootstrap: str, group: str, topic: str, ledger: Ledger,
                     protocol: str, strategy: str | None = None) -> Worker:
    config = {"group.protocol": protocol}
    if protocol == "classic":
        config.update({"partition.assignment.strategy": strategy,
                       "session.timeout.ms": 10000, "heartbeat.interval.ms": 300})
    return Worker(name, bootstrap, group, topic, ledger, config)


def produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    group_workers.produce(bootstrap, topic, start, count, PARTITIONS)


def group_type(admin, group: str):
    listing = admin.list_consumer_groups(request_timeout=10).result(15)
    for g in listing.valid:
        if g.group_id == group:
            return g.type
    return None


def check_the_end(admin, group: str, workers, ledger: Ledger, records: int) -> None:
    """Every worker (already told to stop) has stopped without errors or lost
    partitions; records 0..records-1 were each consumed, no partition was
    owned twice, and the committed offsets are the log ends."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    for w in workers:
        w.join(DEADLINE_S)
        assert not w.is_alive()
    assert [e for w in workers for e in w.errors] == []
    assert [lost for w in workers for lost in w.lost] == []
    per_partition = defaultdict(int)
    for i in range(records):
        per_partition[i % PARTITIONS] += 1
    assert set(ledger.consumed) == {(p, o) for p, n in per_partition.items() for o in range(n)}
    ledger.check_no_partition_owned_twice()
    [future] = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values()
    committed = {tp.partition: tp.offset for tp in future.result(30).topic_partitions}
    assert committed == dict(per_partition)


@pytest.fixture
def migration_server(tmp_path):
    settings = {"group.initial.rebalance.delay.ms": "0",
                "group.consumer.min.heartbeat.interval.ms": "500",
                "group.consumer.heartbeat.interval.ms": "500"}
    with ServerProcess(tmp_path / "data", settings) as srv:
        yield srv


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_classic_group_upgrades_and_downgrades(migration_server, strategy):
    from confluent_kafka import ConsumerGroupType
    from confluent_kafka.admin import AdminClient, NewTopic

    server = migration_server
    topic, group = f"mig-{strategy}", f"mig-group-{strategy}"
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for f in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        f.result(30)
    ledger = Ledger()
    workers: list[Worker] = []

    def start(name: str, protocol: str) -> Worker:
        w = confluent_worker(name, server.bootstrap, group, topic, ledger, protocol, strategy)
        workers.append(w)
        w.start()
        w.ready.wait(30)
        return w

    def owners(*names: str):
        """Every partition owned, by exactly these consumers, each owning some."""
        with ledger.lock:
            sets = [set(ledger.owned[n]) for n in names]
            others = [p for w in workers if w.name not in names for p in ledger.owned[w.name]]
        return (all(sets) and set().union(*sets) == set(range(PARTITIONS))
                and sum(map(len, sets)) == PARTITIONS and not others)

    # two classic consumers
    start("classic-0", "classic")
    start("classic-1", "classic")
    wait_for(lambda: owners("classic-0", "classic-1"), "the classic consumers to share the topic")
    assert group_type(admin, group) == ConsumerGroupType.CLASSIC
    produce(server.bootstrap, topic, 0, BATCH)
    wait_for(lambda: ledger.count() >= BATCH, "the first batch")

    # a KIP-848 consumer joins: online upgrade
    start("kip848", "consumer")
    wait_for(lambda: group_type(admin, group) == ConsumerGroupType.CONSUMER,
             "the group to become a consumer group")
    wait_for(lambda: owners("classic-0", "classic-1", "kip848"),
             "the three consumers to share the topic")
    produce(server.bootstrap, topic, BATCH, BATCH)
    wait_for(lambda: ledger.count() >= 2 * BATCH, "the second batch")

    # the KIP-848 consumer leaves: online downgrade, the classic consumers carry on
    kip848 = workers[-1]
    kip848.stop.set()
    kip848.join(DEADLINE_S)
    assert not kip848.is_alive()
    wait_for(lambda: group_type(admin, group) == ConsumerGroupType.CLASSIC,
             "the group to become a classic group again")
    wait_for(lambda: owners("classic-0", "classic-1"), "the classic consumers to take over")
    produce(server.bootstrap, topic, 2 * BATCH, BATCH)
    wait_for(lambda: ledger.count() >= 3 * BATCH, "the third batch")

    for w in workers:
        w.stop.set()
    check_the_end(admin, group, workers, ledger, 3 * BATCH)
    log = "\n".join(server.log_lines)
    assert "upgraded from classic to consumer group" in log
    assert "downgraded from consumer to classic group" in log


class KafkaPythonWorker(threading.Thread):
    """A kafka-python classic consumer (eager range) in a thread, feeding the same ledger."""

    def __init__(self, name: str, bootstrap: str, group: str, topic: str, ledger: Ledger) -> None:
        super().__init__(name=name, daemon=True)
        self.ledger, self.topic = ledger, topic
        self.bootstrap, self.group = bootstrap, group
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.errors: list[str] = []
        self.lost: list[list[int]] = []
        self.positions: dict[int, int] = {}

    def run(self) -> None:
        from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition
        from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener
        from kafka.coordinator.assignors.range import RangePartitionAssignor

        consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=self.group, client_id=self.name,
            enable_auto_commit=False, auto_offset_reset="earliest", session_timeout_ms=10000,
            heartbeat_interval_ms=300, partition_assignment_strategy=[RangePartitionAssignor],
            fetch_max_wait_ms=100)
        worker = self

        def offsets_of(parts) -> dict:
            return {TopicPartition(worker.topic, p): OffsetAndMetadata(worker.positions[p], "", -1)
                    for p in parts if p in worker.positions}

        # kafka-python 3 runs listeners on its IO thread: only the async commit may be used
        class Listener(AsyncConsumerRebalanceListener):
            async def on_partitions_revoked(self, revoked):
                ps = sorted(tp.partition for tp in revoked)
                if offsets := offsets_of(ps):
                    try:
                        await consumer.commit_async(offsets)
                    except Exception as exc:  # recorded; the test fails on it
                        worker.errors.append(f"commit on revoke: {exc!r}")
                for p in ps:
                    worker.positions.pop(p, None)
                worker.ledger.event(worker.name, "revoke", ps)

            async def on_partitions_assigned(self, assigned):
                worker.ledger.event(worker.name, "assign", [tp.partition for tp in assigned])

            async def on_partitions_lost(self, lost):
                ps = sorted(tp.partition for tp in lost)
                worker.lost.append(ps)
                for p in ps:
                    worker.positions.pop(p, None)
                worker.ledger.event(worker.name, "lost", ps)

        # the topic's partitions known before the first join: kafka-python 3.0.12
        # loses the second, metadata-started rebalance a join without them leads
        # to when poll()'s timeout ends mid JoinGroup/SyncGroup (examples/orders_app)
        consumer.partitions_for_topic(self.topic)
        consumer.subscribe(topics=[self.topic], listener=Listener())
        self.ready.set()
        try:
            while not self.stop.is_set():
                batch = consumer.poll(timeout_ms=1000)
                for tp, msgs in batch.items():
                    for m in msgs:
                        self.ledger.consume(self.name, tp.partition, m.offset)
                    self.positions[tp.partition] = msgs[-1].offset + 1
                if batch:
                    consumer.commit(offsets_of([tp.partition for tp in batch]))
            if offsets := offsets_of(list(self.positions)):
                consumer.commit(offsets)
            self.ledger.event(self.name, "revoke",
                              sorted(tp.partition for tp in consumer.assignment()))
        except Exception as exc:
            self.errors.append(repr(exc))
        finally:
            consumer.close()


def test_kafka_python_classic_members_in_a_consumer_group(migration_server):
    """kafka-python classic consumers join a consumer group a KIP-848 consumer
    started; when it leaves, the group is classic again and they carry on."""
    from confluent_kafka import ConsumerGroupType
    from confluent_kafka.admin import AdminClient, NewTopic

    server = migration_server
    topic, group = "mig-kafka-python", "mig-group-kafka-python"
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for f in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        f.result(30)
    ledger = Ledger()
    kip848 = confluent_worker("kip848", server.bootstrap, group, topic, ledger, "consumer")
    kip848.start()
    kip848.ready.wait(30)
    wait_for(lambda: len(ledger.owned["kip848"]) == PARTITIONS, "the KIP-848 consumer's partitions")
    assert group_type(admin, group) == ConsumerGroupType.CONSUMER
    produce(server.bootstrap, topic, 0, BATCH)

    classics = [KafkaPythonWorker(f"kp-{i}", server.bootstrap, group, topic, ledger)
                for i in range(2)]
    for w in classics:
        w.start()
        w.ready.wait(30)
    workers = [kip848, *classics]

    def shared(*names):
        with ledger.lock:
            sets = [set(ledger.owned[n]) for n in names]
        return all(sets) and set().union(*sets) == set(range(PARTITIONS)) \
            and sum(map(len, sets)) == PARTITIONS

    wait_for(lambda: shared("kip848", "kp-0", "kp-1"), "three consumers to share the topic")
    assert group_type(admin, group) == ConsumerGroupType.CONSUMER
    produce(server.bootstrap, topic, BATCH, BATCH)
    wait_for(lambda: ledger.count() >= 2 * BATCH, "two batches")

    kip848.stop.set()
    kip848.join(DEADLINE_S)
    wait_for(lambda: group_type(admin, group) == ConsumerGroupType.CLASSIC,
             "the group to become a classic group")
    wait_for(lambda: shared("kp-0", "kp-1") and not ledger.owned["kip848"],
             "the kafka-python consumers to take over")
    produce(server.bootstrap, topic, 2 * BATCH, BATCH)
    wait_for(lambda: ledger.count() >= 3 * BATCH, "the third batch")
    for w in classics:
        w.stop.set()
    check_the_end(admin, group, workers, ledger, 3 * BATCH)
