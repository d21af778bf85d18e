"""Lag on /metrics and Burrow's v3 API over a workload with known answers:
records produced with chosen timestamps, offsets committed by kafka-python.

kafka_consumergroup_lag_seconds is now minus the timestamp of the first
record not yet committed (read from the partition log), so it matches the
produced timestamps within a second; Burrow's routes answer with Burrow's
JSON shape, and /status applies Burrow's rules (a group that stopped
committing while lagging is STOP, hence ERR; a caught-up partition is OK
and left out of /status but not of /lag).
"""
from __future__ import annotations

import time

import pytest

from .support import get, get_json, http_port, http_server, scrape, value

pytestmark = pytest.mark.clients

RECORDS = 20
BASE_AGO_S = 300  # the first record is stamped 300 s ago, then one per second


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic
    from kafka.structs import OffsetAndMetadata

    server = http_server(tmp_path_factory.mktemp("lag") / "data")
    try:
        admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=15000)
        admin.create_topics([NewTopic("lagt", 2, 1)])
        admin.close()
        base = int(time.time() * 1000) - BASE_AGO_S * 1000
        stamps = [base + i * 1000 for i in range(RECORDS)]
        producer = KafkaProducer(bootstrap_servers=server.bootstrap, linger_ms=0)
        for p in (0, 1):
            for ts in stamps:
                producer.send("lagt", value=b"x", partition=p, timestamp_ms=ts).get(30)
        producer.close()
        consumers = []
        for group in ("lagger", "stopper"):  # lag test moves lagger on; stopper stays
            consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id=group,
                                     enable_auto_commit=False)
            consumer.assign([TopicPartition("lagt", 0), TopicPartition("lagt", 1)])
            consumer.commit({TopicPartition("lagt", 0): OffsetAndMetadata(5, "", -1),
                             TopicPartition("lagt", 1): OffsetAndMetadata(RECORDS, "", -1)})
            consumers.append(consumer)
        consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id="one-only",
                                 enable_auto_commit=False)
        consumer.assign([TopicPartition("lagt", 0)])
        consumer.commit({TopicPartition("lagt", 0): OffsetAndMetadata(3, "", -1)})
        consumers.append(consumer)
        yield server, http_port(server), stamps, consumers[0]
        for consumer in consumers:
            consumer.close()
    finally:
        server.stop()


def test_lag_and_exact_time_lag(workload):
    from kafka import TopicPartition
    from kafka.structs import OffsetAndMetadata
    server, port, stamps, consumer = workload
    before = time.time()
    samples = scrape(port)
    after = time.time()
    labels = {"consumergroup": "lagger", "topic": "lagt"}
    assert value(samples, "kafka_consumergroup_current_offset", partition=0, **labels) == 5
    assert value(samples, "kafka_consumergroup_lag", partition=0, **labels) == RECORDS - 5
    assert value(samples, "kafka_consumergroup_lag", partition=1, **labels) == 0
    assert value(samples, "kafka_consumergroup_lag_sum", **labels) == RECORDS - 5
    assert value(samples, "kafka_consumergroup_current_offset_sum", **labels) == 5 + RECORDS
    assert value(samples, "kafka_topic_partition_current_offset", topic="lagt", partition=0) == RECORDS
    assert value(samples, "kafka_topic_partition_oldest_offset", topic="lagt", partition=0) == 0
    assert value(samples, "kafka_topic_partitions", topic="lagt") == 2
    # kafka_exporter's -1 for a partition of the topic without a commit (group "one-only")
    one = {"consumergroup": "one-only", "topic": "lagt"}
    assert value(samples, "kafka_consumergroup_current_offset", partition=1, **one) == -1
    assert value(samples, "kafka_consumergroup_lag", partition=1, **one) == -1
    assert value(samples, "kafka_consumergroup_lag", partition=0, **one) == RECORDS - 3
    assert value(samples, "kafka_consumergroup_lag_sum", **one) == RECORDS - 3
    # the first record not yet committed on partition 0 is record 5
    seconds = value(samples, "kafka_consumergroup_lag_seconds", partition=0, **labels)
    assert before - stamps[5] / 1000 - 1 <= seconds <= after - stamps[5] / 1000 + 1, seconds
    assert value(samples, "kafka_consumergroup_lag_seconds", partition=1, **labels) == 0

    # the group moves on: the time lag follows its new position
    consumer.commit({TopicPartition("lagt", 0): OffsetAndMetadata(12, "", -1)})
    before = time.time()
    samples = scrape(port)
    after = time.time()
    seconds = value(samples, "kafka_consumergroup_lag_seconds", partition=0, **labels)
    assert before - stamps[12] / 1000 - 1 <= seconds <= after - stamps[12] / 1000 + 1, seconds
    assert value(samples, "kafka_consumergroup_lag", partition=0, **labels) == RECORDS - 12


