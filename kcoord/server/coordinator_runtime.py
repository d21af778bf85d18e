"""The coordinator runtime: shards that load and unload, and one operation
primitive through which every group request reaches the core.

As Kafka's CoordinatorRuntime:
- `write(group_id, op, error)` / `write_parked(...)` / `read(...)` are
  scheduleWriteOperation / scheduleReadOperation.  The runtime alone
  answers a group whose shard this node does not own (NOT_COORDINATOR) or
  is still loading (COORDINATOR_LOAD_IN_PROGRESS), replays the op's
  records, arms its timers, waits until its records are durable before
  answering, answers requests parked earlier, and turns a failed write into
  an error answer (COORDINATOR_NOT_AVAILABLE).  `error(code)` builds the
  handler's error answer for a code.
- `load(partition, epoch)` / `unload(partition, epoch)` are onElection /
  onResignation.  Unload cancels the shard's timers, answers its parked and
  queued requests NOT_COORDINATOR at once, and drops its state.
- Durability is a declared seam (`log/durability.Durability`; default
  `LocalDurability`: fsync in worker threads).  A write is answered when
  `durability.sync(logs, done)` calls back: in a cluster
  (`cluster/durability.ReplicatedDurability`), when the high watermark
  passes what was appended.

Per shard, records are replayed at once (all but the AppliedRecords, whose
change the handler already made: Kafka's replayRecords=false; loading the
log replays every record) and queued for the group commit
(fsync_rounds.py): one round appends every waiting shard's records as one
batch per shard and has them made durable together; only then are the
answers released.  An answer never shows state that is not yet durable: an
op without records is answered after the writes queued before it.
"""
from __future__ import annotations

import asyncio
import gc
import logging
import time
from typing import Any, Callable

from ..coordinator.partitioner import partition_for
from ..coordinator.result import Record, Result
from ..coordinator.shard import CoordinatorConfig, CoordinatorShard
from ..log import PartitionLog
from ..log.compaction import compact
from ..observe.events import GroupEventLog, ServerMetrics
from ..protocol.errors import Err
from .dispatch import Reply
from .hot_ops import release_waiters
from ..log.durability import (
    LOST_LEADERSHIP, Durability, LocalDurability, NotReplicated, coordinator_answer,
)
from .clock import WallClock
from .stall_grace import STALL_GRACE_S, STALL_LATE_MS, fired_after_a_stall  # noqa: F401 (re-exported)
from .fsync_rounds import FULL_BATCH_RECORDS, FsyncRounds
from .shard_batches import TxnEnd, TxnWrite, build_shard_batches
from .coordinator_state import ACTIVE, FAILED, LOADING, NOT_OWNED, CoordinatorState, wait_loaded
from .internal_topic import compacted, open_internal_topic
from .shard_loader import ShardLoader
from .shard_snapshot import SnapshotMark, remove_temporaries
from .snapshot_schedule import ShardSnapshots
from ..protocol.internal_topics import OFFSETS_TOPIC

log = logging.getLogger("kcoord.coordinator")

PARTITION_CACHE_MAX = 100_000  # group ids whose partition the runtime remembers

# the shard states are coordinator_state.py's (one state machine for every coordinator)
__all__ = ["NOT_OWNED", "LOADING", "ACTIVE", "FAILED", "CoordinatorRuntime", "ShardRuntime"]

# A shard timer that fires late after a stall of this process or its loop
# waits STALL_GRACE_S once, so the heartbeats queued meanwhile count first
# (stall_grace.py; the transaction and share-lock timers do the same).
# How often a shard held by a lapse looks whether this node surely leads it
# again (the lease's restore tells it at once; a new state ends a lapse too).
LAPSE_RECHECK_S = 0.25

_PARKED = object()  # an entry's answer: the request answers through its token

ErrorFn = Callable[[int], Any]


def _not_durable(_code: int) -> int:
    """A marker's answer when its write failed: the sender retries it."""
    return Err.NOT_LEADER_OR_FOLLOWER


class _Batch:
    """Records of one shard waiting to be appended, then to be durable, and
    the requests answered once they are: entries of (reply, answer, error,
    replies to other parked requests)."""
    __slots__ = ("records", "count", "runs", "waiters", "dropped", "timeout")

    def __init__(self) -> None:
        self.records: list[Record] | None = []  # None once appended (take)
        # records in `records`: an item may be several records encoded
        # already (coordinator_batch.EncodedRecords, hot_ops._queue_commit)
        self.count = 0
        # runs written before `records` with their own batch metadata
        # (shard_batches.py: a transaction's records, its marker), or None
        self.runs: list[tuple] | None = None
        self.waiters: list[tuple] = []
        self.dropped = False
        self.timeout: asyncio.TimerHandle | None = None  # offsets.commit.timeout.ms

    def drop(self) -> None:
        """Answered for good (released, failed or dropped)."""
        self.dropped = True
        if self.timeout is not None:
            self.timeout.cancel()
            self.timeout = None


