"""The pipeline's commits table over transactional offset commits written by
a real `kcoord serve` (confluent-kafka send_offsets_to_transaction): each
TxnOffsetCommit row is labelled committed / aborted / open from the real
COMMIT and ABORT markers, and the offsets table applies only committed ones
(what OffsetFetch answers)."""
from __future__ import annotations

import pytest

from tests.clients.wire import WireClient, create_topic
from tests.support import ServerProcess

from .conftest import read_table

GROUP = "txn-pipe"


def _txn(producer, offset: int, commit: bool | None, group_metadata) -> None:
    from confluent_kafka import TopicPartition
    producer.begin_transaction()
    producer.produce("out", value=b"x%d" % offset)
    producer.send_offsets_to_transaction([TopicPartition("in", 0, offset)], group_metadata, 30)
    if commit is True:
        producer.commit_transaction(30)
    elif commit is False:
        producer.abort_transaction(30)
    else:
        producer.flush(30)  # left open: the server is stopped with it undecided


def test_commits_table_labels_real_transactional_commits(spark, tmp_path):
    pytest.importorskip("confluent_kafka")
    from confluent_kafka import Consumer, Producer, TopicPartition
    from kcoord.pipeline.jobs import run_pipeline
    data = tmp_path / "data"
    server = ServerProcess(data, settings={"offsets.topic.num.partitions": "2",
                                           "transaction.state.log.num.partitions": "2"}).start()
    try:
        with WireClient(server.port) as c:
            for name in ("in", "out"):
                assert create_topic(c, name)["error_code"] == 0
        # read_uncommitted: no RequireStable (with the open transaction a stable
        # fetch answers UNSTABLE_OFFSET_COMMIT until it is decided)
        consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": GROUP,
                             "isolation.level": "read_uncommitted"})
        meta = consumer.consumer_group_metadata()
        producer = Producer({"bootstrap.servers": server.bootstrap,
                             "transactional.id": "pipe-tx"})
        producer.init_transactions(30)
        _txn(producer, 5, True, meta)
        _txn(producer, 9, False, meta)
        _txn(producer, 12, None, meta)
        fetched = consumer.committed([TopicPartition("in", 0)], timeout=30)
        assert fetched[0].offset == 5  # only the committed transaction's offset
        consumer.close()
    finally:
        server.kill()
    out = tmp_path / "out"
    run_pipeline(spark, data, out, report=False, log=lambda *_: None)
    rows = [r for r in read_table(out / "commits") if r["group"] == GROUP]
    assert sorted((r["committed_offset"], r["txn"]) for r in rows) == [
        (5, "committed"), (9, "aborted"), (12, "open")]
    [offset] = [r for r in read_table(out / "offsets") if r["group"] == GROUP]
    assert offset["committed_offset"] == 5
