"""Helpers of the application's tests: only the plugin's public fixtures."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the orders package

from orders.logic import order  # noqa: E402


def seed(bootstrap: str, topic: str, n: int, start: int = 0) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "client.id": "seed"})
    for i in range(start, start + n):
        p.produce(topic, order(i), key=str(i).encode())
    assert p.flush(30) == 0


def totals(kafka, topic: str) -> dict[int, float]:
    return {json.loads(r.value)["id"]: json.loads(r.value)["total"]
            for r in kafka.records(topic)}


def assert_all_committed(kafka, group: str, topic: str, n: int) -> None:
    """The group committed past all n records of the topic's two partitions."""
    assert sum(kafka.committed(group, topic, p) or 0 for p in (0, 1)) == n
    assert set(kafka.lag(group).values()) <= {0}


@pytest.fixture
def topics(kafka):
    """A fresh (orders, totals, group) for the test."""
    return kafka.create_topic(partitions=2), kafka.create_topic(), kafka.group_name()
