"""confluent-kafka ShareConsumers (KIP-932) against kcoord.

- three members on a three-partition topic, 3,000 records produced while
  they poll: every record delivered, each once, each acknowledgement
  confirmed once;
- explicit acknowledgement: ACCEPT, RELEASE (delivered again with delivery
  count 2), REJECT (never again), and a record released every time is
  delivered exactly group.share.delivery.count.limit times, then archived;
  /metrics, scraped while the member runs, counts each of them, and the
  share lag is the records not yet acknowledged;
- a member SIGKILLed (or SIGSTOPped: its locks run out) while it holds
  records: another member receives those records (delivery count 2);
- the server SIGKILLed mid-run and restarted: no record whose
  acknowledgement was confirmed is delivered again, every other one is.

The share-partition start offset is `latest` (Kafka's default): records are
produced only once the members receive probe records from every partition.
Every wait polls for its condition with a deadline; nothing sleeps for a
fixed time.
"""
from __future__ import annotations

import itertools
import os
import signal
import threading

import pytest

from tests.admin.support import get_json, http_port, scrape, value
from tests.clients.share_workers import Deliveries, ShareWorker, produce, start_holder, wait_for
from tests.support import ServerProcess

pytestmark = pytest.mark.clients

DEADLINE_S = 120.0
LIMIT = 5  # group.share.delivery.count.limit (Kafka's default)


@pytest.fixture
def server(tmp_path):
    proc = ServerProcess(tmp_path / "data", {
        "group.share.min.heartbeat.interval.ms": "200",
        "group.share.heartbeat.interval.ms": "200",
        "group.share.min.record.lock.duration.ms": "1000",
        "group.share.record.lock.duration.ms": "3000",
        "http.listen": "127.0.0.1:0",   # /metrics: the share-group series
    })
    proc.start()
    yield proc
    proc.kill()
    if proc.proc.returncode not in (0, -9, None):
        print(proc.log_text())


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(30)


def flowing(bootstrap: str, topic: str, partitions: int, log: Deliveries) -> None:
    """Produce probe records until the members receive one from every partition
    (their share partitions are loaded, so `latest` is behind us)."""
    counter = itertools.count()

    def seen() -> bool:
        produce(bootstrap, topic, [b"probe-%d" % next(counter) for _ in range(partitions)],
                partitions)
        with log.lock:
            return {p for (p, _), v in log.where.items() if v.startswith(b"probe")} == set(
                range(partitions))
    wait_for(seen, "probe records from every partition", DEADLINE_S, 0.5)


def check(workers) -> None:
    for w in workers:
        assert w.failure is None, f"{w.name}: {w.failure!r}"


def test_three_members_three_partitions_every_record_once(server):
    topic, group = "share-3x3", "share-g1"
    create_topic(server.bootstrap, topic, 3)
    log = Deliveries()
    workers = [ShareWorker(f"m{i}", server.bootstrap, group, topic, log) for i in range(3)]
    for w in workers:
        w.start()
    flowing(server.bootstrap, topic, 3, log)
    values = [b"r%04d" % i for i in range(3000)]
    for chunk in range(3):                                    # while they poll
        produce(server.bootstrap, topic, values[chunk * 1000:(chunk + 1) * 1000], 3)
    wait_for(lambda: log.values() >= set(values) or check(workers), "all 3,000 records",
             DEADLINE_S)
    for w in workers:
        w.finish()
    assert not log.errors, log.errors[:5]
    twice = {v: r for v, r in log.received.items() if v in set(values) and len(r) != 1}
    assert not twice, f"records delivered more than once: {list(twice.items())[:5]}"
    assert all(r[0][1] == 1 for v, r in log.received.items() if v in set(values))
    keys = {k for k, v in log.where.items() if v in set(values)}
    assert {k: log.confirmed[k] for k in keys if log.confirmed[k] != 1} == {}
    assert len({who for v in values for who, _ in log.received[v]}) >= 2   # shared work


