"""The share-group table against a real `kcoord serve`: a confluent-kafka
ShareConsumer accepts records and releases a poison record until it is
archived at the delivery-count limit; more records wait unconsumed.  The
pipeline's share_groups table, over the wire and from the data dir, agrees
with DescribeShareGroupOffsets (start offset and lag), counts the records
in their states, and flags the poison record."""
from __future__ import annotations

import pytest

from tests.support import ServerProcess

TOPIC, GROUP, LIMIT = "share-pipe", "share-pipe-g", 5
DESCRIBE_OFFSETS = 90
DEADLINE_S = 180.0    # generous: CI's two cores are shared


def _describe(port: int) -> dict[int, tuple[int, int]]:
    """{partition: (start offset, lag)} from DescribeShareGroupOffsets v1."""
    from tests.clients.wire import WireClient
    with WireClient(port) as c:
        [g] = c.request(DESCRIBE_OFFSETS, 1, {"groups": [
            {"group_id": GROUP, "topics": [{"topic_name": TOPIC, "partitions": [0, 1]}]}]})[
            "groups"]
    assert g["error_code"] == 0, g
    return {p["partition_index"]: (p["start_offset"], p["lag"]) for p in g["topics"][0]["partitions"]
            if p["error_code"] == 0}


def _consume(server) -> None:
    from confluent_kafka import AcknowledgeType as Ack
    from tests.clients.share_workers import Deliveries, ShareWorker, produce, wait_for
    from tests.clients.test_share_consumers import create_topic, flowing

    create_topic(server.bootstrap, TOPIC, 2)
    log = Deliveries()
    worker = ShareWorker("pipe", server.bootstrap, GROUP, TOPIC, log,
                         lambda m: Ack.RELEASE if m.value().startswith(b"poison") else Ack.ACCEPT)
    worker.start()
    try:
        flowing(server.bootstrap, TOPIC, 2, log)
        produce(server.bootstrap, TOPIC, [b"poison", b"ok-1", b"ok-2", b"ok-3"], 2)
        produce(server.bootstrap, TOPIC, [b"end"], 1)     # after the poison (partition 0)
        wait_for(lambda: len(log.received[b"poison"]) >= LIMIT and log.received.get(b"end")
                 and len(log.confirmed) >= len(log.where), "the poison archived", DEADLINE_S)
    finally:
        worker.finish()
    # nobody consumes these: share lag 3 on partition 0, 2 on partition 1
    produce(server.bootstrap, TOPIC, [b"late-%d" % i for i in range(5)], 2)


def _share_records(spark, **where):
    """The share groups' __consumer_offsets records (types 10-15), from the
    data dir (path=) or over the wire (bootstrap=)."""
    reader = spark.read.format("kcoord_offsets").option("recordTypes", "10-15")
    if "bootstrap" in where:
        return reader.option("bootstrap", where["bootstrap"]).load()
    return reader.load(str(where["path"]))


def test_share_table_agrees_with_describe_share_group_offsets(spark, tmp_path):
    """The share step alone (the whole run's other jobs are covered elsewhere and
    would double this test's time): share_groups_table over the wire while the
    server runs, then from its data dir once it stopped."""
    pytest.importorskip("confluent_kafka")
    from kcoord.pipeline.jobs import data_dir_log_ends, server_observations, server_topic_names
    from kcoord.pipeline.logend import server_log_end_history, topic_id_names
    from kcoord.pipeline.report import share_section
    from kcoord.pipeline.share_jobs import share_groups_table
    from tests.clients.share_workers import wait_for

    data = tmp_path / "data"
    server = ServerProcess(data, settings={
        "group.share.min.heartbeat.interval.ms": "200",
        "group.share.heartbeat.interval.ms": "200",
        "offsets.topic.num.partitions": "2",
        "share.coordinator.state.topic.num.partitions": "2"})
    server.start()
    try:
        _consume(server)
        described = wait_for(lambda: (lambda d: d if {p: lag for p, (_, lag) in d.items()}
                                      == {0: 3, 1: 2} else None)(_describe(server.port)),
                             "the late records in the share lag", DEADLINE_S)
        live = server.bootstrap
        wire, wire_groups = share_groups_table(
            spark, _share_records(spark, bootstrap=live), server_topic_names(live),
            server_observations(live), bootstrap_server=live,
            history=lambda tps, times: server_log_end_history(live, tps, times))
    finally:
        server.stop()
    assert server.proc.returncode == 0, server.log_text()

    local, local_groups = share_groups_table(
        spark, _share_records(spark, path=data), topic_id_names(data), data_dir_log_ends(data),
        data_dir=data)
    for where, table, groups in (("wire", wire, wire_groups), ("data dir", local, local_groups)):
        rows = {r["partition"]: r for r in table if r["group"] == GROUP and r["topic"] == TOPIC}
        assert {p: (r["start_offset"], r["lag"]) for p, r in rows.items()} == described, where
        assert all(r["in_flight"] == 0 and r["group_in_offsets"] for r in rows.values()), where
        assert rows[0]["archived_at_limit"] == 1 and rows[1]["archived_at_limit"] == 0, where
        assert "ARCHIVED_AT_LIMIT" in rows[0]["problems"], where
        assert "ARCHIVED_AT_LIMIT" not in rows[1]["problems"], where
        assert groups == {GROUP}, where
    assert "ARCHIVED_AT_LIMIT" in share_section(local)
