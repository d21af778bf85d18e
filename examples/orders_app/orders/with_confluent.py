"""The application on confluent-kafka (librdkafka)."""
from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from .logic import total

# commit errors that pass: the coordinator is moving or loading
TRY_AGAIN = {KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.NOT_COORDINATOR,
             KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.REQUEST_TIMED_OUT}


def run(bootstrap: str, group: str, orders: str, totals: str, count: int,
        timeout: float = 60.0, group_protocol: str = "classic") -> int:
    """Process `count` orders (or what comes in `timeout` s); -> how many."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "client.id": "orders-confluent", "group.protocol": group_protocol,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         **({"session.timeout.ms": 30000} if group_protocol == "classic" else {})})
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "orders-confluent",
                         "enable.idempotence": True})
    done = 0
    deadline = time.monotonic() + timeout
    try:
        consumer.subscribe([orders])
        while done < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            producer.produce(totals, total(msg.value()), key=msg.key())
            if producer.flush(30):
                raise RuntimeError("a total was not acknowledged")
            _commit(consumer, msg, deadline)
            done += 1
    finally:
        consumer.close()
    return done


def _commit(consumer, msg, deadline: float) -> None:
    """Commit past msg; a retriable error (a coordinator moving) is tried again."""
    while True:
        try:
            consumer.commit(message=msg, asynchronous=False)
            return
        except KafkaException as exc:
            error = exc.args[0]
            if not (error.retriable() or error.code() in TRY_AGAIN) \
                    or time.monotonic() > deadline:
                raise
            time.sleep(0.1)
