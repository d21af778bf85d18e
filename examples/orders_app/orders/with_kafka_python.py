"""The application on kafka-python."""
from __future__ import annotations

import time

from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition

from .logic import total


def run(bootstrap: str, group: str, orders: str, totals: str, count: int,
        timeout: float = 60.0) -> int:
    consumer = KafkaConsumer(orders, bootstrap_servers=bootstrap, group_id=group,
                             client_id="orders-kafka-python", auto_offset_reset="earliest",
                             enable_auto_commit=False,
                             # a loaded test machine may starve the heartbeats for seconds
                             session_timeout_ms=30000)
    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id="orders-kafka-python")
    # The topic's partitions known before the first poll joins the group.
    # Otherwise the first join assigns nothing (no metadata yet), the metadata
    # that arrives next starts a second rebalance, and kafka-python 3.0.12
    # loses that one if poll()'s timeout ends while its JoinGroup/SyncGroup
    # is in flight: the leader's assignment already made need_rejoin() false,
    # so no later poll() awaits the join's end, and the consumer stays
    # without partitions or heartbeats until its session expires.
    consumer.partitions_for_topic(orders)
    done = 0
    deadline = time.monotonic() + timeout
    try:
        while done < count and time.monotonic() < deadline:
            for tp, msgs in consumer.poll(timeout_ms=200).items():
                for msg in msgs:
                    producer.send(totals, total(msg.value), key=msg.key).get(30)
                    consumer.commit({TopicPartition(tp.topic, tp.partition):
                                     OffsetAndMetadata(msg.offset + 1, "", -1)})
                    done += 1
    finally:
        consumer.close()
        producer.close()
    return done
