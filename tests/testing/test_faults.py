"""Every fault kind reaches a real client (confluent-kafka, librdkafka),
through kcoord.testing.KafkaServer in this process."""
from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kcoord.protocol.api import APIS, request_codec, response_codec
from kcoord.protocol.errors import Err
from kcoord.testing import KafkaServer
from kcoord.protocol.api import error_response


@pytest.fixture(scope="module")
def kafka():
    with KafkaServer() as server:
        yield server


@pytest.fixture(autouse=True)
def clean(kafka):
    kafka.reset()
    yield
    kafka.reset()


def consumer(kafka, group, client_id="app", **extra):
    return Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group,
                     "client.id": client_id, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "session.timeout.ms": 30000, **extra})


def produce(kafka, topic, values, **extra):
    p = Producer({"bootstrap.servers": kafka.bootstrap, **extra})
    for v in values:
        p.produce(topic, v, partition=0)
    assert p.flush(30) == 0


def test_commit_retried_after_not_coordinator_lands(kafka):
    topic, group = kafka.create_topic(), kafka.group_name()
    fault = kafka.faults.fail("OffsetCommit", "NOT_COORDINATOR", count=1, group=group)
    c = consumer(kafka, group)
    try:
        c.assign([TopicPartition(topic, 0)])
        c.commit(offsets=[TopicPartition(topic, 0, 42)], asynchronous=False)
    finally:
        c.close()
    assert fault.fired == 1
    codes = [r.error_code for r in kafka.requests("OffsetCommit", client_id="app")]
    assert codes[0] == Err.NOT_COORDINATOR and codes[-1] == 0, codes
    # the client looked its coordinator up again before retrying, as it must
    assert len(kafka.requests("FindCoordinator", client_id="app")) >= 2
    assert kafka.committed(group, topic, 0) == 42


@pytest.mark.parametrize("first", ["a", "b"])
def test_parked_joins_released_in_order_choose_the_leader(kafka, first):
    topic, group = kafka.create_topic(partitions=2), kafka.group_name()
    second = "b" if first == "a" else "a"
    # the first two rounds of joins: the id-less join (MEMBER_ID_REQUIRED) and the real one
    park = kafka.faults.park("JoinGroup", count=4, group=group)
    members = {name: consumer(kafka, group, client_id=name) for name in ("a", "b")}
    try:
        for c in members.values():
            c.subscribe([topic])
            c.poll(0)  # starts the join

        def poll_all() -> None:
            for c in members.values():
                c.poll(0.05)

        def release(round_: int, name: str) -> None:
            parked = [p for p in park.wait_parked(2 * round_) if p.client_id == name]
            parked[-1].release()
            kafka.wait_for(lambda: poll_all() or any(
                r.answered for r in kafka.requests("JoinGroup", client_id=name)[round_ - 1:]),
                30, what=f"{name}'s join answered")

        for round_ in (1, 2):
            release(round_, first)
            release(round_, second)
        kafka.wait_for(lambda: poll_all() or (kafka.group(group).state == "Stable"
                                              and len(kafka.group(group).members) == 2), 60)
        info = kafka.group(group)
        assert info.leader.startswith(first + "-"), (info.leader, first)
        owned = sorted(p for m in info.members for p in m.assignment.get(topic, []))
        assert owned == [0, 1]
        assert park.fired == 4
    finally:
        park.remove()
        for c in members.values():
            c.close()


def test_capped_fetch_version_is_what_the_client_sends(kafka):
    topic = kafka.create_topic()
    produce(kafka, topic, [b"one"])

    def consume(group, client_id):
        c = consumer(kafka, group, client_id=client_id)
        c.subscribe([topic])
        try:
            msg = kafka.wait_for(lambda: (lambda m: m if m is not None and not m.error() else None)(
                c.poll(0.2)), 30, what="a record")
            return msg.value()
        finally:
            c.close()

    assert consume(kafka.group_name(), "new") == b"one"
    uncapped = {r.version for r in kafka.requests("Fetch", client_id="new")}
    assert max(uncapped) > 11
    kafka.faults.cap_versions({"Fetch": 11, "ConsumerGroupHeartbeat": None})
    assert consume(kafka.group_name(), "old") == b"one"
    assert {r.version for r in kafka.requests("Fetch", client_id="old")} == {11}
    # the caps are gone after a reset: a new client sees the full range again
    kafka.reset()
    assert consume(kafka.group_name(), "new-again") == b"one"
    assert max(r.version for r in kafka.requests("Fetch", client_id="new-again")) > 11


