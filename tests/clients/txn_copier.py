"""A consume-transform-produce worker (confluent-kafka), run as its own
process so tests can SIGKILL it: reads `input` from its group's committed
offsets (read_committed), and per transaction copies up to 10 records to
`output` and commits the consumed offsets with send_offsets_to_transaction.
Exits 0 once its position reaches the end of the input.

    python -m tests.clients.txn_copier BOOTSTRAP INPUT OUTPUT GROUP TXN_ID PARTITIONS TOTAL
"""
from __future__ import annotations

import sys
import time

from confluent_kafka import OFFSET_STORED, Consumer, KafkaException, Producer, TopicPartition

DEADLINE_S = 240.0


def main(bootstrap: str, source: str, sink: str, group: str, txn_id: str, partitions: int,
         total: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                         "transaction.timeout.ms": 10000, "linger.ms": 2})
    producer.init_transactions(60)
    assignment = [TopicPartition(source, p, OFFSET_STORED) for p in range(partitions)]
    consumer.assign(assignment)
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        msgs = [m for m in consumer.consume(10, timeout=0.5) if not m.error()]
        if msgs:
            producer.begin_transaction()
            for m in msgs:
                producer.produce(sink, key=m.key(), value=m.value(), partition=m.partition())
            positions = consumer.position([TopicPartition(source, p) for p in range(partitions)])
            producer.send_offsets_to_transaction(
                [tp for tp in positions if tp.offset >= 0], consumer.consumer_group_metadata(), 60)
            producer.commit_transaction(60)
            continue
        # idle: done once the group's committed offsets cover the whole input
        committed = consumer.committed([TopicPartition(source, p) for p in range(partitions)],
                                       timeout=30)
        if sum(max(tp.offset, 0) for tp in committed) >= total:
            consumer.close()
            return 0
    return 2


if __name__ == "__main__":
    args = sys.argv[1:]
    try:
        sys.exit(main(*args[:5], int(args[5]), int(args[6])))
    except KafkaException as exc:
        print(f"copier failed: {exc}", file=sys.stderr)
        sys.exit(3)
