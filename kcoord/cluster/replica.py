"""One node's replica of one partition: Kafka's replication protocol, sans-I/O.

The leader side is Kafka's Partition (followers' log ends and last caught-up
times, ISR expand and shrink proposed through the partition state store's
compare-and-set and applied only when it answers, the high watermark, the
writes waiting for it); the follower side is Kafka's AbstractFetcherThread
for one partition (truncation on becoming the follower of a new epoch by
OffsetForLeaderEpoch with the KIP-101/279 rules, then fetching from the log
end).  No sockets, no asyncio, no clock: time comes in as `now` (ms), what
to send comes out as data, and the driver feeds the answers back.

The one thing it calls is the local log (`ReplicaLog`): a truncation, an
epoch start and a flush, synchronous and rare (leadership changes).

kcoord differs from Kafka in one deliberate point: an acknowledged write is
on disk (fsynced) on every in-sync replica, not only in their page caches.
A follower fsyncs what it fetched before it fetches again (its fetch offset
is always durable) and the leader counts only its own fsynced end in the high
watermark.  Followers read up to the leader's log end (its unfsynced tail
too, so their fetch and fsync overlap the leader's fsync); a follower may
then hold records its leader lost in a power cut, which is safe because a
leader back from one is a new incarnation and leads again only at a new
epoch (cluster/etcd_control.py), so the follower truncates them.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from enum import Enum
from typing import Callable, Protocol

from kcoord.coordinator.compiled import mypyc_attr
from kcoord.log.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, EpochCache
from kcoord.protocol.errors import Err

from .state import NO_LEADER, PartitionState

UNKNOWN_OFFSET = -1


class ReplicaLog(Protocol):
    """The local log as replication sees it."""

    @property
    def log_start_offset(self) -> int: ...
    @property
    def log_end_offset(self) -> int: ...
    @property
    def flushed_offset(self) -> int:
        """Offsets below it are on disk."""
        ...
    @property
    def epochs(self) -> EpochCache: ...
    def truncate_to(self, offset: int) -> None:
        """Durably remove every record at or after `offset`, and every epoch
        entry starting there or later (also when `offset` is the log end)."""
        ...
    def reset_to(self, offset: int) -> None:
        """Durably empty the log and restart it at `offset`."""
        ...
    def assign_epoch(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` starts at `start_offset`, in memory: the driver
        makes it durable (SettleEpoch) off the loop."""
        ...
    def flush(self) -> None: ...


@dataclass(frozen=True, slots=True)
class ReplicationConfig:
    replica_lag_time_max_ms: int = 30000     # replica.lag.time.max.ms
    min_insync_replicas: int = 1             # min.insync.replicas


# A leader's ISR check (tick) runs every lag/2.  One that comes later than
# that by over this much (ms) comes after a stall of the leader itself (its
# process stopped, its loop held, its host starved): the followers' fetches
# of that time wait unread in its sockets, so the stall is not counted
# against them (_credit_own_stall).
TICK_LATE_MS = 1000


class Role(Enum):
    NONE = "none"
    LEADER = "leader"
    FOLLOWER = "follower"


# ------------------------------------------------------------------ outputs

@dataclass(frozen=True, slots=True)
class ProposeIsr:
    """Send `proposed` to the state store's alter_isr; feed its answer to
    on_isr_result(proposed, answer)."""
    proposed: PartitionState
    why: str = ""       # for the log: which replica joins or leaves, and why


@dataclass(frozen=True, slots=True)
class Completed:
    """Writes waiting for the high watermark are done: answer them with
    `error` (NONE, NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_OR_FOLLOWER)."""
    tokens: tuple
    error: int


@dataclass(frozen=True, slots=True)
class HighWatermarkMoved:
    offset: int


@dataclass(frozen=True, slots=True)
class BecameLeader:
    epoch: int


@dataclass(frozen=True, slots=True)
class BecameFollower:
    leader: int
    epoch: int


@dataclass(frozen=True, slots=True)
class SettleEpoch:
    """Make the log and the new `epoch`'s checkpoint entry durable (in an
    fsync thread), then call on_epoch_settled: until then this leader
    appends nothing (a crash must not leave records of an epoch its
    checkpoint does not name, past a recovery point that covers them)."""
    epoch: int