class ShardRuntime(CoordinatorState, ShardLoader):
    """One __consumer_offsets partition on this node: its state, core, log,
    timers, parked requests and writes in flight.  Another coordinator on
    the same runtime (the share coordinator, share_runtime.py) subclasses it
    with its own core (`new_core`), record writer (`encode_batch`) and log
    replay (`replay_log`)."""

    def __init__(self, index: int, plog: PartitionLog, config: CoordinatorConfig,
                 linger_ms: int = 0, commit: FsyncRounds | None = None,
                 events: GroupEventLog | None = None) -> None:
        self.index = index
        # logs rebalances, expiries and loads; a ServerMetrics also counts them
        self.events = events if events is not None else GroupEventLog()
        self.metrics = self.events if isinstance(self.events, ServerMetrics) else None
        self.plog = plog
        self.config = config
        self.commit = commit if commit is not None else FsyncRounds(linger_ms)
        CoordinatorState.__init__(self)
        self.clock = self.commit.clock  # the server's one clock (clock.py)
        self.core: CoordinatorShard | None = None
        self.parked: dict[Any, ErrorFn] = {}  # token -> its request's error answer
        self._pending: _Batch | None = None   # records not appended yet
        self._batches: list[_Batch] = []      # not yet released, oldest first
        self._queued = False                  # in the group commit's queue
        self._timers: dict[tuple, asyncio.TimerHandle] = {}
        # A lapse: timers that fired while this node could not tell it still
        # leads the shard's log (held, in firing order), and the check that
        # looks again until it does (see _fire)
        self._held: dict[tuple, None] = {}
        self._doubt_check: asyncio.TimerHandle | None = None
        self.records_loaded = 0
        self.load_errors = 0
        self.replayed_end = -1    # the log end the last load replayed up to
        self.snapshots: ShardSnapshots | None = None  # None: no coordinator snapshots
        self.snapshot_mark: SnapshotMark | None = None  # what the snapshot on disk covers
        self.compacted_upto = -1  # active segment base at the last compaction

    # ------------------------------------------------------------ lifecycle
    def load(self, epoch: int = 0) -> asyncio.Task | None:
        """Become this shard's coordinator for `epoch` (onElection): replay the
        log into a fresh core, then serve.  A lower epoch than the current one
        is ignored; an owned shard only takes the newer epoch.  -> the load
        task (None if nothing is loaded)."""
        if not self.take_epoch(epoch):
            log.info("shard %d: load for epoch %d ignored (at epoch %d)",
                     self.index, epoch, self.epoch)
            return None
        if self.state is LOADING:
            return self._load_task
        if self.state is ACTIVE:
            return None
        self.core = self.new_core()
        self.records_loaded = self.load_errors = 0
        return self.start_load(self._load)

    def new_core(self):
        """A fresh core for this shard, which loading fills from the log."""
        return CoordinatorShard(self.index, self.config)

    @staticmethod
    def encode_batch(records: list, now: int) -> bytearray:
        """The bytes to append for the shard's pending records."""
        return build_shard_batches(records, now)

    def appended(self, _records: list, _first_offset: int) -> None:
        """The records now sit from `_first_offset` on (the group shard needs
        only the log's growth: a snapshot every N records)."""
        if self.snapshots is not None:
            self.snapshots.after_append(self)

    async def _load(self) -> None:
        try:
            await self.replay_log()
            # A replicated log may hold records above its high watermark (not
            # acknowledged, possibly truncated later): serve nothing until
            # they are committed (Kafka serves reads at the last committed
            # offset); single node: no such wait.
            await self.commit.durability.replayed(self.plog, self.replayed_end, self.epoch)
            if self.snapshots is not None:  # still pure replay state: on_loaded comes after
                await self.snapshots.after_load(self)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("shard %d: loading failed", self.index)
            self.core = None
            self.finish_load(False)
            return
        self.finish_load(True)
        # from now on the core reports rebalances and expiries (not while replaying)
        self.core.set_observer(self.events)
        # restart the sessions of loaded members (their timers are not durable)
        self.apply(self.core.on_loaded(self.clock.ms()))

    def unload(self, epoch: int | None = None) -> bool:
        """Stop coordinating this shard (onResignation): cancel its timers,
        answer its parked and queued requests NOT_COORDINATOR, drop its
        state.  With an epoch, only if it is newer than the loaded one.
        -> True if the shard was unloaded."""
        if not self.take_resignation(epoch):
            return False
        self._drop(Err.NOT_COORDINATOR)
        return True

    def _drop(self, code: int) -> None:
        """-> NOT_OWNED: a load under way cancelled, every request it holds answered."""
        self.stop()
        self.cancel_all_timers()
        batches, self._batches, self._pending = self._batches, [], None
        for batch in batches:
            self._fail_batch(batch, code)
        parked, self.parked = self.parked, {}
        for token, error in parked.items():
            _answer(token, error(Err.NOT_COORDINATOR))
        self.core = None

    def reload(self) -> None:
        """Throw away memory that may be ahead of the log and replay the log again."""
        if self.state is NOT_OWNED:
            return
        self._drop(Err.NOT_COORDINATOR)
        self.load(self.epoch)

    # ------------------------------------------------------------ operations
    def run(self, op: Callable, error: ErrorFn, token: Reply | None = None):
        """The operation primitive for one request (see the module doc);
        -> the answer, or a Reply of it."""
        if self.state is not ACTIVE:
            return error(self.state_error())
        if token is None:
            result = op(self.core, self.clock.ms())
            if result.__class__ is not Result:
                # the answer alone: nothing to write, arm or deliver (the hot paths)
                if self._batches:  # behind the writes queued before it
                    reply = Reply()
                    self._batches[-1].waiters.append((reply, result, error, None))
                    return reply
                return result
        else:
            result = op(self.core, self.clock.ms(), token)
            self.parked[token] = error
        return self.finish(result, error, token)

    def finish(self, result: Result, error: ErrorFn, token: Reply | None):
        """The rest of run(): replay and queue the records, arm the timers,
        deliver the replies, answer now or once durable."""
        answer = result.response if token is None else _PARKED
        if result.timers:
            self.arm_timers(result.timers)
        records, replies = result.records, result.replies
        if records:
            self.core.replay_emitted(records)
            reply = Reply() if token is None else token
            self._queue(records).waiters.append((reply, answer, error, replies))
            return reply
        if self._batches:  # behind the writes queued before it
            reply = Reply() if token is None else token
            self._batches[-1].waiters.append((reply, answer, error, replies))
            return reply
        if replies:
            self._deliver(replies)
        if token is None:
            return answer
        return token.result() if token.done() else token

    def read(self, op: Callable, error: ErrorFn):
        """A read operation: -> op(core, now), answered after the writes
        queued before it are durable (so it shows no state that is not), and
        only while this node surely leads the log (so it shows no state that
        a newer leader has already replaced)."""
        if self.state is not ACTIVE:
            return error(self.state_error())
        code = self.serve_error()
        if code:
            return error(code)
        answer = op(self.core, self.clock.ms())
        if not self._batches:
            return answer
        reply = Reply()
        self._batches[-1].waiters.append((reply, answer, error, None))
        return reply

    def apply(self, result: Result) -> None:
        """An internal result (a timer, a load, a topic change, expiry): replay
        its records now, arm its timers, answer its parked requests once durable."""
        if result.timers:
            self.arm_timers(result.timers)
        if result.records:
            self.core.replay_emitted(result.records)
            self._queue(result.records).waiters.append((None, _PARKED, None, result.replies))
        elif result.replies:
            if self._batches:
                self._batches[-1].waiters.append((None, _PARKED, None, result.replies))
            else:
                self._deliver(result.replies)

    def refusal(self) -> int:
        """Kafka's check before an acks=all append, made before an operation
        that always writes runs (so its memory is untouched): NONE, or the
        client's answer (COORDINATOR_NOT_AVAILABLE: the ISR is below
        min.insync.replicas; NOT_COORDINATOR).  NONE when not active: the
        operation answers the state's error."""
        if self.state is not ACTIVE:
            return Err.NONE
        code = self.commit.durability.append_error(self.plog)
        return coordinator_answer(code) if code else Err.NONE

    def serve_error(self) -> int:
        """NONE while this node surely leads the shard's log, else the
        client's answer (NOT_COORDINATOR): checked before a read answers
        from memory, which a newer leader may already have moved past (NONE
        when not active: the operation answers the state's error)."""
        if self.state is not ACTIVE:
            return Err.NONE
        code = self.commit.durability.serve_error(self.plog)
        return coordinator_answer(code) if code else Err.NONE

    def write_records(self, records: list[Record], answer: Any = None,
                      reply: Any = None):
        """Replay records now and append them durably soon; -> `reply` (or a
        new Reply) that resolves to `answer` once they are durable, or fails
        with the write's error.  Without records: the Reply of the writes in
        flight, or None."""
        if not records:
            if not self._batches:
                return None
            reply = Reply() if reply is None else reply
            self._batches[-1].waiters.append((reply, answer, None, None))
            return reply
        self.core.replay_emitted(records)
        reply = Reply() if reply is None else reply
        self._queue(records).waiters.append((reply, answer, None, None))
        return reply

    def _queue(self, records: list[Record]) -> _Batch:
        batch = self._pending
        if batch is None:
            batch = self._pending = _Batch()
            self._batches.append(batch)
            timeout = self.commit.write_timeout
            if timeout is not None:
                batch.timeout = asyncio.get_running_loop().call_later(
                    timeout, self.time_out, batch)
        batch.records += records
        batch.count += len(records)
        if not self._queued:
            self._queued = True
            self.commit.add(self)
        elif batch.count >= FULL_BATCH_RECORDS:
            self.commit.filled()
        return batch

    def _queue_run(self, meta, records: list) -> _Batch:
        """Queue records that take their own batch (`meta`: shard_batches.py)."""
        batch = self._queue([])
        runs = batch.runs
        if runs is None:
            runs = batch.runs = []
        if batch.records:
            runs.append((None, batch.records))
            batch.records = []
            batch.count = 0  # (the next records start a batch of their own)
        runs.append((meta, records))
        return batch

    # ------------------------------------------------------------ transactions
    def write_txn(self, producer_id: int, producer_epoch: int, op: Callable, error: ErrorFn):
        """Kafka's scheduleTransactionalWriteOperation: op(core, now) -> Result
        whose records are written in one transactional batch of the producer
        (pending until its marker); answered once durable."""
        if self.state is not ACTIVE:
            return error(self.state_error())
        code = self.commit.durability.append_error(self.plog)  # refusal(), state known
        if code:
            return error(coordinator_answer(code))
        result = op(self.core, self.clock.ms())
        if not result.records:
            answer = self.finish(result, error, None)
        else:
            self.core.replay_txn_offsets(producer_id, producer_epoch, result.records)
            answer = Reply()
            self._queue_run(TxnWrite(producer_id, producer_epoch), result.records).waiters.append(
                (answer, result.response, error, None))
        self.commit.hurry()  # the producer waits on it before EndTxn: no linger
        return answer

    async def complete_txn(self, producer_id: int, producer_epoch: int, commit: bool,
                           load_wait: float | None = None) -> int:
        """Kafka's scheduleTransactionCompletion: the transaction's marker on
        this partition, replayed and written, once a load under way is done
        (its replay must see every batch before the marker; at most
        `load_wait` seconds).  -> NONE once durable, else
        NOT_LEADER_OR_FOLLOWER (not coordinated here, or the write failed:
        the sender retries)."""
        task = self._load_task
        if self.state is LOADING and task is not None:
            await asyncio.wait([task], timeout=load_wait)
        answer = self._marker(producer_id, producer_epoch, commit)
        return answer if isinstance(answer, int) else await answer

    def complete_txn_then(self, producer_id: int, producer_epoch: int, commit: bool,
                          done: Callable[[int], None]) -> None:
        """`complete_txn` without a task (a single node's completion, a step
        its producer's next request waits for): done(code) once durable, or
        at once when refused; a shard still loading goes the awaited way."""
        if self.state is LOADING:
            task = asyncio.ensure_future(self.complete_txn(producer_id, producer_epoch, commit))
            task.add_done_callback(
                lambda t: done(Err.NOT_LEADER_OR_FOLLOWER if t.cancelled() or t.exception()
                               else t.result()))
            return
        answer = self._marker(producer_id, producer_epoch, commit)
        if isinstance(answer, int):
            done(answer)
        else:
            answer.add_done_callback(lambda r: done(
                r.result() if r.exception() is None else Err.NOT_LEADER_OR_FOLLOWER))

    def _marker(self, producer_id: int, producer_epoch: int, commit: bool):
        """The marker replayed and queued -> a Reply of its code once durable,
        or the code refusing it now."""
        if self.state is not ACTIVE:
            return Err.NOT_LEADER_OR_FOLLOWER
        code = self.commit.durability.append_error(self.plog)
        if code:
            return code  # NOT_ENOUGH_REPLICAS: the marker's sender retries it
        self.core.replay_txn_marker(producer_id, producer_epoch, commit)
        reply = Reply()
        self._queue_run(TxnEnd(producer_id, producer_epoch, commit), []).waiters.append(
            (reply, Err.NONE, _not_durable, None))
        self.commit.hurry()  # the transaction waits on it: no linger
        return reply

    def _deliver(self, replies) -> None:
        parked = self.parked
        for token, response in replies:
            if parked.pop(token, None) is not None:
                _answer(token, response)

    # ------------------------------------------------------------ group commit
    def take(self, now: int) -> _Batch | None:
        """Append the pending records as one batch (not yet durable): the
        batch to release once durable, or None (nothing, or the append
        failed: its requests were answered and the shard reloads)."""
        batch, self._pending = self._pending, None
        self._queued = False
        if batch is None:
            return None
        # The records are freed here, while the cache still holds them, not
        # when the batch is released after its fsync (an OffsetCommit's ten
        # records of two dicts each, freed cold, cost about 5% of its CPU).
        records, batch.records = batch.records, None
        runs, batch.runs = batch.runs, None
        code = self.commit.durability.append_error(self.plog)
        if code:
            # refused before appending, as Kafka's replica manager refuses an
            # acks=all write: memory is ahead of the log, so the shard's
            # writes fail and it reloads (unloads when it no longer leads)
            log.warning("shard %d: write refused before appending (%s)", self.index,
                        Err(code).name)
            if code in LOST_LEADERSHIP:
                self.unload()
            else:
                self._failed()
            return None
        try:
            if self.metrics is None:
                first, _ = self.plog.append(self.encode_batch(records, now) if runs is None
                                            else build_shard_batches(records, now, runs))
            else:
                started = time.perf_counter()
                first, _ = self.plog.append(self.encode_batch(records, now) if runs is None
                                            else build_shard_batches(records, now, runs))
                self.metrics.appended(time.perf_counter() - started)
            self.appended(records, first)
        except Exception:
            log.exception("shard %d: append failed; reloading the shard from its log", self.index)
            self._failed()
            return None
        return batch

    def release(self, batch: _Batch, error: BaseException | None) -> None:
        """The batch is durable (or failed to be): answer its requests."""
        if batch.dropped:  # the shard was unloaded meanwhile: already answered
            return
        if error is not None:
            if isinstance(error, NotReplicated) and error.lost_leadership:
                # the durability seam says another node leads the shard now:
                # everything waiting is answered NOT_COORDINATOR and the shard
                # unloads (the control plane loads it again if it leads it again)
                log.warning("shard %d: write not durable here (%s); unloading the shard",
                            self.index, Err(error.error).name)
                self.unload()
                return
            log.error("shard %d: write failed (%s); reloading the shard from its log",
                      self.index, error)
            self._failed()
            return
        self._batches.remove(batch)
        batch.drop()
        release_waiters(batch.waiters, self.parked, _PARKED)

    def time_out(self, batch: _Batch) -> None:
        """The batch is not durable offsets.commit.timeout.ms after its first
        write (appended and waiting for the high watermark, or still waiting
        for its round behind one that is): answer its requests
        COORDINATOR_NOT_AVAILABLE (Kafka's write timeout, whose
        REQUEST_TIMED_OUT the group coordinator answers so).  The batch stays
        queued or in flight: it may still commit, and its release then
        answers nothing twice."""
        batch.timeout = None
        if batch.dropped:
            return
        code = Err.COORDINATOR_NOT_AVAILABLE
        parked = self.parked
        for reply, answer, error, replies in batch.waiters:
            for token, _ in replies or ():
                fail = parked.pop(token, None)
                if fail is not None:
                    _answer(token, fail(code))
            if reply is None or error is None:  # internal writes: wait for the outcome
                continue
            if answer is _PARKED:
                parked.pop(reply, None)
            _answer(reply, error(code))

    def _failed(self) -> None:
        # Everything not yet durable was computed from memory that is ahead of
        # the log: it fails, and the shard reloads from its log.
        batches, self._batches, self._pending = self._batches, [], None
        for batch in batches:
            self._fail_batch(batch, Err.COORDINATOR_NOT_AVAILABLE)
        self.reload()

    def _fail_batch(self, batch: _Batch, code: int) -> None:
        batch.drop()
        parked = self.parked
        for reply, answer, error, replies in batch.waiters:
            for token, _ in replies or ():
                fail = parked.pop(token, None)
                if fail is not None:
                    _answer(token, fail(code))
            if reply is None:
                continue
            if answer is _PARKED:
                parked.pop(reply, None)
            if error is not None:
                _answer(reply, error(code))
            elif not reply.done():
                reply.set_exception(OSError(f"coordinator write failed ({Err(code).name})"))

    # ------------------------------------------------------------ timers
    def arm_timers(self, timers) -> None:
        clock = self.clock
        now = clock.ms()
        for key, deadline in timers:
            handle = self._timers.pop(key, None)
            if handle is not None:
                handle.cancel()
            if deadline is not None:
                delay = max(deadline - now, 0) / 1000.0
                self._timers[key] = clock.call_later(delay, self._fire, key, max(deadline, now))

    def _fire(self, key: tuple, due: int | None = None) -> None:
        """Timer `key` fired; `due`: when it should have (ms), None after a
        stall's grace (STALL_LATE_MS)."""
        self._timers.pop(key, None)
        if self.state is not ACTIVE:
            return
        if self.serve_error():
            # This node cannot tell it still leads the shard (its lease lapsed,
            # or an ISR change was refused): its members' answers are held
            # meanwhile (nothing is acknowledged), so a client waiting on one
            # sends nothing more and its session would expire on our clock
            # alone (seed 261). Kafka's coordinator runs no timers for a shard
            # it does not surely lead; the timer waits until this node serves
            # again, when every session restarts (resume_after_lapse).
            self._held[key] = None
            self.note_lapse()
            return
        now = self.clock.ms()
        if due is not None and fired_after_a_stall(due, now):
            self._timers[key] = self.clock.call_later(STALL_GRACE_S, self._fire, key, None)
            return
        # replayed now, not in a task: a request handled before the task ran
        # would be computed from state that misses these records
        self.apply(self.core.on_timer(key, now))

    def cancel_all_timers(self) -> None:
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        self._held.clear()
        if self._doubt_check is not None:
            self._doubt_check.cancel()
            self._doubt_check = None

    # ------------------------------------------------------------ lapses
    @property
    def in_doubt(self) -> bool:
        """A lapse was noted and the shard has not resumed since."""
        return self._doubt_check is not None or bool(self._held)

    def note_lapse(self) -> None:
        """This node's lease lapsed (or a timer found the shard in doubt):
        look every LAPSE_RECHECK_S until it surely leads the shard again,
        then resume (an end of the lapse told at once comes through
        resume_after_lapse; this catches one ended by a new state)."""
        if self.state is ACTIVE and self._doubt_check is None:
            self._doubt_check = self.clock.call_later(LAPSE_RECHECK_S, self._check_lapse)

    def _check_lapse(self) -> None:
        self._doubt_check = None
        if self.state is not ACTIVE:
            return
        if self.serve_error():
            self._doubt_check = self.clock.call_later(LAPSE_RECHECK_S, self._check_lapse)
            return
        held = self.resume_after_lapse()
        if held >= 0:   # (the lease's restore, which logs once for all, came first otherwise)
            log.info("shard %d: serving again after a lapse: its members' sessions "
                     "restarted, %d held timers run", self.index, held)

    def resume_after_lapse(self) -> int:
        """This node serves the shard again after a lapse: every member's
        session counts again from now (as after a load: their heartbeats'
        answers were held, so their clients may have sent nothing since),
        then the timers held meanwhile fire (the core re-arms those not due).
        The number of held timers run, or -1 when it did not resume."""
        if self.state is not ACTIVE or self.serve_error():
            return -1
        if self._doubt_check is not None:
            self._doubt_check.cancel()
            self._doubt_check = None
        now = self.clock.ms()
        self.apply(self.core.restart_member_timers(now))
        held, self._held = self._held, {}
        for key in held:
            if self.state is not ACTIVE:
                break
            self.apply(self.core.on_timer(key, now))
        return len(held)


