"""A seeded simulation of kcoord's replication (kcoord/cluster/replica.py).

N nodes replicate one partition with Replica state machines over a fake
network (delays, reordering, loss) under a fake clock; a controller decides
leaders and ISRs through a compare-and-set store, as the etcd control plane
will; nodes crash (a kill keeps the page cache, a power cut loses everything
after the last fsync), pause (past their lease or not) and come back; a
node can also stop hearing etcd's answers for a while (a paused etcd, a
one-way cut) while its lease lives on: its session lapses
(on_session_lost) and is then restored (on_session_restored).
Clients write with acks=-1 to whichever node believes it leads, and retry
writes not yet acknowledged: a node whose log already holds the retried
record answers it as the broker answers an idempotent producer's retry
(`answer_retry`), the way that lost acknowledged writes in a fault run when
it did not wait for the high watermark.

Leaders serve followers' fetches as kcoord's fetch sessions do: a partition
found idle (Replica.follower_idle with the session's IdleClock) is left out
of the session's later fetches until news on the log (an append, a flush, a
high watermark, role, epoch or ISR change: Replica.on_log_news), its
follower's caught-up time carried by the session's clock meanwhile.  A
shadow of each leader keeps the caught-up times as a leader that looked at
every fetch would have (Kafka's rules), and they must agree.

After every step these invariants are checked:
  - an acknowledged record is in the log of every leader of the same or a
    later epoch (no acknowledged record is ever lost);
  - replicas agree below their high watermarks (one committed log);
  - at most one node acknowledges writes in any leader epoch;
  - a leader appends in its epoch only once its epoch checkpoint names it
    (SettleEpoch: the log and the checkpoint fsynced off the loop, a while
    after it took the epoch; a kill or power cut before that loses it);
  - every follower's caught-up time on its leader (what Replica.tick shrinks
    the ISR by) is the one of a leader that looked at every fetch: a
    session's idle partitions neither keep a lagging follower in the ISR
    nor drop a caught-up one.
Then the faults stop, every node comes back, and the cluster must again
acknowledge writes and bring every in-sync replica up to the leader.

Deterministic: the same seed gives the same schedule.
"""
from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field, replace

from kcoord.cluster.replica import (
    BecameFollower, BecameLeader, Completed, EpochQuery, FetchQuery, FetchServed,
    HighWatermarkMoved, IdleClock, ProposeIsr, Replica, ReplicationConfig, Resigned, Role,
    SettleEpoch,
)
from kcoord.cluster.state import NO_LEADER, PartitionState
from kcoord.log.leader_epoch import EpochCache
from kcoord.protocol.errors import Err

CONTROLLER = -1


class InvariantViolation(AssertionError):
    pass


class SimLog:
    """A partition log in memory: record i is (leader epoch, value) at offset
    i; `flushed` records are on disk, the rest only in the page cache."""

    def __init__(self) -> None:
        self.records: list[tuple[int, int]] = []
        self.flushed = 0
        self.epochs = EpochCache()
        self.durable_epochs = EpochCache()  # what the checkpoint file holds

    log_start_offset = 0

    @property
    def log_end_offset(self) -> int:
        return len(self.records)

    @property
    def flushed_offset(self) -> int:
        return self.flushed

    def append(self, records) -> None:
        for record in records:
            # The log assigns an epoch entry for each batch (Kafka's
            # maybeAssignEpochStartOffset); the checkpoint is written at once.
            if self.epochs.assign(record[0], len(self.records)):
                self.durable_epochs = self.epochs.copy()
            self.records.append(record)

    def truncate_to(self, offset: int) -> None:
        del self.records[offset:]
        self.flushed = min(self.flushed, offset)
        if self.epochs.truncate_from_end(offset):
            self.durable_epochs = self.epochs.copy()

    def reset_to(self, offset: int) -> None:  # logs here never lose their start
        raise AssertionError("the simulated logs all start at offset 0")

    def assign_epoch(self, epoch: int, start_offset: int) -> None:
        # in memory: the checkpoint is written when the driver settles it
        self.epochs.assign(epoch, start_offset)

    def settle_epochs(self) -> None:
        self.flush()
        self.durable_epochs = self.epochs.copy()

    def lose_unwritten_epochs(self) -> None:
        """The process died: the cache is what the checkpoint held, cut to the log."""
        self.epochs = self.durable_epochs.copy()
        if self.epochs.truncate_from_end(len(self.records)):
            self.durable_epochs = self.epochs.copy()

    def flush(self) -> None:
        self.flushed = len(self.records)

    def power_cut(self) -> None:
        del self.records[self.flushed:]
        self.lose_unwritten_epochs()


