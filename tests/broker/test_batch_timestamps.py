"""Batches whose header maxTimestamp is unset (-1) or wrong, as some producers
send them (sarama 1.22 sends -1), are stored as Kafka's LogValidator stores
them: maxTimestamp rewritten to the records' max.  Topic "good" gets the same
records with correct headers; everything that reads batch timestamps must
answer the same for "bad": ListOffsets by timestamp (before and after a
restart), the time index files, retention by time and the Burrow API's lag.
And every record's timestamp is checked against the topic's
message.timestamp.before/after.max.ms, as LogValidator does.
"""
from __future__ import annotations

import time

import pytest

from kcoord.broker.batch_timestamps import InvalidTimestamps, check_batch
from kcoord.protocol.records import build_batch, read_batch_header, rewrite_max_timestamp
from tests.admin.support import get_json, http_port, http_server, wait_for
from tests.clients.wire import WireClient, create_topic, list_offset, produce

OFFSET_COMMIT = 8
DAY_MS = 86_400_000
HOUR_MS = 3_600_000
TOPIC_CONFIGS = {"retention.ms": str(DAY_MS), "segment.bytes": "100", "index.interval.bytes": "0",
                 "message.timestamp.after.max.ms": str(2 * HOUR_MS)}  # the "future" batch
INVALID_TIMESTAMP = 32


def batch(stamps: list[int], compression: int = 0) -> bytes:
    # records out of time order, so the max is not the last record's
    order = stamps[1:] + stamps[:1]
    return build_batch([(b"k%d" % i, b"v" * 40, [], ts) for i, ts in enumerate(order)],
                       compression=compression)


def broken(data: bytes, max_ts: int) -> bytes:
    out = bytearray(data)
    rewrite_max_timestamp(out, 0, read_batch_header(out), max_ts)
    return bytes(out)


def commit(client: WireClient, group: str, offset: int) -> None:
    body = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
            "topics": [{"name": t, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                   "committed_metadata": ""}]}
                       for t in ("good", "bad")]}
    response = WireClient.request(client, OFFSET_COMMIT, 8, body)
    assert all(p["error_code"] == 0 for t in response["topics"] for p in t["partitions"]), response


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    data = tmp_path_factory.mktemp("ts") / "data"
    server = http_server(data, **{"log.retention.check.interval.ms": "200",
                                  "http.burrow.min-distance": "0"})  # both commits kept
    now = int(time.time() * 1000)
    # two days old (past retention), then recent, then stamped in the future:
    # a commit made now sees the log end of the first two only
    old = [[now - 2 * DAY_MS + 1000 * (10 * b + i) for i in range(5)] for b in range(3)]
    recent = [[now - 600_000 + 1000 * (10 * b + i) for i in range(5)] for b in range(2)]
    future = [[now + 3_600_000 + 1000 * i for i in range(5)]]
    try:
        with WireClient(server.port) as c:
            for name in ("good", "bad"):
                assert create_topic(c, name, 1, TOPIC_CONFIGS)["error_code"] == 0
            sent = 0
            for stamps in old + recent:
                codec = 3 if sent == 1 else 0  # one lz4 batch: the in-place compressed path
                data_ = batch(stamps, codec)
                assert produce(c, "good", 0, data_)["error_code"] == 0
                # unset, below the base timestamp, above every record
                wrong = (-1, stamps[0], max(stamps) + 5000)[sent % 3]
                assert produce(c, "bad", 0, broken(data_, wrong))["error_code"] == 0
                sent += 1
            commit(c, "lagging", 12)
            data_ = batch(future[0])
            assert produce(c, "good", 0, data_)["error_code"] == 0
            assert produce(c, "bad", 0, broken(data_, -1))["error_code"] == 0
            commit(c, "lagging", 14)
        yield server, data, old + recent + future
    finally:
        server.stop()


def offsets_by_time(port: int, stamps: list[int]) -> dict:
    with WireClient(port) as c:
        return {name: [(p["offset"], p["timestamp"])
                       for p in (list_offset(c, name, 0, ts) for ts in stamps)]
                for name in ("good", "bad")}