@dataclass(frozen=True, slots=True)
class Resigned:
    """Neither leader nor follower any more (no leader, or not a replica)."""


# ------------------------------------------------ follower requests (to send)

@dataclass(frozen=True, slots=True, eq=False)
class EpochQuery:
    """OffsetForLeaderEpoch to `leader`: where does `epoch` end in its log?
    Answers are matched to the request by identity."""
    leader: int
    current_leader_epoch: int
    epoch: int


@dataclass(frozen=True, slots=True, eq=False)
class FetchQuery:
    """Fetch to `leader` from `fetch_offset` (this replica's log end)."""
    leader: int
    current_leader_epoch: int
    fetch_offset: int


@dataclass(frozen=True, slots=True)
class FetchServed:
    """The leader's answer to a follower fetch: error, high watermark, and
    how far the follower may read (the leader's log end: its unfsynced tail
    too, safe because a leader back from a crash leads at a new epoch)."""
    error: int
    high_watermark: int = -1
    read_end: int = -1
    log_start_offset: int = -1


class SessionClock(Protocol):
    """What Replica.follower_idle keeps of a follower's fetch session: the
    time of its latest fetch (kcoord's FetchSession, or an IdleClock)."""
    ms: int


class IdleClock:
    """The time of a follower fetch session's latest fetch, shared by every
    idle partition of the session (Replica.follower_idle with a clock).

    A fetch session leaves its idle partitions out of the leader's pass
    (only changed ones are looked at), so instead of writing each one's
    caught-up time per fetch, the driver sets `ms` once per fetch and an
    idle partition's follower counts as caught up at `ms`.  That is exact
    while the leader's fsynced end has not passed the follower's position:
    it was at most there at every earlier moment too, so at the session's
    latest fetch the follower was caught up."""
    __slots__ = ("ms",)

    def __init__(self, ms: int = 0) -> None:
        self.ms = ms


class _Progress:
    """The leader's view of one follower (Kafka's ReplicaState)."""
    __slots__ = ("log_end_offset", "last_caught_up_ms", "last_fetch_leader_end",
                 "last_fetch_ms", "idle_clock")

    def __init__(self, caught_up_ms: int) -> None:
        self.log_end_offset = UNKNOWN_OFFSET
        self.last_caught_up_ms = caught_up_ms
        self.last_fetch_leader_end = UNKNOWN_OFFSET
        self.last_fetch_ms = 0
        # while set: an idle partition of the follower's fetch session, caught
        # up as of the session's latest fetch (IdleClock); see _settle_idle
        self.idle_clock: SessionClock | None = None


_TRUNCATING, _FETCHING = "truncating", "fetching"


