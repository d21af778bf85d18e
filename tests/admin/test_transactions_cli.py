"""`kcoord transactions` (kafka-transactions.sh's subcommands) as a real
process against a real server holding an open transaction of a
confluent-kafka producer: tables with Kafka's columns, refusals on stderr
with exit 1, and abort closing the transaction by its start offset."""
from __future__ import annotations

import subprocess
import sys

import pytest

from kcoord.protocol.errors import Err
from tests.clients.wire import WireClient, create_topic
from tests.support import ServerProcess

pytestmark = [pytest.mark.clients]


def txns(server, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kcoord.cli", "transactions",
                           "--bootstrap-server", server.bootstrap, *args],
                          capture_output=True, text=True, timeout=60)


def rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def open_txn(tmp_path_factory):
    from confluent_kafka import Producer
    server = ServerProcess(tmp_path_factory.mktemp("txcli") / "data",
                           settings={"group.initial.rebalance.delay.ms": "0"}).start()
    producer = None
    try:
        with WireClient(server.port) as c:
            assert create_topic(c, "t")["error_code"] == Err.NONE
        # the longest timeout: a loaded machine must not see the coordinator abort it
        producer = Producer({"bootstrap.servers": server.bootstrap, "transactional.id": "h-1",
                             "linger.ms": 1, "transaction.timeout.ms": 900000})
        producer.init_transactions(30)
        producer.begin_transaction()
        for i in range(5):
            producer.produce("t", value=b"%d" % i, partition=0)
        assert producer.flush(30) == 0
        yield server
    finally:
        server.kill()


def test_list_describe_and_producers(open_txn):
    out = txns(open_txn, "list")
    assert out.returncode == 0, out.stderr
    table = rows(out.stdout)
    assert table[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    assert table[1][0] == "h-1" and table[1][3] == "Ongoing"
    assert "\t" in out.stdout.splitlines()[0]  # Kafka's prettyPrintTable: padded, tab after each
    pid = table[1][2]

    out = txns(open_txn, "describe", "--transactional-id", "h-1")
    assert out.returncode == 0, out.stderr
    head, row = rows(out.stdout)
    assert head == ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                    "TransactionState", "TransactionTimeoutMs", "CurrentTransactionStartTimeMs",
                    "TransactionDurationMs", "TopicPartitions"]
    assert (row[1], row[2], row[4], row[8]) == ("h-1", pid, "Ongoing", "t-0")

    out = txns(open_txn, "describe", "--transactional-id", "nope")
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.startswith("Failed to describe transaction state of transactional-id "
                                 "`nope`: The transactionalId could not be found.")

    out = txns(open_txn, "describe-producers", "--topic", "t", "--partition", "0")
    assert out.returncode == 0, out.stderr
    head, row = rows(out.stdout)
    assert head == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                    "LastTimestamp", "CurrentTransactionStartOffset"]
    assert row[0] == pid and row[5] == "0"

    # its coordinator still holds the transaction: not hanging
    out = txns(open_txn, "find-hanging", "--topic", "t", "--max-transaction-timeout", "0")
    assert out.returncode == 0, out.stderr
    assert rows(out.stdout) == [["Topic", "Partition", "ProducerId", "ProducerEpoch",
                                 "CoordinatorEpoch", "StartOffset", "LastTimestamp",
                                 "Duration(min)"]]
    out = txns(open_txn, "find-hanging")
    assert out.returncode == 1 and "requires either --topic or --broker-id" in out.stderr


def test_abort_by_start_offset(open_txn):
    out = txns(open_txn, "abort", "--topic", "t", "--partition", "0")
    assert out.returncode == 1 and "must be identified either with --start-offset" in out.stderr
    out = txns(open_txn, "abort", "--topic", "t", "--partition", "0", "--start-offset", "0")
    assert out.returncode == 0, out.stderr
    out = txns(open_txn, "describe-producers", "--topic", "t", "--partition", "0")
    assert all(r[5] == "None" for r in rows(out.stdout)[1:]), out.stdout
    out = txns(open_txn, "abort", "--topic", "t", "--partition", "0", "--start-offset", "0")
    assert out.returncode == 1
    assert ("Could not find any open transactions starting at offset 0 on partition t-0"
            in out.stderr)
