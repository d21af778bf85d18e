"""__consumer_offsets served as Kafka serves it: an internal topic in Metadata,
readable with Fetch and ListOffsets up to what is durable, not writable by Produce."""
from __future__ import annotations

import asyncio

import pytest

from kcoord.broker.catalogue import Catalogue
from kcoord.broker.data_handlers import DataPlane, below
from kcoord.log.fsync_batcher import FsyncBatcher
from kcoord.protocol.errors import Err
from kcoord.protocol.messages.coordinator_records import decode_record_key
from kcoord.protocol.records import build_batch, decode_all
from kcoord.server.config import Config
from tests.support import ServerProcess

OFFSETS = "__consumer_offsets"


def _batch(n: int, ts: int = 1000) -> bytes:
    return build_batch([(b"k%d" % i, b"v%d" % i, [], ts + i) for i in range(n)])


class _Ctx:
    api_version = 9  # Produce v9 / ListOffsets v9: what the handlers read of the context


def _fetch_req(topic: str, offset: int) -> dict:
    return {"max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "topics": [{"topic": topic, "partitions": [
                {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}]}]}


def test_internal_topic_shows_only_durable_records(tmp_path):
    cfg = Config(data_dir=tmp_path)
    catalogue = Catalogue(tmp_path, cfg.values)
    try:
        catalogue.create(OFFSETS, 1)
        catalogue.create("orders", 1)
        plane = DataPlane(catalogue, cfg, FsyncBatcher())
        for name in (OFFSETS, "orders"):
            plog = catalogue.partition(name, 0)
            plog.append(_batch(3))
            plog.flush()
            plog.append(_batch(2))  # appended, not yet fsynced
        resp, _, _ = plane._fetch_once(12, _fetch_req(OFFSETS, 0))
        part = resp["responses"][0]["partitions"][0]
        assert part["high_watermark"] == 3
        assert [r.offset for r in decode_all(part["records"])] == [0, 1, 2]
        resp, _, _ = plane._fetch_once(12, _fetch_req(OFFSETS, 3))
        assert resp["responses"][0]["partitions"][0]["records"] == b""
        # a user topic shows its whole log (acks=1 data is visible at once)
        resp, _, _ = plane._fetch_once(12, _fetch_req("orders", 0))
        part = resp["responses"][0]["partitions"][0]
        assert part["high_watermark"] == 5 and len(decode_all(part["records"])) == 5

        def latest(topic):
            r = plane.list_offsets(_Ctx(), {"topics": [{"name": topic, "partitions": [
                {"partition_index": 0, "timestamp": -1}]}]})
            return r["topics"][0]["partitions"][0]["offset"]
        assert latest(OFFSETS) == 3 and latest("orders") == 5
        catalogue.partition(OFFSETS, 0).flush()
        assert latest(OFFSETS) == 5
        resp, _, _ = plane._fetch_once(12, _fetch_req(OFFSETS, 3))
        assert [r.offset for r in decode_all(resp["responses"][0]["partitions"][0]["records"])] \
            == [3, 4]
        # truncation lowers what is durable
        catalogue.partition(OFFSETS, 0).truncate_to(3)
        assert latest(OFFSETS) == 3
    finally:
        catalogue.close()


def test_below_keeps_whole_batches_under_the_watermark():
    data = build_batch([(None, b"a", [], 1)] * 2, base_offset=0) + \
        build_batch([(None, b"b", [], 1)] * 3, base_offset=2)
    assert below(data, 5) == data
    assert len(decode_all(below(data, 2))) == 2
    assert below(data, 1) == b""


def test_produce_to_internal_topic_is_refused(tmp_path):
    cfg = Config(data_dir=tmp_path)
    catalogue = Catalogue(tmp_path, cfg.values)
    try:
        catalogue.create(OFFSETS, 2)
        plane = DataPlane(catalogue, cfg, FsyncBatcher())
        resp = asyncio.run(_produce(plane, OFFSETS))
        part = resp["responses"][0]["partition_responses"][0]
        assert part["error_code"] == Err.INVALID_TOPIC_EXCEPTION
        assert part["error_message"] == f"Cannot append to internal topic {OFFSETS}"
        assert catalogue.partition(OFFSETS, 1).log_end_offset == 0
    finally:
        catalogue.close()


