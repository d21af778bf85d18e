"""KafkaServer(in_process=False): the server in a subprocess of its own,
with the same faults, clock and inspection (driven over its stdin/stdout)."""
from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition

from kcoord.protocol.errors import Err
from kcoord.testing import KafkaServer


def commit(server, group, topic, offset, client_id="app"):
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": group,
                  "client.id": client_id})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        c.close()


def test_subprocess_server_faults_clock_inspection_and_a_kill():
    with KafkaServer({"offsets.retention.minutes": 1,
                      "offsets.retention.check.interval.ms": 1000},
                     in_process=False, virtual_time=True) as server:
        topic, group = server.create_topic(), server.group_name()
        fault = server.faults.fail("OffsetCommit", "NOT_COORDINATOR", group=group)
        commit(server, group, topic, 7)
        assert fault.fired == 1
        codes = [r.error_code for r in server.requests("OffsetCommit", client_id="app")]
        assert codes == [Err.NOT_COORDINATOR, 0]
        assert server.committed(group, topic, 0) == 7

        p = Producer({"bootstrap.servers": server.bootstrap, "acks": "all"})
        p.produce(topic, b"durable", partition=0)
        assert p.flush(30) == 0
        bootstrap = server.bootstrap
        server.kill()  # SIGKILL
        server.restart()
        assert server.bootstrap == bootstrap
        assert [r.value for r in server.records(topic)] == [b"durable"]
        assert server.committed(group, topic, 0) == 7

        server.clock.advance(61)  # the subprocess's virtual clock: retention passes
        assert server.committed(group, topic, 0) is None
        assert "kcoord listening on" in server.log_tail()
