"""Issue 3 bad input, at the wire level: the data plane answers bad requests
with Kafka's error codes and leaves the logs untouched.

Requests are built with kcoord's codec (kcoord.protocol.api.request_codec,
kcoord.protocol.headers.encode_request_header) and record batches with
kcoord.protocol.records.build_batch, so each test controls the exact bytes.
Where it matters a test runs at an old non-flexible version (what aiokafka
and kafkajs send) and a flexible one (kafka-python, confluent-kafka).
"""
from __future__ import annotations

import itertools

import pytest

from kcoord.protocol.errors import Err
from kcoord.protocol.records import build_batch
from tests.clients.wire import (WireClient, create_topic, fetch, list_offset, metadata,
                                produce, read_partition)
from tests.support import ServerProcess

PRODUCE_VERSIONS = [3, 7, 9, 11]
FETCH_VERSIONS = [4, 11, 12]


def batch(n: int = 3, value_size: int = 10, tag: bytes = b"r") -> bytes:
    return build_batch([(tag + b"-key-%d" % i, bytes([i % 256]) * value_size, [("h", b"v")], None)
                        for i in range(n)], base_timestamp=1_700_000_000_000)


def corrupt(data: bytes, at: int = -3) -> bytes:
    """Flip one byte inside the CRC-covered part (attributes .. end) of the batch."""
    broken = bytearray(data)
    broken[at] ^= 0x55
    return bytes(broken)


# One server per setting for the whole module (a server start per test was most
# of its time): every test writes only to topics of its own.
@pytest.fixture
def client(module_server):
    with WireClient(module_server.port) as c:
        yield c


TOPIC_NUMBERS = itertools.count()


@pytest.fixture
def topic(client):
    name = f"errs-{next(TOPIC_NUMBERS)}"
    assert create_topic(client, name, 2)["error_code"] == 0
    return name


def log_end(client, topic, partition=0) -> int:
    p = list_offset(client, topic, partition)
    assert p["error_code"] == 0, p
    return p["offset"]


# ------------------------------------------------------------ CORRUPT_MESSAGE
@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
def test_wrong_crc_is_corrupt_message_and_nothing_is_appended(client, topic, version):
    assert produce(client, topic, 0, batch(tag=b"first"), version=version)["error_code"] == 0
    before = read_partition(client, topic, 0)

    for at in (21, 30, 70, -1):  # attributes, timestamps, first record, last byte
        p = produce(client, topic, 0, corrupt(batch(tag=b"bad"), at), version=version)
        assert p["error_code"] == Err.CORRUPT_MESSAGE, (at, p)
        assert p["base_offset"] == -1
    assert log_end(client, topic) == 3
    assert read_partition(client, topic, 0) == before

    # a good batch still lands right after the first one
    p = produce(client, topic, 0, batch(tag=b"second"), version=version)
    assert p["error_code"] == 0 and p["base_offset"] == 3, p


def test_crc_error_in_a_later_batch_rejects_the_whole_record_set(client, topic):
    """Kafka validates the whole record set before appending any of it."""
    good, bad = batch(tag=b"good"), corrupt(batch(tag=b"bad"))
    p = produce(client, topic, 0, good + bad)
    assert p["error_code"] == Err.CORRUPT_MESSAGE, p
    assert log_end(client, topic) == 0
    # other partitions of the same request are independent
    body = {"transactional_id": None, "acks": -1, "timeout_ms": 30000,
            "topic_data": [{"name": topic, "partition_data": [
                {"index": 0, "records": bad}, {"index": 1, "records": good}]}]}
    response = client.request(0, 9, body)
    codes = {p["index"]: p["error_code"] for p in response["responses"][0]["partition_responses"]}
    assert codes == {0: Err.CORRUPT_MESSAGE, 1: Err.NONE}
    assert (log_end(client, topic, 0), log_end(client, topic, 1)) == (0, 3)


def test_truncated_batch_is_corrupt_message(client, topic):
    data = batch()
    for cut in (len(data) - 1, 30, 5):
        p = produce(client, topic, 0, data[:cut])
        assert p["error_code"] == Err.CORRUPT_MESSAGE, (cut, p)
    assert log_end(client, topic) == 0


def test_crc_survives_the_fetch_path(client, topic):
    """What was accepted comes back with a valid CRC (decode_batch verifies it)."""
    assert produce(client, topic, 0, batch(5))["error_code"] == 0
    [(header, records)] = read_partition(client, topic, 0)
    assert header.base_offset == 0 and len(records) == 5