async def _produce(plane, topic):
    out = plane.produce(_Ctx(), {"acks": 1, "transactional_id": None, "topic_data": [
        {"name": topic, "partition_data": [{"index": 1, "records": _batch(1)}]}]})
    return await out if asyncio.iscoroutine(out) else out


def test_real_server_serves_its_offsets_log(tmp_path):
    """Metadata lists it as internal with offsets.topic.num.partitions partitions; a
    kafka-python consumer with exclude_internal_topics=False reads the commits."""
    pytest.importorskip("kafka")
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
    from kafka.admin import NewTopic
    from kafka.structs import OffsetAndMetadata

    from kcoord.pipeline.wire import EARLIEST, LATEST, Cluster, Connection

    with ServerProcess(tmp_path / "data", settings={"offsets.topic.num.partitions": "3",
                                                    "group.initial.rebalance.delay.ms": "0"}) as srv:
        admin = KafkaAdminClient(bootstrap_servers=srv.bootstrap, request_timeout_ms=15000)
        try:
            admin.create_topics([NewTopic("orders", 1, 1)])
        finally:
            admin.close()
        consumer = KafkaConsumer(bootstrap_servers=srv.bootstrap, group_id="g-internal",
                                 enable_auto_commit=False, request_timeout_ms=15000)
        try:
            tp = TopicPartition("orders", 0)
            consumer.assign([tp])
            for i in range(3):
                consumer.commit({tp: OffsetAndMetadata(10 + i, "", -1)})
        finally:
            consumer.close()

        cluster = Cluster(srv.bootstrap)
        try:
            cluster.refresh(None)
            meta = cluster.topics[OFFSETS]
            assert meta["is_internal"] and sorted(meta["partitions"]) == [0, 1, 2]
            assert cluster.topics["orders"]["is_internal"] is False
            ends = cluster.list_offsets(OFFSETS, [0, 1, 2], LATEST)
            starts = cluster.list_offsets(OFFSETS, [0, 1, 2], EARLIEST)
            assert starts == {0: 0, 1: 0, 2: 0} and sum(ends.values()) == 3
            (p,) = [p for p, e in ends.items() if e]
            code, data, hw, _ = cluster.fetch(OFFSETS, p, 0)
            assert code == 0 and hw == ends[p]
            keys = [decode_record_key(r.key)[1] for r in decode_all(data)]
            assert [(k["group"], k["topic"], k["partition"]) for k in keys] == \
                [("g-internal", "orders", 0)] * 3
        finally:
            cluster.close()

        reader = KafkaConsumer(bootstrap_servers=srv.bootstrap, exclude_internal_topics=False,
                               enable_auto_commit=False, request_timeout_ms=15000,
                               consumer_timeout_ms=5000, auto_offset_reset="earliest")
        try:
            reader.assign([TopicPartition(OFFSETS, p)])
            reader.seek_to_beginning()
            got = [m.offset for m in reader]
            assert got == [0, 1, 2]
        finally:
            reader.close()

        # kafka-python's producer will not even try (no partitions for an internal
        # topic): send the Produce request directly
        host, port = srv.bootstrap.split(":")
        conn = Connection(host, int(port))
        try:
            resp = conn._call(0, 9, {"transactional_id": None, "acks": -1, "timeout_ms": 15000,
                                     "topic_data": [{"name": OFFSETS, "partition_data": [
                                         {"index": 0, "records": _batch(1)}]}]})
        finally:
            conn.close()
        part = resp["responses"][0]["partition_responses"][0]
        assert part["error_code"] == Err.INVALID_TOPIC_EXCEPTION
        assert part["error_message"] == f"Cannot append to internal topic {OFFSETS}"
