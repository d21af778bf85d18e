"""The replica state machine, scenario by scenario (Kafka's known failure cases)."""
from dataclasses import replace

from kcoord.cluster.replica import (
    BecameFollower, BecameLeader, Completed, EpochQuery, FetchQuery, FetchServed,
    HighWatermarkMoved,
    ProposeIsr, Replica, ReplicationConfig, Role, SettleEpoch,
)
from kcoord.cluster.state import PartitionState
from kcoord.protocol.errors import Err

from .replication_sim import SimLog

LAG = 100


def state(leader, epoch, isr, replicas=(0, 1, 2), version=None):
    return PartitionState("t", 0, leader, epoch, tuple(isr), tuple(replicas),
                          version if version is not None else epoch * 10 + len(isr))


class _SettledAtOnce(Replica):
    """A replica whose driver makes a new epoch durable at once (SettleEpoch)."""

    def on_state(self, state, now):
        outs = super().on_state(state, now)
        for out in outs:
            if isinstance(out, SettleEpoch):
                self.log.settle_epochs()
                outs = outs + self.on_epoch_settled(out.epoch, now)
        return outs


def replica(node, records=(), *, flushed=None, hwm=0, min_isr=1, settle=True):
    log = SimLog()
    log.append(records)
    log.flushed = len(records) if flushed is None else flushed
    kind = _SettledAtOnce if settle else Replica
    return kind(node, log, ReplicationConfig(LAG, min_isr), high_watermark=hwm)


def write(leader, *values, flush=True):
    """Append `values` as the leader; -> one past the last offset."""
    leader.log.append([(leader.leader_epoch, v) for v in values])
    if flush:
        leader.log.flush()
    return leader.log.log_end_offset


def exchange(leader, follower, now=0):
    """One request of `follower` answered by `leader`; -> the leader's outputs."""
    request = follower.next_request()
    if isinstance(request, EpochQuery):
        error, epoch, end = leader.answer_epoch_query(request.current_leader_epoch, request.epoch)
        follower.on_epoch_answer(request, error, epoch, end, now)
        return []
    assert isinstance(request, FetchQuery), request
    served, outs = leader.serve_follower_fetch(follower.node_id, request.fetch_offset,
                                               request.current_leader_epoch, now)
    if served.error == Err.NONE and follower.accepts_fetched(request):
        follower.log.append(leader.log.records[request.fetch_offset:served.read_end])
        follower.log.flush()
    follower.on_fetch_answer(request, served, now)
    return outs


def completed(outs):
    return [(t, o.error) for o in outs if isinstance(o, Completed) for t in o.tokens]


def test_high_watermark_waits_for_every_in_sync_replica_before_acknowledging():
    s = state(0, 1, (0, 1, 2))
    a, b, c = replica(0), replica(1), replica(2)
    assert isinstance(a.on_state(s, 0)[0], BecameLeader)
    for r in (b, c):
        assert isinstance(r.on_state(s, 0)[0], BecameFollower)
    end = write(a, "x", "y", "z")
    assert a.on_flushed(0) == [] and a.high_watermark == 0
    assert a.await_offset(end, "w") == []
    outs = exchange(a, b) + exchange(a, b)      # b: fetch from 0 (empty log), report 3
    assert b.log.records == a.log.records and a.high_watermark == 0 and completed(outs) == []
    outs = exchange(a, c) + exchange(a, c)
    assert a.high_watermark == 3 and completed(outs) == [("w", Err.NONE)]
    exchange(a, b)
    assert b.high_watermark == 3        # followers learn it in their next fetch


def test_min_insync_replicas_refuses_before_and_flags_after_the_append():
    a = replica(0, min_isr=2)
    a.on_state(state(0, 1, (0,)), 0)
    assert a.check_append(-1) == Err.NOT_ENOUGH_REPLICAS
    assert a.check_append(1) == Err.NONE
    a2, b = replica(0, min_isr=2), replica(1, min_isr=2)
    s = state(0, 1, (0, 1), (0, 1))
    a2.on_state(s, 0)
    b.on_state(s, 0)
    assert a2.check_append(-1) == Err.NONE
    end = write(a2, "x")
    a2.await_offset(end, "w")
    # b never fetches: after replica.lag.time.max.ms the leader drops it...
    assert a2.tick(LAG) == []
    (proposal,) = a2.tick(LAG + 1)
    assert proposal.proposed.isr == (0,)
    # ...and once the store agrees the write completes, below min.insync.replicas.
    outs = a2.on_isr_result(proposal.proposed, _with_version(proposal.proposed), LAG + 1)
    assert completed(outs) == [("w", Err.NOT_ENOUGH_REPLICAS_AFTER_APPEND)]


