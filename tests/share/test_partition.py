"""Table tests of the share-partition state machine with a fake clock, after
Kafka's SharePartitionTest: acquire, each acknowledge type, lock expiry, the
delivery-count limit, start-offset movement, gaps, read_committed."""
import pytest

from kcoord.protocol.errors import Err
from kcoord.share.partition import (
    ACCEPT, ACKNOWLEDGED, ACQUIRED, ARCHIVED, AVAILABLE, GAP, RELEASE, REJECT,
    FetchedBatch, SharePartition, ShareLimits, check_ack_batches)
from kcoord.share.persister import ShareState, StateBatch

LOCK = 30_000


def fresh(start=0, limit=5, locks=2000, batches=()):
    return SharePartition.loaded(ShareState(start_offset=start, batches=list(batches)), start,
                                 ShareLimits(delivery_count_limit=limit, max_record_locks=locks))


def log(*spans, aborted=()):
    """Log batches: (base, last) pairs."""
    return [FetchedBatch(b, l, (b, l) in aborted) for b, l in spans]


def ack(first, last, *types):
    return {"first_offset": first, "last_offset": last, "acknowledge_types": list(types)}


def durable(sp, now=0, error=Err.NONE):
    """Send the pending write and complete it."""
    write = sp.take_write()
    assert write is not None
    return write, sp.write_done(write, error, now)


def ranges(acq):
    return [tuple(r) for r in acq.ranges]


# ------------------------------------------------------------------ acquire
def test_acquire_new_batches_whole_and_counted():
    sp = fresh()
    got = sp.acquire("m1", 500, log((0, 4), (5, 9)), now=0, lock_ms=LOCK)
    assert ranges(got) == [(0, 9, 1)]
    assert got.count == 10
    assert got.timers[0].deadline_ms == LOCK
    assert sp.view() == [(0, 9, ACQUIRED, 1, "m1")]
    assert (sp.start, sp.end) == (0, 10)
    assert sp.next_fetch_offset() == 10


def test_max_records_is_a_soft_limit_at_batch_boundaries():
    sp = fresh()
    got = sp.acquire("m1", 3, log((0, 4), (5, 9)), now=0, lock_ms=LOCK)
    assert ranges(got) == [(0, 4, 1)]       # the whole first batch, not the second
    assert sp.end == 5


def test_batch_size_cuts_acquired_ranges_at_batch_boundaries():
    sp = fresh()
    got = sp.acquire("m1", 500, log((0, 2), (3, 5), (6, 8), (9, 9)), 0, LOCK, batch_size=4)
    assert ranges(got) == [(0, 5, 1), (6, 9, 1)]


def test_acquire_skips_records_acquired_by_another_member():
    sp = fresh()
    sp.acquire("m1", 500, log((0, 4)), 0, LOCK)
    got = sp.acquire("m2", 500, log((0, 4), (5, 7)), 0, LOCK)
    assert ranges(got) == [(5, 7, 1)]
    assert sp.state_at(2) == (ACQUIRED, 1, "m1")
    assert sp.state_at(6) == (ACQUIRED, 1, "m2")


def test_nothing_to_acquire():
    sp = fresh()
    assert sp.acquire("m1", 0, log((0, 4)), 0, LOCK).ranges == []
    assert sp.acquire("m1", 10, [], 0, LOCK).ranges == []
    assert sp.end == 0


def test_max_record_locks_bounds_the_window():
    sp = fresh(locks=100)
    got = sp.acquire("m1", 500, log((0, 59), (60, 149)), 0, LOCK)
    assert ranges(got) == [(0, 99, 1)]       # cut at the window, inside the log batch
    assert not sp.can_acquire()
    assert sp.acquire("m2", 500, log((100, 149)), 0, LOCK).ranges == []
    sp.acknowledge("m1", [ack(0, 9, ACCEPT)], 1)
    durable(sp)
    assert sp.start == 10 and sp.can_acquire()
    assert ranges(sp.acquire("m2", 500, log((60, 149)), 2, LOCK)) == [(100, 109, 1)]


