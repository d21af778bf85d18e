"""Issue 2 acceptance: real Kafka clients bootstrap against `kcoord serve`.

Every client connects to one server of this module (`module_server`: own
port, own data dir; started once, as its tests only read), negotiates versions with ApiVersions (kafka-python opens with v4,
which kcoord answers per KIP-511) and reads cluster and topic metadata
without error.  No client is pinned to an api_version.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.clients.wire import WireClient, create_topic

pytestmark = [pytest.mark.clients, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

JS_DIR = Path(__file__).parent / "js"
TOPIC, PARTITIONS = "bootstrap-topic", 3


@pytest.fixture(scope="module")
def server_with_topic(module_server):
    """A server holding one user topic, created over the wire, so metadata is not trivial."""
    with WireClient(module_server.port) as client:
        assert create_topic(client, TOPIC, PARTITIONS)["error_code"] == 0
    return module_server


def test_kafka_python_admin(server_with_topic):
    from kafka.admin import KafkaAdminClient
    server = server_with_topic
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=30000)
    try:
        assert TOPIC in admin.list_topics()
        cluster = admin.describe_cluster()
        assert cluster["controller_id"] == 0
        assert cluster["cluster_id"]
        [broker] = cluster["brokers"]
        assert (broker["host"], broker["port"]) == ("127.0.0.1", server.port)
        [described] = admin.describe_topics([TOPIC])
        assert described["error_code"] == 0
        assert sorted(p["partition_index"] for p in described["partitions"]) == list(range(PARTITIONS))
        assert all(p["leader_id"] == 0 for p in described["partitions"])
    finally:
        admin.close()


def test_kafka_python_negotiates_versions(module_server):
    """kafka-python opens with ApiVersions v4 and reads kcoord's advertised ranges."""
    from kafka.admin import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=module_server.bootstrap, request_timeout_ms=30000)
    try:
        versions = {int(k): tuple(v) for k, v in admin.api_versions().items()}
    finally:
        admin.close()
    assert versions[18] == (0, 4)  # ApiVersions
    assert versions[3] == (0, 12)  # Metadata
    assert versions[0][1] >= 9 and versions[1][1] >= 12  # flexible Produce and Fetch


def test_confluent_admin_list_topics(server_with_topic):
    from confluent_kafka.admin import AdminClient
    server = server_with_topic
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    md = admin.list_topics(timeout=30)
    assert md.cluster_id
    assert md.controller_id == 0
    assert [(b.id, b.host, b.port) for b in md.brokers.values()] == [(0, "127.0.0.1", server.port)]
    topic = md.topics[TOPIC]
    assert topic.error is None
    assert sorted(topic.partitions) == list(range(PARTITIONS))
    assert all(p.leader == 0 and p.error is None for p in topic.partitions.values())
    # a single-topic request too (Metadata with a topic list, not "all topics")
    one = admin.list_topics(topic=TOPIC, timeout=30)
    assert sorted(one.topics[TOPIC].partitions) == list(range(PARTITIONS))


def test_aiokafka_client_metadata(server_with_topic):
    from aiokafka import AIOKafkaProducer
    from aiokafka.client import AIOKafkaClient
    server = server_with_topic

    async def main():
        client = AIOKafkaClient(bootstrap_servers=server.bootstrap, request_timeout_ms=30000)
        await client.bootstrap()
        try:
            md = await client.fetch_all_metadata()
            brokers = [(b.nodeId, b.host, b.port) for b in md.brokers()]
            partitions = md.partitions_for_topic(TOPIC)
        finally:
            await client.close()
        producer = AIOKafkaProducer(bootstrap_servers=server.bootstrap, request_timeout_ms=30000)
        await producer.start()
        try:
            producer_partitions = await producer.partitions_for(TOPIC)
        finally:
            await producer.stop()
        return brokers, partitions, producer_partitions

    brokers, partitions, producer_partitions = asyncio.run(
        asyncio.wait_for(main(), 120))
    assert brokers == [(0, "127.0.0.1", server.port)]
    assert partitions == set(range(PARTITIONS))
    assert producer_partitions == set(range(PARTITIONS))


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_kafkajs_admin(server_with_topic):
    server = server_with_topic
    assert (JS_DIR / "node_modules" / "kafkajs").is_dir(), "run `make js` first"
    proc = subprocess.run(["node", str(JS_DIR / "bootstrap.js"), server.bootstrap],
                          cwd=JS_DIR, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "KAFKAJS_NO_PARTITIONER_WARNING": "1"})
    assert proc.returncode == 0, f"node failed:\n{proc.stderr}\n{server.log_text()}"
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["cluster"]["brokers"] == [{"nodeId": 0, "host": "127.0.0.1", "port": server.port}]
    assert out["cluster"]["controller"] == 0
    assert out["cluster"]["clusterId"]
    topics = {t["name"]: t["partitions"] for t in out["topics"]}
    assert sorted(topics[TOPIC]) == list(range(PARTITIONS))
