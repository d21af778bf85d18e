"""Transactions with real clients (issue 14): commit and abort visibility
under read_committed and read_uncommitted, fencing by a second producer with
the same transactional id, the server aborting a transaction left open past
its timeout (the LSO then moves on), the server SIGKILLed mid-transaction,
and a consume-transform-produce loop killed at random points that still
yields its output exactly once with committed offsets matching it.
"""
from __future__ import annotations

import random
import subprocess
import sys
import time

import pytest

from tests.clients.wire import WireClient, create_topic
from tests.support import ServerProcess

pytestmark = [pytest.mark.clients, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

DEADLINE_S = 120.0
FAST_TXN_SETTINGS = {"group.initial.rebalance.delay.ms": "0",
                     "transaction.abort.timed.out.transaction.cleanup.interval.ms": "300"}


@pytest.fixture(scope="module")
def txn_server(tmp_path_factory):
    """One server for the tests that do not kill it: each has its own topics,
    transactional ids and groups (the other clients share the input topic "in")."""
    proc = ServerProcess(tmp_path_factory.mktemp("txn") / "data", settings=FAST_TXN_SETTINGS).start()
    make_topic(proc, "in")
    yield proc
    proc.kill()


def make_topic(server, name: str, partitions: int = 1) -> None:
    with WireClient(server.port) as c:
        assert create_topic(c, name, partitions)["error_code"] == 0


def read_all(bootstrap: str, topic: str, partitions: int, isolation: str,
             expect: int | None = None, settle_s: float = 2.0) -> list[bytes]:
    """Every value of the topic under `isolation`, read until `expect` values
    arrived (or nothing new came for settle_s)."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{random.random()}",
                  "isolation.level": isolation, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[bytes] = []
    deadline = time.monotonic() + DEADLINE_S
    quiet_until = time.monotonic() + settle_s
    while time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and not m.error():
            got.append(m.value())
            quiet_until = time.monotonic() + settle_s
        if expect is not None and len(got) >= expect and time.monotonic() > quiet_until:
            break
        if expect is None and time.monotonic() > quiet_until:
            break
    c.close()
    return got


def list_offsets(port: int, topic: str, partition: int, isolation: int) -> int:
    with WireClient(port) as c:
        resp = c.request(2, 7, {"replica_id": -1, "isolation_level": isolation, "topics": [
            {"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1,
                                            "current_leader_epoch": -1}]}]})
    return resp["topics"][0]["partitions"][0]["offset"]


def txn_producer(bootstrap: str, txn_id: str, timeout_ms: int = 60000):
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                  "transaction.timeout.ms": timeout_ms, "linger.ms": 1})
    p.init_transactions(30)
    return p


def wait_until(predicate, what: str, timeout: float = DEADLINE_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


# ------------------------------------------------------------------ basics
def test_commit_visible_abort_only_to_read_uncommitted(txn_server):
    make_topic(txn_server, "out", 2)
    bs = txn_server.bootstrap
    p = txn_producer(bs, "basic")
    p.begin_transaction()
    for i in range(6):
        p.produce("out", value=b"c%d" % i, partition=i % 2)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(4):
        p.produce("out", value=b"a%d" % i, partition=i % 2)
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce("out", value=b"c-last", partition=1)
    p.commit_transaction(30)
    committed = sorted([b"c%d" % i for i in range(6)] + [b"c-last"])
    assert sorted(read_all(bs, "out", 2, "read_committed", 7)) == committed
    assert sorted(read_all(bs, "out", 2, "read_uncommitted", 11)) == sorted(
        committed + [b"a%d" % i for i in range(4)])
    # markers are in the log: LSO = log end when nothing is open
    assert list_offsets(txn_server.port, "out", 1, 1) == list_offsets(txn_server.port, "out", 1, 0)


def test_second_producer_fences_the_first(txn_server):
    from confluent_kafka import KafkaException
    make_topic(txn_server, "fence")
    bs = txn_server.bootstrap
    a = txn_producer(bs, "shared")
    a.begin_transaction()
    a.produce("fence", value=b"zombie")
    a.flush(30)
    # the open transaction pins the LSO
    assert list_offsets(txn_server.port, "fence", 0, 1) == 0
    b = txn_producer(bs, "shared")  # aborts a's transaction with a bumped epoch
    b.begin_transaction()
    b.produce("fence", value=b"fresh")
    b.commit_transaction(30)
    with pytest.raises(KafkaException) as err:
        a.produce("fence", value=b"zombie-2")
        a.commit_transaction(30)
    assert err.value.args[0].fatal() or "fenced" in str(err.value).lower()
    assert read_all(bs, "fence", 1, "read_committed", 1) == [b"fresh"]
    assert sorted(read_all(bs, "fence", 1, "read_uncommitted", 2)) == [b"fresh", b"zombie"]


def test_open_transaction_is_aborted_after_its_timeout(txn_server):
    make_topic(txn_server, "slow")
    bs = txn_server.bootstrap
    p = txn_producer(bs, "slowpoke", timeout_ms=2000)
    p.begin_transaction()
    p.produce("slow", value=b"never")
    p.flush(30)
    end = list_offsets(txn_server.port, "slow", 0, 0)
    assert end == 1 and list_offsets(txn_server.port, "slow", 0, 1) == 0
    # the server aborts it: an ABORT marker follows and the LSO reaches the log end
    wait_until(lambda: list_offsets(txn_server.port, "slow", 0, 1) == 2, "the timeout abort")
    assert read_all(bs, "slow", 1, "read_committed") == []
    with WireClient(txn_server.port) as c:
        [state] = c.request(65, 0, {"transactional_ids": ["slowpoke"]})["transaction_states"]
    assert state["transaction_state"] == "CompleteAbort" and state["producer_epoch"] == 1


def test_server_killed_mid_transaction(tmp_path):
    srv = ServerProcess(tmp_path / "data", settings=FAST_TXN_SETTINGS).start()
    try:
        make_topic(srv, "k", 2)
        bs = srv.bootstrap
        p = txn_producer(bs, "crashy", timeout_ms=3000)
        p.begin_transaction()
        p.produce("k", value=b"done", partition=0)
        p.commit_transaction(30)
        p.begin_transaction()
        p.produce("k", value=b"open", partition=0)
        p.produce("k", value=b"open", partition=1)
        p.flush(30)
        srv.kill()
        srv.start()
        # the open transaction came back Ongoing (LSO pinned), then timed out
        wait_until(lambda: list_offsets(srv.port, "k", 1, 1) == 2, "abort after restart")
        assert list_offsets(srv.port, "k", 0, 1) == list_offsets(srv.port, "k", 0, 0) == 4
        assert read_all(bs, "k", 2, "read_committed", 1) == [b"done"]
        # a new producer with the same id works after the restart
        q = txn_producer(bs, "crashy")
        q.begin_transaction()
        q.produce("k", value=b"after", partition=1)
        q.commit_transaction(30)
        assert sorted(read_all(bs, "k", 2, "read_committed", 2)) == [b"after", b"done"]
    finally:
        srv.kill()


# ------------------------------------------------- consume-transform-produce
def _produce_input(bs: str, topic: str, partitions: int, total: int) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bs, "acks": "all", "linger.ms": 5})
    for i in range(total):
        p.produce(topic, value=b"v%05d" % i, partition=i % partitions)
    assert p.flush(60) == 0


def _committed(bs: str, group: str, topic: str, partitions: int) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bs, "group.id": group,
                  "isolation.level": "read_committed"})
    got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    c.close()
    return [tp.offset for tp in got]


def _run_copier(bs: str, group: str, total: int, partitions: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tests.clients.txn_copier", bs, "in", "out",
                             group, "copier-1", str(partitions), str(total)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("victim", ["client", "server"])
def test_copy_loop_killed_at_random_points_is_exactly_once(tmp_path, victim):
    total, partitions = 600, 2
    rng = random.Random(14 if victim == "client" else 41)
    srv = ServerProcess(tmp_path / "data", settings=FAST_TXN_SETTINGS).start()
    try:
        make_topic(srv, "in", partitions)
        make_topic(srv, "out", partitions)
        _produce_input(srv.bootstrap, "in", partitions, total)
        kills = 0
        for _ in range(3):  # three runs cut short by SIGKILL at a random point
            before = sum(list_offsets(srv.port, "out", p, 0) for p in range(partitions))
            proc = _run_copier(srv.bootstrap, "copy", total, partitions)
            # once this run has written something, kill it a random moment later
            wait_until(lambda: proc.poll() is not None or sum(
                list_offsets(srv.port, "out", p, 0) for p in range(partitions)) > before,
                "the copier's first output")
            time.sleep(rng.uniform(0.0, 0.8))
            if proc.poll() is None:
                if victim == "client":
                    proc.kill()
                else:
                    srv.kill()
                    proc.kill()
                    srv.start()
                kills += 1
            proc.wait(30)
        proc = _run_copier(srv.bootstrap, "copy", total, partitions)
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        assert kills >= 1
        out = read_all(srv.bootstrap, "out", partitions, "read_committed", total)
        assert len(out) == len(set(out)) == total, (len(out), len(set(out)))
        assert sorted(out) == [b"v%05d" % i for i in range(total)]
        assert _committed(srv.bootstrap, "copy", "in", partitions) == [total // partitions] * 2
    finally:
        srv.kill()


# ------------------------------------------------------------- other clients
def _kafka_python(bs: str, topic: str, group: str) -> None:
    from kafka import KafkaProducer
    from kafka.structs import OffsetAndMetadata, TopicPartition
    p = KafkaProducer(bootstrap_servers=bs, transactional_id="kp-tx")
    p.init_transactions()
    p.begin_transaction()
    for v in (b"c0", b"c1", b"c2"):
        p.send(topic, v)
    p.send_offsets_to_transaction({TopicPartition("in", 0): OffsetAndMetadata(5, "", -1)}, group)
    p.commit_transaction()
    p.begin_transaction()
    for v in (b"a0", b"a1"):
        p.send(topic, v)
    p.flush()
    p.abort_transaction()
    p.close()


def _aiokafka(bs: str, topic: str, group: str) -> None:
    import asyncio

    from aiokafka import AIOKafkaProducer
    from aiokafka.structs import TopicPartition

    async def main():
        p = AIOKafkaProducer(bootstrap_servers=bs, transactional_id="aio-tx",
                             enable_idempotence=True)
        await p.start()
        try:
            async with p.transaction():
                for v in (b"c0", b"c1", b"c2"):
                    await p.send_and_wait(topic, v)
                await p.send_offsets_to_transaction({TopicPartition("in", 0): 5}, group)
            await p.begin_transaction()
            for v in (b"a0", b"a1"):
                await p.send_and_wait(topic, v)
            await p.abort_transaction()
        finally:
            await p.stop()
    asyncio.run(asyncio.wait_for(main(), DEADLINE_S))


def _kafkajs(bs: str, topic: str, group: str) -> None:
    import shutil
    from pathlib import Path
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    script = Path(__file__).parent / "js" / "transactions.js"
    proc = subprocess.run(["node", str(script), bs, topic, group], capture_output=True,
                          text=True, timeout=DEADLINE_S)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka", "kafkajs"])
def test_transactional_producers_of_other_clients(txn_server, client):
    out = f"out-{client}"
    make_topic(txn_server, out)
    bs = txn_server.bootstrap
    {"kafka-python": _kafka_python, "aiokafka": _aiokafka, "kafkajs": _kafkajs}[client](
        bs, out, f"{client}-g")
    assert sorted(read_all(bs, out, 1, "read_committed", 3)) == [b"c0", b"c1", b"c2"]
    assert sorted(read_all(bs, out, 1, "read_uncommitted", 5)) == [
        b"a0", b"a1", b"c0", b"c1", b"c2"]
    assert _committed(bs, f"{client}-g", "in", 1) == [5]