def _with_version(s, bump=1):
    return replace(s, version=s.version + bump)


def test_a_follower_joins_the_isr_only_once_it_reaches_the_leaders_epoch():
    # KAFKA-7128: b takes over with a high watermark (5) behind the one its
    # predecessor acknowledged (10).  c holds 6 records: at b's high watermark
    # but missing acknowledged ones, so it must not join the ISR yet.
    old = [(1, i) for i in range(10)]
    b, c = replica(1, old, hwm=5), replica(2, old[:6], hwm=5)
    s = state(1, 2, (1, 0))     # the dead old leader 0 is still in the ISR
    b.on_state(s, 0)
    c.on_state(s, 0)
    assert b.epoch_start_offset == 10
    outs = exchange(b, c) + exchange(b, c)          # truncation (none), fetch from 6
    assert not [o for o in outs if isinstance(o, ProposeIsr)]
    outs = exchange(b, c)                           # reports 10: now in the epoch
    (proposal,) = [o for o in outs if isinstance(o, ProposeIsr)]
    assert proposal.proposed.isr == (0, 1, 2) and proposal.proposed.version == s.version
    assert b.maximal_isr == {0, 1, 2}               # the high watermark waits for c at once


def test_old_leader_truncates_its_unacknowledged_suffix():
    # KIP-101 scenario 2: a led epoch 1 and wrote 5, 6 alone; b took over in
    # epoch 2 from offset 5.  a follows b: it must drop its 5, 6.
    common = [(1, i) for i in range(5)]
    a = replica(0, common + [(1, "a5"), (1, "a6")], hwm=5)
    b = replica(1, common, hwm=5)
    s = state(1, 2, (1, 0), (0, 1))
    b.on_state(s, 0)
    write(b, "b5", "b6", "b7")
    a.on_state(s, 0)
    assert isinstance(a.next_request(), EpochQuery)
    a._inflight = None  # the query above was only a peek
    exchange(b, a)
    assert a.log.records == common
    exchange(b, a)
    assert a.log.records == b.log.records


def test_truncation_takes_several_rounds_when_the_leader_never_saw_our_epoch():
    # KIP-279: f wrote in epoch 3, which the leader never had.
    f = replica(2, [(1, 0), (1, 1), (1, 2), (3, "f3"), (3, "f4"), (3, "f5"), (3, "f6")])
    leader = replica(0, [(1, 0), (1, 1), (1, 2), (2, 3), (2, 4), (2, 5)])
    s = state(0, 4, (0, 2))
    leader.on_state(s, 0)
    f.on_state(s, 0)
    q1 = f.next_request()
    assert q1.epoch == 3
    f._inflight = None
    exchange(leader, f)                 # leader: epoch 2 ends at 6; f never had 2
    assert f.log.log_end_offset == 3 and f.log.epochs.entries == [(1, 0)]
    q2 = f.next_request()
    assert isinstance(q2, EpochQuery) and q2.epoch == 1
    f._inflight = None
    exchange(leader, f)                 # epoch 1 ends at 3 on both
    exchange(leader, f)
    assert f.log.records == leader.log.records


def test_truncation_stops_where_our_own_epoch_ends():
    # f wrote 3, 4 in epoch 3, unknown to the leader, whose epoch 1 runs to 5:
    # f's epoch 1 ends at 3, so it keeps 0..2 only.
    f = replica(2, [(1, 0), (1, 1), (1, 2), (3, "f3"), (3, "f4")])
    leader = replica(0, [(1, i) for i in range(5)])
    s = state(0, 4, (0, 2))
    leader.on_state(s, 0)
    f.on_state(s, 0)
    exchange(leader, f)
    assert f.log.records == [(1, 0), (1, 1), (1, 2)]
    exchange(leader, f)
    assert f.log.records == leader.log.records


def test_a_follower_keeps_committed_records_above_its_own_high_watermark():
    # KIP-101 scenario 1: b fetched m0, m1 (acknowledged by a) but had only
    # learned high watermark 1 when it restarted.  It must keep m1.
    a = replica(0, [(1, "m0"), (1, "m1")], hwm=2)
    b = replica(1, [(1, "m0"), (1, "m1")], hwm=1)
    s = state(0, 1, (0, 1), (0, 1))
    a.on_state(s, 0)
    b.on_state(s, 0)
    exchange(a, b)
    assert b.log.records == [(1, "m0"), (1, "m1")]