def test_compacted_offsets_are_archived():
    sp = fresh()
    got = sp.acquire("m1", 500, log((0, 1), (5, 6)), 0, LOCK)
    assert ranges(got) == [(0, 1, 1), (5, 6, 1)]
    assert sp.state_at(3) == (ARCHIVED, 0, None)


# ------------------------------------------------------------- acknowledge
@pytest.mark.parametrize("kind,state", [(ACCEPT, ACKNOWLEDGED), (REJECT, ARCHIVED),
                                        (GAP, ARCHIVED), (RELEASE, AVAILABLE)])
def test_each_acknowledge_type(kind, state):
    sp = fresh()
    sp.acquire("m1", 500, log((0, 9)), 0, LOCK)
    res = sp.acknowledge("m1", [ack(3, 5, kind)], 1)
    assert res.error_code == Err.NONE and res.ticket is not None
    write, done = durable(sp, 2)
    assert done.answers == [(res.ticket, Err.NONE)]
    assert sp.state_at(4)[:2] == (state, 1)
    assert sp.state_at(2) == (ACQUIRED, 1, "m1")
    assert sp.start == 0


def test_per_offset_types():
    sp = fresh()
    sp.acquire("m1", 500, log((0, 4)), 0, LOCK)
    assert sp.acknowledge("m1", [ack(0, 4, ACCEPT, RELEASE, REJECT, GAP, ACCEPT)], 1).error_code == 0
    durable(sp)
    assert [sp.state_at(o)[0] for o in range(1, 5)] == [AVAILABLE, ARCHIVED, ARCHIVED,
                                                             ACKNOWLEDGED]
    assert sp.start == 1                     # 0 acknowledged, 1 available again
    assert sp.next_fetch_offset() == 1


def test_released_records_are_redelivered_with_count_two():
    sp = fresh()
    sp.acquire("m1", 500, log((0, 4)), 0, LOCK)
    sp.acknowledge("m1", [ack(0, 4, RELEASE)], 1)
    durable(sp)
    got = sp.acquire("m2", 500, log((0, 4)), 2, LOCK)
    assert ranges(got) == [(0, 4, 2)]


def test_accept_moves_the_start_offset_past_finished_records():
    sp = fresh()
    sp.acquire("m1", 500, log((0, 4), (5, 9)), 0, LOCK)
    sp.acknowledge("m1", [ack(5, 9, ACCEPT)], 1)
    durable(sp)
    assert sp.start == 0                     # 0-4 still acquired
    sp.acknowledge("m1", [ack(0, 4, ACCEPT)], 2)
    durable(sp)
    assert (sp.start, sp.end, sp.runs) == (10, 10, [])


def test_start_offset_waits_for_the_write():
    sp = fresh()
    sp.acquire("m1", 500, log((0, 4)), 0, LOCK)
    sp.acknowledge("m1", [ack(0, 4, ACCEPT)], 1)
    assert sp.start == 0
    write = sp.take_write()
    assert write.start_offset == 0 and write.delivery_complete_count == 5
    assert write.batches == [StateBatch(0, 4, ACKNOWLEDGED, 1)]
    sp.write_done(write, Err.NONE, 2)
    assert sp.start == 5


@pytest.mark.parametrize("who,batches,code", [
    ("m2", [ack(0, 2, ACCEPT)], Err.INVALID_RECORD_STATE),          # acquired by another
    ("m1", [ack(5, 7, ACCEPT)], Err.INVALID_RECORD_STATE),          # not acquired (available)
    ("m1", [ack(3, 20, ACCEPT)], Err.INVALID_REQUEST),              # past the window
    ("m1", [ack(0, 2, ACCEPT), ack(2, 3, ACCEPT)], Err.INVALID_RECORD_STATE),  # twice
])
def test_acknowledge_errors_change_nothing(who, batches, code):
    sp = fresh()
    sp.acquire("m1", 500, log((0, 4)), 0, LOCK)
    sp.acquire("m1", 500, log((5, 9)), 0, LOCK)
    sp.acknowledge("m1", [ack(5, 9, RELEASE)], 1)
    durable(sp)
    before = sp.view()
    assert sp.acknowledge(who, batches, 2).error_code == code
    assert sp.view() == before
    assert sp.take_write() is None