def _answer(reply, value) -> None:
    if not reply.done():
        reply.set_result(value)


# Young-generation size of the cyclic garbage collector while serving.  A
# commit allocates some 80 dicts, lists and tuples, nearly all freed by
# reference counting within a round; with Python's default (700) the
# collector runs every few commits and walks every young object still in
# flight (hundreds of pipelined requests), measured at 15-20% of the server's
# CPU under the OffsetCommit bench.  Cycles are still collected, just in
# fewer, larger passes.
GC_GEN0_THRESHOLD = 50_000


def tune_gc() -> None:
    gen0, gen1, gen2 = gc.get_threshold()
    if 0 < gen0 < GC_GEN0_THRESHOLD:  # 0: collection disabled by the embedder, leave it
        gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


class CoordinatorRuntime:
    """Every __consumer_offsets shard of this node, and the operation primitive.

    Single node (the default): `start()` loads every shard at epoch 0.  In a
    cluster, `start(load_all=False)` and the control plane calls `load` and
    `unload` as leadership moves; a shard it has not loaded answers
    NOT_COORDINATOR.  `durability` decides when an appended write may be
    answered (see the module doc).

    The group coordinator is this class; another coordinator served by the
    same runtime (share_runtime.py) sets TOPIC, SHARD, the config keys and
    `new_core_config`, and may leave its topic to be created on first use
    (CREATE_AT_START False: no shards until `open_topic`)."""

    TOPIC = OFFSETS_TOPIC
    SHARD = ShardRuntime
    PARTITIONS_KEY = "offsets.topic.num.partitions"
    LINGER_KEY = "group.coordinator.append.linger.ms"
    WRITE_TIMEOUT_KEY = "offsets.commit.timeout.ms"
    SNAPSHOT_KEY: str | None = "group.coordinator.snapshot.interval.records"
    CREATE_AT_START = True
    WHAT = "shards"  # in the log lines

    def __init__(self, catalogue, config, events: GroupEventLog | None = None,
                 durability: Durability | None = None, clock: WallClock | None = None) -> None:
        self.catalogue = catalogue
        # the one clock of the server (clock.py): wall time unless injected
        self.clock = clock if clock is not None else WallClock()
        self._time = self.clock.time  # the write path's now: one call, no method lookup
        self.config = config
        self.events = events if events is not None else GroupEventLog()
        metrics = self.events if isinstance(self.events, ServerMetrics) else None
        self.metrics = metrics
        self.core_config = self.new_core_config(config.values)
        # the adaptive linger (-1, the default) starts a round once the loop's queue drained
        self.linger = max(config[self.LINGER_KEY], 0)
        # one group commit for every shard
        self.commit = FsyncRounds(self.linger, durability or LocalDurability(), metrics=metrics,
                                  clock=self.clock)
        # one node: its own log never refuses an append (LocalDurability.append_error),
        # so an always-writing op goes straight to write(), one call less per commit
        self.replicated = self.commit.durability.replicated  # hot_ops.commit_request asks
        if not self.replicated:
            self.write_checked = self.write  # type: ignore[method-assign]
        if self.commit.durability.replicated:
            self.commit.write_timeout = config[self.WRITE_TIMEOUT_KEY] / 1000.0
        self.shards: list = []
        self._partitions: dict[str, int] = {}  # group id -> partition (partition_for hashes in Python)
        self._cleanup: asyncio.TimerHandle | None = None
        self._loaded_task: asyncio.Task | None = None
        self._started = False
        self._load_all = False
        self.snapshots: ShardSnapshots | None = None
        if self.CREATE_AT_START or catalogue.get(self.TOPIC) is not None:
            self.open_topic()

    def new_core_config(self, values: dict):
        return CoordinatorConfig.from_values(values)

    def topic_configs(self) -> dict[str, str]:
        """The internal topic's configs when this runtime creates it."""
        return compacted(self.config["offsets.topic.segment.bytes"])

    def open_topic(self) -> None:
        """Create the topic if need be and make one shard per partition (once);
        after start(), a single node loads them."""
        if self.shards:
            return
        topic = open_internal_topic(self.catalogue, self.TOPIC, self.config[self.PARTITIONS_KEY],
                                    self.topic_configs(), self.PARTITIONS_KEY)
        self.shards = [self.SHARD(i, plog, self.core_config, self.linger, self.commit,
                                  self.events)
                       for i, plog in enumerate(topic.partitions)]
        interval = self.config[self.SNAPSHOT_KEY] if self.SNAPSHOT_KEY else 0
        if self.SNAPSHOT_KEY:  # before any write of this server: a crash's leftovers
            for plog in topic.partitions:
                remove_temporaries(plog.path)
        if interval > 0:
            self.snapshots = ShardSnapshots(interval, self.commit.durability)
            for shard in self.shards:
                shard.snapshots = self.snapshots
        if self._started and self._load_all:
            self._load_every_shard()

    # ------------------------------------------------------------ routing
    def partition_for(self, group_id: str) -> int:
        p = self._partitions.get(group_id)
        if p is None:
            p = partition_for(group_id, len(self.shards))
            if len(self._partitions) >= PARTITION_CACHE_MAX:
                self._partitions.clear()
            self._partitions[group_id] = p
        return p

    def shard_for(self, group_id: str) -> ShardRuntime:
        return self.shards[self.partition_for(group_id)]

    def owns(self, partition: int) -> bool:
        """Is this node the (loaded or loading) coordinator of the shard?"""
        return self.shards[partition].state in (LOADING, ACTIVE)

    # ------------------------------------------------------------ operations
    def write(self, group_id: str, op: Callable, error: ErrorFn, *args):
        """op(core, now, *args) -> Result with `response`: the answer once its
        records are durable; or the answer alone when the op has nothing to
        write, arm or deliver.  -> the answer, or a Reply of it.  (The hot
        paths, the steady heartbeats, pass arguments rather than a closure,
        and ShardRuntime.run is inlined here.)"""
        p = self._partitions.get(group_id)
        if p is None:
            p = self.partition_for(group_id)
        shard = self.shards[p]
        if shard.state is not ACTIVE:
            return error(shard.state_error())
        result = op(shard.core, int(self._time() * 1000), *args)
        if result.__class__ is not Result:  # the answer alone
            if shard._batches:  # behind the writes queued before it
                reply = Reply()
                shard._batches[-1].waiters.append((reply, result, error, None))
                return reply
            return result
        return shard.finish(result, error, None)

    def write_checked(self, group_id: str, op: Callable, error: ErrorFn, *args):
        """write() for an operation that always writes (an offset commit):
        refused before it runs when its records could not be appended (in a
        cluster; one node binds write() in its place at construction)."""
        code = self.shard_for(group_id).refusal()
        if code:
            return error(code)
        return self.write(group_id, op, error, *args)

    def write_parked(self, group_id: str, op: Callable, error: ErrorFn):
        """op(core, now, token) -> Result: the request is answered by the reply
        addressed to `token` (now or by a later op or timer), once durable;
        unload answers it NOT_COORDINATOR.  -> the answer, or a Reply of it."""
        return self.shard_for(group_id).run(op, error, Reply())

    def read(self, group_id: str, op: Callable, error: ErrorFn):
        """op(core, now) -> the answer, sent once the writes before it are durable."""
        return self.shard_for(group_id).read(op, error)

    def write_txn(self, group_id: str, producer_id: int, producer_epoch: int, op: Callable,
                  error: ErrorFn):
        """A transactional write to the group's shard (ShardRuntime.write_txn)."""
        return self.shard_for(group_id).write_txn(producer_id, producer_epoch, op, error)

    async def complete_txn(self, partition: int, producer_id: int, producer_epoch: int,
                           commit: bool, load_wait: float | None = None) -> int:
        """A transaction's marker on __consumer_offsets partition `partition`
        (ShardRuntime.complete_txn); UNKNOWN_TOPIC_OR_PARTITION past its end."""
        if not 0 <= partition < len(self.shards):
            return Err.UNKNOWN_TOPIC_OR_PARTITION
        return await self.shards[partition].complete_txn(producer_id, producer_epoch, commit,
                                                         load_wait)

    def read_all(self, op: Callable) -> tuple[list, int]:
        """op(core, now) on every shard this node serves: (answers, the error
        code if some owned shard could not answer (still loading), else NONE)."""
        answers, error = [], Err.NONE
        now = self.clock.ms()
        for shard in self.shards:
            if shard.state is ACTIVE:
                answers.append(op(shard.core, now))
            elif shard.state is LOADING:
                error = Err.COORDINATOR_LOAD_IN_PROGRESS
        return answers, error

    def write_all(self, op: Callable) -> None:
        """op(core, now) -> Result on every active shard, applied as an
        internal write (Kafka's scheduleWriteAllOperation)."""
        now = self.clock.ms()
        for shard in self.shards:
            if shard.state is ACTIVE:
                try:
                    result = op(shard.core, now)
                except Exception:  # one shard's failure must not stop the others
                    log.exception("shard %d: operation failed", shard.index)
                    continue
                shard.apply(result)

    # ------------------------------------------------------------ lifecycle
    def load(self, partition: int, epoch: int) -> asyncio.Task | None:
        return self.shards[partition].load(epoch)

    def unload(self, partition: int, epoch: int | None = None) -> bool:
        return self.shards[partition].unload(epoch)

    def start(self, load_all: bool = True) -> None:
        tune_gc()
        self._started, self._load_all = True, load_all
        if load_all:
            self._load_every_shard()
        self._schedule_cleanup()

    def _load_every_shard(self) -> None:
        # shards load independently; each answers COORDINATOR_LOAD_IN_PROGRESS until done
        tasks = [s.load(0) for s in self.shards]
        self._loaded_task = asyncio.get_running_loop().create_task(
            self._log_all_loaded([t for t in tasks if t is not None], time.monotonic()))

    async def _log_all_loaded(self, tasks: list, start: float) -> None:
        await asyncio.gather(*tasks, return_exceptions=True)
        gc.freeze()  # the loaded state is long-lived: keep it out of later collections
        if self.shards and all(s.loaded for s in self.shards):
            log.info("all %s loaded: %d records in %.2fs", self.WHAT,
                     sum(s.records_loaded for s in self.shards), time.monotonic() - start)

    async def wait_loaded(self) -> None:
        """Until no shard is loading."""
        await wait_loaded(self.shards)

    def _schedule_cleanup(self) -> None:
        interval = self.core_config.offsets_retention_check_interval_ms / 1000.0
        self._cleanup = self.clock.call_later(interval, self._run_cleanup)

    def _run_cleanup(self) -> None:
        now = self.clock.ms()
        delete_retention = self.config["log.cleaner.delete.retention.ms"]
        for shard in self.shards:
            if not shard.loaded:
                continue
            records = shard.core.cleanup(now)
            if records:
                log.info("shard %d: expiring %d records", shard.index, len(records))
                self.events.offsets_expired(sum(1 for r in records if r.type in (0, 1)))
                shard.apply(Result(records=records))
            # compact once per newly sealed segment; records stay replayable
            # (latest per key), so live and reloaded state stay equal
            plog = shard.plog
            if plog.sealed_segments() and plog.active.base_offset > shard.compacted_upto:
                if self.snapshots is not None and not self.snapshots.may_compact(shard):
                    continue  # a catch-up reads the segments: next time
                try:
                    compact(plog, now, delete_retention)
                except Exception:
                    log.exception("shard %d: compaction failed", shard.index)
                shard.compacted_upto = plog.active.base_offset
        self._schedule_cleanup()

    def on_lease_lapsed(self) -> None:
        """This node's etcd lease lapsed (cluster/shard_ownership.py): each
        active shard holds its timers until this node surely leads it again."""
        for shard in self.shards:
            shard.note_lapse()
        log.info("lease lapsed: %d active shards hold their timers until this node "
                 "surely leads them again", sum(s.state is ACTIVE for s in self.shards))

    def on_lease_restored(self) -> None:
        """etcd confirmed this node's lease again: every shard it surely
        leads restarts its members' sessions and runs its held timers."""
        resumed = held = 0
        for shard in self.shards:
            in_doubt = shard.in_doubt
            ran = shard.resume_after_lapse()
            if ran >= 0 and in_doubt:
                resumed += 1
                held += ran
        if resumed:     # (a restore is also told where no shard was in doubt)
            log.info("lease restored: %d shards in doubt serve again, their members' "
                     "sessions restarted, %d held timers run", resumed, held)

    def stop(self) -> None:
        if self._cleanup is not None:
            self._cleanup.cancel()
        if self._loaded_task is not None:
            self._loaded_task.cancel()
        for shard in self.shards:
            if shard._load_task is not None:
                shard._load_task.cancel()
            shard.cancel_all_timers()
        self.commit.close()
        if self.snapshots is not None:  # after the last append: the logs are complete
            self.snapshots.at_shutdown(self.shards)
