"""A share-group member in a process of its own, to be SIGKILLed while it
holds acquired records: it polls (explicit acknowledgement) until it has
some records, prints each as `R <partition> <offset> <delivery count>`,
then `HOLDING` and keeps them (no acknowledgement, no further poll) until
it is killed.

    python -m tests.clients.share_member BOOTSTRAP GROUP TOPIC
"""
from __future__ import annotations

import sys
import time

from confluent_kafka import ShareConsumer


def main() -> int:
    bootstrap, group, topic = sys.argv[1:4]
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([topic])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        got = [m for m in consumer.poll(0.2) if m.error() is None]
        if got:
            for m in got:
                print("R", m.partition(), m.offset(), m.delivery_count(), flush=True)
            print("HOLDING", flush=True)
            while True:  # hold the acquired records until SIGKILL
                time.sleep(1)
    return 1


if __name__ == "__main__":
    sys.exit(main())
