"""The wire source: `__consumer_offsets` read from a running `kcoord serve` over
the Kafka protocol gives the same rows and the same tables as the data-dir source."""
from __future__ import annotations

import pytest

from kcoord.pipeline.generate import generate
from tests.support import ServerProcess

from .conftest import read_table

# every group kind, record version, compression codec, transactions, KIP-848
# records, several segments per partition (the bad input the generator adds to
# the end of partition 0 is cut by the server's recovery scan when it opens the log)
WORKLOAD = dict(groups=20, topics=3, partitions=4, commits=3000, log_partitions=4, seed=5,
                partitions_per_group=3, segment_bytes=16 << 10, corrupt=True,
                # members that do not expire while the tests run: a server that loads the
                # log would otherwise write their expiry 45 s in, between two reads
                session_timeout_ms=3_600_000)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    data = tmp_path_factory.mktemp("wire") / "data"
    manifest = generate(data, **WORKLOAD)
    server = ServerProcess(data, settings={
        "offsets.topic.num.partitions": str(WORKLOAD["log_partitions"]),
        # the generated commits are old: keep the server from expiring them meanwhile
        "offsets.retention.check.interval.ms": "86400000",
        "group.consumer.session.timeout.ms": "3600000",
        "group.consumer.max.session.timeout.ms": "3600000"})
    server.start()
    try:
        yield data, server, manifest
    finally:
        server.stop()


def _rows(reader) -> list[dict]:
    out = []
    for part in reader.partitions():
        for batch in reader.read(part):
            out.extend(batch.to_pylist())
    return out


def _key(r):
    return (r["log_partition"], -1 if r["offset"] is None else r["offset"], str(r.get("error")))


def test_wire_rows_equal_file_rows(served):
    from kcoord.pipeline.source import OffsetsReader
    from kcoord.pipeline.wire_source import WireOffsetsReader
    data, server, _ = served
    file_rows = sorted(_rows(OffsetsReader({"path": str(data)})), key=_key)
    # small fetches: many round trips, batches cut at fetch boundaries
    wire_rows = sorted(_rows(WireOffsetsReader({"bootstrap": server.bootstrap,
                                                "fetchBytes": "4096"})), key=_key)
    assert len(file_rows) > 2500
    assert all(r["segment"] is None for r in wire_rows)
    assert {r["segment"] for r in file_rows} != {None}
    for r in file_rows + wire_rows:
        r.pop("segment")
        r.pop("error_detail")  # names the segment file on one side only
    assert wire_rows == file_rows


def test_wire_source_projection_and_record_types(served):
    from kcoord.pipeline.source import OffsetsReader
    from kcoord.pipeline.wire_source import WireOffsetsReader
    data, server, _ = served
    cols = ["log_partition", "offset", "group", "record_type", "raw_value"]
    f = sorted(_rows(OffsetsReader({"path": str(data), "recordTypes": "2-8"}, cols)), key=_key)
    w = sorted(_rows(WireOffsetsReader({"bootstrap": server.bootstrap, "recordTypes": "2-8"},
                                       cols)), key=_key)
    assert f == w and f and {r["record_type"] for r in f} <= set(range(2, 9))


def test_unreadable_topic_and_unreachable_server_are_one_line_errors(served):
    from kcoord.pipeline.wire import WireError
    from kcoord.pipeline.wire_source import WireOffsetsReader
    _, server, _ = served
    with pytest.raises(WireError, match=r"topic no-such-topic cannot be read .*"
                                        r"UNKNOWN_TOPIC_OR_PARTITION"):
        WireOffsetsReader({"bootstrap": server.bootstrap, "topic": "no-such-topic"}).partitions()
    with pytest.raises(WireError, match="cannot connect to 127.0.0.1:1"):
        WireOffsetsReader({"bootstrap": "127.0.0.1:1"}).partitions()
    with pytest.raises(WireError, match="security.protocol=TLS is not supported"):
        WireOffsetsReader({"bootstrap": server.bootstrap,
                           "kafka.security.protocol": "TLS"}).partitions()
    with pytest.raises(WireError, match="ssl.truststore.location is set but "
                                        "security.protocol is SASL_PLAINTEXT"):
        WireOffsetsReader({"bootstrap": server.bootstrap,
                           "kafka.security.protocol": "SASL_PLAINTEXT",
                           "kafka.ssl.truststore.location": "ca.pem"}).partitions()
    with pytest.raises(WireError, match="sasl.mechanism is set but security.protocol is "
                                        "PLAINTEXT"):
        WireOffsetsReader({"bootstrap": server.bootstrap,
                           "kafka.sasl.mechanism": "PLAIN"}).partitions()