def test_acknowledging_an_acknowledged_record_is_invalid_record_state():
    sp = fresh()
    sp.acquire("m1", 500, log((0, 4), (5, 9)), 0, LOCK)
    sp.acknowledge("m1", [ack(5, 6, ACCEPT)], 1)
    durable(sp)
    assert sp.acknowledge("m1", [ack(6, 6, ACCEPT)], 2).error_code == Err.INVALID_RECORD_STATE


def test_acknowledgement_in_flight_blocks_a_second_one():
    sp = fresh()
    sp.acquire("m1", 500, log((0, 4)), 0, LOCK)
    assert sp.acknowledge("m1", [ack(0, 1, ACCEPT)], 1).error_code == 0
    assert sp.acknowledge("m1", [ack(1, 2, ACCEPT)], 1).error_code == Err.INVALID_RECORD_STATE


def test_acknowledgement_below_the_start_is_done_already():
    sp = fresh(start=10)
    res = sp.acknowledge("m1", [ack(0, 9, ACCEPT)], 1)
    assert res.error_code == Err.NONE and res.ticket is None


@pytest.mark.parametrize("batches,code", [
    ([ack(5, 4, ACCEPT)], Err.INVALID_REQUEST),
    ([ack(0, 4)], Err.INVALID_REQUEST),
    ([ack(0, 4, ACCEPT, ACCEPT)], Err.INVALID_REQUEST),
    ([ack(0, 4, 4)], Err.INVALID_REQUEST),
    ([ack(5, 9, ACCEPT), ack(0, 4, ACCEPT)], Err.INVALID_REQUEST),
    ([ack(0, 4, ACCEPT), ack(4, 6, ACCEPT)], Err.NONE),   # touching ranges pass (Kafka's check)
    ([ack(0, 1, ACCEPT, REJECT), ack(3, 3, GAP)], Err.NONE),
])
def test_request_level_acknowledgement_checks(batches, code):
    assert check_ack_batches(batches) == code


def test_failed_write_rolls_back_to_the_same_member():
    sp = fresh()
    sp.acquire("m1", 500, log((0, 4)), 0, LOCK)
    res = sp.acknowledge("m1", [ack(0, 4, ACCEPT)], 1)
    _, done = durable(sp, 2, error=Err.COORDINATOR_NOT_AVAILABLE)
    assert done.answers == [(res.ticket, Err.COORDINATOR_NOT_AVAILABLE)]
    assert sp.view() == [(0, 4, ACQUIRED, 1, "m1")]
    assert sp.start == 0
    assert sp.acknowledge("m1", [ack(0, 4, ACCEPT)], 3).error_code == Err.NONE


def test_failed_write_after_the_lock_expired_makes_records_available():
    sp = fresh()
    got = sp.acquire("m1", 500, log((0, 4)), 0, LOCK)
    sp.acknowledge("m1", [ack(0, 4, ACCEPT)], 1)
    write = sp.take_write()
    assert not sp.expire(got.timers[0].lock, LOCK)   # the change in flight is not expired
    sp.write_done(write, Err.COORDINATOR_NOT_AVAILABLE, LOCK + 1)
    assert sp.view() == [(0, 4, AVAILABLE, 1, None)]


def test_one_write_at_a_time_and_later_acks_wait_for_the_next():
    sp = fresh()
    sp.acquire("m1", 500, log((0, 9)), 0, LOCK)
    first = sp.acknowledge("m1", [ack(0, 4, ACCEPT)], 1)
    w1 = sp.take_write()
    second = sp.acknowledge("m1", [ack(5, 9, ACCEPT)], 1)
    assert sp.take_write() is None
    assert sp.write_done(w1, 0, 2).answers == [(first.ticket, 0)]
    w2 = sp.take_write()
    assert w2.tickets == {second.ticket}
    sp.write_done(w2, 0, 3)
    assert sp.start == 10


