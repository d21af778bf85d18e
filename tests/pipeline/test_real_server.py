"""A log written by a real `kcoord serve` (kafka-python committing) read back by the pipeline."""
from __future__ import annotations

import pytest

from tests.support import ServerProcess

from .conftest import read_table

TOPICS = {"orders": 4, "audit": 2}


def _admin(server):
    from kafka import KafkaAdminClient
    return KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=15000)


def _workload(server) -> dict:
    """Topics with records, five groups committing, one offset deleted, one group deleted.
    -> what OffsetFetch returns for each group at the end."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic
    from kafka.structs import OffsetAndMetadata

    admin = _admin(server)
    try:
        admin.create_topics([NewTopic(t, n, 1) for t, n in TOPICS.items()])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, request_timeout_ms=15000)
    try:
        for t, n in TOPICS.items():
            for p in range(n):
                for i in range(20 + 7 * p):
                    producer.send(t, value=b"v%d" % i, partition=p)
        producer.flush(30)
    finally:
        producer.close()

    groups = [f"real-{i}" for i in range(5)]
    for gi, group in enumerate(groups):
        consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id=group,
                                 enable_auto_commit=False, request_timeout_ms=15000)
        tps = [TopicPartition(t, p) for t, n in TOPICS.items() for p in range(n)
               if (p + gi) % 2 == 0 or t == "orders"]
        consumer.assign(tps)
        try:
            for round_ in range(3):  # later commits win
                consumer.commit({tp: OffsetAndMetadata(1 + round_ * 3 + gi + tp.partition,
                                                       f"{group}-r{round_}" if round_ != 1 else "",
                                                       round_ if gi % 2 else -1)
                                 for tp in tps})
        finally:
            consumer.close()

    admin = _admin(server)
    try:
        errors = admin.delete_group_offsets("real-1", [TopicPartition("orders", 0)])
        assert all(e.__name__ == "NoError" for e in errors.values()), errors
        assert admin.delete_groups(["real-4"]) == {"real-4": "OK"}
        fetched = {}
        for group in groups:
            got = admin.list_group_offsets(group)[group]
            fetched[group] = {(tp.topic, tp.partition): (om.offset, om.metadata, om.leader_epoch)
                              for tp, om in got.items()}
    finally:
        admin.close()
    return fetched


def test_offsets_table_equals_offset_fetch(spark, tmp_path):
    pytest.importorskip("kafka")
    from kcoord.pipeline.jobs import log_end_observations, run_pipeline
    data = tmp_path / "data"
    server = ServerProcess(data, settings={"group.initial.rebalance.delay.ms": "0",
                                           "offsets.topic.num.partitions": "4"})
    server.start()
    try:
        fetched = _workload(server)
        # the log-end source over ListOffsets, against the running server
        live = log_end_observations(spark.read.format("kcoord_log_ends")
                                    .option("bootstrap", server.bootstrap).load())
        # the whole job with live log ends (no history: lag against the current end)
        live_out = tmp_path / "live-out"
        run_pipeline(spark, data, live_out, bootstrap=server.bootstrap, report=False,
                     log=lambda *_: None)
    finally:
        server.stop()
    assert server.proc.returncode == 0, server.log_text()
    assert {tp: obs[-1][0] for tp, obs in live.items()} == {
        (t, p): 20 + 7 * p for t, n in TOPICS.items() for p in range(n)}

    out = tmp_path / "out"
    summary = run_pipeline(spark, data, out, report=False, log=lambda *_: None)
    assert summary["bad_input_total"] == 0
    assert summary["tombstones"] > 0
    got: dict = {}
    for r in read_table(out / "offsets"):
        got.setdefault(r["group"], {})[(r["topic"], r["partition"])] = (
            r["committed_offset"], r["metadata"], r["leader_epoch"])
    want = {g: v for g, v in fetched.items() if v}
    assert got == want
    assert "real-4" not in got and ("orders", 0) not in got["real-1"]

    # lag against the data dir's log ends equals lag against what ListOffsets said
    for r in read_table(out / "lag"):
        end = 20 + 7 * r["partition"]
        assert (r["log_end_offset"], r["lag"]) == (end, end - r["committed_offset"])
    statuses = {r["group"]: r["status"] for r in read_table(out / "status")
                if r["scope"] == "group"}
    assert set(statuses) == set(want)
    key = lambda r: (r["group"], r["topic"], r["partition"])  # noqa: E731
    assert {key(r): (r["committed_offset"], r["log_end_offset"], r["lag"])
            for r in read_table(live_out / "lag")} == \
        {key(r): (r["committed_offset"], r["log_end_offset"], r["lag"])
         for r in read_table(out / "lag")}
