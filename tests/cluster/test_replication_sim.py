"""The replication protocol under seeded faults (tests/cluster/replication_sim.py).

Every schedule checks its invariants after every step; bench/replication_sim.py
runs many more schedules."""
import os

from kcoord.cluster.replica import Completed, Replica
from kcoord.protocol.errors import Err

from .replication_sim import InvariantViolation, Simulation
from .sim_configs import config_for

SCHEDULES = int(os.environ.get("KCOORD_SIM_SCHEDULES", "1000"))


def run_schedules(seeds, replica_class=Replica, sim_class=Simulation):
    failures, totals = [], {}
    for seed in seeds:
        sim = sim_class(seed, config_for(seed))
        sim.replica_class = replica_class
        try:
            sim.run()
        except InvariantViolation as exc:
            failures.append(str(exc))
            continue
        for key, value in sim.stats.items():
            totals[key] = totals.get(key, 0) + value
    return failures, totals


def test_no_acknowledged_write_is_lost_under_seeded_faults():
    failures, totals = run_schedules(range(SCHEDULES))
    assert not failures, f"{len(failures)} of {SCHEDULES} schedules failed; first:\n{failures[0]}"
    # The schedules did exercise what they are meant to.
    for what in ("crashes", "power_cuts", "pauses", "moves", "elections", "isr_changes",
                 "truncations", "lost", "lapses", "retries", "idle_skips"):
        assert totals[what] >= SCHEDULES // 10, (what, totals)


class _NoTruncation(Replica):
    """A follower that skips KIP-101 truncation: fetches from its log end at once."""

    def on_epoch_answer(self, request, error, epoch, end_offset, now):
        return super().on_epoch_answer(request, error, epoch, self.log.log_end_offset, now)


class _CountsUnsyncedEnd(Replica):
    """A leader that counts its own unfsynced log end in the high watermark."""

    def _maybe_increment_hwm(self, out):
        flushed = self.log.flushed
        self.log.flushed = self.log.log_end_offset
        try:
            super()._maybe_increment_hwm(out)
        finally:
            self.log.flushed = flushed


def test_the_invariants_catch_broken_replication():
    for broken in (_NoTruncation, _CountsUnsyncedEnd):
        failures, _ = run_schedules(range(60), broken)
        assert failures, f"{broken.__name__} went unnoticed"


class _IdleNeverCredited(Replica):
    """A leader that forgets the caught-up time a fetch session's idle
    partition held when news comes (as if the session had never fetched)."""

    def on_log_news(self):
        for p in self._progress.values():
            p.idle_clock = None


class _SessionsMissNews(Simulation):
    """A driver whose fetch sessions keep leaving an idle partition out
    after news on its log (the replica is still told)."""

    def _news(self, node):
        if node.replica is not None:
            node.replica.on_log_news()


class _IdleCountedPastNews(Replica):
    """A leader that keeps counting an idle follower caught up at its
    session's fetches after records came (news ignored)."""

    def on_log_news(self):
        pass

    def _drop_passed_idle(self):
        pass

    def caught_up_ms(self, replica_id):
        p = self._progress.get(replica_id)
        if p is not None and p.idle_clock is not None:
            return max(p.last_caught_up_ms, p.idle_clock.ms)
        return super().caught_up_ms(replica_id)


def test_a_sessions_idle_partitions_keep_exact_caught_up_times():
    """The shadow check fires on both wrong directions: a caught-up follower
    made to look lagging, a lagging one made to look caught up."""
    for broken, sim in ((_IdleNeverCredited, Simulation),
                        (_IdleCountedPastNews, _SessionsMissNews)):
        failures, _ = run_schedules(range(60), broken, sim)
        assert failures and "caught up at" in failures[0], broken.__name__
    # a driver that misses news, with the real replica: it credits nothing
    # past the fsynced end (conservative), which the check still sees
    failures, _ = run_schedules(range(60), sim_class=_SessionsMissNews)
    assert failures and "caught up at" in failures[0]


class _NeverRestored(Replica):
    """A leader that, once its session lapsed, waits for a newer state only."""

    def on_session_restored(self, now):
        return []


# schedules where the leader's session lapses without its lease expiring
# and no newer state follows (found first by the fault harness: etcd paused)
LAPSE_SEEDS = [23, 73, 277]


def test_a_leader_whose_lease_lapsed_without_expiring_acknowledges_again():
    failures, totals = run_schedules(LAPSE_SEEDS)
    assert not failures, failures[0]
    assert totals["lapses"] >= len(LAPSE_SEEDS)
    for seed in LAPSE_SEEDS:
        failures, _ = run_schedules([seed], _NeverRestored)
        assert failures and "no write was acknowledged after" in failures[0], seed


class _RetryAnsweredOnDisk(Simulation):
    """The broker as it was: a retry of a record its log holds is answered
    once that record is on the local disk, whatever the high watermark (or
    a lapsed lease) says."""

    def answer_retry(self, node, offset, value):
        if node.log.flushed > offset:
            self._handle(node, [Completed(((offset, value),), Err.NONE)])


# schedules where a retry reaches a leader holding a record no follower has
# yet (fault run 106: 32 acknowledged records lost that way)
RETRY_SEEDS = [1, 2, 4]


def test_a_retried_write_is_acknowledged_only_past_the_high_watermark():
    failures, totals = run_schedules(RETRY_SEEDS)
    assert not failures, failures[0]
    assert totals["retries"] >= len(RETRY_SEEDS)
    for seed in RETRY_SEEDS:
        failures, _ = run_schedules([seed], sim_class=_RetryAnsweredOnDisk)
        assert failures and "acknowledged but not on" in failures[0], seed


