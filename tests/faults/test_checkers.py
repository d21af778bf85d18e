"""The fault harness's checkers on hand-made histories: each anomaly class
is found where it is, and a correct history (unknown outcomes included)
passes."""
from tests.faults.checkers import (
    anomaly_count,
    check_queue,
    check_register,
    check_transactions,
)
from tests.faults.history import FAIL, INF, OK, UNKNOWN, Op

_ids = iter(range(1, 10**6))


def op(f, key, value, invoke, complete, outcome=OK, process="p", **extra):
    return Op(process, f, key, value, invoke, INF if outcome == UNKNOWN else complete,
              outcome, extra=extra, id=next(_ids))


def kinds(result):
    return {k: a["count"] for k, a in result["anomalies"].items()}


K = ("g", 0)


# --------------------------------------------------------------- register
def test_register_accepts_a_linearizable_history_with_unknown_commits():
    ops = [op("write", K, 1, 0, 1),
           op("read", K, 1, 2, 3),
           op("write", K, 2, 4, 5, UNKNOWN),       # may land any time after 4
           op("read", K, 1, 6, 7),                 # not yet
           op("read", K, 2, 8, 9),                 # now it did
           op("write", K, 3, 10, 12),
           op("read", K, 2, 11, 11.5),             # concurrent with write 3: either is fine
           op("read", K, 3, 13, 14),
           op("write", K, 4, 15, 16, FAIL, error=22),  # fenced, never seen
           op("read", K, 3, 17, 18),
           op("read", K, None, -2, -1)]            # before any write: nothing committed
    result = check_register(ops)
    assert anomaly_count(result) == 0, result
    assert result["counts"]["write:unknown"] == 1


def test_register_finds_a_lost_acknowledged_commit():
    ops = [op("write", K, 1, 0, 1), op("read", K, None, 2, 3)]
    assert kinds(check_register(ops)) == {"lost-commit": 1}


def test_register_finds_a_stale_read_after_a_newer_acknowledged_commit():
    ops = [op("write", K, 1, 0, 1), op("write", K, 2, 2, 3), op("read", K, 1, 4, 5)]
    assert kinds(check_register(ops)) == {"stale-read": 1}


def test_register_finds_a_fenced_commit_that_became_visible():
    ops = [op("write", K, 1, 0, 1, FAIL, error=22), op("read", K, 1, 2, 3)]
    assert kinds(check_register(ops)) == {"fenced-commit-seen": 1}


def test_register_finds_reads_from_the_future_and_of_values_nobody_wrote():
    ops = [op("read", K, 5, 0, 1), op("write", K, 5, 2, 3), op("read", K, 99, 4, 5)]
    assert kinds(check_register(ops)) == {"future-read": 1, "phantom-read": 1}


def test_register_finds_an_unknown_commit_seen_and_then_gone():
    """An unknown commit may or may not happen, but once a fetch saw it, a
    later fetch returning the value it replaced is a loss."""
    ops = [op("write", K, 1, 0, 1), op("write", K, 2, 2, 3, UNKNOWN),
           op("read", K, 2, 4, 5), op("read", K, 1, 6, 7)]
    assert kinds(check_register(ops)) == {"non-monotonic-read": 1}


def test_register_keys_are_independent():
    ops = [op("write", ("g", 0), 1, 0, 1), op("read", ("g", 1), None, 2, 3)]
    assert anomaly_count(check_register(ops)) == 0


# ------------------------------------------------------------------ queue
def produce(value, partition, offset, outcome=OK, t=0.0):
    return op("produce", None, value, t, t + 1, outcome, partition=partition, offset=offset)


def consume(group, partition, offset, value, t):
    return op("consume", (group, partition), value, t, t, offset=offset)


def commit(group, partition, offset, t, outcome=OK):
    return op("commit", (group, partition), offset, t, t + 0.5, outcome)


def test_queue_accepts_redelivery_after_a_rebalance_and_unknown_produces():
    log = {0: {0: "a", 1: "b", 2: "c"}}
    ops = [produce("a", 0, 0), produce("b", 0, 1), produce("c", 0, 2, UNKNOWN),
           produce("d", 0, None, UNKNOWN),                  # never landed: allowed
           consume("g", 0, 0, "a", 3), consume("g", 0, 1, "b", 4), commit("g", 0, 1, 5),
           # a rebalance: the next owner starts at the committed 1 and sees b again
           consume("g", 0, 1, "b", 7), consume("g", 0, 2, "c", 8), commit("g", 0, 3, 9)]
    result = check_queue(ops, log, {("g", 0): 3})
    assert anomaly_count(result) == 0, result
    assert result["counts"]["consume:redelivered"] == 1
    assert result["counts"]["produce:unknown-present"] == 1


