"""The application on aiokafka (asyncio)."""
from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from .logic import total


async def run(bootstrap: str, group: str, orders: str, totals: str, count: int,
              timeout: float = 60.0) -> int:
    consumer = AIOKafkaConsumer(orders, bootstrap_servers=bootstrap, group_id=group,
                                client_id="orders-aiokafka", auto_offset_reset="earliest",
                                enable_auto_commit=False,
                                # a loaded test machine may starve the heartbeats for seconds
                                session_timeout_ms=30000)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, client_id="orders-aiokafka")
    await consumer.start()
    await producer.start()
    done = 0
    try:
        async def loop() -> None:
            nonlocal done
            while done < count:
                batches = await consumer.getmany(timeout_ms=200)
                for tp, msgs in batches.items():
                    for msg in msgs:
                        await producer.send_and_wait(totals, total(msg.value), key=msg.key)
                        await consumer.commit({TopicPartition(tp.topic, tp.partition):
                                               msg.offset + 1})
                        done += 1
        try:
            await asyncio.wait_for(loop(), timeout)
        except asyncio.TimeoutError:
            pass
    finally:
        await consumer.stop()
        await producer.stop()
    return done
