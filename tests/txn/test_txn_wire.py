"""Transaction APIs at the wire level against a real `kcoord serve`: errors
and version translations clients depend on, the KIP-890 verify-only form,
produce-side checks, read_committed Fetch with the aborted list, and the
describe APIs."""
from __future__ import annotations

import time

import pytest

from kcoord.protocol.errors import Err
from kcoord.protocol.records import build_batch
from tests.clients.wire import WireClient, create_topic, produce
from tests.support import ServerProcess

INIT, ADD_PARTS, ADD_OFFSETS, END, TXN_COMMIT = 22, 24, 25, 26, 28
DESCRIBE_PRODUCERS, DESCRIBE_TXNS, LIST_TXNS, FETCH, LIST_OFFSETS = 61, 65, 66, 1, 2


def wait_loaded(c, timeout: float = 60.0) -> None:
    """Until the transaction coordinator has loaded its log (it answers
    COORDINATOR_LOAD_IN_PROGRESS before, which real clients retry)."""
    deadline = time.monotonic() + timeout
    while c.request(LIST_TXNS, 0, {"state_filters": [], "producer_id_filters": []})[
            "error_code"] == Err.COORDINATOR_LOAD_IN_PROGRESS:
        assert time.monotonic() < deadline, "transaction state never loaded"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def port(tmp_path_factory):
    srv = ServerProcess(tmp_path_factory.mktemp("txnwire") / "data",
                        settings={"transaction.max.timeout.ms": "60000"}).start()
    with WireClient(srv.port) as c:
        assert create_topic(c, "t", 2)["error_code"] == 0
        wait_loaded(c)
    yield srv.port
    srv.kill()


@pytest.fixture
def c(port):
    with WireClient(port) as client:
        yield client


def init(c, tid: str, version: int = 4, timeout: int = 10000, pid: int = -1, epoch: int = -1):
    return c.request(INIT, version, {"transactional_id": tid, "transaction_timeout_ms": timeout,
                                     "producer_id": pid, "producer_epoch": epoch})


def add(c, tid, pid, epoch, parts, version=3):
    resp = c.request(ADD_PARTS, version, {
        "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in parts.items()]})
    return {(t["name"], p["partition_index"]): p["partition_error_code"]
            for t in resp["results_by_topic_v3_and_below"] for p in t["results_by_partition"]}


def end(c, tid, pid, epoch, commit, version=3):
    return c.request(END, version, {"transactional_id": tid, "producer_id": pid,
                                    "producer_epoch": epoch, "committed": commit})["error_code"]


def txn_batch(pid, epoch, values, transactional=True):
    return build_batch([(None, v, [], 1) for v in values], producer_id=pid,
                       producer_epoch=epoch, base_sequence=0, transactional=transactional)


def test_init_errors_and_fenced_translation(c):
    assert init(c, "w-1", timeout=0)["error_code"] == Err.INVALID_TRANSACTION_TIMEOUT
    assert init(c, "w-1", timeout=60001)["error_code"] == Err.INVALID_TRANSACTION_TIMEOUT
    assert init(c, "", version=4)["error_code"] == Err.INVALID_REQUEST
    first = init(c, "w-1")
    second = init(c, "w-1")
    assert second["producer_id"] == first["producer_id"]
    assert second["producer_epoch"] == first["producer_epoch"] + 1
    pid, old = first["producer_id"], first["producer_epoch"]
    # PRODUCER_FENCED (90) for v2+ of AddPartitions, INVALID_PRODUCER_EPOCH (47) before
    assert set(add(c, "w-1", pid, old, {"t": [0]}, version=3).values()) == {Err.PRODUCER_FENCED}
    assert set(add(c, "w-1", pid, old, {"t": [0]}, version=1).values()) == \
        {Err.INVALID_PRODUCER_EPOCH}
    assert end(c, "w-1", pid, old, True, version=1) == Err.INVALID_PRODUCER_EPOCH
    assert end(c, "w-1", pid + 1, second["producer_epoch"], True) == \
        Err.INVALID_PRODUCER_ID_MAPPING


def test_unknown_partition_fails_the_whole_add(c):
    r = init(c, "w-2")
    codes = add(c, "w-2", r["producer_id"], r["producer_epoch"], {"t": [0, 9], "nope": [0]})
    assert codes == {("t", 0): Err.OPERATION_NOT_ATTEMPTED,
                     ("t", 9): Err.UNKNOWN_TOPIC_OR_PARTITION,
                     ("nope", 0): Err.UNKNOWN_TOPIC_OR_PARTITION}
    # nothing was added: EndTxn on the still-empty transaction is INVALID_TXN_STATE
    assert end(c, "w-2", r["producer_id"], r["producer_epoch"], True) == Err.INVALID_TXN_STATE


def test_verify_only_form_and_produce_checks(c):
    r = init(c, "w-3")
    pid, epoch = r["producer_id"], r["producer_epoch"]
    # a transactional batch to a partition not in the transaction is refused
    assert produce(c, "t", 1, txn_batch(pid, epoch, [b"x"]))["error_code"] == \
        Err.INVALID_TXN_STATE
    assert set(add(c, "w-3", pid, epoch, {"t": [1]}).values()) == {Err.NONE}
    resp = c.request(ADD_PARTS, 4, {"transactions": [{
        "transactional_id": "w-3", "producer_id": pid, "producer_epoch": epoch,
        "verify_only": True, "topics": [{"name": "t", "partitions": [0, 1]}]}]})
    [txn] = resp["results_by_transaction"]
    codes = {p["partition_index"]: p["partition_error_code"]
             for p in txn["topic_results"][0]["results_by_partition"]}
    assert codes == {0: Err.TRANSACTION_ABORTABLE, 1: Err.NONE}
    start = produce(c, "t", 1, txn_batch(pid, epoch, [b"a1", b"a2"]))
    assert start["error_code"] == Err.NONE
    # a plain batch of the same producer inside its open transaction
    assert produce(c, "t", 1, txn_batch(pid, epoch, [b"p"], transactional=False))[
        "error_code"] == Err.INVALID_TXN_STATE
    # a client control batch
    ctl = build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", [], 1)], control=True,
                      transactional=True, producer_id=pid, producer_epoch=epoch)
    assert produce(c, "t", 1, ctl)["error_code"] == Err.INVALID_RECORD
    # DescribeProducers shows the open transaction's first offset
    resp = c.request(DESCRIBE_PRODUCERS, 0, {"topics": [{"name": "t",
                                                          "partition_indexes": [1]}]})
    [prod] = [p for p in resp["topics"][0]["partitions"][0]["active_producers"]
              if p["producer_id"] == pid]
    assert prod["current_txn_start_offset"] == start["base_offset"]
    # read_committed stops at the open transaction; the abort then lists it
    assert end(c, "w-3", pid, epoch, False) == Err.NONE
    fetch = c.request(FETCH, 12, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
        "isolation_level": 1, "session_id": 0, "session_epoch": -1, "topics": [{
            "topic": "t", "topic_id": bytes(16), "partitions": [{
                "partition": 1, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                "log_start_offset": -1, "current_leader_epoch": -1, "last_fetched_epoch": -1}]}],
        "forgotten_topics_data": [], "rack_id": ""})
    part = fetch["responses"][0]["partitions"][0]
    assert part["last_stable_offset"] == part["high_watermark"]
    assert {"producer_id": pid, "first_offset": start["base_offset"]} in [
        {k: a[k] for k in ("producer_id", "first_offset")} for a in part["aborted_transactions"]]