# ---------------------------------------------------- UNKNOWN_TOPIC_OR_PARTITION
@pytest.fixture(scope="module")
def no_autocreate(tmp_path_factory):
    with ServerProcess(tmp_path_factory.mktemp("no-autocreate") / "data",
                       settings={"auto.create.topics.enable": "false"}) as proc:
        yield proc


@pytest.mark.parametrize("version", [1, 4, 9, 12])
def test_unknown_topic_metadata_without_autocreate(no_autocreate, version):
    with WireClient(no_autocreate.port) as c:
        response = metadata(c, ["nope"], version=version)
        [t] = response["topics"]
        assert t["error_code"] == Err.UNKNOWN_TOPIC_OR_PARTITION, t
        # and it was not created behind the client's back
        names = [t["name"] for t in metadata(c, None)["topics"]]
        assert "nope" not in names


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
def test_unknown_topic_produce_without_autocreate(no_autocreate, version):
    with WireClient(no_autocreate.port) as c:
        p = produce(c, "nope", 0, batch(), version=version)
        assert p["error_code"] == Err.UNKNOWN_TOPIC_OR_PARTITION, p
        assert "nope" not in [t["name"] for t in metadata(c, None)["topics"]]


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_unknown_topic_fetch_and_list_offsets(no_autocreate, version):
    with WireClient(no_autocreate.port) as c:
        assert fetch(c, "nope", 0, 0, version=version)["error_code"] == \
            Err.UNKNOWN_TOPIC_OR_PARTITION
        assert list_offset(c, "nope", 0)["error_code"] == Err.UNKNOWN_TOPIC_OR_PARTITION


def test_unknown_topic_id_fetch(client, topic):
    """Fetch v13+ names topics by id: an unknown id is UNKNOWN_TOPIC_ID."""
    p = fetch(client, "", 0, 0, version=13, topic_id=b"\x01" * 16)
    assert p["error_code"] == Err.UNKNOWN_TOPIC_ID, p


def test_unknown_partition_of_existing_topic(client, topic):
    """With auto-create on (the default), a partition past the topic's count is still unknown."""
    assert produce(client, topic, 2, batch())["error_code"] == Err.UNKNOWN_TOPIC_OR_PARTITION
    assert produce(client, topic, -1, batch())["error_code"] == Err.UNKNOWN_TOPIC_OR_PARTITION
    assert fetch(client, topic, 7, 0)["error_code"] == Err.UNKNOWN_TOPIC_OR_PARTITION
    assert list_offset(client, topic, 7)["error_code"] == Err.UNKNOWN_TOPIC_OR_PARTITION


def test_metadata_autocreate_uses_num_partitions(client):
    [t] = metadata(client, ["made-by-metadata"])["topics"]
    assert t["error_code"] == 0 and len(t["partitions"]) == 1
    [t] = metadata(client, ["not-allowed"], allow_auto_create=False)["topics"]
    assert t["error_code"] == Err.UNKNOWN_TOPIC_OR_PARTITION


# ---------------------------------------------------- INVALID_TOPIC_EXCEPTION
INVALID_NAMES = ["", ".", "..", "has space", "slash/name", "star*", "ünïcode", "a" * 250]


@pytest.mark.parametrize("version", [2, 4, 5, 7])
def test_create_topics_invalid_name(client, version):
    body = {"topics": [{"name": n, "num_partitions": 1, "replication_factor": 1,
                        "assignments": [], "configs": []} for n in INVALID_NAMES],
            "timeout_ms": 30000, "validate_only": False}
    response = client.request(19, version, body)
    codes = {t["name"]: t["error_code"] for t in response["topics"]}
    assert codes == {n: Err.INVALID_TOPIC_EXCEPTION for n in INVALID_NAMES}
    names = [t["name"] for t in metadata(client, None)["topics"]]
    assert not set(names) & set(INVALID_NAMES)


def test_create_topics_longest_legal_name(client):
    assert create_topic(client, "a" * 249)["error_code"] == 0


@pytest.mark.parametrize("version", [1, 4, 9, 12])
def test_metadata_invalid_name(client, version):
    names = ["has space", "slash/name", "a" * 250]
    response = metadata(client, names, version=version)
    codes = {t["name"]: t["error_code"] for t in response["topics"]}
    assert codes == {n: Err.INVALID_TOPIC_EXCEPTION for n in names}


