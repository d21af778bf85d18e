"""Burrow's /lag on a live server agrees with the Spark pipeline's status
table over the same log, evaluated at the same time.

Four groups on one 2-partition topic, each built to land on a Burrow status
with margin (so the few milliseconds between the HTTP request and the
pipeline's as-of time cannot change an answer): caught up (OK), one commit
behind the log end (STOP: ERR), commits falling further behind one second
apart (WARN), and one partition caught up beside one stopped (ERR with one
OK partition).  Kept small: one Spark run over a few hundred records."""
from __future__ import annotations

import time

import pytest

from tests.pipeline.conftest import read_table, spark  # noqa: F401  (the Spark fixture)

from .support import get_json, http_port, http_server

pytestmark = pytest.mark.clients

TOPIC = "bt"


def _workload(server) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic
    from kafka.structs import OffsetAndMetadata

    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=15000)
    admin.create_topics([NewTopic(TOPIC, 2, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, linger_ms=0)
    old = int(time.time() * 1000) - 120_000

    def produce(n: int, ts: int | None = None) -> None:
        for p in (0, 1):
            for i in range(n):
                producer.send(TOPIC, value=b"r", partition=p,
                              timestamp_ms=None if ts is None else ts + i).get(30)

    consumers = {}

    def commit(group: str, offsets: dict[int, int]) -> None:
        c = consumers.get(group)
        if c is None:
            c = consumers[group] = KafkaConsumer(bootstrap_servers=server.bootstrap,
                                                 group_id=group, enable_auto_commit=False)
            c.assign([TopicPartition(TOPIC, p) for p in (0, 1)])
        c.commit({TopicPartition(TOPIC, p): OffsetAndMetadata(o, "", -1)
                  for p, o in offsets.items()})

    try:
        produce(30, old)                       # 30 records per partition, two minutes old
        commit("caught-up", {0: 30, 1: 30})    # OK
        commit("stopped", {0: 10, 1: 12})      # one commit, lagging: STOP -> ERR
        commit("half", {0: 30, 1: 5})          # partition 0 OK, partition 1 STOP -> ERR
        # falling behind: each round the log grows by 10, the group commits 2 more
        for round_ in range(4):
            time.sleep(1.05)  # commits a second apart: the last one is recent (not STOP)
            produce(10)
            commit("falling", {0: 30 + 2 * round_, 1: 30 + 2 * round_})
    finally:
        producer.close()
        for c in consumers.values():
            c.close()


def test_burrow_lag_agrees_with_the_pipeline_status_table(spark, tmp_path):  # noqa: F811
    from kcoord.pipeline.jobs import run_pipeline
    data = tmp_path / "data"
    server = http_server(data, **{"offsets.topic.num.partitions": "4"})
    try:
        _workload(server)
        port = http_port(server)
        as_of = int(time.time() * 1000)
        burrow = {}
        for group in ("caught-up", "stopped", "half", "falling"):
            status, doc = get_json(port, f"/v3/kafka/local/consumer/{group}/lag")
            assert status == 200, doc
            burrow[group] = doc["status"]
    finally:
        server.stop()
    assert {g: s["status"] for g, s in burrow.items()} == {
        "caught-up": "OK", "stopped": "ERR", "half": "ERR", "falling": "WARN"}

    out = tmp_path / "out"
    run_pipeline(spark, data, out, as_of=as_of, report=False, log=lambda *_: None)
    rows = read_table(out / "status")
    groups = {r["group"]: r for r in rows if r["scope"] == "group"}
    parts = {(r["group"], r["topic"], r["partition"]): r for r in rows
             if r["scope"] == "partition"}
    assert set(groups) == set(burrow)
    for group, st in burrow.items():
        assert groups[group]["status"] == st["status"], group
        assert groups[group]["complete"] == pytest.approx(st["complete"]), group
        assert len(st["partitions"]) == 2
        for p in st["partitions"]:
            row = parts[(group, p["topic"], p["partition"])]
            assert (row["status"], row["current_lag"]) == (p["status"], p["current_lag"]), \
                (group, p["partition"])
            assert row["complete"] == pytest.approx(p["complete"])
            assert (row["start_offset"], row["end_offset"]) == (p["start"]["offset"],
                                                                p["end"]["offset"])
    by = {(g, p["partition"]): p["status"] for g, st in burrow.items() for p in st["partitions"]}
    assert by[("half", 0)] == "OK" and by[("half", 1)] == "STOP"
    assert by[("stopped", 0)] == "STOP"