@dataclass
class SimConfig:
    nodes: int = 3
    produce_count: int = 40
    produce_gap_ms: tuple[int, int] = (2, 15)
    lag_ms: int = 120
    lease_ms: int = 100
    min_isr: int = 1
    loss: float = 0.03
    delay_ms: tuple[int, int] = (1, 8)
    slow_delay_ms: int = 40       # sometimes a message takes this long (reordering)
    fault_rate: float = 0.02      # per produce: chance of a crash, a pause, or a leader move
    flush_delay_ms: tuple[int, int] = (0, 4)
    bump_epoch_on_isr_removal: bool = True
    bump_epoch_on_return: bool = True   # the controller fences a returning incarnation
    request_timeout_ms: int = 60
    fetch_max_wait_ms: int = 30
    fetch_max_records: int = 16
    heal_ms: int = 600
    # chance per produce that etcd pauses past every lease (from its own
    # generator: 0 keeps every seed's schedule as it was before this fault)
    etcd_pause_rate: float = 0.0
    # a node back as the same process after its lease expired keeps its
    # leaderships and ISR places (kcoord's resumed registration)
    keep_resumed: bool = True


@dataclass
class Node:
    id: int
    log: SimLog = field(default_factory=SimLog)
    replica: Replica | None = None
    alive: bool = True
    incarnation: int = 0
    paused_until: int = 0
    pause_started: int = -1
    registered: bool = True
    registrations: int = 0        # a lapse noticed under an earlier registration is old news
    down_since: int = -1
    hwm_checkpoint: int = 0
    inflight: object = None
    backoff_until: int = 0
    parked: list = field(default_factory=list)
    pending_isr: list = field(default_factory=list)
    flush_scheduled: bool = False
    watch_stalled_until: int = 0
    lapsed_until: int = 0         # hears no answer from etcd until then (its lease lives)
    # (follower, its incarnation) -> its fetch session here (as a leader)
    sessions: dict = field(default_factory=dict)
    # follower -> [its progress object, caught-up ms, last fetch leader end,
    # last fetch ms]: Kafka's rules applied to every fetch it sent here
    shadow: dict = field(default_factory=dict)


class SimSession:
    """A follower's fetch session on a leader (one partition here)."""

    def __init__(self) -> None:
        self.clock = IdleClock()
        self.idle = False      # left out of its fetches until news on the log
        self.listed: tuple | None = None   # (fetch offset, leader epoch) last sent