# ------------------------------------------------------------- lock expiry
def test_lock_expiry_makes_records_available_with_their_count():
    sp = fresh()
    got = sp.acquire("m1", 500, log((0, 4)), 0, LOCK)
    lock = got.timers[0].lock
    assert not sp.expire(lock, LOCK - 1)      # early: nothing
    assert sp.expire(lock, LOCK)
    assert sp.view() == [(0, 4, AVAILABLE, 1, None)]
    assert sp.next_fetch_offset() == 0
    write, _ = durable(sp)
    assert write.batches == [StateBatch(0, 4, AVAILABLE, 1)]
    assert ranges(sp.acquire("m2", 500, log((0, 4)), LOCK, LOCK)) == [(0, 4, 2)]


def test_acknowledge_after_the_lock_expired_is_invalid_record_state():
    sp = fresh()
    got = sp.acquire("m1", 500, log((0, 4)), 0, LOCK)
    sp.expire(got.timers[0].lock, LOCK)
    assert sp.acknowledge("m1", [ack(0, 4, ACCEPT)], LOCK + 1).error_code == \
        Err.INVALID_RECORD_STATE


def test_expiry_only_touches_records_still_acquired():
    sp = fresh()
    got = sp.acquire("m1", 500, log((0, 9)), 0, LOCK)
    sp.acknowledge("m1", [ack(0, 4, ACCEPT)], 1)
    durable(sp)
    sp.expire(got.timers[0].lock, LOCK)
    assert sp.start == 5
    assert sp.view() == [(5, 9, AVAILABLE, 1, None)]


def test_member_leaving_releases_its_records_only():
    sp = fresh()
    sp.acquire("m1", 500, log((0, 4)), 0, LOCK)
    sp.acquire("m2", 500, log((5, 9)), 0, LOCK)
    assert sp.release_member("m1")
    assert sp.view() == [(0, 4, AVAILABLE, 1, None), (5, 9, ACQUIRED, 1, "m2")]
    assert not sp.release_member("m3")


# --------------------------------------------------- delivery-count limit
def test_release_at_the_delivery_limit_archives():
    sp = fresh(limit=2)
    for member, now in (("m1", 0), ("m2", 10)):
        sp.acquire(member, 500, log((0, 0)), now, LOCK)
        sp.acknowledge(member, [ack(0, 0, RELEASE)], now + 1)
        durable(sp)
    assert (sp.start, sp.runs) == (1, [])      # archived at count 2, then passed


def test_lock_expiry_at_the_delivery_limit_archives():
    sp = fresh(limit=3)
    for n in range(3):
        got = sp.acquire("m1", 500, log((0, 0), (1, 1)), n * LOCK, LOCK)
        assert got.ranges[0].delivery_count == n + 1
        sp.expire(got.timers[0].lock, (n + 1) * LOCK)
    assert sp.state_at(0) is None and sp.start == 1    # record 0 archived, start passed it
    assert sp.state_at(1)[:2] == (AVAILABLE, 2)         # the second was left alone at count 2


def test_delivery_count_never_passes_the_limit():
    sp = fresh(limit=5)
    counts = []
    for n in range(8):
        got = sp.acquire("m1", 500, log((0, 0)), n * LOCK, LOCK)
        counts += [r.delivery_count for r in got.ranges]
        for timer in got.timers:
            sp.expire(timer.lock, (n + 1) * LOCK)
    assert counts == [1, 2, 3, 4, 5]


def test_poison_records_come_in_shrinking_slices_and_alone_on_the_last_try():
    sp = fresh(limit=5)
    sizes = []
    for n in range(5):
        got = sp.acquire("m1", 500, log((0, 7)), n * LOCK, LOCK)
        sizes.append([(r.first, r.last, r.delivery_count) for r in got.ranges])
        for timer in got.timers:
            sp.expire(timer.lock, (n + 1) * LOCK)
    assert sizes[0] == [(0, 7, 1)]
    assert sizes[2] == [(0, 7, 3)]
    assert sizes[3] == [(0, 3, 4)]             # count 3 = threshold max(2, ceil(5/2)): half
    assert sizes[4] == [(0, 0, 5)]             # its last try (count limit - 1): alone


