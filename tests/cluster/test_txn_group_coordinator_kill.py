"""A consume-transform-produce loop (aiokafka's transactional
producer) while the node coordinating its consumer group, not its
transaction coordinator, is SIGKILLed on a 3-node cluster: TxnOffsetCommit
finds the new group coordinator, and the output and committed offsets are
exactly the input, once.  (confluent-kafka runs this case only opt-in:
librdkafka #5511, see test_transactions_cluster.py.)"""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from kcoord.protocol.errors import Err
from tests.cluster.support import wait_until
from tests.cluster.test_transactions_cluster import (  # noqa: F401 (cluster: fixture)
    PARTITIONS, TOTAL, bootstrap, cluster, committed, create, group_led_elsewhere, read_all,
    txn_coordinator)

pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning")]

TXN_ID = "aio-copier"
DEADLINE_S = 120.0
CALL_TIMEOUT_S = 40.0


class AioCopier(threading.Thread):
    """aiokafka in its own event loop.  An error in a transaction aborts it
    (or, if the abort fails too, starts a new producer, whose
    InitProducerId fences the old) and rewinds the consumer to the
    committed offsets.  Every call is bounded: a hang is an error."""

    def __init__(self, bs: str, group: str) -> None:
        super().__init__(name="aio-copier", daemon=True)
        self.bs, self.group = bs, group
        self.done = threading.Event()
        self.txns = 0
        self.errors: list[str] = []
        self.failure: str | None = None
        self.stage = "starting"

    def run(self) -> None:
        import asyncio
        try:
            asyncio.run(self._run())
        except Exception as exc:  # reported by the test
            self.failure = repr(exc)

    async def _producer(self):
        from aiokafka import AIOKafkaProducer
        p = AIOKafkaProducer(bootstrap_servers=self.bs, transactional_id=TXN_ID,
                             enable_idempotence=True, transaction_timeout_ms=10000,
                             linger_ms=2, metadata_max_age_ms=1000)
        await p.start()
        return p

    async def _run(self) -> None:
        import asyncio

        from aiokafka import AIOKafkaConsumer
        from aiokafka.errors import KafkaError
        from aiokafka.structs import TopicPartition

        def bounded(aw):
            return asyncio.wait_for(aw, CALL_TIMEOUT_S)
        tps = [TopicPartition("in", p) for p in range(PARTITIONS)]
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bs, group_id=self.group,
                                    isolation_level="read_committed", enable_auto_commit=False,
                                    auto_offset_reset="earliest", metadata_max_age_ms=1000)
        await consumer.start()
        consumer.assign(tps)
        producer = await self._producer()
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            self.stage = "consume"
            batches = await consumer.getmany(timeout_ms=500, max_records=10)
            msgs = [m for records in batches.values() for m in records]
            if not msgs:
                self.stage = "committed?"
                done = sum([(await bounded(consumer.committed(tp))) or 0 for tp in tps])
                self.stage = f"idle at {done}"
                if done >= TOTAL:
                    break
                continue
            try:
                self.stage = "transaction"
                await bounded(producer.begin_transaction())
                sent = [await producer.send("out", value=m.value, partition=m.partition)
                        for m in msgs]
                offsets = {tp: await consumer.position(tp) for tp in tps}
                self.stage = "send offsets"
                await bounded(producer.send_offsets_to_transaction(offsets, self.group))
                self.stage = "commit"
                await bounded(asyncio.gather(*sent))
                await bounded(producer.commit_transaction())
                self.txns += 1
            except (KafkaError, asyncio.TimeoutError) as exc:
                self.errors.append(f"{self.stage}: {exc!r}")
                try:
                    await bounded(producer.abort_transaction())
                except (KafkaError, asyncio.TimeoutError) as again:
                    self.errors.append(f"abort: {again!r}")
                    await bounded(producer.stop())
                    producer = await bounded(self._producer())
                for tp in tps:
                    consumer.seek(tp, (await bounded(consumer.committed(tp))) or 0)
        await consumer.stop()
        await producer.stop()
        self.done.set()


def test_group_coordinator_sigkill_aiokafka(cluster):
    from kafka import KafkaProducer
    create(cluster, "in", PARTITIONS)
    create(cluster, "out", PARTITIONS)
    bs = bootstrap(cluster)
    inp = KafkaProducer(bootstrap_servers=bs, acks="all", linger_ms=5)
    for i in range(TOTAL):
        inp.send("in", value=b"v%05d" % i, partition=i % PARTITIONS)
    inp.flush(60)
    inp.close()
    txn_node, _ = wait_until(lambda: (found := txn_coordinator(cluster, 1, TXN_ID))[1]
                             == Err.NONE and found, "the copier's transaction coordinator")
    # a group coordinated by another node than the transactions
    group, victim = group_led_elsewhere(cluster, txn_node, "aio-copy")
    copier = AioCopier(bs, group)
    copier.start()
    wait_until(lambda: copier.txns >= 5 or copier.done.is_set() or copier.failure,
               "the copier's first commits")
    assert copier.failure is None, (copier.failure, copier.errors)
    txns_before = copier.txns
    os.kill(cluster.nodes[victim].proc.pid, signal.SIGKILL)
    cluster.nodes[victim].proc.wait(10)
    survivor = next(n for n in cluster.running())
    wait_until(lambda: (found := txn_coordinator(cluster, survivor, group, key_type=0))[1]
               == Err.NONE and found[0] != victim, "a new group coordinator")
    txns_moved = copier.txns  # from here on offsets can only go to the new coordinator
    copier.join(DEADLINE_S + 30)
    assert copier.failure is None, (copier.failure, copier.errors)
    assert copier.done.is_set(), ("the copier did not finish", copier.stage, copier.errors)
    assert copier.txns > txns_moved >= txns_before, "no transaction committed after the failover"

    survivors = bootstrap(cluster)
    out = read_all(survivors, "out", "read_committed", TOTAL)
    assert len(out) == len(set(out)) == TOTAL, (len(out), len(set(out)), copier.errors)
    assert sorted(out) == [b"v%05d" % i for i in range(TOTAL)]
    assert committed(survivors, group) == [TOTAL // PARTITIONS] * PARTITIONS