class Simulation:
    replica_class = Replica     # tests swap in broken replicas to see the checks fire

    def __init__(self, seed: int, config: SimConfig | None = None) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.cfg = config or SimConfig()
        self.now = 0
        self._queue: list = []
        self._seq = 0
        self.nodes = {i: Node(i) for i in range(self.cfg.nodes)}
        self.rcfg = ReplicationConfig(self.cfg.lag_ms, self.cfg.min_isr)
        ids = tuple(self.nodes)
        self.store = PartitionState("t", 0, leader=ids[0], leader_epoch=0, isr=ids,
                                    replicas=ids, version=1)
        self._cut: dict[tuple[int, int], int] = {}   # (src, dst) -> cut until
        self.committed: list[tuple[int, int]] = []
        self.acked: dict[int, int] = {}              # offset -> value
        self.ack_epoch_end: dict[int, int] = {}      # epoch -> one past its last acked offset
        self.acker_of_epoch: dict[int, int] = {}     # epoch -> node that acknowledged in it
        self._unchecked_acks: list[tuple[int, int]] = []
        self._last_checked = None
        self.next_value = 0
        self.produced = 0
        self.healing = False
        self.acks_after_heal = 0
        self.steps = 0
        self.trace: list[str] = []
        self.stats = {"crashes": 0, "power_cuts": 0, "pauses": 0, "moves": 0, "lost": 0, "lapses": 0,
                      "elections": 0, "isr_changes": 0, "truncations": 0, "retries": 0,
                      "idle_skips": 0, "etcd_pauses": 0, "resumes": 0,
                      "kept_leaderships": 0}
        # retries draw from their own generator so every seed keeps the
        # schedule of faults it had before retries existed
        self.retry_rng = random.Random(seed * 104729 + 7)
        self.settle_rng = random.Random(seed * 7919 + 3)   # so do new leaders' epoch fsyncs
        self.etcd_rng = random.Random(seed * 31337 + 11)   # and etcd's pauses
        self.etcd_paused_until = 0
        self.unacked: dict[int, int] = {}           # value -> offset of its first append
        for node in self.nodes.values():
            node.replica = self.replica_class(node.id, node.log, self.rcfg)

    # ------------------------------------------------------------ scheduling

    def at(self, when: int, *event) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (when, self._seq, event))

    def _delay(self) -> int:
        lo, hi = self.cfg.delay_ms
        if self.rng.random() < 0.05:
            return self.rng.randint(hi, self.cfg.slow_delay_ms)
        return self.rng.randint(lo, hi)

    def send(self, src: int, dst: int, kind: str, *payload, reliable: bool = False) -> None:
        if not reliable and not self.healing:
            if self.rng.random() < self.cfg.loss or self._cut.get((src, dst), 0) > self.now:
                self.stats["lost"] += 1
                return
        src_inc = self.nodes[src].incarnation if src != CONTROLLER else 0
        when = self.now + self._delay()
        if src == CONTROLLER and not self.healing:
            when = max(when, self.nodes[dst].watch_stalled_until)
        # A message goes to the process that was there when it was sent: a
        # restarted node has new connections and a watch from the current
        # revision, and never sees what was meant for its predecessor.
        dst_inc = self.nodes[dst].incarnation if dst != CONTROLLER else 0
        self.at(when, "msg", src, src_inc, dst, dst_inc, kind, payload)

    # ------------------------------------------------------------------ run

    def run(self) -> "Simulation":
        cfg = self.cfg
        for node in self.nodes.values():
            self._on_state(node, self.store)
            self.at(self.rng.randint(1, cfg.lag_ms // 2), "tick", node.id, node.incarnation)
        self.at(1, "produce")
        self.at(50, "resync")
        heal_at = None
        while self._queue:
            when, _, event = heapq.heappop(self._queue)
            if heal_at is not None and when > self._heal_at + cfg.heal_ms:
                break
            self.now = when
            self._dispatch(event)
            self.steps += 1
            self.check()
            if heal_at is None and self.produced >= cfg.produce_count:
                heal_at = self.now
                self._heal()
        self.check_healed()
        return self

    def _dispatch(self, event) -> None:
        kind = event[0]
        if kind in ("tick", "flush", "timeout", "isr_timeout", "wake", "fflush", "retry",
                    "settle", "lapse"):
            node = self.nodes[event[1]]
            if not node.alive or node.incarnation != event[2]:
                return
            if node.paused_until > self.now:
                self.at(node.paused_until, *event)
                return
            getattr(self, "_ev_" + kind)(node, *event[3:])
            self._pump(node)
        elif kind == "msg":
            _, src, src_inc, dst, dst_inc, mkind, payload = event
            if dst == CONTROLLER:
                self._controller_msg(src, src_inc, mkind, payload)
                return
            node = self.nodes[dst]
            if not node.alive or node.incarnation != dst_inc:
                return
            if node.paused_until > self.now:
                self.at(node.paused_until, *event)
                return
            getattr(self, "_msg_" + mkind)(node, src, src_inc, *payload)
            self._pump(node)
        else:
            getattr(self, "_ev_" + kind)(*event[1:])

    # ------------------------------------------------------------- outputs

    def _handle(self, node: Node, outs) -> None:
        for out in outs:
            if isinstance(out, Completed):
                if out.error == Err.NONE:
                    self._acknowledged(node, out.tokens)
            elif isinstance(out, ProposeIsr):
                node.pending_isr.append(out.proposed)
                self._send_isr(node, out.proposed)
            elif isinstance(out, HighWatermarkMoved):
                self._news(node)    # the followers must hear it
            elif isinstance(out, SettleEpoch):
                # the log and the epoch checkpoint fsynced in a thread, a while later
                self.at(self.now + self.settle_rng.randint(*self.cfg.flush_delay_ms), "settle",
                        node.id, node.incarnation, out.epoch)
            elif isinstance(out, (BecameLeader, BecameFollower, Resigned)):
                self.trace.append(f"{self.now} n{node.id} {out}")
                self._news(node)

    def _news(self, node: Node) -> None:
        """News on the leader's log (the append notifier in kcoord): its
        sessions look at the partition again."""
        if node.replica is not None:
            node.replica.on_log_news()
        for session in node.sessions.values():
            session.idle = False

    def _acknowledged(self, node: Node, tokens) -> None:
        replica = node.replica
        epoch = replica.leader_epoch
        other = self.acker_of_epoch.setdefault(epoch, node.id)
        if other != node.id:
            self.fail(f"epoch {epoch} acknowledged by n{other} and n{node.id}")
        isr = set(replica.maximal_isr)
        if len(isr) < self.cfg.min_isr:
            self.fail(f"acknowledged with ISR {sorted(isr)} below min.insync.replicas")
        if self.store.leader_epoch == epoch:
            isr |= set(self.store.isr)      # the store's word, not only the leader's
        for offset, value in tokens:
            # Acknowledged = on disk on every in-sync replica (and so on at
            # least min.insync.replicas nodes).
            for r in isr:
                log = self.nodes[r].log
                if offset >= log.flushed or log.records[offset][1] != value:
                    self.fail(f"{value}@{offset} acknowledged but not on n{r}'s disk")
            self.acked[offset] = value
            self.unacked.pop(value, None)
            self._unchecked_acks.append((offset, value))
            if offset + 1 > self.ack_epoch_end.get(epoch, 0):
                self.ack_epoch_end[epoch] = offset + 1
            if self.healing:
                self.acks_after_heal += 1

    # ------------------------------------------------------------ node events

    def _on_state(self, node: Node, state: PartitionState) -> None:
        self._handle(node, node.replica.on_state(state, self.now))
        self._news(node)    # an ISR change too: kcoord's manager reports every new state

    def _ev_tick(self, node: Node) -> None:
        node.hwm_checkpoint = node.replica.high_watermark
        self._handle(node, node.replica.tick(self.now))
        self.at(self.now + self.cfg.lag_ms // 2, "tick", node.id, node.incarnation)

    def _ev_flush(self, node: Node) -> None:
        node.flush_scheduled = False
        node.log.flush()
        self._handle(node, node.replica.on_flushed(self.now))
        self._news(node)
        parked, node.parked = node.parked, []
        for src, src_inc, request in parked:
            self._serve_fetch(node, src, src_inc, request, park=False)

    def _ev_settle(self, node: Node, epoch: int) -> None:
        node.log.settle_epochs()
        self._handle(node, node.replica.on_epoch_settled(epoch, self.now))

    def _schedule_flush(self, node: Node) -> None:
        if not node.flush_scheduled:
            node.flush_scheduled = True
            self.at(self.now + self.rng.randint(*self.cfg.flush_delay_ms), "flush", node.id,
                    node.incarnation)
        # an append wakes parked follower fetches: they read the unfsynced tail
        parked, node.parked = node.parked, []
        for src, src_inc, request in parked:
            self._serve_fetch(node, src, src_inc, request, park=False)

    def _ev_wake(self, node: Node, src: int, src_inc: int, request) -> None:
        entry = (src, src_inc, request)
        if entry in node.parked:
            node.parked.remove(entry)
            self._serve_fetch(node, src, src_inc, request, park=False)

    def _ev_timeout(self, node: Node, request) -> None:
        if node.inflight is request:
            node.inflight = None
            node.backoff_until = self.now + 5
            self._handle(node, node.replica.on_request_failed(request, self.now))

    def _ev_isr_timeout(self, node: Node, proposed) -> None:
        # No answer is not a refusal (the change may have been applied): ask
        # again until the store answers, as Kafka's AlterPartitionManager does.
        if proposed in node.pending_isr:
            self._send_isr(node, proposed)

    def _send_isr(self, node: Node, proposed) -> None:
        self.send(node.id, CONTROLLER, "alter_isr", proposed)
        self.at(self.now + self.cfg.request_timeout_ms, "isr_timeout", node.id,
                node.incarnation, proposed)

    def _ev_retry(self, node: Node) -> None:
        pass    # _pump runs after every node event

    def _ev_fflush(self, node: Node, request, served) -> None:
        """A follower's fetched records reached the disk: report."""
        node.log.flush()
        node.inflight = None
        self._handle(node, node.replica.on_fetch_answer(request, served, self.now))

    def _pump(self, node: Node) -> None:
        """Let a follower send its next request, as its fetcher task does."""
        replica = node.replica
        if node.inflight is not None or replica.role is not Role.FOLLOWER:
            return
        if node.backoff_until > self.now:
            self.at(node.backoff_until, "retry", node.id, node.incarnation)
            return
        request = replica.next_request()
        if request is None:
            return
        node.inflight = request
        kind = "epoch_q" if isinstance(request, EpochQuery) else "fetch_q"
        self.send(node.id, request.leader, kind, request)
        self.at(self.now + self.cfg.request_timeout_ms, "timeout", node.id, node.incarnation, request)

    # -------------------------------------------------------------- messages

    def _msg_state(self, node: Node, src, src_inc, state: PartitionState) -> None:
        self._on_state(node, state)

    def _msg_epoch_q(self, node: Node, src: int, src_inc: int, request: EpochQuery) -> None:
        answer = node.replica.answer_epoch_query(request.current_leader_epoch, request.epoch)
        self.send(node.id, src, "epoch_a", src_inc, request, answer)

    def _msg_epoch_a(self, node: Node, src, src_inc, to_inc: int, request, answer) -> None:
        if node.incarnation != to_inc or node.inflight is not request:
            return
        node.inflight = None
        error, epoch, end = answer
        before = node.log.log_end_offset
        self._handle(node, node.replica.on_epoch_answer(request, error, epoch, end, self.now))
        if node.log.log_end_offset < before:
            self.stats["truncations"] += 1
        if error != Err.NONE:
            node.backoff_until = self.now + 5

    def _msg_fetch_q(self, node: Node, src: int, src_inc: int, request: FetchQuery) -> None:
        self._serve_fetch(node, src, src_inc, request, park=True)

    def _serve_fetch(self, node: Node, src: int, src_inc: int, request: FetchQuery,
                     park: bool) -> None:
        # A fetch session leaves out a partition where the follower is where
        # it was, caught up and told the high watermark (data_handlers.py's
        # _idle_in_session): the leader records the fetch through
        # follower_idle with the session's clock, and looks at it no more
        # until news on the log (or the follower lists it: a new position or
        # epoch); serve_follower_fetch would have answered the same.
        leader, asker = node.replica, self.nodes[src].replica
        known = asker.high_watermark if asker is not None else -1   # what the follower heard
        session = node.sessions.get((src, src_inc))
        if session is None:
            session = node.sessions[(src, src_inc)] = SimSession()
        session.clock.ms = self.now
        self._shadow_fetch(node, src, request)
        listed = (request.fetch_offset, request.current_leader_epoch)
        if session.listed != listed:
            session.listed, session.idle = listed, False
        if session.idle:
            self.stats["idle_skips"] += 1
            served, outs = FetchServed(Err.NONE, leader.high_watermark, node.log.flushed_offset,
                                       node.log.log_start_offset), []
        elif leader.follower_idle(src, request.fetch_offset, request.current_leader_epoch,
                                  known, self.now, session.clock):
            session.idle = True
            served, outs = FetchServed(Err.NONE, leader.high_watermark, node.log.flushed_offset,
                                       node.log.log_start_offset), []
        else:
            served, outs = leader.serve_follower_fetch(
                src, request.fetch_offset, request.current_leader_epoch, self.now)
        self._handle(node, outs)
        records = ()
        if served.error == Err.NONE:
            end = min(served.read_end, request.fetch_offset + self.cfg.fetch_max_records)
            records = tuple(node.log.records[request.fetch_offset:end])
            if not records and park:
                # Long poll: answered when the leader's log grows, or after max wait.
                node.parked.append((src, src_inc, request))
                self.at(self.now + self.cfg.fetch_max_wait_ms, "wake", node.id, node.incarnation,
                        src, src_inc, request)
                return
        self.send(node.id, src, "fetch_a", src_inc, request, served, records)

    def _shadow_fetch(self, node: Node, src: int, request: FetchQuery) -> None:
        """Kafka's caught-up rules (serve_follower_fetch's) on every fetch
        a leader takes, session or not."""
        leader = node.replica
        p = leader._progress.get(src)
        if (leader.role is not Role.LEADER or p is None
                or leader.check_current_epoch(request.current_leader_epoch) != Err.NONE
                or not node.log.log_start_offset <= request.fetch_offset
                <= node.log.log_end_offset):
            return
        entry = node.shadow.get(src)
        if entry is None or entry[0] is not p:   # a new progress: as the leader made it
            entry = node.shadow[src] = [p, p.last_caught_up_ms, p.last_fetch_leader_end,
                                        p.last_fetch_ms]
        flushed, offset = node.log.flushed_offset, request.fetch_offset
        if offset >= flushed:
            entry[1] = max(entry[1], self.now)
        elif offset >= entry[2]:
            entry[1] = max(entry[1], entry[3])
        entry[2] = max(flushed, entry[2])
        entry[3] = self.now

    def _check_caught_up_times(self) -> None:
        for node in self.nodes.values():
            leader = node.replica
            if leader is None or leader.role is not Role.LEADER:
                continue
            for src, entry in node.shadow.items():
                if leader._progress.get(src) is entry[0] and leader.caught_up_ms(src) != entry[1]:
                    self.fail(f"leader n{node.id} counts n{src} caught up at "
                              f"{leader.caught_up_ms(src)}, its fetches say {entry[1]}")

    def _msg_fetch_a(self, node: Node, src, src_inc, to_inc: int, request, served, records) -> None:
        if node.incarnation != to_inc or node.inflight is not request:
            return
        replica = node.replica
        if served.error == Err.NONE and records and replica.accepts_fetched(request):
            node.log.append(records)
            # The fetcher fsyncs before it fetches again; a crash in between
            # loses these records (and they were never reported).
            self.at(self.now + self.rng.randint(0, 3), "fflush", node.id, node.incarnation,
                    request, served)
            return
        node.inflight = None
        self._handle(node, replica.on_fetch_answer(request, served, self.now))
        if served.error != Err.NONE:
            node.backoff_until = self.now + 5

    def _msg_isr_a(self, node: Node, src, src_inc, to_inc: int, proposed, result) -> None:
        if node.incarnation != to_inc or proposed not in node.pending_isr:
            return
        node.pending_isr.remove(proposed)
        self._handle(node, node.replica.on_isr_result(proposed, result, self.now))
        self._news(node)

    # ------------------------------------------------------------- controller

    def _controller_msg(self, src: int, src_inc: int, kind: str, payload) -> None:
        assert kind == "alter_isr"
        if self.etcd_paused_until > self.now:   # etcd answers once it runs again
            self.at(self.etcd_paused_until, "msg", src, src_inc, CONTROLLER, 0, kind, payload)
            return
        (proposed,) = payload
        cur = self.store
        ok = (proposed.version == cur.version and proposed.leader == cur.leader
              and proposed.leader_epoch == cur.leader_epoch)
        result = None
        if ok:
            self.stats["isr_changes"] += 1
            result = self._store_set(replace(proposed))
        self.send(CONTROLLER, src, "isr_a", src_inc, proposed, result)

    def _store_set(self, state: PartitionState) -> PartitionState:
        state = replace(state, version=self.store.version + 1)
        if state.leader_epoch < self.store.leader_epoch:
            self.fail("controller lowered the leader epoch")
        self.store = state
        for node in self.nodes.values():
            if node.alive:
                self.send(CONTROLLER, node.id, "state", state)
        return state

    def _live(self) -> set[int]:
        return {n.id for n in self.nodes.values() if n.registered}

    def _elect(self, exclude: int | None = None) -> None:
        """Clean election from the ISR's registered members, epoch + 1."""
        cur = self.store
        live = self._live()
        candidates = [r for r in cur.isr if r in live and r != exclude]
        if not candidates:
            if cur.leader != NO_LEADER:
                self._store_set(replace(cur, leader=NO_LEADER, leader_epoch=cur.leader_epoch + 1))
            return
        leader = self.rng.choice(candidates)
        isr = tuple(r for r in cur.isr if r in live or r == leader)
        self.stats["elections"] += 1
        self._store_set(replace(cur, leader=leader, leader_epoch=cur.leader_epoch + 1, isr=isr))

    def _ev_lease_check(self) -> None:
        if self.etcd_paused_until > self.now:   # a paused etcd expires nothing
            self.at(self.etcd_paused_until, "lease_check")
            return
        for node in self.nodes.values():
            if not node.registered:
                continue
            gone_since = node.down_since if not node.alive else (
                node.pause_started if node.paused_until > self.now else -1)
            if gone_since >= 0 and self.now - gone_since >= self.cfg.lease_ms:
                node.registered = False
                self._on_node_lost(node.id)

    def _on_node_lost(self, node_id: int) -> None:
        cur = self.store
        if cur.leader == node_id:
            self._elect(exclude=node_id)
        elif node_id in cur.isr and len(cur.isr) > 1:
            isr = tuple(r for r in cur.isr if r != node_id)
            bump = 1 if self.cfg.bump_epoch_on_isr_removal else 0
            self._store_set(replace(cur, isr=isr, leader_epoch=cur.leader_epoch + bump))

    def _register(self, node: Node, resumed: bool = False) -> None:
        """The node registers under a new lease; `resumed`: the same process
        as before its lease expired (kcoord's registration names the old
        lease), not a restart."""
        node.registered = True
        node.registrations += 1
        cur = self.store
        keep = resumed and self.cfg.keep_resumed
        if cur.leader == NO_LEADER and node.id in cur.isr:
            self._elect()
        elif cur.leader == node.id and self.cfg.bump_epoch_on_return and not keep:
            self._store_set(replace(cur, leader_epoch=cur.leader_epoch + 1))
        else:
            self.send(CONTROLLER, node.id, "state", self.store, reliable=True)
        if keep:
            if cur.leader == node.id:
                self.stats["kept_leaderships"] += 1
            # the controller records the incarnation as handled; the node hears
            # that after every state written before it (its watch is in order)
            self.stats["resumes"] += 1
            self.send(CONTROLLER, node.id, "handled", self.store, reliable=True)

    def _msg_handled(self, node: Node, src, src_inc, state: PartitionState) -> None:
        """Its incarnation handled: a leadership it still holds is current."""
        self._on_state(node, state)
        if node.replica.state is not None and node.replica.state.version == state.version:
            self._handle(node, node.replica.on_session_restored(self.now))

    def _etcd_pause(self) -> None:
        """etcd stops past every lease: nothing is decided or answered;
        each node notices its lease lapsed a lease after the last answer;
        when etcd runs again every lease has expired."""
        if self.etcd_paused_until > self.now:
            return
        self.stats["etcd_pauses"] += 1
        self.etcd_paused_until = self.now + self.etcd_rng.randint(self.cfg.lease_ms,
                                                                  3 * self.cfg.lease_ms)
        for node in self.nodes.values():
            if node.alive:
                self.at(self.now + self.cfg.lease_ms, "lapse", node.id, node.incarnation,
                        node.registrations)
        self.at(self.etcd_paused_until, "etcd_resume")

    def _ev_lapse(self, node: Node, registrations: int) -> None:
        if node.registrations == registrations:
            self._handle(node, node.replica.on_session_lost(self.now))

    def _ev_etcd_resume(self) -> None:
        for node in self.nodes.values():
            if node.alive and node.paused_until <= self.now:
                self._register(node, resumed=True)   # its refresh: expired; a new lease
            elif node.registered:
                node.registered = False   # down, or paused: back later
                self._on_node_lost(node.id)

    def _ev_resync(self) -> None:
        # A watch that reconnects reads the latest state.
        for node in self.nodes.values():
            if node.alive:
                self.send(CONTROLLER, node.id, "state", self.store, reliable=True)
        self.at(self.now + 60, "resync")

    def _ev_move(self) -> None:
        """Controlled leadership move (preferred leader, controlled shutdown)."""
        cur = self.store
        live = self._live()
        if self.etcd_paused_until > self.now:
            return  # nobody writes to a paused etcd
        others = [r for r in cur.isr if r != cur.leader and r in live]
        if cur.leader != NO_LEADER and others:
            self.stats["moves"] += 1
            self._store_set(replace(cur, leader=self.rng.choice(others),
                                    leader_epoch=cur.leader_epoch + 1))

    # ------------------------------------------------------------------ faults

    def _ev_produce(self) -> None:
        cfg, rng = self.cfg, self.rng
        if not self.healing:
            if rng.random() < cfg.fault_rate:
                self._fault()
            if cfg.etcd_pause_rate and self.etcd_rng.random() < cfg.etcd_pause_rate:
                self._etcd_pause()
            self.produced += 1
        leaders = [n for n in self.nodes.values()
                   if n.alive and n.paused_until <= self.now and n.replica.is_leader]
        if leaders:
            node = rng.choice(leaders)
            replica = node.replica
            if replica.check_append(-1) == Err.NONE:
                offset = node.log.log_end_offset
                value = self.next_value
                self.next_value += 1
                node.log.append([(replica.leader_epoch, value)])
                self._news(node)
                self.unacked[value] = offset
                self._schedule_flush(node)
                self._handle(node, replica.await_offset(offset + 1, (offset, value)))
        self._client_retry(leaders)
        if not self.healing or self.now < self._heal_at + self.cfg.heal_ms - 100:
            self.at(self.now + rng.randint(*cfg.produce_gap_ms), "produce")

    def _client_retry(self, leaders: list[Node]) -> None:
        """Now and then the client sends an unacknowledged write again to a
        node that believes it leads (its first answer was lost or late)."""
        rng = self.retry_rng
        if not leaders or not self.unacked or rng.random() >= 0.1:
            return
        value = rng.choice(sorted(self.unacked))
        offset = self.unacked[value]
        node = rng.choice(leaders)
        records = node.log.records
        if offset < len(records) and records[offset][1] == value:
            self.stats["retries"] += 1
            self.answer_retry(node, offset, value)

    def answer_retry(self, node: Node, offset: int, value: int) -> None:
        """The broker's answer to a retry of a record its log holds (the
        duplicate check in DataPlane._append): the write's offset once the
        high watermark passes the log end, as for a first send."""
        self._handle(node, node.replica.await_offset(node.log.log_end_offset, (offset, value)))

    def _fault(self) -> None:
        rng = self.rng
        what = rng.random()
        node = self.nodes[rng.randrange(len(self.nodes))]
        if what < 0.35:
            if node.alive:
                self._crash(node, power_cut=rng.random() < 0.5)
                self.at(self.now + rng.randint(5, 300), "restart", node.id)
        elif what < 0.45:
            # Messages between two nodes are dropped for a while.
            other = rng.randrange(len(self.nodes))
            until = self.now + rng.randint(20, 300)
            self._cut[(node.id, other)] = self._cut[(other, node.id)] = until
        elif what < 0.55:
            # The node's watch stalls: it learns of state changes late.
            node.watch_stalled_until = self.now + rng.randint(20, 300)
        elif what < 0.6:
            # etcd's answers do not reach the node for longer than its lease,
            # but its refreshes reach etcd: the lease never expires (the
            # leader, most often: whether it acknowledges again is the question)
            if rng.random() < 0.7 and self.store.leader != NO_LEADER:
                node = self.nodes[self.store.leader]
            if node.alive and node.lapsed_until <= self.now:
                self.stats["lapses"] += 1
                node.lapsed_until = self.now + rng.randint(self.cfg.lease_ms,
                                                           3 * self.cfg.lease_ms)
                self._handle(node, node.replica.on_session_lost(self.now))
                self.at(node.lapsed_until, "restore", node.id, node.incarnation,
                        node.registrations)
        elif what < 0.8:
            if node.alive and node.paused_until <= self.now:
                self.stats["pauses"] += 1
                node.pause_started = self.now
                node.paused_until = self.now + rng.randint(10, 3 * self.cfg.lease_ms)
                self.at(node.paused_until, "resume", node.id, node.incarnation)
                self.at(self.now + self.cfg.lease_ms, "lease_check")
        else:
            self._ev_move()

    def _crash(self, node: Node, power_cut: bool) -> None:
        self.stats["crashes"] += 1
        node.alive = False
        node.down_since = self.now
        self.at(self.now + self.cfg.lease_ms, "lease_check")
        node.incarnation += 1
        if power_cut:
            self.stats["power_cuts"] += 1
            if node.log.flushed < node.replica.high_watermark:
                self.fail(f"n{node.id} had records below its high watermark only in memory")
            node.log.power_cut()
        else:
            node.log.lose_unwritten_epochs()   # a kill: the checkpoint write never ran
        node.replica = None
        node.inflight = None
        node.parked = []
        node.sessions = {}
        node.shadow = {}
        node.pending_isr = []
        node.flush_scheduled = False
        node.paused_until = 0

    def _ev_restart(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if node.alive:
            return
        node.alive = True
        node.down_since = -1
        # What survived (all of it after a kill: the page cache outlives the
        # process) is fsynced when the log is opened.
        node.log.flush()
        node.backoff_until = 0
        node.replica = self.replica_class(node.id, node.log, self.rcfg,
                               high_watermark=min(node.hwm_checkpoint, node.log.log_end_offset))
        self.at(self.now + 1, "tick", node.id, node.incarnation)
        self._register(node)

    def _ev_resume(self, node_id: int, incarnation: int) -> None:
        node = self.nodes[node_id]
        if not node.alive or node.incarnation != incarnation or node.paused_until > self.now:
            return
        node.pause_started = -1
        if not node.registered:
            # it notices its lease lapsed, then that it expired: the same process
            self._handle(node, node.replica.on_session_lost(self.now))
            self._register(node, resumed=True)
        self._pump(node)

    def _ev_restore(self, node_id: int, incarnation: int, registrations: int) -> None:
        node = self.nodes[node_id]
        if not node.alive or node.incarnation != incarnation:
            return
        if node.registrations != registrations:
            return  # its lease did expire meanwhile (etcd paused): registered anew
        if node.paused_until > self.now or self.etcd_paused_until > self.now:
            # it hears etcd again once both run
            self.at(max(node.paused_until, self.etcd_paused_until), "restore", node_id,
                    incarnation, registrations)
            return
        self._handle(node, node.replica.on_session_restored(self.now))
        self._pump(node)

    def _heal(self) -> None:
        self.healing = True
        # Pauses run out by themselves; healing is counted from the last one.
        self._heal_at = max([self.now, self.etcd_paused_until]
                            + [max(n.paused_until, n.lapsed_until) for n in self.nodes.values()])
        for node in self.nodes.values():
            if not node.alive:
                self.at(self.now + 1, "restart", node.id)

    # -------------------------------------------------------------- invariants

    def fail(self, message: str) -> None:
        tail = "\n".join(self.trace[-15:])
        raise InvariantViolation(f"seed {self.seed} at t={self.now}: {message}\n{tail}\n"
                                 + self.describe())

    def describe(self) -> str:
        lines = [f"store: {self.store}"]
        for n in self.nodes.values():
            r = n.replica
            role = f"{r.role.value} e{r.leader_epoch} hwm={r.high_watermark}" if r else "down"
            lines.append(f"  n{n.id} {role} leo={n.log.log_end_offset} flushed={n.log.flushed} "
                         f"epochs={n.log.epochs.entries} log={n.log.records[-8:]}")
        return "\n".join(lines)

    def check(self) -> None:
        self._check_caught_up_times()
        committed = self.committed
        live = [n for n in self.nodes.values() if n.replica is not None]
        signature = [len(self.acked), len(committed)]
        for node in live:
            records = node.log.records
            hwm = node.replica.high_watermark
            if hwm > len(records):
                self.fail(f"n{node.id} high watermark {hwm} past its log end {len(records)}")
            signature.append((id(node.replica), len(records), hwm))
            if hwm > len(committed):
                # Whoever first reports a high watermark defines the committed log.
                committed.extend(records[len(committed):hwm])
        signature.extend((n.replica.role, n.replica.leader_epoch) for n in live)
        signature = tuple(signature)
        if signature == self._last_checked:
            return      # no log, high watermark, role or acknowledgement changed
        self._last_checked = signature
        for node in live:
            replica = node.replica
            records = node.log.records
            hwm = replica.high_watermark
            if records[:hwm] != committed[:hwm]:
                self.fail(f"n{node.id} disagrees with the committed log below its high watermark")
            if replica.role is Role.LEADER:
                epoch = replica.leader_epoch
                if (any(e == epoch for e, _ in records[replica.epoch_start_offset:])
                        and node.log.durable_epochs.latest_epoch != epoch):
                    self.fail(f"leader n{node.id} appended in epoch {epoch} before its "
                              f"checkpoint named it (durable: {node.log.durable_epochs})")
                if epoch == self.store.leader_epoch:
                    self._check_hw_durable_on_isr(node, hwm)
                upto = max((end for e, end in self.ack_epoch_end.items() if e <= epoch), default=0)
                if records[:upto] != committed[:upto]:
                    self.fail(f"leader n{node.id} (epoch {epoch}) lacks acknowledged records")
        for offset, value in self._unchecked_acks:
            if offset >= len(committed) or committed[offset][1] != value:
                self.fail(f"acknowledged record {value}@{offset} is not committed")
        self._unchecked_acks.clear()

    def _check_hw_durable_on_isr(self, leader: Node, hwm: int) -> None:
        # A power cut of any in-sync member may lose only what is past the HW.
        for r in self.store.isr:
            member = self.nodes[r]
            if member.replica is not None and member.log.flushed < hwm:
                self.fail(f"leader n{leader.id}'s high watermark {hwm} passes in-sync "
                          f"n{r}'s fsynced end {member.log.flushed}")

    def check_healed(self) -> None:
        """After the faults stop the cluster must work again."""
        if self.acks_after_heal == 0:
            self.fail("no write was acknowledged after every node came back")
        leaders = [n for n in self.nodes.values() if n.replica and n.replica.is_leader
                   and n.replica.leader_epoch == self.store.leader_epoch]
        if len(leaders) != 1:
            self.fail(f"{len(leaders)} nodes lead the current epoch after healing")
        leader = leaders[0]
        hwm = leader.replica.high_watermark
        for r in self.store.isr:
            follower = self.nodes[r]
            if follower.log.records[:hwm] != leader.log.records[:hwm]:
                self.fail(f"in-sync n{r} does not hold the leader's committed log after healing")