def test_txn_offset_commit_needs_the_group_partition_in_the_transaction(c):
    init(c, "w-4")
    r = init(c, "w-4")  # epoch 1: epoch 0 is stale
    pid, epoch = r["producer_id"], r["producer_epoch"]
    body = {"transactional_id": "w-4", "group_id": "wg", "producer_id": pid,
            "producer_epoch": epoch, "generation_id": -1, "member_id": "",
            "group_instance_id": None, "topics": [{"name": "t", "partitions": [
                {"partition_index": 0, "committed_offset": 3, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}]}

    def code(version):
        return c.request(TXN_COMMIT, version, body)["topics"][0]["partitions"][0]["error_code"]
    assert code(3) == Err.INVALID_TXN_STATE and code(4) == Err.TRANSACTION_ABORTABLE
    assert c.request(ADD_OFFSETS, 3, {"transactional_id": "w-4", "producer_id": pid,
                                      "producer_epoch": epoch,
                                      "group_id": "wg"})["error_code"] == Err.NONE
    assert code(3) == Err.NONE
    stale = dict(body, producer_epoch=epoch - 1)
    assert c.request(TXN_COMMIT, 3, stale)["topics"][0]["partitions"][0][
        "error_code"] == Err.INVALID_PRODUCER_EPOCH


def test_describe_and_list_transactions(c):
    r = init(c, "w-5")
    assert set(add(c, "w-5", r["producer_id"], r["producer_epoch"], {"t": [0]}).values()) == \
        {Err.NONE}
    resp = c.request(DESCRIBE_TXNS, 0, {"transactional_ids": ["w-5", "never"]})
    got, missing = resp["transaction_states"]
    assert (got["transaction_state"], got["producer_id"], got["topics"]) == (
        "Ongoing", r["producer_id"], [{"topic": "t", "partitions": [0]}])
    assert missing["error_code"] == Err.TRANSACTIONAL_ID_NOT_FOUND
    # Kafka leaves every other field at its schema default (0): a strict decoder checks
    assert (missing["transaction_start_time_ms"], missing["producer_id"],
            missing["producer_epoch"], missing["transaction_timeout_ms"],
            missing["transaction_state"], missing["topics"]) == (0, 0, 0, 0, "", [])
    listed = c.request(LIST_TXNS, 1, {"state_filters": ["Ongoing"], "producer_id_filters": [],
                                      "duration_filter": -1})
    assert "w-5" in [t["transactional_id"] for t in listed["transaction_states"]]
    assert end(c, "w-5", r["producer_id"], r["producer_epoch"], True) == Err.NONE
    assert end(c, "w-5", r["producer_id"], r["producer_epoch"], True) == Err.NONE  # retry
    assert end(c, "w-5", r["producer_id"], r["producer_epoch"], False) == Err.INVALID_TXN_STATE


def test_idempotent_retry_is_not_written_twice(c):
    r = c.request(INIT, 4, {"transactional_id": None, "transaction_timeout_ms": 1000,
                            "producer_id": -1, "producer_epoch": -1})
    pid = r["producer_id"]

    def batch(seq):
        return build_batch([(None, b"i%d" % seq, [], 1)], producer_id=pid, producer_epoch=0,
                           base_sequence=seq)
    first = produce(c, "t", 0, batch(0))
    again = produce(c, "t", 0, batch(0))  # the client's retry after a lost answer
    assert (again["error_code"], again["base_offset"]) == (Err.NONE, first["base_offset"])
    assert produce(c, "t", 0, batch(5))["error_code"] == Err.OUT_OF_ORDER_SEQUENCE_NUMBER
    nxt = produce(c, "t", 0, batch(1))
    assert (nxt["error_code"], nxt["base_offset"]) == (Err.NONE, first["base_offset"] + 1)


def test_restart_finishes_a_logged_prepare_commit(tmp_path):
    """A crash after PrepareCommit was logged, before any marker: the restarted
    coordinator writes the COMMIT markers and CompleteCommit itself."""
    from kcoord.log import PartitionLog
    from kcoord.txn.coordinator import TxnCoordinator
    from kcoord.txn.records import PREPARE_COMMIT, TxnValue, encode_key, encode_value
    srv = ServerProcess(tmp_path / "data").start()
    try:
        with WireClient(srv.port) as c:
            assert create_topic(c, "p", 1)["error_code"] == 0
            wait_loaded(c)
            r = init(c, "crash-1")
            pid, epoch = r["producer_id"], r["producer_epoch"]
            assert set(add(c, "crash-1", pid, epoch, {"p": [0]}).values()) == {Err.NONE}
            assert produce(c, "p", 0, txn_batch(pid, epoch, [b"kept"]))["error_code"] == 0
        srv.kill()
        # what EndTxn(commit) logs first, appended while the server is down
        partition = TxnCoordinator().partition_of("crash-1")
        plog = PartitionLog(tmp_path / "data" / f"__transaction_state-{partition}")
        value = TxnValue(pid, epoch, 10000, PREPARE_COMMIT, (("p", 0),), 1, 1)
        plog.append(build_batch([(encode_key("crash-1"), encode_value(value), [], 1)]))
        plog.close()
        srv.start()
        with WireClient(srv.port) as c:
            deadline = time.monotonic() + 60
            while True:
                [state] = c.request(DESCRIBE_TXNS, 0, {"transactional_ids": ["crash-1"]})[
                    "transaction_states"]
                if state["transaction_state"] == "CompleteCommit":
                    break
                assert time.monotonic() < deadline, state
                time.sleep(0.1)
            resp = c.request(LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 1, "topics": [
                {"name": "p", "partitions": [{"partition_index": 0, "timestamp": -1,
                                              "current_leader_epoch": -1}]}]})
            # data at 0, COMMIT marker at 1: the LSO is past both
            assert resp["topics"][0]["partitions"][0]["offset"] == 2
    finally:
        srv.kill()


def test_sequences_reused_after_an_abort_are_refused_not_acknowledged(c):
    # seed 23's fault run: the batch of an aborted transaction, taken for
    # unwritten by librdkafka, had its sequences reused by the next
    # transaction; acknowledged at the old offset, a commit then lost it
    r = init(c, "w-reuse")
    pid, epoch = r["producer_id"], r["producer_epoch"]
    assert add(c, "w-reuse", pid, epoch, {"t": [0]}) == {("t", 0): Err.NONE}
    assert produce(c, "t", 0, txn_batch(pid, epoch, [b"old1", b"old2"]))["error_code"] == 0
    assert end(c, "w-reuse", pid, epoch, False) == Err.NONE
    assert add(c, "w-reuse", pid, epoch, {"t": [0]}) == {("t", 0): Err.NONE}
    assert produce(c, "t", 0, txn_batch(pid, epoch, [b"new1", b"new2"]))["error_code"] == \
        Err.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_next_transaction_waits_for_the_completion_not_concurrent_transactions(c):
    # EndTxn answers once Prepare* is durable; the markers follow, and the
    # next AddPartitions waits for them instead of CONCURRENT_TRANSACTIONS
    r = init(c, "w-next")
    pid, epoch = r["producer_id"], r["producer_epoch"]
    for i in range(10):
        assert add(c, "w-next", pid, epoch, {"t": [0, 1]}) == {("t", 0): 0, ("t", 1): 0}
        assert end(c, "w-next", pid, epoch, i % 2 == 0) == Err.NONE
    assert add(c, "w-next", pid, epoch, {"t": [0]}) == {("t", 0): Err.NONE}