class _FetchesBeforeFsync(Replica):
    """A follower that fetches again (reporting its log end) before its fsync."""

    @property
    def has_request_ready(self):
        flushed = self.log.flushed
        self.log.flushed = self.log.log_end_offset
        try:
            return super().has_request_ready
        finally:
            self.log.flushed = flushed

    def next_request(self):
        flushed = self.log.flushed
        self.log.flushed = self.log.log_end_offset
        try:
            return super().next_request()
        finally:
            self.log.flushed = flushed


class _ReportsBeforeFsync(Simulation):
    """The fetcher of _FetchesBeforeFsync: its fsync comes later."""

    def _ev_fflush(self, node, request, served):
        node.inflight = None
        self._handle(node, node.replica.on_fetch_answer(request, served, self.now))
        self.at(self.now + self.rng.randint(1, 20), "late_flush", node.id, node.incarnation)

    def _ev_late_flush(self, node_id, incarnation):
        node = self.nodes[node_id]
        if node.alive and node.incarnation == incarnation:
            node.log.flush()


def test_the_high_watermark_never_passes_an_in_sync_members_fsynced_end():
    failures, _ = run_schedules(range(30), _FetchesBeforeFsync, _ReportsBeforeFsync)
    assert any("fsynced end" in f for f in failures), failures[:1]


class _LeaderCutWhileFollowersAhead(Simulation):
    """Now and then the leader loses power while a follower holds its
    unfsynced tail (followers read up to the leader's log end, parked
    fetches wake at append) and restarts within its lease."""

    bump_on_return = True
    cuts = 0

    def __init__(self, seed, config):
        config.bump_epoch_on_return = self.bump_on_return
        super().__init__(seed, config)

    def check(self):
        super().check()
        if self.healing or self.rng.random() >= 0.05:
            return
        for node in self.nodes.values():
            if node.replica is not None and node.replica.is_leader and any(
                    other.replica is not None and len(other.log.records) > node.log.flushed
                    for other in self.nodes.values() if other is not node):
                type(self).cuts += 1
                self._crash(node, power_cut=True)
                self.at(self.now + 1, "restart", node.id)
                return


class _SameEpochOnReturn(_LeaderCutWhileFollowersAhead):
    bump_on_return = False


def test_followers_reading_the_unfsynced_tail_need_a_new_epoch_on_the_leaders_return():
    failures, _ = run_schedules(range(100), Replica, _LeaderCutWhileFollowersAhead)
    assert not failures, failures[0]
    assert _LeaderCutWhileFollowersAhead.cuts >= 3
    # The same leader back at the same epoch writes over a tail a follower has.
    failures, _ = run_schedules(range(100), Replica, _SameEpochOnReturn)
    assert any("disagrees with the committed log" in f or "acknowledged" in f
               for f in failures), failures[:1]


class _WritesBeforeEpochSettled(Replica):
    """A new leader that takes writes as soon as it takes its epoch, before
    the log and the epoch checkpoint are fsynced (SettleEpoch)."""

    def check_append(self, required_acks):
        settled, self._settled = self._settled, True
        try:
            return super().check_append(required_acks)
        finally:
            self._settled = settled


def test_a_new_leader_takes_writes_only_once_its_epoch_is_durable():
    """The epoch checkpoint is written in an fsync thread, not on the loop:
    a leader that appended before it was durable could crash with records
    of an epoch its checkpoint does not name."""
    failures, _ = run_schedules(range(20), _WritesBeforeEpochSettled)
    assert any("before its checkpoint named it" in f for f in failures), failures[:1]


class _EtcdPauses(Simulation):
    """etcd pauses past every lease now and then: every node's lease
    expires at once, and each registers again as the same process."""

    def __init__(self, seed, config):
        config.etcd_pause_rate = 0.06
        super().__init__(seed, config)


class _RestartsCountAsResumed(_LeaderCutWhileFollowersAhead, _EtcdPauses):
    """A controller that keeps the leaderships of a restarted process too
    (as if its registration named the lease it held before the restart)."""

    def _ev_restart(self, node_id):
        register = self._register
        self._register = lambda node: register(node, resumed=True)
        try:
            super()._ev_restart(node_id)
        finally:
            del self._register


class _HandledNotRestored(_EtcdPauses):
    """A node that does not acknowledge again when its resumed incarnation
    is handled (only a newer state would lift its lapse)."""

    def _msg_handled(self, node, src, src_inc, state):
        self._on_state(node, state)


def test_a_node_back_as_the_same_process_keeps_its_leaderships():
    """Every lease expired at once (etcd paused past the TTL): a node that
    registers again as the same process keeps its leaderships at their
    epoch and its ISR places (nothing moves after the heal), and a leader
    acknowledges again once its incarnation is handled.  No acknowledged
    write is lost; a restarted process is still fenced with a new epoch
    (a controller that kept it would lose writes)."""
    failures, totals = run_schedules(range(150), Replica, _EtcdPauses)
    assert not failures, failures[0]
    assert totals["etcd_pauses"] >= 50 and totals["resumes"] >= 100, totals
    assert totals["kept_leaderships"] >= 50, totals
    failures, _ = run_schedules(range(40), Replica, _HandledNotRestored)
    assert any("no write was acknowledged after" in f for f in failures), failures[:1]
    failures, _ = run_schedules(range(100), Replica, _RestartsCountAsResumed)
    assert any("disagrees with the committed log" in f or "acknowledged" in f
               for f in failures), failures[:1]
