"""The pytest plugin as a user meets it: a project's tests run in a
subprocess with only the public fixtures."""
from __future__ import annotations

import textwrap

from tests.testing.support import run_pytest

PROJECT_TESTS = '''
import sys

import pytest
from confluent_kafka import Producer


def produce(bootstrap, topic, value):
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce(topic, value)
    assert p.flush(10) == 0


def test_records_reach_the_server(kafka):
    topic = kafka.create_topic(partitions=1)
    produce(kafka.bootstrap, topic, b"hello")
    assert [r.value for r in kafka.records(topic)] == [b"hello"]
    assert kafka.requests("Produce")[-1].error_code == 0


def test_names_are_unique(kafka):
    assert kafka.topic_name() != kafka.topic_name()
    assert kafka.group_name() != kafka.group_name()


@pytest.mark.kafka_config({"num.partitions": 3})
def test_marker_config(kafka):
    produce(kafka.bootstrap, "auto-created", b"x")
    # auto-created with the marker's partition count, the record in one of them
    ends = [kafka.end_offset("auto-created", p) for p in range(4)]
    assert ends[3] is None and sum(ends[:3]) == 1


def test_own_server(kafka_server_factory, kafka):
    mine = kafka_server_factory({"num.partitions": 2})
    assert mine.bootstrap != kafka.bootstrap
    produce(mine.bootstrap, "t", b"y")
    assert kafka.records("t") == []  # the shared server never saw it
    assert [r.value for r in mine.records("t")] == [b"y"]


def test_fails_on_purpose(kafka):
    produce(kafka.bootstrap, kafka.topic_name(), b"z")
    assert False, "deliberate"


def test_collection_was_light():
    # set by conftest at collection time
    assert not sys.modules.get("_kcoord_heavy_at_collection")
'''

CONFTEST = '''
import sys

HEAVY = ("kcoord.server.app", "kcoord.server.coordinator_runtime", "pyspark", "aetcd", "grpc")


def pytest_collection_finish(session):
    loaded = [m for m in HEAVY if m in sys.modules]
    if loaded:
        sys.modules["_kcoord_heavy_at_collection"] = loaded
'''


def test_plugin_fixtures_markers_and_failure_report(tmp_path):
    (tmp_path / "test_app.py").write_text(textwrap.dedent(PROJECT_TESTS))
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (tmp_path / "pytest.ini").write_text("[pytest]\nkafka_config =\n    num.partitions=1\n")
    run = run_pytest(tmp_path, "-rN")
    out = run.stdout + run.stderr
    assert "1 failed, 5 passed" in out, out
    # the failing test's report carries the server's log tail and its requests
    assert "kcoord log tail" in out and "kcoord requests" in out, out
    assert "Produce v" in out, out