def test_pipeline_over_the_wire_equals_the_file_run(spark, served, tmp_path):
    """Every table from `--bootstrap-server` equals the data-dir run's at the same as-of
    (log ends: the server's current ones equal the data dir's last ones)."""
    from kcoord.pipeline.jobs import run_pipeline
    data, server, manifest = served
    quiet = dict(log=lambda *_: None)
    file_summary = run_pipeline(spark, data, tmp_path / "file", report=False, **quiet)
    as_of = file_summary["as_of"]
    wire_summary = run_pipeline(spark, None, tmp_path / "wire", bootstrap_server=server.bootstrap,
                                as_of=as_of, **quiet)
    page = (tmp_path / "wire" / "report.html").read_text()
    assert "(over the wire)" in page and "ListOffsets by timestamp" in page
    assert page.count('aria-label="lag of ') >= 4
    assert wire_summary["records"] == file_summary["records"]
    assert wire_summary["bad_input"] == file_summary["bad_input"]

    def table(run, name, drop=()):
        rows = read_table(tmp_path / run / name)
        for r in rows:
            for c in drop:
                r.pop(c)
        return sorted(rows, key=lambda r: [str(v) for v in r.values()])

    for name in ("commits", "offsets", "group_generations"):
        assert table("wire", name) == table("file", name), name
    # lag: the same committed offsets, log ends and lag in records and in time
    cols = ("lag_seconds",)  # the rate estimate needs a log-end history
    assert table("wire", "lag", cols) == table("file", "lag", cols)
    assert len(table("file", "lag")) > 20


def test_stream_over_the_wire_follows_new_commits(spark, served, tmp_path):
    """readStream over the wire: a first run reads the log, commits made by a real
    client afterwards arrive in a second run, and the tables then equal a batch run."""
    pytest.importorskip("kafka")
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    from kcoord.pipeline.jobs import run_pipeline
    from kcoord.pipeline.stream import run_stream
    _, server, _ = served
    as_of = 1_700_010_000_000
    out = tmp_path / "stream"
    first = run_stream(spark, None, out, bootstrap_server=server.bootstrap, available_now=True,
                       as_of=as_of, log=lambda *_: None)
    assert first.batches >= 1 and first.last_rows > 0
    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id="live-wire",
                             enable_auto_commit=False, request_timeout_ms=15000)
    try:
        tps = [TopicPartition("topic-000", p) for p in range(2)]
        consumer.assign(tps)
        consumer.commit({tp: OffsetAndMetadata(5, "", -1) for tp in tps})
    finally:
        consumer.close()
    second = run_stream(spark, None, out, bootstrap_server=server.bootstrap, available_now=True,
                        as_of=as_of, log=lambda *_: None)
    assert second.last_rows == 2  # only the new commits were read
    batch = tmp_path / "batch"
    run_pipeline(spark, None, batch, bootstrap_server=server.bootstrap, as_of=as_of,
                 report=False, log=lambda *_: None)
    for name in ("offsets", "lag", "status"):
        got = sorted(map(str, read_table(out / name)))
        assert got == sorted(map(str, read_table(batch / name))), name
    live = [r for r in read_table(out / "lag") if r["group"] == "live-wire"]
    assert len(live) == 2 and all(r["lag"] > 0 and r["time_lag_seconds"] > 0 for r in live)


def test_security_hooks_are_called_with_the_client_properties(served, monkeypatch):
    """What the security work plugs in (wire.SOCKET_FACTORIES / AUTHENTICATORS) gets the
    client properties, and a failing authenticator is one clear error."""
    from kcoord.pipeline import wire
    from kcoord.pipeline.wire_source import WireOffsetsReader
    _, server, _ = served
    seen = []

    def factory(host, port, props, timeout):
        seen.append(("connect", props.get("sasl.mechanism")))
        return wire._plain_socket(host, port, props, timeout)

    def authenticate(conn, props):
        seen.append(("auth", conn.send(18, 0, {})["error_code"]))

    monkeypatch.setitem(wire.SOCKET_FACTORIES, "SASL_PLAINTEXT", factory)
    monkeypatch.setitem(wire.AUTHENTICATORS, "SASL_PLAINTEXT", authenticate)
    opts = {"bootstrap": server.bootstrap, "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.mechanism": "PLAIN"}
    parts = WireOffsetsReader(opts).partitions()
    assert len(parts) == WORKLOAD["log_partitions"]
    assert ("connect", "PLAIN") in seen and ("auth", 0) in seen

    def refuse(conn, props):
        raise ValueError("bad password")
    monkeypatch.setitem(wire.AUTHENTICATORS, "SASL_PLAINTEXT", refuse)
    with pytest.raises(wire.WireError, match="authentication failed: bad password"):
        WireOffsetsReader(opts).partitions()