def test_an_epoch_taken_without_writes_is_dropped_when_following():
    # n led epoch 2 at offset 3 but wrote nothing; its new leader answers for
    # epoch 1 with an epoch n never had: n cuts its cache and asks again.
    n = replica(0, [(0, 0), (0, 1), (0, 2)])
    n.log.assign_epoch(2, 3)
    leader = replica(1, [(1, "x"), (1, "y"), (1, "z"), (1, "w")])
    s = state(1, 4, (1,), (0, 1))
    leader.on_state(s, 0)
    n.on_state(s, 0)
    exchange(leader, n)
    assert n.log.epochs.entries == [(0, 0)]
    query = n.next_request()
    assert isinstance(query, EpochQuery) and query.epoch == 0


def test_requests_in_the_wrong_epoch_or_to_a_non_leader_are_refused():
    leader = replica(0, [(3, "x")])
    leader.on_state(state(0, 3, (0, 1)), 0)
    serve = leader.serve_follower_fetch
    assert serve(1, 0, 2, 0)[0].error == Err.FENCED_LEADER_EPOCH
    assert serve(1, 0, 4, 0)[0].error == Err.UNKNOWN_LEADER_EPOCH
    assert serve(7, 0, 3, 0)[0].error == Err.NOT_LEADER_OR_FOLLOWER   # not a replica
    assert serve(1, 5, 3, 0)[0].error == Err.OFFSET_OUT_OF_RANGE
    assert serve(1, 0, 3, 0)[0].error == Err.NONE
    assert leader.answer_epoch_query(2, 3)[0] == Err.FENCED_LEADER_EPOCH
    assert leader.answer_epoch_query(-1, 3) == (Err.NONE, 3, 1)     # clients skip the check
    follower = replica(1)
    follower.on_state(state(0, 3, (0, 1)), 0)
    assert follower.serve_follower_fetch(2, 0, 3, 0)[0].error == Err.NOT_LEADER_OR_FOLLOWER
    assert follower.answer_epoch_query(3, 3)[0] == Err.NOT_LEADER_OR_FOLLOWER
    assert follower.check_append(-1) == Err.NOT_LEADER_OR_FOLLOWER


def test_a_new_leader_takes_writes_once_its_log_and_epoch_are_durable():
    b = replica(1, [(1, i) for i in range(5)], flushed=3, settle=False)
    outs = b.on_state(state(1, 2, (1, 2), (1, 2)), 0)
    assert outs == [BecameLeader(2), SettleEpoch(2)]
    # the fsyncs run off the loop: meanwhile no write, the epoch in memory only
    assert b.log.flushed == 3 and b.log.durable_epochs.latest_epoch == 1
    assert b.check_append(1) == Err.NOT_LEADER_OR_FOLLOWER and not b.accepts_writes
    assert b.on_epoch_settled(1, 0) == [] and not b.accepts_writes     # not its epoch
    b.log.settle_epochs()
    b.on_epoch_settled(2, 0)
    assert b.log.flushed == 5 and b.log.durable_epochs.entries == [(1, 0), (2, 5)]
    assert b.check_append(1) == Err.NONE and b.accepts_writes


def test_followers_read_the_unfsynced_tail_but_the_hw_counts_fsynced_ends():
    b = replica(1, [(1, i) for i in range(5)], flushed=3)
    b.on_state(state(1, 2, (1, 2), (1, 2)), 0)
    assert b.log.flushed == 5           # a new leader fsyncs the old epochs' records first
    end = write(b, "u1", "u2", flush=False)
    served, _ = b.serve_follower_fetch(2, 5, 2, 0)
    assert served.read_end == 7 and served.high_watermark == 5  # the tail, not yet committed
    assert b.await_offset(end, "w") == []
    # the follower fsynced the tail and reports it before the leader's own fsync
    served, outs = b.serve_follower_fetch(2, 7, 2, 1)
    assert served.high_watermark == 5 and completed(outs) == []
    assert b.follower_idle(2, 7, 2, 5, 2)  # nothing past its position to read
    b.log.flush()
    outs = b.on_flushed(3)
    assert b.high_watermark == 7 and completed(outs) == [("w", Err.NONE)]


def test_the_leaders_unsynced_records_are_not_committed():
    b = replica(1)
    b.on_state(state(1, 1, (1,), (1,)), 0)
    end = write(b, "u1", "u2", flush=False)
    assert b.on_flushed(0) == [] and b.await_offset(end, "w") == []
    assert b.high_watermark == 0
    b.log.flush()
    outs = b.on_flushed(0)
    assert b.high_watermark == 2 and HighWatermarkMoved(2) in outs
    assert completed(outs) == [("w", Err.NONE)]