def test_disconnect_then_the_produce_lands_once(kafka):
    topic = kafka.create_topic()
    fault = kafka.faults.disconnect("Produce", count=1, topic=topic)
    produce(kafka, topic, [b"x"], **{"client.id": "p", "enable.idempotence": True})
    assert fault.fired == 1
    produces = kafka.requests("Produce", client_id="p")
    assert produces[0].fault == "disconnect" and produces[-1].error_code == 0
    assert [r.value for r in kafka.records(topic)] == [b"x"]


def test_delay_holds_the_request_then_answers(kafka):
    topic = kafka.create_topic()
    fault = kafka.faults.delay("Produce", 300, topic=topic)
    produce(kafka, topic, [b"slow"], **{"client.id": "d"})
    assert fault.fired >= 1
    held = kafka.requests("Produce", client_id="d")
    assert held[0].fault == "delay" and held[0].error_code == 0
    assert [r.value for r in kafka.records(topic)] == [b"slow"]


def test_fail_filters_by_group_and_partition(kafka):
    topic, g1, g2 = kafka.create_topic(partitions=2), kafka.group_name(), kafka.group_name()
    fault = kafka.faults.fail(8, Err.UNKNOWN_TOPIC_OR_PARTITION, count=None, group=g1,
                              topic=topic, partition=1)
    for group in (g1, g2):
        c = consumer(kafka, group)
        try:
            c.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
        finally:
            c.close()
    assert fault.fired == 0  # partition 0 only: not matched
    c = consumer(kafka, g1, client_id="p1")
    try:
        with pytest.raises(Exception):
            c.commit(offsets=[TopicPartition(topic, 1, 7)], asynchronous=False)
    finally:
        c.close()
    assert fault.fired >= 1 and kafka.committed(g1, topic, 1) is None
    fault.remove()
    assert kafka.committed(g1, topic, 0) == 5 and kafka.committed(g2, topic, 0) == 5


def test_error_answers_encode_for_every_api_and_version():
    """fail() answers in the response's own schema: every (API, version)
    encodes, answering a request decoded from its defaults."""
    for key, api in APIS.items():
        for version in range(api.min_version, api.max_version + 1):
            encode_req, decode_req = request_codec(key, version)
            req, _ = decode_req(bytes(encode_req({}, bytearray())), 0)
            answer = error_response(key, version, req, Err.NOT_COORDINATOR)
            body = bytes(response_codec(key, version)[0](answer, bytearray()))
            decoded, _ = response_codec(key, version)[1](body, 0)
            if any(f.name == "error_code" and version in f.versions
                   for f in api.response.fields):
                assert decoded["error_code"] == Err.NOT_COORDINATOR, (api.name, version)


def test_kill_and_restart_keep_acknowledged_data_and_the_port():
    with KafkaServer() as server:
        topic, group = server.create_topic(), server.group_name()
        produce(server, topic, [b"kept"], **{"acks": "all"})
        c = consumer(server, group)
        try:
            c.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        finally:
            c.close()
        bootstrap = server.bootstrap
        server.kill()  # no clean shutdown: the next start recovers the logs
        server.restart()
        assert server.bootstrap == bootstrap
        assert [r.value for r in server.records(topic)] == [b"kept"]
        assert server.committed(group, topic, 0) == 1
        assert any("no clean-shutdown marker" in line for line in server.log_tail(50).splitlines())
        produce(server, topic, [b"after"])
        assert [r.value for r in server.records(topic)] == [b"kept", b"after"]