# compiled (native/build.py); the replication simulation's tests subclass it
# with deliberately broken replicas, so interpreted subclasses stay allowed
@mypyc_attr(allow_interpreted_subclasses=True)
class Replica:
    """This node's replica of one partition."""

    def __init__(self, node_id: int, log: ReplicaLog, config: ReplicationConfig | None = None,
                 *, high_watermark: int = 0,
                 isr_eligible: Callable[[int], bool] | None = None) -> None:
        self.node_id = node_id
        self.log = log
        self.config = config or ReplicationConfig()
        # may a follower join the ISR now (Kafka's isReplicaIsrEligible)? A
        # restarted node's new incarnation may not until the controller fenced the old one
        self.isr_eligible = isr_eligible or (lambda _node: True)
        self.state: PartitionState | None = None
        self.role = Role.NONE
        self.high_watermark = max(min(high_watermark, log.log_end_offset), log.log_start_offset)
        # leader side
        self._progress: dict[int, _Progress] = {}
        self._pending: PartitionState | None = None   # ISR proposal awaiting the store
        self._refused = False   # the store refused our ISR change: acknowledge nothing
        self._lapsed = False    # our etcd lease may have lapsed: acknowledge nothing
        self._epoch_start = UNKNOWN_OFFSET
        self._settled = False   # this leader's epoch is durable: it may take writes
        self._waiters: list[tuple[int, int, object]] = []
        self._waiter_seq = 0
        self._last_tick = -1    # when tick() last ran in this leadership (ms)
        # the replica the high watermark last waited for (this node: its own
        # fsync), for the log of a new leadership's first acknowledged write
        self.hwm_waited_for = node_id
        # follower side
        self._stage = _TRUNCATING
        self._inflight: EpochQuery | FetchQuery | None = None   # the one request out
        self._blocked = False   # fenced by the leader: wait for a newer state

    # ------------------------------------------------------------ properties

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch if self.state is not None else UNDEFINED_EPOCH

    @property
    def _known(self) -> PartitionState:
        """The state, in a role that has one (a leader's or a follower's
        methods; typed for the compiled build, which checks it)."""
        state = self.state
        assert state is not None
        return state

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def accepts_writes(self) -> bool:
        """Leads, and its epoch is durable (SettleEpoch)."""
        return self.role is Role.LEADER and self._settled

    @property
    def epoch_start_offset(self) -> int:
        return self._epoch_start

    @property
    def maximal_isr(self) -> frozenset[int]:
        """The ISR the high watermark waits for: the committed one plus any
        replica being added (Kafka: adding to the ISR is only ever safer)."""
        isr = frozenset(self.state.isr) if self.state is not None else frozenset()
        if self._pending is not None:
            isr |= frozenset(self._pending.isr)
        return isr

    # ------------------------------------------------------- partition state

    def on_state(self, state: PartitionState, now: int) -> list:
        """A new partition state from the control plane (or our own CAS)."""
        if self.state is not None and state.version <= self.state.version:
            return []
        old = self.state
        self.state = state
        if self._pending is not None and state.version > self._pending.version:
            self._pending = None    # decided: its answer, if it comes, is old news
        self._refused = self._lapsed = False
        self._blocked = False
        out: list = []
        me = self.node_id
        if state.leader == me:
            if self.role is not Role.LEADER or old is None or old.leader_epoch != state.leader_epoch:
                self._become_leader(state, now, out)
            else:
                self._sync_progress(state, now)
            self._maybe_increment_hwm(out)
        elif state.leader != NO_LEADER and me in state.replicas:
            if (self.role is not Role.FOLLOWER or old is None or old.leader != state.leader
                    or old.leader_epoch != state.leader_epoch):
                self._become_follower(state, out)
        elif self.role is not Role.NONE:
            self._fail_waiters(Err.NOT_LEADER_OR_FOLLOWER, out)
            self.role = Role.NONE
            self._progress.clear()
            self._pending = None
            self._inflight = None
            out.append(Resigned())
        return out

    @property
    def serves_reads(self) -> bool:
        """A leader that knows it still leads (not _stale)."""
        return self.role is Role.LEADER and not self._stale

    @property
    def _stale(self) -> bool:
        """This leader cannot tell whether it still leads: it acknowledges,
        proposes and moves its high watermark no further."""
        return self._refused or self._lapsed

    def on_session_lost(self, _now: int) -> list:
        """This node's lease may have lapsed, so the controller may already
        have moved its leadership: acknowledge nothing (and keep the high
        watermark) until a newer state arrives, or until etcd confirms the
        lease never expired (on_session_restored)."""
        if self.role is Role.LEADER:
            self._lapsed = True
        return []

    def on_session_restored(self, _now: int) -> list:
        """etcd answered a refresh of the same lease again: it never expired,
        so no election moved a leadership for this node's absence, and any
        other change reaches it through the watch as always.  Without this
        a leader that lost etcd's answers for a TTL (etcd paused, a one-way
        cut) but kept its lease stayed mute for good: no newer state comes
        when nothing changed."""
        out: list = []
        if self._lapsed:
            self._lapsed = False
            if self.role is Role.LEADER:
                self._maybe_increment_hwm(out)
        return out

    def _become_leader(self, state: PartitionState, now: int, out: list) -> None:
        # Kafka's makeLeader: the new epoch starts at the log end, and every
        # follower's position is unknown until it fetches in this epoch (so
        # the high watermark only moves on positions reported in it).
        self.role = Role.LEADER
        self._inflight = None
        self._pending = None
        log = self.log
        self._epoch_start = log.log_end_offset
        # In memory now; the log (the previous epochs' records are durable
        # before this one's) and the checkpoint are fsynced off the loop, and
        # writes wait for that (check_append).  Followers may fetch meanwhile.
        log.assign_epoch(state.leader_epoch, self._epoch_start)
        self._settled = False
        self._last_tick = now
        self._progress = {r: _Progress(now if r in state.isr else 0)
                          for r in state.replicas if r != self.node_id}
        out.append(BecameLeader(state.leader_epoch))
        out.append(SettleEpoch(state.leader_epoch))

    def on_epoch_settled(self, epoch: int, _now: int) -> list:
        """The driver made SettleEpoch(`epoch`) durable: writes may come."""
        out: list = []
        if self.role is Role.LEADER and self.leader_epoch == epoch and not self._settled:
            self._settled = True
            self._maybe_increment_hwm(out)
        return out

    def _sync_progress(self, state: PartitionState, now: int) -> None:
        for r in state.replicas:
            if r != self.node_id and r not in self._progress:
                self._progress[r] = _Progress(now if r in state.isr else 0)
        for r in list(self._progress):
            if r not in state.replicas:
                del self._progress[r]

    def _become_follower(self, state: PartitionState, out: list) -> None:
        self._fail_waiters(Err.NOT_LEADER_OR_FOLLOWER, out)
        self.role = Role.FOLLOWER
        self._progress.clear()
        self._pending = None
        self._stage = _TRUNCATING
        self._inflight = None
        self._blocked = False
        out.append(BecameFollower(state.leader, state.leader_epoch))

    # ------------------------------------------------------------ leader side

    def check_current_epoch(self, current_leader_epoch: int) -> int:
        """Kafka's checkCurrentLeaderEpoch: -1 skips the check."""
        if current_leader_epoch < 0:
            return Err.NONE
        epoch = self.leader_epoch
        if current_leader_epoch < epoch:
            return Err.FENCED_LEADER_EPOCH
        if current_leader_epoch > epoch:
            return Err.UNKNOWN_LEADER_EPOCH
        return Err.NONE

    def check_append(self, required_acks: int) -> int:
        """May a write be appended here now?  Kafka checks the committed ISR
        against min.insync.replicas for acks=-1 before appending."""
        if self.role is not Role.LEADER or not self._settled:
            return Err.NOT_LEADER_OR_FOLLOWER   # (clients retry: the epoch settles in one fsync)
        if required_acks == -1 and len(self._known.isr) < self.config.min_insync_replicas:
            return Err.NOT_ENOUGH_REPLICAS
        return Err.NONE

    def await_offset(self, end_offset: int, token: object) -> list:
        """Complete `token` once the high watermark reaches `end_offset` (one
        past the write's last offset)."""
        if self.role is not Role.LEADER:
            return [Completed((token,), Err.NOT_LEADER_OR_FOLLOWER)]
        self._waiter_seq += 1
        heapq.heappush(self._waiters, (end_offset, self._waiter_seq, token))
        out: list = []
        self._complete_waiters(out)
        return out

    def on_flushed(self, _now: int) -> list:
        """The local log's fsynced end moved (after an append's fsync)."""
        out: list = []
        if self.role is Role.LEADER:
            self._drop_passed_idle()
            self._maybe_increment_hwm(out)
        return out

    # ----------------------------------------- idle partitions of fetch sessions

    def on_log_news(self) -> None:
        """The driver saw news on this log (an append, a role, epoch, ISR or
        high-watermark change) and looks at it again in its followers'
        sessions: each idle follower's caught-up time becomes its own
        again, credited with its session's latest fetch.  Drivers call it
        at the append, before that append's fsync moves the fsynced end."""
        for p in self._progress.values():
            if p.idle_clock is not None:
                self._settle_idle(p)

    def settle_follower(self, replica_id: int) -> None:
        """One follower's session no longer leaves this partition out (it
        forgot it, closed, or looks at it again): as on_log_news, for it."""
        p = self._progress.get(replica_id)
        if p is not None and p.idle_clock is not None:
            self._settle_idle(p)

    def caught_up_ms(self, replica_id: int) -> int:
        """A follower's last caught-up time as Replica.tick judges it."""
        p = self._progress.get(replica_id)
        if p is None:
            return -1
        if p.idle_clock is not None and self.log.flushed_offset <= p.log_end_offset:
            return max(p.last_caught_up_ms, p.idle_clock.ms)
        return p.last_caught_up_ms

    def _settle_idle(self, p: _Progress) -> None:
        """Detach `p` from its session's clock, keeping the caught-up time
        the clock gave it when still true: the leader's fsynced end is at
        most the follower's position, so it was at the session's latest
        fetch too.  Past it the driver missed news (the append should have
        detached it first): nothing is credited, the older time stands."""
        clock = p.idle_clock
        if clock is None:
            return
        p.idle_clock = None
        flushed = self.log.flushed_offset
        if flushed <= p.log_end_offset:
            ms = clock.ms
            if ms > p.last_caught_up_ms:
                p.last_caught_up_ms = ms
            if ms > p.last_fetch_ms:
                p.last_fetch_ms = ms
                p.last_fetch_leader_end = max(flushed, p.last_fetch_leader_end)

    def _drop_passed_idle(self) -> None:
        for p in self._progress.values():
            if p.idle_clock is not None and self.log.flushed_offset > p.log_end_offset:
                self._settle_idle(p)    # (credits nothing: see _settle_idle)

    def serve_follower_fetch(self, replica_id: int, fetch_offset: int,
                             current_leader_epoch: int, now: int) -> tuple[FetchServed, list]:
        """A follower's Fetch: record its position (Kafka's
        updateFollowerFetchState), maybe expand the ISR, maybe move the high
        watermark.  The driver then reads [fetch_offset, read_end): up to the
        log end, while the high watermark and the caught-up time count the
        fsynced ends (a follower fetches again only after its own fsync)."""
        error = self.check_current_epoch(current_leader_epoch)
        if error == Err.NONE and self.role is not Role.LEADER:
            error = Err.NOT_LEADER_OR_FOLLOWER
        progress = self._progress.get(replica_id)
        if error == Err.NONE and progress is None:
            error = Err.NOT_LEADER_OR_FOLLOWER     # not an assigned replica
        log = self.log
        if error != Err.NONE or progress is None:
            return FetchServed(error), []
        if progress.idle_clock is not None:
            self._settle_idle(progress)
        if fetch_offset > log.log_end_offset or fetch_offset < log.log_start_offset:
            return FetchServed(Err.OFFSET_OUT_OF_RANGE, self.high_watermark,
                               log.flushed_offset, log.log_start_offset), []
        leader_end = log.flushed_offset
        if fetch_offset >= leader_end:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, now)
        elif fetch_offset >= progress.last_fetch_leader_end:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, progress.last_fetch_ms)
        moved = progress.log_end_offset != fetch_offset
        progress.log_end_offset = fetch_offset
        progress.last_fetch_leader_end = max(leader_end, progress.last_fetch_leader_end)
        progress.last_fetch_ms = now
        if not moved and replica_id in self._known.isr:
            # the same position again (an idle partition of the fetch): the
            # ISR and the high watermark have nothing new to count
            return FetchServed(Err.NONE, self.high_watermark, log.log_end_offset,
                               log.log_start_offset), []
        out: list = []
        self._maybe_expand_isr(replica_id, progress, out)
        self._maybe_increment_hwm(out)
        return FetchServed(Err.NONE, self.high_watermark, log.log_end_offset,
                           log.log_start_offset), out

    def follower_idle(self, replica_id: int, fetch_offset: int, current_leader_epoch: int,
                      known_high_watermark: int, now: int,
                      clock: SessionClock | None = None) -> bool:
        """A follower's fetch of this partition in its fetch session, at the
        position it last reported, with nothing past it to read (the log
        end), in the ISR and told the current high watermark: record the fetch
        (as serve_follower_fetch would: caught up now) and -> True, nothing
        to answer.  Anything else -> False: serve_follower_fetch it.

        With the session's `clock` (set to `now`), the follower stays caught
        up at each later `clock.ms` without further calls, until the driver
        reports news on this log (on_log_news) or this follower fetches it
        again: the driver then leaves the partition out of the session's
        fetches until news."""
        if self.role is not Role.LEADER or self.check_current_epoch(current_leader_epoch):
            return False
        progress = self._progress.get(replica_id)
        leader_end = self.log.flushed_offset
        if (progress is None or fetch_offset != self.log.log_end_offset
                or progress.log_end_offset != fetch_offset
                or known_high_watermark != self.high_watermark
                or replica_id not in self._known.isr):
            return False
        if progress.idle_clock is not None:
            self._settle_idle(progress)
        progress.last_caught_up_ms = max(progress.last_caught_up_ms, now)
        progress.last_fetch_leader_end = max(leader_end, progress.last_fetch_leader_end)
        progress.last_fetch_ms = now
        progress.idle_clock = clock
        return True

    def answer_epoch_query(self, current_leader_epoch: int, epoch: int,
                           *, require_leader: bool = True) -> tuple[int, int, int]:
        """OffsetForLeaderEpoch for one partition: (error, epoch, end offset)."""
        error = self.check_current_epoch(current_leader_epoch)
        if error == Err.NONE and require_leader and self.role is not Role.LEADER:
            error = Err.NOT_LEADER_OR_FOLLOWER
        if error != Err.NONE:
            return error, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        found = self.log.epochs.epoch_end_offset(epoch, self.log.log_end_offset)
        if found is None:
            return Err.NONE, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        return Err.NONE, found[0], found[1]

    def tick(self, now: int) -> list:
        """Periodic leader duty (Kafka runs it every lag/2): shrink the ISR
        by the followers that have not caught up within the lag time."""
        out: list = []
        if self.role is not Role.LEADER:
            return out
        lag = self.config.replica_lag_time_max_ms
        self._credit_own_stall(now, lag // 2)
        if self._pending is not None or self._stale:
            return out
        leader_end = self.log.flushed_offset
        out_of_sync = set()
        why = []
        for r in self._known.isr:
            if r == self.node_id:
                continue
            p = self._progress.get(r)
            if p is not None and p.idle_clock is not None and leader_end > p.log_end_offset:
                self._settle_idle(p)    # news missed: its own (older) time judges it
            # (an idle one still attached is at the fsynced end: never out of sync)
            if p is None or (p.log_end_offset < leader_end and now - p.last_caught_up_ms > lag):
                out_of_sync.add(r)
                why.append(f"node {r} not caught up for {now - p.last_caught_up_ms} ms "
                           f"(at offset {p.log_end_offset} of {leader_end})"
                           if p is not None else f"node {r} unknown")
        if out_of_sync:
            isr = tuple(r for r in self._known.isr if r not in out_of_sync)
            self._propose(isr, out, "; ".join(why))
        return out

    def _credit_own_stall(self, now: int, interval: int) -> None:
        """A tick over TICK_LATE_MS past its interval: this leader itself ran
        nothing for a while (its process stopped, its loop held), so the
        followers' fetches queued in its sockets could not count.  The whole
        time since the last tick is taken off their lag (their caught-up
        times move on by it, never past now): the stall may have begun right
        after that tick, and a follower wrongly dropped costs more (an ISR
        below min.insync refuses every write) than one dropped up to lag/2
        late.  A follower silent after the wake is still dropped, a lag
        time later."""
        gap = now - self._last_tick if self._last_tick >= 0 else 0
        self._last_tick = now
        if gap - interval > TICK_LATE_MS:
            for p in self._progress.values():
                p.last_caught_up_ms = min(now, p.last_caught_up_ms + gap)

    def on_isr_result(self, proposed: PartitionState, result: PartitionState | None,
                      now: int) -> list:
        """The store's answer to a ProposeIsr: the new state, or None when the
        compare-and-set was refused.  No answer is not a refusal: the driver
        asks again until the store answers (as Kafka's AlterPartitionManager)."""
        if self._pending is not proposed:
            # Already decided by a newer state (or we are no longer leader).
            return self.on_state(result, now) if result is not None else []
        if result is not None:
            return self.on_state(result, now)     # clears _pending
        # Refused: someone else changed the state (maybe our own change, its
        # answer lost), so this leader no longer knows the ISR.  Until a newer
        # state arrives its high watermark stays put, it acknowledges nothing
        # and proposes nothing; the refused proposal still counts as a
        # possible ISR.
        self._refused = True
        return []

    def on_isr_ineligible(self, proposed: PartitionState) -> list:
        """The store refused to add a replica that may not join yet; the
        stored state did not change, so this leader still knows the ISR:
        the proposal is dropped and a later fetch may propose again."""
        out: list = []
        if self._pending is proposed:
            self._pending = None
            self._maybe_increment_hwm(out)  # it no longer waits for the refused replica
        return out

    def _propose(self, isr: tuple[int, ...], out: list, why: str = "") -> None:
        proposed = self._known.with_isr(isr)
        self._pending = proposed
        out.append(ProposeIsr(proposed, why))

    def on_eligibility_changed(self, _now: int) -> list:
        """A replica may have become ISR-eligible (the controller handled its
        incarnation): a follower whose last fetch in this epoch already
        showed it caught up joins now, not at its next fetch (an idle
        follower's long poll: up to replica.fetch.wait.max.ms later, while
        an ISR of one below min.insync.replicas refuses every write)."""
        out: list = []
        if self.role is Role.LEADER:
            for r, p in self._progress.items():
                if r not in self._known.isr:
                    self._maybe_expand_isr(r, p, out)
        return out

    def _maybe_expand_isr(self, replica_id: int, p: _Progress, out: list) -> None:
        # Kafka's isFollowerInSync: caught up to the high watermark and into
        # this leader's epoch (so it holds everything committed before it).
        if (self._pending is not None or self._stale or replica_id in self._known.isr
                or replica_id not in self._known.replicas or not self.isr_eligible(replica_id)):
            return
        if p.log_end_offset >= self.high_watermark and p.log_end_offset >= self._epoch_start:
            isr = tuple(r for r in self._known.replicas if r in self._known.isr or r == replica_id)
            self._propose(isr, out, f"node {replica_id} caught up (offset {p.log_end_offset}, "
                                    f"high watermark {self.high_watermark})")

    def _maybe_increment_hwm(self, out: list) -> None:
        if self._stale:
            return
        new = self.log.flushed_offset
        waited_for = self.node_id
        for r in self.maximal_isr:
            if r == self.node_id:
                continue
            p = self._progress.get(r)
            end = p.log_end_offset if p is not None else UNKNOWN_OFFSET
            if end < new:
                new, waited_for = end, r
        if self._waiters and new < self._waiters[0][0]:
            self.hwm_waited_for = waited_for
        if new > self.high_watermark:
            self.high_watermark = new
            out.append(HighWatermarkMoved(new))
        self._complete_waiters(out)

    def _complete_waiters(self, out: list) -> None:
        if self._stale or not self._waiters or self._waiters[0][0] > self.high_watermark:
            return
        error = (Err.NONE if len(self.maximal_isr) >= self.config.min_insync_replicas
                 else Err.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
        done = []
        while self._waiters and self._waiters[0][0] <= self.high_watermark:
            done.append(heapq.heappop(self._waiters)[2])
        out.append(Completed(tuple(done), error))

    def _fail_waiters(self, error: int, out: list) -> None:
        if self._waiters:
            out.append(Completed(tuple(w[2] for w in sorted(self._waiters)), error))
            self._waiters = []

    # ---------------------------------------------------------- follower side

    @property
    def has_request_ready(self) -> bool:
        """Would next_request return a request now?  (No side effect: the
        driver asks it to cut short a long poll that leaves this one out.)"""
        if self.role is not Role.FOLLOWER or self._inflight is not None or self._blocked:
            return False
        return (self._stage == _TRUNCATING
                or self.log.flushed_offset >= self.log.log_end_offset)

    def next_request(self) -> EpochQuery | FetchQuery | None:
        """What this follower sends its leader next (None: nothing now).  At
        most one request is in flight; every one must be answered through
        on_epoch_answer / on_fetch_answer or on_request_failed."""
        if not self.has_request_ready:
            return None
        state, log = self._known, self.log
        if self._stage == _TRUNCATING:
            latest = log.epochs.latest_epoch
            if latest == UNDEFINED_EPOCH:
                # Nothing known about epochs (an empty log): Kafka truncates
                # to the high watermark.
                self._truncate(self.high_watermark)
                self._stage = _FETCHING
            else:
                self._inflight = EpochQuery(state.leader, state.leader_epoch, latest)
                return self._inflight
        if log.flushed_offset < log.log_end_offset:
            return None     # report only what is on disk: flush first
        self._inflight = FetchQuery(state.leader, state.leader_epoch, log.log_end_offset)
        return self._inflight

    def awaits(self, request) -> bool:
        """Is `request` this follower's request in flight?"""
        return request is self._inflight and self.role is Role.FOLLOWER

    def on_request_failed(self, request, _now: int) -> list:
        """The request or its answer was lost (timeout, connection error)."""
        if request is self._inflight:
            self._inflight = None
        return []

    def on_epoch_answer(self, request: EpochQuery, error: int, epoch: int, end_offset: int,
                        _now: int) -> list:
        if request is not self._inflight:
            return []
        self._inflight = None
        if error != Err.NONE:
            self._on_leader_error(error)
            return []
        log = self.log
        local_end = log.log_end_offset
        # AbstractFetcherThread.getOffsetTruncationState (KIP-101, KIP-279).
        if end_offset == UNDEFINED_EPOCH_OFFSET:
            target, done = self.high_watermark, True
        elif epoch == UNDEFINED_EPOCH:
            target, done = min(end_offset, local_end), True
        else:
            mine = log.epochs.epoch_end_offset(epoch, local_end)
            if mine is None:
                target, done = min(end_offset, local_end), True
            elif mine[0] != epoch:
                # The leader's epoch is unknown here: cut to the end of our
                # largest epoch below it and ask again.
                target, done = min(mine[1], local_end), False
            else:
                target, done = min(mine[1], end_offset, local_end), True
        self._truncate(target)
        if done:
            self._stage = _FETCHING
        return []

    def accepts_fetched(self, request: FetchQuery) -> bool:
        """May the records answering `request` be appended now?"""
        return (request is self._inflight and self._stage == _FETCHING
                and request.fetch_offset == self.log.log_end_offset)

    def on_fetch_answer(self, request: FetchQuery, served: FetchServed, _now: int) -> list:
        """After the driver appended (accepts_fetched) and fsynced the records."""
        if request is not self._inflight:
            return []
        self._inflight = None
        if served.error == Err.OFFSET_OUT_OF_RANGE:
            self._on_out_of_range(served)
            return []
        if served.error != Err.NONE:
            self._on_leader_error(served.error)
            return []
        out: list = []
        hwm = min(served.high_watermark, self.log.log_end_offset)
        if hwm != self.high_watermark:
            self.high_watermark = hwm
            out.append(HighWatermarkMoved(hwm))
        return out

    def _on_leader_error(self, error: int) -> None:
        if error == Err.FENCED_LEADER_EPOCH:
            # The leader is in a newer epoch than our state: wait for it.
            self._blocked = True
        # NOT_LEADER_OR_FOLLOWER, UNKNOWN_LEADER_EPOCH (the leader has not
        # heard of our epoch yet), anything else: retry after a backoff.

    def _on_out_of_range(self, served: FetchServed) -> None:
        # AbstractFetcherThread.handleOutOfRangeError: behind the leader's log
        # start, restart from it; ahead of its end (unclean election), cut.
        log = self.log
        if log.log_end_offset < served.log_start_offset:
            log.reset_to(served.log_start_offset)
            self.high_watermark = served.log_start_offset
        elif served.read_end >= 0 and log.log_end_offset > served.read_end:
            self._stage = _TRUNCATING   # diverged: ask where our epochs end again

    def _truncate(self, offset: int) -> None:
        log = self.log
        # At or past the log end this still cuts the epoch cache there: a
        # leader that took an epoch and wrote nothing in it before losing it
        # keeps an entry at its log end that its new leader does not have
        # (Kafka's UnifiedLog.truncateTo does the same).
        log.truncate_to(min(offset, log.log_end_offset))
        if self.high_watermark > log.log_end_offset:
            self.high_watermark = log.log_end_offset