def test_a_refused_isr_change_freezes_the_leader_until_a_newer_state():
    a = replica(0)
    s = state(0, 1, (0, 1), (0, 1))
    a.on_state(s, 0)
    (proposal,) = a.tick(LAG + 1)
    assert a.on_isr_result(proposal.proposed, None, LAG + 1) == []
    end = write(a, "x")
    assert a.on_flushed(LAG + 2) == [] and a.await_offset(end, "w") == []
    assert a.tick(3 * LAG) == []        # proposes nothing while stale
    newer = _with_version(s.with_isr((0,)), 5)
    outs = a.on_state(newer, 3 * LAG)
    assert completed(outs) == [("w", Err.NONE)] and a.high_watermark == 1


def test_an_ineligible_follower_joins_the_isr_only_once_eligible():
    # Kafka's isReplicaIsrEligible: a restarted node's new incarnation stays
    # out until the controller fenced the old one (else that fencing would
    # throw the new one out of the ISR, and out of any leadership it got)
    eligible = {1: False}
    a = Replica(0, SimLog(), ReplicationConfig(LAG, 1), isr_eligible=lambda n: eligible[n])
    b = replica(1)
    s = state(0, 1, (0,), (0, 1))
    a.on_state(s, 0)
    b.on_state(s, 0)
    outs = exchange(a, b) + exchange(a, b)
    assert not [o for o in outs if isinstance(o, ProposeIsr)] and a.maximal_isr == {0}
    eligible[1] = True
    (proposal,) = [o for o in exchange(a, b) if isinstance(o, ProposeIsr)]
    assert proposal.proposed.isr == (0, 1) and a.maximal_isr == {0, 1}
    # the store still refused it (its registration changed meanwhile): the
    # leader is not stale, it acknowledges on its own ISR and may propose again
    end = write(a, "x")
    a.await_offset(end, "w")
    assert completed(a.on_flushed(1)) == []          # waits for b, being added
    assert completed(a.on_isr_ineligible(proposal.proposed)) == [("w", Err.NONE)]
    (again,) = [o for o in exchange(a, b) + exchange(a, b) if isinstance(o, ProposeIsr)]
    assert again.proposed.isr == (0, 1)


def test_waiting_writes_fail_when_leadership_moves():
    a = replica(0)
    a.on_state(state(0, 1, (0, 1), (0, 1)), 0)
    a.await_offset(write(a, "x"), "w")
    outs = a.on_state(state(1, 2, (1,), (0, 1)), 0)
    assert completed(outs) == [("w", Err.NOT_LEADER_OR_FOLLOWER)]
    assert a.role is Role.FOLLOWER
    # An older state never goes back.
    assert a.on_state(state(0, 1, (0, 1), (0, 1)), 0) == [] and a.role is Role.FOLLOWER


def test_a_leader_whose_lease_may_have_lapsed_acknowledges_nothing():
    a = replica(0)
    s = state(0, 1, (0,), (0, 1))
    a.on_state(s, 0)
    a.on_session_lost(1)
    end = write(a, "x")
    assert a.on_flushed(2) == [] and a.await_offset(end, "w") == [] and a.high_watermark == 0
    outs = a.on_state(_with_version(s), 3)      # still the leader, says the controller
    assert completed(outs) == [("w", Err.NONE)]


def test_a_leader_whose_lease_lapsed_but_never_expired_acknowledges_again():
    """Found by the fault harness (etcd paused, then the leader paused): the
    lease survived, so no newer state ever came, and the leader stayed mute.
    etcd answering a refresh of the same lease lets it acknowledge again."""
    a = replica(0)
    s = state(0, 1, (0,), (0, 1))
    a.on_state(s, 0)
    a.on_session_lost(1)
    end = write(a, "x")
    assert a.on_flushed(2) == [] and a.high_watermark == 0
    outs = a.await_offset(end, "w")
    assert outs == [] and a.on_state(s, 3) == []   # the same state again changes nothing
    assert completed(a.on_session_restored(4)) == [("w", Err.NONE)]
    assert a.high_watermark == end


