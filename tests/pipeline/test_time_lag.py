"""The time-lag lookups against records produced with known timestamps by a real
client into a real `kcoord serve`: over the wire and from the data dir."""
from __future__ import annotations

import pytest

from kcoord.protocol.records import build_batch
from tests.support import ServerProcess

T0 = 1_700_000_000_000


def test_first_timestamp_skips_markers_and_earlier_records():
    from kcoord.pipeline.timelag import first_timestamp
    data = build_batch([(None, b"a", [], T0 + i) for i in range(4)], base_offset=10) + \
        build_batch([(b"\0\0\0\1", b"\0\0\0\0\0\0", [], T0 + 50)], base_offset=14,
                    control=True, transactional=True, producer_id=7) + \
        build_batch([(None, b"b", [], T0 + 90 + i) for i in range(2)], base_offset=15)
    assert first_timestamp(data, 12) == (T0 + 2, None)
    assert first_timestamp(data, 14) == (T0 + 90, None)  # the marker is not a record to consume
    assert first_timestamp(data, 16) == (T0 + 91, None)
    assert first_timestamp(data, 17) == (None, 17)


def test_lookups_return_produce_timestamps(tmp_path):
    pytest.importorskip("kafka")
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic

    from kcoord.pipeline.timelag import dir_lookup, wire_lookup

    data = tmp_path / "data"
    sent: dict = {}  # (topic, partition, offset) -> timestamp
    with ServerProcess(data) as srv:
        admin = KafkaAdminClient(bootstrap_servers=srv.bootstrap, request_timeout_ms=15000)
        try:
            admin.create_topics([NewTopic("plain", 2, 1), NewTopic("packed", 1, 1)])
        finally:
            admin.close()
        for topic, compression in (("plain", None), ("packed", "gzip")):
            producer = KafkaProducer(bootstrap_servers=srv.bootstrap, linger_ms=50,
                                     batch_size=4096, compression_type=compression,
                                     request_timeout_ms=15000)
            try:
                futures = []
                for i in range(300):
                    p = i % 2 if topic == "plain" else 0
                    ts = T0 + 7 * i + (1000 if p else 0)
                    futures.append((p, ts, producer.send(topic, value=b"x" * 40, partition=p,
                                                         timestamp_ms=ts)))
                producer.flush(30)
                for p, ts, fut in futures:
                    meta = fut.get(timeout=30)
                    sent[(topic, p, meta.offset)] = ts
            finally:
                producer.close()
        # every offset, one past the end (nothing to find), a partition that does not exist
        wants = set(sent) | {("plain", 0, 150), ("nope", 0, 0)}
        over_wire = wire_lookup(srv.bootstrap)(wants)
        # past log ends for the report: where each log ended at time t
        from kcoord.pipeline.logend import server_log_end_history
        times = [T0 - 1, T0 + 500, T0 + 1500, T0 + 10_000]
        history = server_log_end_history(srv.bootstrap, {("plain", 0), ("plain", 1), ("x", 0)},
                                         times)
    from_dir = dir_lookup(data)(wants)
    assert over_wire == sent
    for p in (0, 1):
        stamps = sorted(ts for (t, q, _), ts in sent.items() if t == "plain" and q == p)
        want = [(sum(1 for ts in stamps if ts <= t), t) for t in times]
        assert history[("plain", p)] == want
    assert set(history) == {("plain", 0), ("plain", 1)}
    assert from_dir == sent
    assert len(sent) == 600 and len({k[:2] for k in sent}) == 3


def test_internal_topics_are_not_user_partitions(tmp_path):
    """A data dir written by a server with transactions holds __transaction_state:
    it has no consumer lag to measure."""
    import json

    from kcoord.pipeline.logend import user_partitions
    (tmp_path / "kcoord-topics.json").write_text(json.dumps({"topics": [
        {"name": "__consumer_offsets", "id": "00" * 16, "partitions": 2},
        {"name": "__transaction_state", "id": "01" * 16, "partitions": 2},
        {"name": "orders", "id": "02" * 16, "partitions": 1}]}))
    assert [(t, p) for t, p, _ in user_partitions(tmp_path)] == [("orders", 0)]
    (tmp_path / "kcoord-topics.json").unlink()  # no catalogue: the directories count
    for name in ("__transaction_state-0", "orders-0", "__consumer_offsets-0"):
        (tmp_path / name).mkdir()
    assert [(t, p) for t, p, _ in user_partitions(tmp_path)] == [("orders", 0)]