def test_explicit_accept_release_reject_and_the_delivery_limit(server):
    from confluent_kafka import AcknowledgeType as Ack
    topic, group = "share-explicit", "share-g2"
    create_topic(server.bootstrap, topic, 1)
    log = Deliveries()

    def decide(msg):
        value = msg.value()
        if value.startswith(b"release"):
            return Ack.RELEASE if msg.delivery_count() == 1 else Ack.ACCEPT
        if value.startswith(b"reject"):
            return Ack.REJECT
        if value.startswith(b"poison"):
            return Ack.RELEASE
        return Ack.ACCEPT

    worker = ShareWorker("explicit", server.bootstrap, group, topic, log, decide)
    worker.start()
    flowing(server.bootstrap, topic, 1, log)
    values = [b"accept-0", b"release-0", b"reject-0", b"poison-0", b"accept-1", b"release-1"]
    produce(server.bootstrap, topic, values, 1)
    wait_for(lambda: len(log.received[b"poison-0"]) >= LIMIT and
             all(len(log.received[v]) >= 2 for v in (b"release-0", b"release-1"))
             or check([worker]), "the releases and the poison record", DEADLINE_S)
    produce(server.bootstrap, topic, [b"end"], 1)           # after the poison was archived
    wait_for(lambda: log.received.get(b"end") or check([worker]), "the end record", DEADLINE_S)
    port = http_port(server)
    with log.lock:
        accepted = {v for v in log.received if decide_value(v) == "accept"}
        first_deliveries = sum(1 for got in log.received.values() for _, c in got if c == 1)
    metric = "kcoord_share_group_record_acknowledgements_total"
    # acknowledgements reach the server after the deliveries the log saw
    samples = wait_for(lambda: (lambda s: s if value(s, metric, group=group, ack_type="Accept")
                                >= len(accepted) else None)(scrape(port)),
                       "every acceptance counted", DEADLINE_S)
    assert value(samples, metric, group=group, ack_type="Accept") == len(accepted)
    assert value(samples, metric, group=group, ack_type="Release") == 2 + LIMIT
    assert value(samples, metric, group=group, ack_type="Reject") == 1
    archived = "kcoord_share_group_records_archived_total"
    assert value(samples, archived, group=group, reason="rejected") == 1
    assert value(samples, archived, group=group, reason="delivery_limit") == 1
    acquired = value(samples, "kcoord_share_group_records_acquired_total", group=group)
    histogram = "kcoord_share_group_record_delivery_count"
    assert value(samples, histogram + "_count", group=group) == acquired
    assert value(samples, histogram + "_bucket", group=group, le="1.0") >= first_deliveries
    assert (value(samples, histogram + "_bucket", group=group, le="5.0")
            - value(samples, histogram + "_bucket", group=group, le="4.0")) >= 1  # the poison
    assert value(samples, "kcoord_group_coordinator_share_groups", state="Stable") == 1
    lag = ("kcoord_share_group_lag", (("group", group), ("partition", "0"), ("topic", topic)))
    wait_for(lambda: scrape(port).get(lag) == 0, "no share lag once every record is done",
             DEADLINE_S)
    worker.finish()
    produce(server.bootstrap, topic, [b"late-%d" % i for i in range(3)], 1)
    # nobody consumes: the share lag is the three records not yet acknowledged
    wait_for(lambda: scrape(port).get(lag) == 3, "a share lag of 3", DEADLINE_S)
    _, status = get_json(port, "/status.json")
    row = next(g for g in status["groups"] if g["group"] == group)
    assert row["protocol"] == "share" and row["lag"] == 3 and row["partitions"] == 1
    counts = {v: [c for _, c in log.received[v]] for v in values}
    assert counts[b"accept-0"] == [1] and counts[b"accept-1"] == [1]
    assert counts[b"release-0"] == [1, 2] and counts[b"release-1"] == [1, 2]
    assert counts[b"reject-0"] == [1]                        # never redelivered
    assert counts[b"poison-0"] == list(range(1, LIMIT + 1))  # archived at the limit


def decide_value(value: bytes) -> str:
    """What the explicit test's member finally does with a value."""
    if value.startswith(b"reject"):
        return "reject"
    if value.startswith(b"poison"):
        return "archived"
    return "accept"      # a release-* value is accepted on its second delivery


@pytest.mark.parametrize("how", ["SIGKILL", "SIGSTOP"])
def test_member_killed_holding_records_others_get_them(server, how):
    """SIGKILL closes the member's connection (its session ends: released at
    once); SIGSTOP keeps it open (the records come back when their lock
    expires, group.share.record.lock.duration.ms)."""
    topic, group = f"share-{how.lower()}", f"share-g3-{how.lower()}"
    create_topic(server.bootstrap, topic, 1)
    holder = start_holder(server.bootstrap, group, topic)
    held: list[tuple[int, int]] = []
    threading.Thread(target=lambda: held.extend(tuple(map(int, line.split()))
                                                for line in holder.stdout), daemon=True).start()
    try:
        counter = itertools.count()

        def holding() -> bool:
            produce(server.bootstrap, topic, [b"h%d" % next(counter) for _ in range(5)], 1)
            return bool(held)
        wait_for(holding, "the holder acquiring records", DEADLINE_S, 0.5)
        log = Deliveries()
        other = ShareWorker("other", server.bootstrap, group, topic, log)
        other.start()
        flowing(server.bootstrap, topic, 1, log)    # the other member is assigned and fetching
        os.kill(holder.pid, getattr(signal, how))
        if how == "SIGKILL":
            holder.wait(10)
        held = list(held)                           # what it printed before it stopped
        wait_for(lambda: all(k in log.where for k in held) or check([other]),
                 "the killed member's records at the other member", DEADLINE_S)
        other.finish()
        for key in held:
            counts = [c for _, c in log.received[log.where[key]]]
            assert counts and counts[0] >= 2, (key, counts)     # delivered before, to the holder
        # /metrics: what the holder held came back by lock expiry or by its session ending
        samples, where = scrape(http_port(server)), dict(group=group, topic=topic, partition=0)
        returned = (value(samples, "kcoord_share_partition_acquisition_lock_timeout_total", **where)
                    + value(samples, "kcoord_share_partition_session_release_total", **where))
        assert returned >= len(held), (returned, held)
    finally:
        if holder.poll() is None:
            holder.kill()               # a stopped process too
            holder.wait(10)


def test_server_killed_and_restarted_acknowledged_records_never_again(server):
    from confluent_kafka import AcknowledgeType as Ack
    topic, group = "share-restart", "share-g4"
    create_topic(server.bootstrap, topic, 1)
    log = Deliveries()
    worker = ShareWorker("acker", server.bootstrap, group, topic, log, lambda _m: Ack.ACCEPT)
    worker.start()
    flowing(server.bootstrap, topic, 1, log)
    values = [b"s%04d" % i for i in range(600)]
    produce(server.bootstrap, topic, values[:300], 1)
    wait_for(lambda: len(log.confirmed_values() & set(values)) >= 100 or check([worker]),
             "100 acknowledgements confirmed", DEADLINE_S)
    server.kill()
    acked_before = log.confirmed_values() & set(values)
    server.start()
    produce(server.bootstrap, topic, values[300:], 1)
    wait_for(lambda: log.values() >= set(values) or check([worker]),
             "every record after the restart", DEADLINE_S)
    worker.finish()
    again = [v for v in acked_before if len(log.received[v]) != 1]
    assert not again, f"acknowledged before the kill, delivered again: {again[:5]}"