def _check_envelope(doc: dict, path: str, error: bool) -> None:
    assert doc["error"] is error
    assert isinstance(doc["message"], str) and doc["message"]
    assert doc["request"]["url"] == path and doc["request"]["host"]


def _check_partition(p: dict) -> None:
    assert set(p) == {"topic", "partition", "owner", "client_id", "status", "start", "end",
                      "current_lag", "complete"}
    for end in ("start", "end"):
        assert set(p[end]) == {"offset", "timestamp", "observedAt", "lag"}


def test_burrow_routes(workload):
    server, port, stamps, consumer = workload
    status, doc = get_json(port, "/v3/kafka")
    assert status == 200 and doc["clusters"] == ["local"]
    _check_envelope(doc, "/v3/kafka", False)
    status, doc = get_json(port, "/v3/kafka/local")
    assert status == 200 and doc["module"]["servers"] == [server.bootstrap]
    status, doc = get_json(port, "/v3/kafka/local/consumer")
    assert status == 200 and {"lagger", "stopper"} <= set(doc["consumers"])
    status, doc = get_json(port, "/v3/kafka/local/topic")
    assert status == 200 and doc["topics"] == ["lagt"]
    status, doc = get_json(port, "/v3/kafka/local/topic/lagt")
    assert status == 200 and doc["offsets"] == [RECORDS, RECORDS]

    # /lag: every partition; partition 0 lags and stopped committing (one commit,
    # now later than it): STOP, so the group is ERR
    path = "/v3/kafka/local/consumer/stopper/lag"
    status, doc = get_json(port, path)
    _check_envelope(doc, path, False)
    assert status == 200 and doc["message"] == "consumer status returned"
    st = doc["status"]
    assert {k for k in st} == {"cluster", "group", "status", "complete", "partitions",
                               "partition_count", "maxlag", "totallag"}
    assert st["cluster"] == "local" and st["group"] == "stopper"
    by_partition = {p["partition"]: p for p in st["partitions"]}
    for p in st["partitions"]:
        _check_partition(p)
    committed0 = by_partition[0]["end"]["offset"]
    assert committed0 == 5 and by_partition[0]["start"]["offset"] == 5
    assert by_partition[0]["current_lag"] == RECORDS - 5
    assert by_partition[0]["status"] == "STOP"
    assert by_partition[1]["status"] == "OK" and by_partition[1]["current_lag"] == 0
    assert st["status"] == "ERR"
    assert st["totallag"] == RECORDS - committed0
    assert st["maxlag"]["partition"] == 0 and st["partition_count"] == 2

    # /status: only the partitions that are not OK
    path = "/v3/kafka/local/consumer/stopper/status"
    status, doc = get_json(port, path)
    assert status == 200
    assert [p["partition"] for p in doc["status"]["partitions"]] == [0]
    assert doc["status"]["status"] == "ERR"

    # stored offsets, and 404s as Burrow gives them
    status, doc = get_json(port, "/v3/kafka/local/consumer/stopper")
    assert status == 200 and doc["topics"]["lagt"][1]["offsets"][-1]["offset"] == RECORDS
    for path in ("/v3/kafka/local/consumer/nobody/status", "/v3/kafka/local/consumer/nobody/lag",
                 "/v3/kafka/other/consumer", "/v3/kafka/local/topic/nope"):
        status, doc = get_json(port, path)
        assert status == 404 and doc["error"] is True, path
    status, _, _ = get(port, "/nothing-here")
    assert status == 404


def test_status_json(workload):
    server, port, stamps, consumer = workload
    status, doc = get_json(port, "/status.json")
    assert status == 200
    lagger = [g for g in doc["groups"] if g["group"] == "lagger"]
    assert len(lagger) == 1 and lagger[0]["lag"] > 0 and lagger[0]["partitions"] == 2
    status, body, ctype = get(port, "/")
    assert status == 200 and ctype.startswith("text/html") and b"Recent rebalances" in body