def test_queue_finds_lost_moved_and_duplicated_writes():
    log = {0: {0: "a", 1: "c", 2: "c"}}
    ops = [produce("a", 0, 0), produce("b", 0, 1), produce("c", 0, 2), produce("e", 0, 0)]
    assert kinds(check_queue(ops, log)) == {"lost-write": 2, "duplicate-in-log": 1}
    log = {0: {0: "a", 1: "b"}}
    assert kinds(check_queue([produce("b", 0, 0), produce("a", 0, 1)], log)) == {
        "moved-write": 2}


def test_queue_counts_a_copy_under_a_bumped_producer_epoch_apart():
    """The client re-sent it under a new epoch (librdkafka after a message
    timeout): counted; two copies in one epoch are the broker's duplicate."""
    log = {0: {0: "a", 1: "a", 2: "b", 3: "b"}}
    result = check_queue([produce("a", 0, 1), produce("b", 0, 2)], log,
                         final_epochs={0: {0: 4, 1: 5, 2: 5, 3: 5}})
    assert kinds(result) == {"duplicate-in-log": 1}
    assert result["counts"]["duplicate-across-producer-epochs"] == 1


def test_queue_finds_a_read_of_records_the_log_no_longer_has():
    ops = [produce("a", 0, 0), consume("g", 0, 0, "a", 2), consume("g", 0, 1, "x", 3)]
    assert kinds(check_queue(ops, {0: {0: "a"}})) == {"divergent-read": 1}


def test_queue_finds_duplicates_beyond_redelivery_and_commits_ahead():
    log = {0: {0: "a", 1: "b", 2: "c"}}
    ops = [consume("g", 0, 0, "a", 1), consume("g", 0, 1, "b", 2), commit("g", 0, 2, 3),
           consume("g", 0, 0, "a", 5),       # re-read below an acknowledged commit
           commit("g", 0, 3, 6)]             # 2 was never consumed before this commit
    assert kinds(check_queue(ops, log, {("g", 0): 1})) == {
        "duplicate-beyond-redelivery": 1, "committed-ahead-of-consumed": 1, "lost-commit": 1}


# ----------------------------------------------------------- transactions
def txn(values, outcome, t):
    return op("txn", None, values, t, t + 1, outcome)


def test_transactions_accept_exactly_once_output_with_unknown_commits():
    ops = [txn(["0:0:1", "0:1:1"], OK, 0), txn(["0:2:2"], FAIL, 2),
           txn(["0:2:3"], OK, 4), txn(["0:3:4"], UNKNOWN, 6),
           op("txn-read", None, "0:0:1", 1.5, 1.6)]
    result = check_transactions(ops, ["0:0:1", "0:1:1", "0:2:3", "0:3:4"], {0: 4})
    assert anomaly_count(result) == 0, result
    assert result["counts"]["txn:unknown-visible"] == 1


def test_transactions_find_aborted_reads():
    ops = [txn(["0:0:1"], FAIL, 0), op("txn-read", None, "0:0:1", 1, 2)]
    assert kinds(check_transactions(ops, ["0:0:1"], {0: 1})) == {"aborted-read": 2}


def test_transactions_find_duplicates_losses_and_mismatched_offsets():
    ops = [txn(["0:0:1", "0:1:1"], OK, 0), txn(["0:1:2", "0:2:2"], OK, 2),
           txn(["0:4:3"], OK, 4)]
    out = ["0:0:1", "0:1:1", "0:1:2", "0:2:2", "0:4:3"]
    # committed 4: input 3 has no output; input 4's output is ahead of the offsets
    assert kinds(check_transactions(ops, out, {0: 4})) == {
        "duplicate-output": 1, "lost-output": 1, "output-ahead-of-offsets": 1}
    assert kinds(check_transactions(ops, out[:4], {0: 3})) == {
        "duplicate-output": 1, "committed-txn-missing": 1}
