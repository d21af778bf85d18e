"""Burrow's rules, case by case (the cases of Burrow's caching_test.go, restated)."""
from __future__ import annotations

from kcoord.observe import burrow_rules as burrow
from kcoord.observe.burrow_rules import (
    OK, REWIND, STALL, STOP, WARN, Commit, LogEndHistory, commit_window, evaluate_partition,
    group_status, lag_seconds, partition_status,
)


def w(*items):
    """(offset, timestamp s, lag) triples -> commits, timestamps in ms."""
    return [Commit(o, t * 1000, lag) for o, t, lag in items]


NOW = 1000 * 1000


def test_zero_current_lag_is_ok_whatever_the_history():
    assert partition_status(w((5, 1, 9), (5, 2, 9)), [], 0, NOW) == OK


def test_stop_when_silent_longer_than_the_window_spans():
    win = w((10, 100, 5), (20, 200, 5), (30, 300, 5))
    assert partition_status(win, [40, 50], 5, 700 * 1000) == STOP     # 400 > 200
    assert partition_status(win, [40, 50], 5, 450 * 1000) != STOP     # 150 < 200
    # ...unless a recent log end was at or below the last committed offset
    assert partition_status(win, [30, 50], 5, 700 * 1000) != STOP


def test_rewind_unless_recovered():
    assert partition_status(w((10, 100, 5), (20, 200, 5), (5, 300, 20), (8, 400, 22)),
                            [], 22, 450 * 1000) == REWIND
    # recovered (25 >= 20): the other rules decide; the lag fell at the end, so OK
    assert partition_status(w((10, 100, 5), (20, 200, 5), (5, 300, 20), (25, 400, 1)),
                            [], 1, 450 * 1000) == OK


def test_zero_lag_in_the_window_is_ok():
    assert partition_status(w((10, 100, 0), (10, 200, 3), (10, 300, 6)), [], 6, 350 * 1000) == OK


def test_stall_and_warn():
    assert partition_status(w((10, 100, 3), (10, 200, 6), (10, 300, 9)), [], 9, 350 * 1000) == STALL
    assert partition_status(w((10, 100, 3), (12, 200, 6), (14, 300, 9)), [], 9, 350 * 1000) == WARN
    assert partition_status(w((10, 100, 3), (12, 200, 6), (18, 300, 2)), [], 2, 350 * 1000) == OK
    # unknown lags are skipped by the "lag not decreasing" rule
    assert partition_status(w((10, 100, None), (12, 200, 6), (14, 300, 9)), [], 9, 350 * 1000) == WARN


def test_allowed_lag_and_minimum_complete():
    win = w((10, 100, 3), (10, 200, 3), (10, 300, 3))
    assert partition_status(win, [], 3, 350 * 1000, allowed_lag=3) == OK
    assert evaluate_partition(win, [], 3, 350 * 1000) == (STALL, 0.3)
    assert evaluate_partition(win, [], 3, 350 * 1000, minimum_complete=0.5) == (OK, 0.3)
    assert evaluate_partition([], [], 3, NOW) == (OK, 0.0)
    # only the last `intervals` commits count
    long = w(*[(i, i * 10, 5) for i in range(30)])
    assert evaluate_partition(long, [], 5, 300 * 1000, intervals=10)[1] == 1.0


def test_group_status_caps_partition_errors_at_err():
    assert group_status([OK, OK]) == OK
    assert group_status([OK, WARN]) == WARN
    assert group_status([WARN, STOP]) == burrow.ERR
    assert group_status([REWIND]) == burrow.ERR
    assert burrow.STATUS_NAMES[group_status([STALL, OK])] == "ERR"


def test_log_end_history_is_a_running_maximum():
    h = LogEndHistory([(10, 100), (30, 300), (20, 200), (25, 250), (5, 400)])
    assert [h.at(t) for t in (50, 100, 199, 250, 300, 1000)] == [None, 10, 10, 25, 30, 30]
    assert h.latest() == 30
    assert h.samples(300, intervals=3, refresh_ms=100) == [10, 20, 30]
    assert h.samples(300, intervals=3, refresh_ms=50) == [20, 25, 30]


def test_commit_window_starts_after_the_last_tombstone():
    ev = [(1, 1000, False), (2, 2000, False), (None, 3000, True), (4, 4000, False),
          (5, 5000, False)]
    assert commit_window(ev, 10) == [(4, 4000), (5, 5000)]
    assert commit_window(ev + [(None, 6000, True)], 10) is None
    assert commit_window([(i, i * 1000, False) for i in range(20)], 3) == [
        (17, 17000), (18, 18000), (19, 19000)]


def test_min_distance_keeps_the_slot_and_its_timestamp():
    # Burrow's storage: commits less than min-distance (1 s) after the slot's
    # stored timestamp replace its offset, the timestamp staying; so commits
    # 400 ms apart open a new slot every third commit, not never
    ev = [(i, 10_000 + 400 * i, False) for i in range(7)]
    assert commit_window(ev, 10) == [(2, 10_000), (5, 11_200), (6, 12_400)]
    assert commit_window(ev, 10, min_distance_ms=0) == [(i, 10_000 + 400 * i) for i in range(7)]
    # a commit exactly min-distance later opens a new slot
    assert commit_window([(1, 0, False), (2, 1000, False)], 10) == [(1, 0), (2, 1000)]


def test_lag_seconds_uses_the_rate_over_the_window():
    win = w((100, 0, 5), (200, 10, 5), (300, 20, 5))  # 10 records/s
    assert lag_seconds(win, 50) == 5.0
    assert lag_seconds(win, 0) == 0.0
    assert lag_seconds(w((100, 0, 5), (100, 10, 5)), 50) is None  # not moving: no estimate
    assert lag_seconds(win, None) is None