# ------------------------------------------------------ start offset, gaps
def test_loaded_state_and_gaps_are_fetched_again():
    sp = fresh(start=10, batches=[StateBatch(10, 12, ACKNOWLEDGED, 1),
                                  StateBatch(15, 16, AVAILABLE, 2),
                                  StateBatch(20, 22, ARCHIVED, 5)])
    assert sp.start == 13                       # past the acknowledged head
    assert sp.view() == [(13, 14, AVAILABLE, 0, None), (15, 16, AVAILABLE, 2, None),
                         (17, 19, AVAILABLE, 0, None), (20, 22, ARCHIVED, 5, None)]
    got = sp.acquire("m1", 500, log((13, 16), (17, 25)), 0, LOCK)
    assert ranges(got) == [(13, 14, 1), (15, 16, 3), (17, 19, 1), (23, 25, 1)]


def test_start_offset_below_loaded_batches_clips_them():
    sp = fresh(start=12, batches=[StateBatch(10, 14, AVAILABLE, 1)])
    assert sp.view() == [(12, 14, AVAILABLE, 1, None)]


def test_log_start_moving_archives_available_records():
    sp = fresh()
    sp.acquire("m1", 500, log((0, 9)), 0, LOCK)
    sp.acknowledge("m1", [ack(0, 4, RELEASE)], 1)
    durable(sp)
    sp.on_log_start(3)
    assert sp.view()[0] == (3, 4, AVAILABLE, 1, None) and sp.start == 3
    sp.on_log_start(20)                        # past the window
    assert sp.state_at(12) == (ARCHIVED, 0, None)
    assert sp.state_at(6) == (ACQUIRED, 1, "m1")
    assert sp.next_fetch_offset() == 20


def test_log_start_moves_an_empty_window():
    sp = fresh()
    sp.on_log_start(50)
    assert (sp.start, sp.end, sp.next_fetch_offset()) == (50, 50, 50)


# ------------------------------------------------------------ transactions
def test_read_committed_archives_aborted_batches():
    sp = fresh()
    got = sp.acquire("m1", 500, log((0, 2), (3, 5), (6, 6), (7, 9), aborted={(3, 5)}), 0, LOCK)
    assert ranges(got) == [(0, 2, 1), (6, 9, 1)]   # the marker (6) is given, acked as GAP
    assert sp.state_at(4) == (ARCHIVED, 0, None)
    assert got.count == 7
    sp.acknowledge("m1", [ack(0, 2, ACCEPT), ack(6, 6, GAP), ack(7, 9, ACCEPT)], 1)
    durable(sp)
    assert (sp.start, sp.runs) == (10, [])


def test_aborted_records_cached_as_available_are_archived_on_acquire():
    sp = fresh(batches=[StateBatch(0, 4, AVAILABLE, 1)])
    got = sp.acquire("m1", 500, log((0, 4), (5, 6), aborted={(0, 4)}), 0, LOCK)
    assert ranges(got) == [(5, 6, 1)]
    assert sp.start == 5


# ---------------------------------------------------------------- durability
def test_reload_gives_the_written_state():
    sp = fresh()
    got = sp.acquire("m1", 500, log((0, 4), (5, 9), (10, 14)), 0, LOCK)
    sp.acknowledge("m1", [ack(0, 1, ACCEPT), ack(3, 3, REJECT), ack(4, 5, RELEASE)], 1)
    write, _ = durable(sp)
    again = SharePartition.loaded(ShareState(start_offset=write.start_offset,
                                             batches=write.batches), write.start_offset)
    assert again.durable_view() == sp.durable_view()
    # the acquired records come back as they were before their acquisition
    assert again.state_at(2) == (AVAILABLE, 0, None)
    assert again.state_at(4) == (AVAILABLE, 1, None)
    assert again.end == 6 and again.state_at(7) is None     # never delivered: fetched anew
    assert got.timers