# --------------------------------------------------------- MESSAGE_TOO_LARGE
@pytest.fixture(scope="module")
def small_messages(tmp_path_factory):
    with ServerProcess(tmp_path_factory.mktemp("small-messages") / "data",
                       settings={"message.max.bytes": "10000"}) as proc:
        yield proc


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
def test_batch_over_message_max_bytes(small_messages, version):
    with WireClient(small_messages.port) as c:
        big = f"big-{version}"
        assert create_topic(c, big, 1)["error_code"] == 0
        too_big = batch(n=2, value_size=6000)
        assert len(too_big) > 10000
        p = produce(c, big, 0, too_big, version=version)
        assert p["error_code"] == Err.MESSAGE_TOO_LARGE, p
        assert log_end(c, big) == 0
        fits = batch(n=2, value_size=4000)
        assert len(fits) <= 10000
        p = produce(c, big, 0, fits, version=version)
        assert p["error_code"] == 0 and p["base_offset"] == 0, p


def test_message_max_bytes_counts_the_whole_batch(small_messages):
    """Kafka compares the batch's size on the wire (LOG_OVERHEAD included) with the limit."""
    with WireClient(small_messages.port) as c:
        assert create_topic(c, "edge", 1)["error_code"] == 0
        # grow one record's value until the batch is exactly 10000 and 10001 bytes
        def sized(total):
            size = 9000
            while True:
                data = build_batch([(b"k", b"x" * size, [], None)], base_timestamp=0)
                if len(data) == total:
                    return data
                size += total - len(data)
        assert produce(c, "edge", 0, sized(10001))["error_code"] == Err.MESSAGE_TOO_LARGE
        assert produce(c, "edge", 0, sized(10000))["error_code"] == 0


def test_topic_max_message_bytes_overrides_broker_default(client):
    assert create_topic(client, "tiny", 1, configs={"max.message.bytes": "2000"})["error_code"] == 0
    p = produce(client, "tiny", 0, batch(n=1, value_size=3000))
    assert p["error_code"] == Err.MESSAGE_TOO_LARGE, p
    assert produce(client, "tiny", 0, batch(n=1, value_size=500))["error_code"] == 0


def test_default_message_max_bytes(client, topic):
    """The default message.max.bytes is 1048588: a 1.1 MB batch is refused."""
    big = build_batch([(b"k", bytes(1_100_000), [], None)], base_timestamp=0)
    p = produce(client, topic, 0, big)
    assert p["error_code"] == Err.MESSAGE_TOO_LARGE, p
    ok = build_batch([(b"k", bytes(1_000_000), [], None)], base_timestamp=0)
    assert produce(client, topic, 0, ok)["error_code"] == 0


# ------------------------------------------------------- OFFSET_OUT_OF_RANGE
@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_fetch_past_the_end(client, topic, version):
    assert produce(client, topic, 0, batch(5))["error_code"] == 0
    past = fetch(client, topic, 0, 6, version=version)
    assert past["error_code"] == Err.OFFSET_OUT_OF_RANGE, past
    assert past["high_watermark"] == 5 or version < 5  # clients reset with these
    far = fetch(client, topic, 0, 1 << 40, version=version)
    assert far["error_code"] == Err.OFFSET_OUT_OF_RANGE
    negative = fetch(client, topic, 0, -1, version=version)
    assert negative["error_code"] == Err.OFFSET_OUT_OF_RANGE
    # at the end exactly: no error, no records, the high watermark
    at_end = fetch(client, topic, 0, 5, version=version)
    assert at_end["error_code"] == 0 and not at_end["records"]
    assert at_end["high_watermark"] == 5
    # inside: the batch
    inside = fetch(client, topic, 0, 2, version=version)
    assert inside["error_code"] == 0 and inside["records"]


def test_fetch_past_the_end_of_an_empty_partition(client, topic):
    assert fetch(client, topic, 1, 1)["error_code"] == Err.OFFSET_OUT_OF_RANGE
    p = fetch(client, topic, 1, 0)
    assert p["error_code"] == 0 and p["high_watermark"] == 0 and not p["records"]


def test_fetch_by_topic_id_past_the_end(client, topic):
    [t] = metadata(client, [topic])["topics"]
    topic_id = t["topic_id"]
    assert topic_id != bytes(16)
    assert produce(client, topic, 0, batch(2))["error_code"] == 0
    for version in (13, 16):
        p = fetch(client, "", 0, 9, version=version, topic_id=topic_id)
        assert p["error_code"] == Err.OFFSET_OUT_OF_RANGE, p
        assert fetch(client, "", 0, 0, version=version, topic_id=topic_id)["records"]
