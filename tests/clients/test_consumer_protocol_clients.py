"""confluent-kafka consumers with group.protocol=consumer (KIP-848) against kcoord.

For each server-side assignor (group.remote.assignor uniform and range): five
consumers share a 12-partition topic and consume every record exactly once;
the group scales down to two and back up to five while records keep coming;
no partition is ever owned by two consumers at once (recorded from the
consumers' on_assign / on_revoke / on_lost callbacks with timestamps); the
committed offsets end at the log end; AdminClient.describe_consumer_groups
(ConsumerGroupDescribe) shows the group, its members and their assignments.

Consumers commit explicitly: the offsets they processed, in on_revoke before
a partition is released (so its next owner starts exactly there) and when
they are asked to stop.  Every wait has a generous deadline and polls for
the condition; nothing sleeps for a fixed time.
"""
from __future__ import annotations

import time
from collections import defaultdict

import pytest

from tests.clients import group_workers
from tests.clients.group_workers import Ledger, Worker
from tests.support import ServerProcess

pytestmark = pytest.mark.clients

PARTITIONS = 12
BATCH = 2400
DEADLINE_S = 120.0


def wait_for(condition, what: str, timeout: float = DEADLINE_S, interval: float = 0.05):
    return group_workers.wait_for(condition, what, timeout, interval)


def produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    group_workers.produce(bootstrap, topic, start, count, PARTITIONS)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One server for the module (each test has its own topics and group); a
    500 ms heartbeat interval (Kafka's default is 5 s) so members learn their new
    target assignment in a few round trips instead of tens of seconds."""
    settings = {"group.initial.rebalance.delay.ms": "0",
                "group.consumer.min.heartbeat.interval.ms": "500",
                "group.consumer.heartbeat.interval.ms": "500"}
    with ServerProcess(tmp_path_factory.mktemp("kip848") / "data", settings) as srv:
        yield srv


def describe(admin, group: str):
    [future] = admin.describe_consumer_groups([group], request_timeout=30).values()
    return future.result()


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_consumer_protocol_scale_down_and_up(server, assignor):
    from confluent_kafka import ConsumerGroupState, ConsumerGroupType
    from confluent_kafka.admin import AdminClient, NewTopic

    topic, group = f"kip848-{assignor}", f"group-{assignor}"
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for f in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        f.result(30)
    ledger = Ledger()
    workers: list[Worker] = []

    def start(n: int) -> None:
        for _ in range(n):
            w = Worker(f"{assignor}-c{len(workers)}", server.bootstrap, group, topic, ledger,
                       {"group.protocol": "consumer", "group.remote.assignor": assignor})
            workers.append(w)
            w.start()
            w.ready.wait(30)

    def live() -> list[Worker]:
        return [w for w in workers if w.is_alive() and not w.stop.is_set()]

    def balanced(n: int):
        """n live consumers own all partitions between them, within one of each other."""
        with ledger.lock:
            counts = [len(ledger.owned[w.name]) for w in live()]
            total = set().union(*(ledger.owned[w.name] for w in live())) if counts else set()
        return len(counts) == n and total == set(range(PARTITIONS)) and max(counts) - min(counts) <= 1 \
            and sum(counts) == PARTITIONS

    # five consumers, then records
    start(5)
    wait_for(lambda: balanced(5), "five consumers to share the partitions")
    produce(server.bootstrap, topic, 0, BATCH)
    wait_for(lambda: ledger.count() >= BATCH, "the first batch to be consumed")

    # the group as the AdminClient sees it (ConsumerGroupDescribe)
    def stable_description():
        d = describe(admin, group)
        return d if d.state == ConsumerGroupState.STABLE and len(d.members) == 5 else None
    desc = wait_for(stable_description, "a stable group of five in describe_consumer_groups")
    assert desc.group_id == group and desc.type == ConsumerGroupType.CONSUMER
    assert desc.partition_assignor == assignor
    described = [tp.partition for m in desc.members for tp in m.assignment.topic_partitions]
    assert sorted(described) == list(range(PARTITIONS))
    assert {m.client_id for m in desc.members} == {w.name for w in live()}
    for m in desc.members:
        assert {tp.partition for tp in m.assignment.topic_partitions} == ledger.owned[m.client_id]
        assert all(tp.topic == topic for tp in m.assignment.topic_partitions)

    # scale down to two while records keep coming
    for w in workers[:3]:
        w.stop.set()
    for w in workers[:3]:
        w.join(DEADLINE_S)
        assert not w.is_alive()
    wait_for(lambda: balanced(2), "two consumers to take over every partition")
    produce(server.bootstrap, topic, BATCH, BATCH)
    wait_for(lambda: ledger.count() >= 2 * BATCH, "the second batch to be consumed")

    # and back up to five
    start(3)
    produce(server.bootstrap, topic, 2 * BATCH, BATCH)
    wait_for(lambda: balanced(5), "five consumers again")
    wait_for(lambda: ledger.count() >= 3 * BATCH, "the third batch to be consumed")

    for w in workers:
        w.stop.set()
    for w in workers:
        w.join(DEADLINE_S)
        assert not w.is_alive()
    errors = [e for w in workers for e in w.errors]
    errors += [f"{w.name} lost partitions {lost}" for w in workers for lost in w.lost]
    assert errors == []

    # every record exactly once, no partition ever owned twice
    per_partition = defaultdict(int)
    for i in range(3 * BATCH):
        per_partition[i % PARTITIONS] += 1
    expected = {(p, o) for p, n in per_partition.items() for o in range(n)}
    assert set(ledger.consumed) == expected
    duplicates = {k: v for k, v in ledger.consumed.items() if len(v) > 1}
    assert duplicates == {}
    ledger.check_no_partition_owned_twice()

    # committed offsets are at the log end
    [future] = admin.list_consumer_group_offsets(
        [__import__("confluent_kafka").ConsumerGroupTopicPartitions(group)]).values()
    committed = {tp.partition: tp.offset for tp in future.result(30).topic_partitions}
    assert committed == dict(per_partition)

    # the group is empty now, and still a consumer group
    final = wait_for(lambda: (d := describe(admin, group)).state == ConsumerGroupState.EMPTY and d,
                     "the group to be empty")
    assert final.members == [] and final.type == ConsumerGroupType.CONSUMER


def test_regex_subscription_and_static_member(server):
    """A regex subscription (ConsumerGroupHeartbeat v1) picks up a topic created later;
    a static member that closes (epoch -2) gets its partitions back when it returns."""
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for f in admin.create_topics([NewTopic("rx-a", 3, 1), NewTopic("rx-b", 2, 1),
                                  NewTopic("other", 2, 1)]).values():
        f.result(30)

    def consumer(instance: str):
        assigned: list[tuple[str, int]] = []
        c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "regex-group",
                      "group.protocol": "consumer", "group.instance.id": instance,
                      "client.id": instance})
        c.subscribe(["^rx-.*"], on_assign=lambda _, ps: assigned.extend(
            (tp.topic, tp.partition) for tp in ps))
        return c, assigned

    def poll_until(c, condition, what):
        deadline = time.monotonic() + DEADLINE_S
        while not condition():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            c.poll(0.1)

    c, assigned = consumer("static-1")
    expected = {("rx-a", 0), ("rx-a", 1), ("rx-a", 2), ("rx-b", 0), ("rx-b", 1)}
    poll_until(c, lambda: set(assigned) == expected, "the regex's topics")
    for f in admin.create_topics([NewTopic("rx-c", 2, 1)]).values():
        f.result(30)
    expected |= {("rx-c", 0), ("rx-c", 1)}
    poll_until(c, lambda: set(assigned) == expected, "the new topic matching the regex")
    before = describe(admin, "regex-group")
    [member] = before.members
    assert member.group_instance_id == "static-1"
    assert {(tp.topic, tp.partition) for tp in member.assignment.topic_partitions} == expected
    c.close()  # a static member leaves with epoch -2: it stays in the group

    after_close = describe(admin, "regex-group")
    assert [m.group_instance_id for m in after_close.members] == ["static-1"]
    c, assigned = consumer("static-1")
    poll_until(c, lambda: set(assigned) == expected, "the static member's partitions back")
    [member] = describe(admin, "regex-group").members
    assert member.member_id != before.members[0].member_id  # a new member id, same assignment
    c.close()
