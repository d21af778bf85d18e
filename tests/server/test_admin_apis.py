"""DeleteRecords, DescribeLogDirs, DescribeCluster, DescribeClientQuotas,
ElectLeaders and DescribeTopicPartitions against one real `kcoord serve`,
with confluent-kafka's and kafka-python's AdminClients and at the wire
level (ADMIN_REFERENCE.md section 4 and 7.8, 7.12)."""
from __future__ import annotations

import time

import pytest

from kcoord.log.scan import segment_data_end
from kcoord.protocol.errors import Err
from kcoord.protocol.records import build_batch
from tests.clients.wire import WireClient, create_topic, fetch, list_offset, produce
from tests.support import ServerProcess

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

DELETE_RECORDS, LOG_DIRS, ELECT, QUOTAS, CLUSTER, DTP = 21, 35, 43, 48, 60, 75
ELECTION_NOT_NEEDED = 84


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc = ServerProcess(tmp_path_factory.mktemp("admin") / "data",
                         settings={"group.initial.rebalance.delay.ms": "0"})
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture
def wire(server):
    with WireClient(server.port) as client:
        yield client


def fill(wire, topic, partition, count):
    now = int(time.time() * 1000)
    for i in range(count):
        batch = build_batch([(b"k", b"v%d" % i, [], now)], base_timestamp=now)
        assert produce(wire, topic, partition, batch)["error_code"] == 0


def delete_records(wire, topic, offsets, version=2):
    resp = wire.request(DELETE_RECORDS, version, {"topics": [{"name": topic, "partitions": [
        {"partition_index": p, "offset": o} for p, o in offsets]}], "timeout_ms": 30000})
    [t] = resp["topics"]
    return t["partitions"]


# -------------------------------------------------------------- DeleteRecords
def test_delete_records_moves_the_log_start(wire, server):
    assert create_topic(wire, "dr", 2)["error_code"] == 0
    fill(wire, "dr", 0, 10)
    [p] = delete_records(wire, "dr", [(0, 4)])
    assert (p["error_code"], p["low_watermark"]) == (0, 4)
    # ListOffsets earliest returns it; a fetch below it is OFFSET_OUT_OF_RANGE with the bounds
    assert list_offset(wire, "dr", 0, -2)["offset"] == 4
    below = fetch(wire, "dr", 0, 3)
    assert below["error_code"] == Err.OFFSET_OUT_OF_RANGE
    assert (below["log_start_offset"], below["high_watermark"]) == (4, 10)
    assert fetch(wire, "dr", 0, 4)["error_code"] == 0
    # below the current start: a no-op success; -1: up to the high watermark; beyond: refused
    [p] = delete_records(wire, "dr", [(0, 2)])
    assert (p["error_code"], p["low_watermark"]) == (0, 4)
    [p, q] = delete_records(wire, "dr", [(0, 11), (1, -5)])
    assert p["error_code"] == q["error_code"] == Err.OFFSET_OUT_OF_RANGE
    assert p["low_watermark"] == -1
    [p] = delete_records(wire, "dr", [(0, -1)], version=0)
    assert (p["error_code"], p["low_watermark"]) == (0, 10)
    # unknown partition; a compact-only topic
    [p] = delete_records(wire, "dr", [(9, 0)])
    assert p["error_code"] == Err.UNKNOWN_TOPIC_OR_PARTITION
    assert create_topic(wire, "dr-compact", 1, {"cleanup.policy": "compact"})["error_code"] == 0
    [p] = delete_records(wire, "dr-compact", [(0, 0)])
    assert p["error_code"] == Err.POLICY_VIOLATION


def test_delete_records_confluent_and_durable(server):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic("dr-c", 1, 1)])["dr-c"].result(30)
    with WireClient(server.port) as wire:
        fill(wire, "dr-c", 0, 6)
    result = admin.delete_records([TopicPartition("dr-c", 0, 5)])
    [(tp, fut)] = list(result.items())
    assert fut.result(30).low_watermark == 5
    server.restart()
    with WireClient(server.port) as wire:
        assert list_offset(wire, "dr-c", 0, -2)["offset"] == 5
        assert fetch(wire, "dr-c", 0, 4)["error_code"] == Err.OFFSET_OUT_OF_RANGE


