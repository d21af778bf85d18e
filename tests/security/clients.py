"""Produce, consume in a group and commit with each real client over a
secured listener; each returns (values consumed, committed offset)."""
from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
from pathlib import Path

JS_DIR = Path(__file__).resolve().parents[1] / "clients" / "js"
N = 10


def values(tag: str) -> list[bytes]:
    return [f"{tag}-{i}".encode() for i in range(N)]


def kafka_python_roundtrip(bootstrap: str, topic: str, group: str, **kw):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **kw)
    for v in values(topic):
        producer.send(topic, v)
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             consumer_timeout_ms=15000, **kw)
    # the topic's partitions known before the first join: kafka-python 3.0.12
    # loses the second, metadata-started rebalance a join without them leads
    # to when poll()'s timeout ends mid JoinGroup/SyncGroup (examples/orders_app)
    consumer.partitions_for_topic(topic)
    got = []
    for msg in consumer:
        got.append(msg.value)
        if len(got) == N:
            break
    consumer.commit()
    committed = consumer.committed(TopicPartition(topic, 0))
    consumer.close()
    return got, committed


def confluent_roundtrip(bootstrap: str, topic: str, group: str, conf: dict):
    from confluent_kafka import Consumer, Producer, TopicPartition
    producer = Producer({"bootstrap.servers": bootstrap, **conf})
    for v in values(topic):
        producer.produce(topic, v)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False, **conf})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < N and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        got.append(msg.value())
    consumer.commit(asynchronous=False)
    committed = consumer.committed([TopicPartition(topic, 0)], timeout=30)[0].offset
    consumer.close()
    return got, committed


def aiokafka_roundtrip(bootstrap: str, topic: str, group: str, **kw):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition

    async def main():
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", **kw)
        await producer.start()
        try:
            for v in values(topic):
                await producer.send_and_wait(topic, v)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                    auto_offset_reset="earliest", enable_auto_commit=False, **kw)
        await consumer.start()
        try:
            got = []
            while len(got) < N:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 60)
                for msgs in batch.values():
                    got += [m.value for m in msgs]
            await consumer.commit()
            committed = await consumer.committed(TopicPartition(topic, 0))
        finally:
            await consumer.stop()
        return got, committed
    return asyncio.run(asyncio.wait_for(main(), 120))


def kafkajs_roundtrip(broker: str, topic: str, group: str, ssl: dict | None,
                      sasl: dict | None, tmp: Path):
    if shutil.which("node") is None:
        import pytest
        pytest.skip("node is not installed")
    spec = tmp / f"{topic}.json"
    spec.write_text(json.dumps({"broker": broker, "topic": topic, "group": group, "n": N,
                                "ssl": ssl, "sasl": sasl}))
    proc = subprocess.run(["node", str(JS_DIR / "secure_group.js"), str(spec)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return [v.encode() for v in out["values"]], out["committed"]