# ------------------------------------------------- v2: RENEW and record_limit
def test_renew_restarts_the_lock_and_persists_nothing():
    from kcoord.share.partition import RENEW
    sp = fresh()
    got = sp.acquire("m1", 500, log((0, 4)), 0, LOCK)
    res = sp.acknowledge("m1", [ack(0, 2, RENEW)], 20_000, lock_ms=LOCK)
    assert res.error_code == Err.NONE and res.ticket is None
    assert res.timers[0].deadline_ms == 20_000 + LOCK
    assert sp.take_write() is None
    sp.expire(got.timers[0].lock, LOCK)             # the first lock runs out: 3-4 only
    assert sp.view() == [(0, 2, ACQUIRED, 1, "m1"), (3, 4, AVAILABLE, 1, None)]
    assert sp.acknowledge("m2", [ack(0, 0, RENEW)], 20_001, LOCK).error_code == \
        Err.INVALID_RECORD_STATE
    sp.expire(res.timers[0].lock, 20_000 + LOCK)
    assert sp.state_at(0)[:2] == (AVAILABLE, 1)


def test_renew_beside_other_types():
    from kcoord.share.partition import RENEW
    sp = fresh()
    sp.acquire("m1", 500, log((0, 4)), 0, LOCK)
    res = sp.acknowledge("m1", [ack(0, 4, ACCEPT, RENEW, RENEW, REJECT, ACCEPT)], 1, LOCK)
    assert res.ticket is not None and res.timers
    durable(sp)
    assert sp.view() == [(1, 2, ACQUIRED, 1, "m1"), (3, 3, ARCHIVED, 1, None),
                         (4, 4, ACKNOWLEDGED, 1, None)]
    assert sp.runs[0].lock == res.timers[0].lock


def test_record_limit_cuts_log_batches():
    sp = fresh()
    got = sp.acquire("m1", 3, log((0, 4), (5, 9)), 0, LOCK, strict=True)
    assert ranges(got) == [(0, 2, 1)] and got.count == 3
    assert sp.end == 3
    sp.acknowledge("m1", [ack(0, 2, RELEASE)], 1)
    durable(sp)
    got = sp.acquire("m2", 2, log((0, 4), (5, 9)), 2, LOCK, strict=True)
    assert ranges(got) == [(0, 1, 2)]
    assert sp.state_at(2)[:2] == (AVAILABLE, 1)


# ------------------------------------------------------------------ events
def test_the_counters_move_at_each_event():
    """/metrics' counters (PartitionCounters) as the share partition bumps them:
    acquisitions by delivery count, each acknowledgement type, archives by
    reason, lock timeouts; a refused acknowledgement counts nothing."""
    from kcoord.observe.share_metrics import PartitionCounters
    sp = fresh(limit=2)
    c = sp.events = PartitionCounters()
    got = sp.acquire("m1", 500, log((0, 4), (5, 9)), 0, LOCK)
    assert (c.n_acquired, c.deliveries.counts[0]) == (10, 10)
    assert sp.in_flight() == (10, 1, 10)           # window, runs, acquired now
    sp.acknowledge("m1", [ack(0, 1, ACCEPT), ack(2, 2, REJECT), ack(3, 4, RELEASE)], 1)
    assert c.n_acks == {ACCEPT: 2, RELEASE: 2, REJECT: 1}
    assert sp.in_flight() == (10, 4, 5)            # 0-1 done, 2 archived, 3-4 back, 5-9 held
    assert c.n_archived["rejected"] == 1
    assert sp.acknowledge("m2", [ack(5, 5, ACCEPT)], 1).error_code == Err.INVALID_RECORD_STATE
    assert c.n_acks[ACCEPT] == 2
    durable(sp)
    assert sp.expire(got.timers[0].lock, LOCK)          # 5-9 time out, delivered once
    assert c.n_lock_timeouts == 5 and c.n_archived["delivery_limit"] == 0
    again = sp.acquire("m1", 500, log((3, 9)), LOCK, LOCK)
    assert ranges(again) == [(3, 9, 2)] and c.deliveries.counts[1] == 7
    assert sp.expire(again.timers[0].lock, 2 * LOCK)    # at the limit: archived
    assert c.n_lock_timeouts == 12 and c.n_archived["delivery_limit"] == 7
    assert c.n_acquired == 17 and c.n_session_released == 0
    sp.acquire("m3", 500, log((10, 11)), 2 * LOCK, LOCK)
    assert sp.release_member("m3")                      # its session ended
    assert c.n_session_released == 2 and c.n_lock_timeouts == 12