def test_delete_records_kafka_python_and_consumer_reset(server):
    """A consumer below the new start is reset by auto.offset.reset."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.admin import KafkaAdminClient
    with WireClient(server.port) as wire:
        assert create_topic(wire, "dr-k", 1)["error_code"] == 0
        fill(wire, "dr-k", 0, 8)
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=30000)
    try:
        admin.delete_records({TopicPartition("dr-k", 0): 6})
    finally:
        admin.close()
    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=10000)
    try:
        tp = TopicPartition("dr-k", 0)
        consumer.assign([tp])
        assert consumer.beginning_offsets([tp])[tp] == 6
        consumer.seek(tp, 2)
        seen = []
        deadline = time.monotonic() + 30
        while len(seen) < 2 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000).values():
                seen += [r.offset for r in records]
        assert seen[:2] == [6, 7]
    finally:
        consumer.close()


# ------------------------------------------------------------ DescribeLogDirs
def test_describe_log_dirs(wire, server):
    assert create_topic(wire, "ld", 3)["error_code"] == 0
    fill(wire, "ld", 1, 5)
    for version in (1, 3, 4):
        resp = wire.request(LOG_DIRS, version, {"topics": [
            {"topic": "ld", "partitions": [0, 1]}, {"topic": "dr", "partitions": [7]}]})
        [result] = resp["results"]
        assert result["error_code"] == 0
        assert result["log_dir"] == str(server.data_dir.resolve())
        # a topic with no matching partition is left out
        [topic] = result["topics"]
        sizes = {p["partition_index"]: p["partition_size"] for p in topic["partitions"]}
        assert set(sizes) == {0, 1}
        # the batches on disk (not the zeros preallocated after them)
        on_disk = sum(segment_data_end(f) for f in (server.data_dir / "ld-1").glob("*.log"))
        assert sizes[1] == on_disk > 0 and sizes[0] == 0
        if version >= 4:
            assert result["total_bytes"] > 0 and 0 <= result["usable_bytes"] <= result["total_bytes"]
    everything = wire.request(LOG_DIRS, 2, {"topics": None})["results"][0]["topics"]
    assert {"ld", "dr"} <= {t["name"] for t in everything}


def test_describe_log_dirs_kafka_python(server):
    from kafka.admin import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=30000)
    try:
        [broker] = admin.describe_log_dirs({"ld": [1]})
        [log_dir] = broker["log_dirs"]
        [topic] = log_dir["topics"]
        assert topic["name"] == "ld" and topic["partitions"][0]["partition_size"] > 0
    finally:
        admin.close()


# ------------------------------------------------------------ DescribeCluster
def test_describe_cluster(wire, server):
    for version in (0, 1, 2):
        resp = wire.request(CLUSTER, version, {"include_cluster_authorized_operations": True,
                                               "endpoint_type": 1})
        assert resp["error_code"] == 0 and resp["controller_id"] == 0
        assert resp["brokers"] == [{"broker_id": 0, "host": "127.0.0.1", "port": server.port,
                                    "rack": None, "is_fenced": False}]
        ops = resp["cluster_authorized_operations"]
        assert ops & (1 << 7) and ops & (1 << 8)  # kafka-ui's ACL editing needs ALTER
    resp = wire.request(CLUSTER, 1, {"include_cluster_authorized_operations": False,
                                     "endpoint_type": 2})
    assert resp["error_code"] == 114  # MISMATCHED_ENDPOINT_TYPE
    resp = wire.request(CLUSTER, 1, {"include_cluster_authorized_operations": False,
                                     "endpoint_type": 9})
    assert resp["error_code"] == 115  # UNSUPPORTED_ENDPOINT_TYPE
    plain = wire.request(CLUSTER, 0, {"include_cluster_authorized_operations": False})
    assert plain["cluster_authorized_operations"] == -(2**31)


def test_describe_cluster_clients(server):
    from confluent_kafka.admin import AdminClient
    from kafka.admin import KafkaAdminClient
    client = AdminClient({"bootstrap.servers": server.bootstrap})
    desc = client.describe_cluster(include_authorized_operations=True).result(30)
    assert desc.controller.id == 0 and [n.port for n in desc.nodes] == [server.port]
    # Kafka's random base64 UUID, kept in the data dir
    stored = (server.data_dir / "meta.properties").read_text()
    assert len(desc.cluster_id) == 22 and f"cluster.id={desc.cluster_id}\n" in stored
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=30000)
    try:
        cluster = admin.describe_cluster()
        assert cluster["controller_id"] == 0 and len(cluster["brokers"]) == 1
    finally:
        admin.close()


# ------------------------------------------------------- DescribeClientQuotas
def test_describe_client_quotas(wire):
    for version in (0, 1):
        resp = wire.request(QUOTAS, version, {"components": [
            {"entity_type": "user", "match_type": 2, "match": None}], "strict": False})
        assert resp["error_code"] == 0 and resp["entries"] == []
    for components in ([{"entity_type": "bogus", "match_type": 0, "match": "x"}],
                       [{"entity_type": "user", "match_type": 7, "match": None}],
                       [{"entity_type": "ip", "match_type": 2, "match": None},
                        {"entity_type": "user", "match_type": 2, "match": None}]):
        resp = wire.request(QUOTAS, 1, {"components": components, "strict": True})
        assert resp["error_code"] == Err.INVALID_REQUEST and resp["error_message"]


# --------------------------------------------------------------- ElectLeaders
def test_elect_leaders(wire, server):
    resp = wire.request(ELECT, 2, {"election_type": 0, "timeout_ms": 30000, "topic_partitions": [
        {"topic": "ld", "partitions": [0, 2]}, {"topic": "nope", "partitions": [0]}]})
    assert resp["error_code"] == 0
    by_topic = {r["topic"]: [p["error_code"] for p in r["partition_result"]]
                for r in resp["replica_election_results"]}
    assert by_topic == {"ld": [ELECTION_NOT_NEEDED] * 2, "nope": [Err.UNKNOWN_TOPIC_OR_PARTITION]}
    # null: every partition, and the not-needed entries are left out
    resp = wire.request(ELECT, 1, {"election_type": 0, "timeout_ms": 30000,
                                   "topic_partitions": None})
    assert resp["error_code"] == 0
    assert all(r["partition_result"] == [] for r in resp["replica_election_results"])
    from confluent_kafka import ElectionType, TopicPartition
    from confluent_kafka.admin import AdminClient
    client = AdminClient({"bootstrap.servers": server.bootstrap})
    result = client.elect_leaders(ElectionType.PREFERRED, [TopicPartition("ld", 0)]).result(30)
    [(tp, error)] = list(result.items())
    assert error is not None and error.code() == ELECTION_NOT_NEEDED
    from kafka.admin import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=30000)
    try:
        response = admin.elect_leaders(0, {"ld": [0, 1]})  # ELECTION_NOT_NEEDED is not raised
        [topic] = response.replica_election_results
        assert [p.error_code for p in topic.partition_result] == [ELECTION_NOT_NEEDED] * 2
    finally:
        admin.close()


# ------------------------------------------------- ListPartitionReassignments
def test_list_partition_reassignments(wire, server):
    for topics in (None, [{"name": "ld", "partition_indexes": [0]}]):
        resp = wire.request(46, 0, {"timeout_ms": 30000, "topics": topics})
        assert (resp["error_code"], resp["topics"]) == (0, [])
    from kafka.admin import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=30000)
    try:
        assert not admin.list_partition_reassignments()
    finally:
        admin.close()


# ---------------------------------------------------- DescribeTopicPartitions
def test_describe_topic_partitions_paging(wire):
    assert create_topic(wire, "dtp-a", 3)["error_code"] == 0
    assert create_topic(wire, "dtp-b", 2)["error_code"] == 0
    body = {"topics": [{"name": "dtp-b"}, {"name": "dtp-a"}, {"name": "dtp-none"}],
            "response_partition_limit": 2, "cursor": None}
    resp = wire.request(DTP, 0, body)
    assert [t["name"] for t in resp["topics"]] == ["dtp-a"]
    assert [p["partition_index"] for p in resp["topics"][0]["partitions"]] == [0, 1]
    assert resp["next_cursor"] == {"topic_name": "dtp-a", "partition_index": 2}
    seen = [("dtp-a", 0), ("dtp-a", 1)]
    errors = {}
    while resp["next_cursor"] is not None:
        resp = wire.request(DTP, 0, {**body, "cursor": resp["next_cursor"]})
        for t in resp["topics"]:
            if t["error_code"]:
                errors[t["name"]] = t["error_code"]
            seen += [(t["name"], p["partition_index"]) for p in t["partitions"]]
    assert seen == [("dtp-a", 0), ("dtp-a", 1), ("dtp-a", 2), ("dtp-b", 0), ("dtp-b", 1)]
    assert errors == {"dtp-none": Err.UNKNOWN_TOPIC_OR_PARTITION}
    p = wire.request(DTP, 0, {**body, "response_partition_limit": 10})["topics"][0]["partitions"][0]
    assert (p["leader_id"], p["replica_nodes"], p["isr_nodes"]) == (0, [0], [0])
    bad = wire.request(DTP, 0, {**body, "cursor": {"topic_name": "zzz", "partition_index": 0}})
    assert all(t["error_code"] == Err.INVALID_REQUEST for t in bad["topics"])


def test_describe_topic_partitions_kafka_python(server):
    from kafka.admin import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=30000)
    try:
        described = admin.describe_topic_partitions(["dtp-a"], response_partition_limit=2)
        [topic] = described["topics"]
        assert topic["name"] == "dtp-a" and len(topic["partitions"]) == 2
        assert described["next_cursor"]["partition_index"] == 2
    finally:
        admin.close()
