"""Batches whose header maxTimestamp is unset (-1) or wrong, as some producers
send them (sarama 1.22 sends -1), are stored as Kafka's LogValidator stores
them: maxTimestamp rewritten to the records' max.  Topic "good" gets the same
records with correct headers; everything that reads batch timestamps must
answer the same for "bad": ListOffsets by timestamp (before and after a
restart), the time index files, retention by time and the Burrow API's lag.
"""
from __future__ import annotations

import time

import pytest

from kcoord.broker.batch_timestamps import VERIFY_EVERY, VERIFY_FIRST, MaxTimestampCheck
from kcoord.protocol.records import build_batch, read_batch_header, rewrite_max_timestamp
from tests.admin.support import get_json, http_port, http_server, wait_for
from tests.clients.wire import WireClient, create_topic, list_offset, produce

OFFSET_COMMIT = 8
DAY_MS = 86_400_000
TOPIC_CONFIGS = {"retention.ms": str(DAY_MS), "segment.bytes": "100", "index.interval.bytes": "0"}


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


def test_trusted_client_that_turns_wrong_is_caught_and_checked_again():
    check = MaxTimestampCheck()
    good = batch([1000 + i for i in range(4)])
    for _ in range(VERIFY_FIRST + 1):
        out, header = check.fix(good, 0, read_batch_header(good), "c")
        assert out is good
    wrong = broken(good, 1001)  # plausible (not below the base), but not the max
    fixed = [check.fix(wrong, 0, read_batch_header(wrong), "c")[1].max_timestamp
             for _ in range(VERIFY_EVERY)]
    caught = fixed.index(1003)  # caught within one sampling period ...
    assert set(fixed[:caught]) <= {1001}
    assert fixed[caught:] == [1003] * (VERIFY_EVERY - caught)  # ... then checked every batch
    # another client is not affected, and -1 is always rewritten
    assert check.fix(broken(good, -1), 0, read_batch_header(broken(good, -1)), "d")[1][8] == 1003