def test_a_restored_session_does_not_undo_a_refused_isr_change():
    a = replica(0)
    a.on_state(state(0, 1, (0, 1), (0, 1)), 0)
    write(a, "w0")
    a.tick(LAG // 2)
    proposed = a.tick(LAG + 1)                      # follower 1 lagging: shrink the ISR
    assert proposed and a.on_isr_result(proposed[0].proposed, None, LAG + 1) == []
    a.on_session_lost(LAG + 1)
    end = write(a, "x")
    a.on_flushed(LAG + 1)
    assert a.await_offset(end, "w") == []
    assert a.on_session_restored(LAG + 2) == []     # still refused: waits for a new state


def test_has_request_ready_says_exactly_when_next_request_would_send():
    # the fetcher asks it, without side effects, to cut short a long poll
    # for a partition that just started following its leader
    s = state(0, 1, (0, 1))
    a, b = replica(0, [(0, "x")]), replica(1, [(0, "x")])
    a.on_state(s, 0)
    assert not a.has_request_ready                  # a leader fetches nothing
    assert isinstance(b.on_state(s, 0)[0], BecameFollower)
    assert b.has_request_ready                      # a new follower: its epoch query
    request = b.next_request()
    assert isinstance(request, EpochQuery) and not b.has_request_ready
    error, epoch, end = a.answer_epoch_query(request.current_leader_epoch, request.epoch)
    b.on_epoch_answer(request, error, epoch, end, 0)
    assert b.has_request_ready                      # truncated: now it fetches
    fetch = b.next_request()
    assert isinstance(fetch, FetchQuery) and not b.has_request_ready
    b.on_request_failed(fetch, 0)
    assert b.has_request_ready
    b.log.append([(1, "y")])                        # appended, not yet on disk
    assert not b.has_request_ready and b.next_request() is None
    b.log.flush()
    assert b.has_request_ready
    fetch = b.next_request()
    b.on_fetch_answer(fetch, FetchServed(Err.FENCED_LEADER_EPOCH), 0)
    assert not b.has_request_ready                  # fenced: it waits for a newer state
    assert b.next_request() is None


def test_a_caught_up_follower_joins_the_isr_as_soon_as_it_becomes_eligible():
    """A restarted follower catches up before the controller handled its
    incarnation; the leader adds it when the view says it may, without
    waiting for its next fetch (an idle follower's long poll)."""
    eligible = set()
    a = replica(0, [(1, i) for i in range(3)])
    a.isr_eligible = lambda node: node in eligible
    b = replica(1, [(1, i) for i in range(3)])
    s = state(0, 2, (0,), (0, 1))
    a.on_state(s, 0)
    b.on_state(s, 0)
    outs = exchange(a, b) + exchange(a, b)      # truncation check, then a fetch at the end
    assert not [o for o in outs if isinstance(o, ProposeIsr)]
    assert a.on_eligibility_changed(1) == []    # still not eligible: nothing
    eligible.add(1)
    (proposal,) = a.on_eligibility_changed(2)
    assert isinstance(proposal, ProposeIsr) and proposal.proposed.isr == (0, 1)
    assert a.on_eligibility_changed(3) == []    # one proposal at a time


def test_a_leader_woken_from_its_own_stall_does_not_count_it_against_its_followers():
    """The leader's process stops (SIGSTOP, a starved host) for longer than
    replica.lag.time.max.ms while a write waits for its followers: on waking
    its ISR check runs before it reads the followers' fetches queued in its
    sockets.  The check comes late by the stall, and the lateness is not
    counted against the followers (fault run 150: ISR shrinks tried right
    after each pause of a leader).  A follower that stays silent after the
    wake is still dropped, a lag time later."""
    lag, interval = 4000, 2000
    nodes = [Replica(n, SimLog(), ReplicationConfig(lag, 2)) for n in (0, 1, 2)]
    a, b, c = nodes
    s = state(0, 1, (0, 1, 2))
    for r in nodes:
        r.on_state(s, 0)
    a.log.settle_epochs()
    a.on_epoch_settled(1, 0)
    end = write(a, "x")
    for follower in (b, c):
        for _ in range(3):
            exchange(a, follower, now=interval - 10)
    assert a.high_watermark == end and a.tick(interval) == []
    write(a, "y")                           # appended; then the leader stops for 10 s
    stall_end = 2 * interval + 10_000
    assert a.tick(stall_end) == []          # late by the stall: no follower blamed for it
    for _ in range(3):
        exchange(a, c, now=stall_end + 10)  # c's fetches, read after the late check
    assert a.tick(stall_end + interval) == []
    (proposal,) = a.tick(stall_end + 2 * interval + 1)   # b silent for a lag since the wake
    assert proposal.proposed.isr == (0, 2), proposal
    assert "node 1 not caught up" in proposal.why