def test_rewritten_headers_answer_as_correct_ones(served):
    server, data, batches = served
    port = http_port(server)

    # retention by time removes the two-day-old segments of both topics alike
    def starts():
        with WireClient(server.port) as c:
            return [list_offset(c, t, 0, -2)["offset"] for t in ("good", "bad")]
    wait_for(lambda: starts()[0] >= 15, "retention of the old segments of good", timeout=60)
    wait_for(lambda: starts()[1] >= 15, "retention of the old segments of bad", timeout=60)
    assert starts()[0] == starts()[1]

    # ListOffsets by timestamp: each batch's times, and its max (which the header lacked)
    probes = [b[0] for b in batches[3:]] + [max(b) for b in batches[3:]] + [max(batches[-1]) + 1]
    got = offsets_by_time(server.port, probes)
    assert got["bad"] == got["good"]
    assert got["good"][-1] == (-1, -1)
    assert all(off >= 15 for off, _ in got["good"][:-1])

    # Burrow: the lag at each commit is the log end at its time (the future
    # batch is not yet there), not the current end
    status, detail = get_json(port, "/v3/kafka/local/consumer/lagging")
    assert status == 200, detail
    lags = {t: [o["lag"] for o in detail["topics"][t][0]["offsets"]] for t in ("good", "bad")}
    assert lags["good"] == [25 - 12, 25 - 14], lags
    assert lags["bad"] == lags["good"]
    _, lag = get_json(port, "/v3/kafka/local/consumer/lagging/lag")
    by_topic = {p["topic"]: (p["status"], p["current_lag"]) for p in lag["status"]["partitions"]}
    assert by_topic["bad"] == by_topic["good"]

    # after a restart the time indexes are read back from disk: same answers,
    # and the .timeindex files of the two partitions hold the same entries
    server.stop()
    server.start()
    assert offsets_by_time(server.port, probes) == got
    for path in sorted((data / "good-0").glob("*.timeindex")):
        twin = data / "bad-0" / path.name
        assert path.read_bytes() == twin.read_bytes(), path.name
    assert any(p.stat().st_size for p in (data / "bad-0").glob("*.timeindex"))


def test_every_batch_of_a_client_is_checked():
    # no sampling: a plausible wrong header (above the base, below the max) is
    # rewritten in every batch, as Kafka's validator computes the max each time
    good = batch([1000 + i for i in range(4)])
    for wrong in [broken(good, 1001)] * 100 + [broken(good, -1)]:
        out, header = check_batch(wrong, 0, read_batch_header(wrong), 2000, 10**18, 10**18)
        assert header.max_timestamp == 1003 == read_batch_header(out).max_timestamp
    out, header = check_batch(good, 0, read_batch_header(good), 2000, 10**18, 10**18)
    assert out is good  # a right header is left as it is


def test_records_out_of_range_are_named():
    stamps = [5000, 100, 5001, 9000, -1]  # batch() stores them rotated: 100, 5001, 9000, -1, 5000
    data = batch(stamps)
    try:
        check_batch(data, 0, read_batch_header(data), now=6000, before_ms=1000, after_ms=2000)
    except InvalidTimestamps as exc:
        assert exc.errors == [
            (0, "Timestamp 100 of message with offset 0 is out of range. "
                "The timestamp should be within [5000, 8000]"),
            (2, "Timestamp 9000 of message with offset 2 is out of range. "
                "The timestamp should be within [5000, 8000]")]
    else:
        raise AssertionError("a batch with records out of range was accepted")


def test_produce_out_of_range_is_refused_with_record_errors(served):
    server = served[0]
    now = int(time.time() * 1000)
    with WireClient(server.port) as c:
        assert create_topic(c, "strict", 1, {"message.timestamp.before.max.ms": str(HOUR_MS)}
                            )["error_code"] == 0
        assert create_topic(c, "appended", 1, {"message.timestamp.type": "LogAppendTime"}
                            )["error_code"] == 0
        old, fresh, ahead = now - 2 * HOUR_MS, now, now + 2 * HOUR_MS  # ahead: Kafka 4's 1 h default
        refused = produce(c, "strict", 0, batch([fresh, old, ahead, fresh]))
        assert refused["error_code"] == INVALID_TIMESTAMP
        assert refused["base_offset"] == -1
        assert refused["error_message"] == ("One or more records have been rejected due to "
                                            "invalid timestamp")
        assert [e["batch_index"] for e in refused["record_errors"]] == [0, 1]
        assert refused["record_errors"][0]["batch_index_error_message"].startswith(
            f"Timestamp {old} of message with offset 0 is out of range. "
            "The timestamp should be within [")
        assert list_offset(c, "strict", 0, -1)["offset"] == 0  # nothing was appended
        assert produce(c, "strict", 0, batch([fresh, fresh - 1000]))["error_code"] == 0
        # LogAppendTime topics take the broker's time: the records' times are not checked
        assert produce(c, "appended", 0, batch([old, ahead]))["error_code"] == 0


def test_a_real_producer_sees_invalid_timestamp(served):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    server = served[0]
    producer = confluent_kafka.Producer({"bootstrap.servers": f"127.0.0.1:{server.port}",
                                         "enable.idempotence": False, "retries": 0})
    reports = []
    ahead = int(time.time() * 1000) + 2 * HOUR_MS  # past Kafka 4's default after.max.ms (1 h)
    producer.produce("strict", b"late", timestamp=ahead, on_delivery=lambda e, m: reports.append(e))
    assert producer.flush(60) == 0
    producer.produce("strict", b"now", on_delivery=lambda e, m: reports.append(e))
    assert producer.flush(60) == 0
    assert reports[0] is not None and reports[0].code() == confluent_kafka.KafkaError.INVALID_TIMESTAMP
    assert reports[1] is None
