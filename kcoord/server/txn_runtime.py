"""The runtime of the transaction coordinator core (kcoord/txn/).

Owns the __transaction_state log (one topic, `transaction.state.log.num.
partitions` partitions, Kafka's record schemas), loads it at start by
replaying every record, and drives the core: a handler's records are
replayed at once, appended, and fsynced before the answer leaves.  Once a
PrepareCommit/PrepareAbort is durable, the markers are written in-process
to every partition of the transaction (data partitions through the data
plane, __consumer_offsets partitions through their coordinator shard),
made durable, and then the Complete* record is written.  On load every
Prepare* found is finished the same way.  Timers: the timed-out
transaction sweep and the transactional-id expiry sweep.

In a cluster each __transaction_state partition is coordinated by the node
leading it (cluster/shard_ownership.py calls load/unload as leadership moves;
a partition not led here answers NOT_COORDINATOR, one loading
COORDINATOR_LOAD_IN_PROGRESS), a write is acknowledged once the high
watermark passes it (the group runtime's ReplicatedDurability), the leader
epoch of the partition is the coordinator epoch stamped into markers, and
markers for partitions led by other nodes go out as WriteTxnMarkers
(txn_markers.py).
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

from ..log.durability import Durability, NotReplicated, coordinator_answer
from ..log.fsync_batcher import FsyncBatcher
from ..protocol.errors import Err, ProtocolError
from ..protocol.records import decode_batch
from ..txn.coordinator import Completion, TxnConfig, TxnCoordinator
from ..txn.records import TxnRecord, decode_key, decode_value, partition_batches
from .coordinator_state import ACTIVE, LOADING, CoordinatorState, wait_loaded
from .internal_topic import compacted, open_internal_topic
from .shard_batches import COORDINATOR_EPOCH
from .stall_grace import STALL_GRACE_S, fired_after_a_stall
from ..protocol.internal_topics import OFFSETS_TOPIC, TXN_TOPIC

log = logging.getLogger("kcoord.txn")

LOAD_CHUNK = 4 << 20
COMPLETION_RETRY_S = 0.5
COMPLETION_WAIT_S = 5.0  # longest a request waits for a completion under way


def _resolve(waiter: asyncio.Future, _value=None) -> None:
    if not waiter.done():
        waiter.set_result(_value)


def _call_each(callbacks, *args) -> None:
    """callback(*args) for each; one that fails is logged, the rest still run."""
    for callback in callbacks:
        try:
            callback(*args)
        except Exception:
            log.exception("a transaction write's callback failed")


class TxnRuntime:
    def __init__(self, catalogue, config, data_plane, coordinator, fsync: FsyncBatcher,
                 producer_ids, durability: Durability, clock=None) -> None:
        self.catalogue = catalogue
        # the server's one clock (clock.py), shared with the group runtime
        self.clock = clock if clock is not None else coordinator.clock
        self.config = config
        self.data = data_plane
        self.coordinator = coordinator  # the group coordinator runtime (__consumer_offsets)
        self.fsync = fsync  # the data partitions' markers
        self.core = TxnCoordinator(TxnConfig.from_values(config.values), producer_ids.next_id)
        wanted = self.core.config.num_partitions
        topic = open_internal_topic(catalogue, TXN_TOPIC, wanted,
                                    compacted(config["transaction.state.log.segment.bytes"]),
                                    "transaction.state.log.num.partitions", strict=True)
        self.logs = topic.partitions
        # per __transaction_state partition: whether it is coordinated here, and
        # the leader epoch it was loaded for (the coordinator epoch); the same
        # state machine as the group shards' (coordinator_state.py)
        self.partitions = [CoordinatorState() for _ in range(wanted)]
        # fsync here (LocalDurability), or in a cluster once replicated
        self.durability = durability
        self.markers = None  # txn_markers.MarkerSender in a cluster: markers to any leader
        self._swept = False
        self._completing: dict[str, int] = {}  # transactional id -> coordinator epoch
        self._tasks: set[asyncio.Task] = set()
        # transactional id -> its completion under way and the coordinator epoch it runs in
        self._finishing: dict[str, tuple[int, asyncio.Task]] = {}
        # transactional id -> callbacks of requests waiting (when_settled) for its completion
        self._settling: dict[str, list[Callable[[], None]]] = {}
        self._unsynced: list = []  # (logs, done(errors)) of this loop iteration's writes
        self._timers: list = []  # handles of the clock's timers
        self.records_loaded = 0
        data_plane.txn_verifier = self.verify_append
        data_plane.txn_remote = self

    # ------------------------------------------------------------- loading
    @property
    def loaded(self) -> bool:
        """Every partition is served here (a single node, once loaded)."""
        return all(p.state is ACTIVE for p in self.partitions)

    @property
    def loading(self) -> bool:
        """Some partition is still loading here."""
        return any(p.state is LOADING for p in self.partitions)

    async def wait_loaded(self) -> None:
        """Until no partition is loading."""
        await wait_loaded(self.partitions)

    def start(self, load_all: bool = True) -> None:
        """Single node: coordinate every partition (epoch 0).  A cluster loads
        a partition when this node leads it (load/unload)."""
        if load_all:
            for p in range(len(self.logs)):
                self.load(p, 0)
        if not self._swept:
            self._swept = True
            self._arm(self.config["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
                      self._abort_timed_out)
            self._arm(self.config["transaction.remove.expired.transaction.cleanup.interval.ms"],
                      self._expire_ids)

    def state_error(self, transactional_id: str) -> int:
        """NONE when this node coordinates the id now, else the Kafka error."""
        return self.partitions[self.core.partition_of(transactional_id)].state_error()

    def owns(self, partition: int, epoch: int) -> bool:
        p = self.partitions[partition]
        return p.state is ACTIVE and p.epoch == epoch

    def load(self, partition: int, epoch: int) -> None:
        """Coordinate `partition` from leader epoch `epoch` on (onElection):
        replay its log into the core, then finish every Prepare* in it."""
        p = self.partitions[partition]
        newer = epoch > p.epoch
        if not p.take_epoch(epoch):
            return
        if p.state is ACTIVE:
            if newer:  # still led here, in a newer epoch: completions go on with it
                self._complete_pending(partition)
            return
        if p.state is LOADING:
            return
        self.core.drop_partition(partition)
        task = p.start_load(lambda: self._load(partition, epoch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def unload(self, partition: int, epoch: int | None = None) -> bool:
        """Stop coordinating `partition` (onResignation; with an epoch, only for
        a newer one): its ids leave the core, its writes answer NOT_COORDINATOR."""
        p = self.partitions[partition]
        if not p.take_resignation(epoch):
            return False
        p.stop()
        self.core.drop_partition(partition)
        return True

    async def _load(self, partition: int, epoch: int) -> None:
        start = time.monotonic()
        plog = self.logs[partition]
        count = self.records_loaded
        offset, end = plog.log_start_offset, plog.log_end_offset
        while offset < end:
            chunk = plog.read(offset, LOAD_CHUNK, min_one=True)
            if not chunk:
                break
            pos = 0
            while pos < len(chunk):
                header, records = decode_batch(chunk, pos)
                pos += header.size
                if header.next_offset <= offset:
                    continue
                offset = header.next_offset
                for rec in records:
                    self._load_record(rec)
            await asyncio.sleep(0)
        # a new leader's log may end with records never acknowledged (a
        # truncation could still remove them): serve once they are committed
        await self.durability.replayed(plog, offset, epoch)
        p = self.partitions[partition]
        if p.state is not LOADING or p.epoch != epoch:
            return
        p.finish_load(True)
        if self.durability.replicated:
            log.info("transaction state partition %d loaded (epoch %d): %d records in %.2fs",
                     partition, epoch, self.records_loaded - count, time.monotonic() - start)
        elif self.loaded:
            log.info("transaction state loaded: %d records, %d transactional ids",
                     self.records_loaded, len(self.core.txns))
        self._complete_pending(partition)

    def _complete_pending(self, partition: int) -> None:
        for completion in self.core.pending_completions():
            if self.core.partition_of(completion.transactional_id) == partition:
                self._finish(completion)

    def _load_record(self, rec) -> None:
        if rec.key is None:
            return
        try:
            tid = decode_key(rec.key)
            if tid is None:
                log.warning("skipping a __transaction_state record with an unknown key version")
                return
            self.core.replay(TxnRecord(self.core.partition_of(tid), tid, decode_value(rec.value)))
            self.records_loaded += 1
        except ProtocolError as exc:
            log.warning("skipping an undecodable __transaction_state record: %s", exc)

    # -------------------------------------------------------------- writes
    def _append(self, records: list[TxnRecord]) -> tuple[int, list]:
        """Replay now and append (not yet durable): -> (NONE, the logs to make
        durable), or (the client's error, []) when a partition is not
        coordinated here (NOT_COORDINATOR) or its ISR is below
        min.insync.replicas (COORDINATOR_NOT_AVAILABLE: refused before
        anything is replayed or appended, as Kafka's replica manager refuses
        an acks=all append)."""
        parts = {r.partition for r in records}
        if any(self.partitions[p].state is not ACTIVE for p in parts):
            return Err.NOT_COORDINATOR, []
        for p in parts:
            code = self.durability.append_error(self.logs[p])
            if code:
                return coordinator_answer(code), []
        self.core.replay_all(records)
        logs = []
        for partition, batch in partition_batches(records, self.clock.ms()):
            plog = self.logs[partition]
            plog.append(batch)  # a leader stamps its epoch
            logs.append((partition, plog))
        return Err.NONE, logs

    def _sync_together(self, plogs: list, done: Callable[[list], None]) -> None:
        """done(the errors of `plogs`: None each when durable), on the loop.
        The writes of one loop iteration share one durability round (the
        requests released together after a completion, and its Complete*):
        with separate ones the first starts its fsync at once and the others
        wait a whole fsync and replication round behind it."""
        if not self._unsynced:
            asyncio.get_running_loop().call_soon(self._sync_round)
        self._unsynced.append((plogs, done))

    def _sync_round(self) -> None:
        writes, self._unsynced = self._unsynced, []
        plogs = list({id(p): p for ps, _ in writes for p in ps}.values())

        def synced(errors) -> None:
            failed = {id(p): e for p, e in zip(plogs, errors)}
            for ps, done in writes:
                _call_each((done,), [failed.get(id(p)) for p in ps])
        self.durability.sync(plogs, synced)

    async def _durable(self, logs) -> int:
        """NONE once the appended records are durable (a cluster: once the
        high watermark passed them), else NOT_COORDINATOR."""
        fut = asyncio.get_running_loop().create_future()
        self._sync_together([plog for _, plog in logs], lambda errors: _resolve(fut, errors))
        return self._written(logs, await fut)

    def _written(self, logs, errors: list) -> int:
        """The answer to a write whose logs' durability ended with `errors`:
        NONE, or NOT_COORDINATOR (a failed partition still led here reloads)."""
        code = Err.NONE
        for (partition, _), error in zip(logs, errors):
            if error is None:
                continue
            code = Err.NOT_COORDINATOR
            lost = isinstance(error, NotReplicated) and error.lost_leadership
            if not lost and self.partitions[partition].loaded:
                # still the leader (a failed fsync, or the ISR shrank below
                # min.insync.replicas after the append): memory is ahead of
                # the log, or a committed Prepare* has no completion started;
                # the reload replays what the log holds and finishes it
                log.warning("transaction state partition %d: write failed (%s); reloading",
                            partition, error)
                epoch = self.partitions[partition].epoch
                self.unload(partition)
                self.load(partition, epoch)
        return code

    async def write(self, records: list[TxnRecord]) -> int:
        """Replay now, append, and return once durable: NONE, or
        NOT_COORDINATOR when a partition is not (or no longer) led here."""
        if not records:
            return Err.NONE
        code, logs = self._append(records)
        if code:
            return code
        return await self._durable(logs)

    def write_then(self, records: list[TxnRecord], done: Callable[[int], None]) -> None:
        """`write` for a request answered without a task: done(its code) on
        the loop once durable, or at once when refused (no loop iteration
        and no coroutine between the request and its fsync round)."""
        if not records:
            done(Err.NONE)
            return
        code, logs = self._append(records)
        if code:
            done(code)
            return
        self._sync_together([plog for _, plog in logs],
                            lambda errors: done(self._written(logs, errors)))

    def end_then(self, records: list[TxnRecord], done: Callable[[int], None]) -> None:
        """`write_and_complete(records, wait=False)` as `write_then`: EndTxn's
        Prepare* durable, its completion started, then done(code)."""
        def written(code: int) -> None:
            if not code:
                self._complete_started(records)
            done(code)
        self.write_then(records, written)

    def _complete_started(self, records: list[TxnRecord]) -> list[asyncio.Future]:
        """Start finishing every Prepare* among `records` (now durable)."""
        tasks = []
        for r in records:
            completion = self.core.completion(r.transactional_id)
            if completion is not None:
                tasks.append(self._finish(completion))
        return tasks

    async def write_and_complete(self, records: list[TxnRecord], wait: bool = True) -> int:
        """Write; then start finishing every Prepare* the records started.
        With `wait` (InitProducerId's fencing abort) wait for that at most
        COMPLETION_WAIT_S; without it answer once the Prepare* is durable,
        as Kafka answers EndTxn: the producer's next InitProducerId or
        AddPartitions waits for the completion (settled)."""
        code = await self.write(records)
        if code:
            return code
        tasks = self._complete_started(records)
        if tasks and wait:
            await asyncio.wait(tasks, timeout=COMPLETION_WAIT_S)
        return Err.NONE

    def _finish(self, c: Completion) -> asyncio.Future:
        """Start completing `c`, remembered so a request of that id can wait
        for it: -> a future done once the completion ended."""
        tid = c.transactional_id
        epoch = self.partitions[self.core.partition_of(tid)].epoch
        under_way = self._finishing.get(tid)
        # One of an older epoch is no help: it stops at its next look at
        # owns() (a marker round, a retry's sleep, a peer's timeout away) and
        # leaves the Prepare* to "the next coordinator", which is this one,
        # reloaded meanwhile (seed 190's rerun: kfx-txn-1's PrepareAbort
        # stood for good, txn-group's offsets never stable again).
        if under_way is not None and under_way[0] == epoch and not under_way[1].done():
            return under_way[1]
        handle: asyncio.Future
        if self.markers is None:
            handle = asyncio.get_running_loop().create_future()
        else:
            handle = self._spawn(self._complete(c))
        self._finishing[tid] = (epoch, handle)

        def forget(t: asyncio.Future) -> None:
            current = self._finishing.get(tid)
            if current is not None and current[1] is t:
                del self._finishing[tid]
                self._release(tid)      # it ended without a Complete* (lost the partition)
        handle.add_done_callback(forget)
        if self.markers is None:
            self._complete_here(c, handle)
        return handle

    def _under_way(self, transactional_id: str | None) -> bool:
        under_way = self._finishing.get(transactional_id) if transactional_id else None
        return under_way is not None and not under_way[1].done()

    async def settled(self, transactional_id: str | None) -> None:
        """Wait (at most COMPLETION_WAIT_S) for the id's completion under way:
        the request after an EndTxn then finds the transaction complete
        instead of answering CONCURRENT_TRANSACTIONS at once."""
        if not self._under_way(transactional_id):
            return
        waiter = asyncio.get_running_loop().create_future()
        self.when_settled(transactional_id, lambda: _resolve(waiter))
        await waiter

    def when_settled(self, transactional_id: str | None, go: Callable[[], None]) -> None:
        """`settled` for a request answered without a task: go() now when no
        completion of the id is under way, else once it is done (or after
        COMPLETION_WAIT_S), once."""
        if not self._under_way(transactional_id):
            go()
            return
        fired = False

        def once() -> None:
            nonlocal fired
            if not fired:
                fired = True
                timer.cancel()
                go()
        timer = asyncio.get_running_loop().call_later(COMPLETION_WAIT_S, once)
        self._settling.setdefault(transactional_id, []).append(once)

    def _release(self, tid: str) -> None:
        """The requests waiting for `tid`'s completion go on, right here: their
        writes join this loop iteration's durability round."""
        _call_each(self._settling.pop(tid, ()))

    # ---------------------------------------------------------- completion
    def _complete_here(self, c: Completion, handle: asyncio.Future) -> None:
        """`_complete` on a single node without a task: the markers written
        now, Complete* from the callback of their durability round (the
        producer's next request waits for it: each loop iteration saved is
        latency saved); `handle` done once it ended.  A failed marker goes
        the awaited way, which retries."""
        tid = c.transactional_id
        partition = self.core.partition_of(tid)
        epoch = self.partitions[partition].epoch
        if self._completing.get(tid) == epoch:
            _resolve(handle)
            return  # under way (one of an older epoch stops by itself)
        self._completing[tid] = epoch
        ended = False

        def markers_done(ok: bool) -> None:
            nonlocal ended
            if ended:
                return
            ended = True
            if self._completing.get(tid) == epoch:
                del self._completing[tid]
            if not ok:
                log.warning("markers of %s failed; retrying", tid)
                self._spawn(self._complete(c)).add_done_callback(lambda _t: _resolve(handle))
                return
            try:
                self._completed(c, partition, epoch)
            finally:
                _resolve(handle)
        try:
            self._markers_then(c, markers_done)
        except Exception:
            log.exception("markers of %s failed", tid)
            markers_done(False)

    def _markers_then(self, c: Completion, done: Callable[[bool], None]) -> None:
        """`_write_markers` without a task: done(all durable?) once every
        marker's durability round ended."""
        outstanding = 1
        ok = True

        def one(durable: bool) -> None:
            nonlocal outstanding, ok
            ok = ok and durable
            outstanding -= 1
            if outstanding == 0:
                done(ok)
        data_logs = []
        for topic, index in c.partitions:
            if topic == OFFSETS_TOPIC:
                if 0 <= index < len(self.coordinator.shards):
                    outstanding += 1
                    self.coordinator.shards[index].complete_txn_then(
                        c.producer_id, c.producer_epoch, c.commit,
                        lambda code: one(code == Err.NONE))
                continue
            plog = self._data_marker(c, topic, index)
            if plog is not None:
                data_logs.append(plog)
        if data_logs:
            outstanding += 1
            self.fsync.sync_call(data_logs, lambda error: one(error is None))
        one(True)

    def _completed(self, c: Completion, partition: int, epoch: int) -> None:
        """The markers of `c` are durable: Complete* replayed now (the
        client's next request sees it) but not waited for (a Prepare* found
        on load is completed again), and the requests waiting released."""
        tid = c.transactional_id
        current = self.core.completion(tid)
        if current is None or (current.producer_id, current.producer_epoch,
                               current.commit) != (c.producer_id, c.producer_epoch, c.commit):
            return
        code, logs = self._append(self.core.complete(tid, self.clock.ms()))
        if code == Err.COORDINATOR_NOT_AVAILABLE:
            self._spawn(self._complete_later(tid, partition, epoch))
        elif logs:
            self._sync_together([plog for _, plog in logs],
                                lambda errors: self._written(logs, errors))
        # The waiting requests' writes join Complete*'s durability round
        # (one fsync and replication round for both, instead of theirs
        # waiting one round behind Complete*'s own).
        self._release(tid)

    async def _complete(self, c: Completion) -> None:
        """Markers to every partition of the transaction, durable, then Complete*."""
        tid = c.transactional_id
        partition = self.core.partition_of(tid)
        epoch = self.partitions[partition].epoch
        if self._completing.get(tid) == epoch:
            return  # under way (one of an older epoch stops by itself)
        self._completing[tid] = epoch
        try:
            if self.markers is not None:
                # a cluster: to each partition's leader, this node included
                if not await self.markers.write(c, epoch, lambda: self.owns(partition, epoch)):
                    return  # no longer the coordinator: the next one finishes it
            else:
                while True:
                    try:
                        await self._write_markers(c)
                        break
                    except Exception:
                        log.exception("markers of %s failed; retrying", tid)
                        await asyncio.sleep(COMPLETION_RETRY_S)
            self._completed(c, partition, epoch)
        finally:
            if self._completing.get(tid) == epoch:
                del self._completing[tid]

    async def _complete_later(self, tid: str, partition: int, epoch: int) -> None:
        """The Complete* record the ISR was too short to take: asked again
        (Kafka retries it on COORDINATOR_NOT_AVAILABLE) while this node
        coordinates the partition in `epoch` and the Prepare* stands."""
        while self.owns(partition, epoch):
            await asyncio.sleep(COMPLETION_RETRY_S)
            code, logs = self._append(self.core.complete(tid, self.clock.ms()))
            if code != Err.COORDINATOR_NOT_AVAILABLE:
                if logs:
                    await self._durable(logs)
                return

    async def _write_markers(self, c: Completion) -> None:
        data_logs = []
        shard_writes = []
        for topic, index in c.partitions:
            if topic == OFFSETS_TOPIC:
                if 0 <= index < len(self.coordinator.shards):
                    # under way at once, beside the data partitions' markers
                    marker = self.coordinator.complete_txn(index, c.producer_id,
                                                           c.producer_epoch, c.commit)
                    shard_writes.append((index, asyncio.ensure_future(marker)))
                continue
            plog = self._data_marker(c, topic, index)
            if plog is not None:
                data_logs.append(plog)
        if data_logs:
            await self.fsync.sync(data_logs)
        for index, write in shard_writes:
            if await write != Err.NONE:
                raise RuntimeError(f"{OFFSETS_TOPIC}-{index} is not active")  # retried

    def _data_marker(self, c: Completion, topic: str, index: int):
        """`c`'s marker appended to a data partition: -> its log to make
        durable, or None (deleted, or refused)."""
        code, plog = self.data.write_marker(topic, index, c.producer_id, c.producer_epoch,
                                            c.commit, COORDINATOR_EPOCH)
        if plog is None and code not in (Err.UNKNOWN_TOPIC_OR_PARTITION, Err.NONE):
            # a newer epoch already wrote there: this transaction is superseded
            log.warning("marker for %s on %s-%d refused (%d)", c.transactional_id, topic,
                        index, code)
        return plog

    # -------------------------------------------------------------- timers
    def _arm(self, interval_ms: int, fn) -> None:
        """fn() every interval_ms.  A run that comes late after a stall of this
        process or its loop waits STALL_GRACE_S once (stall_grace.py): the
        EndTxn and AddPartitionsToTxn queued in the sockets meanwhile are
        read before a sweep aborts their transactions as timed out."""
        due = self.clock.ms() + interval_ms

        def fire(graced: bool) -> None:
            self._timers.remove(handle_box[0])
            if not graced and fired_after_a_stall(due, self.clock.ms()):
                handle_box[0] = self.clock.call_later(STALL_GRACE_S, fire, True)
                self._timers.append(handle_box[0])
                return
            self._spawn(fn())
            self._arm(interval_ms, fn)
        handle_box = [self.clock.call_later(interval_ms / 1000.0, fire, False)]
        self._timers.append(handle_box[0])

    def _served(self, records: list[TxnRecord]) -> list[TxnRecord]:
        return [r for r in records if self.partitions[r.partition].loaded]

    async def _abort_timed_out(self) -> None:
        records = self._served(self.core.abort_timed_out(self.clock.ms()))
        if records:
            log.info("aborting %d timed-out transactions", len(records))
            await self.write_and_complete(records)

    async def _expire_ids(self) -> None:
        records = self._served(self.core.expire_ids(self.clock.ms()))
        if records:
            log.info("expiring %d transactional ids", len(records))
            await self.write(records)

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def stop(self) -> None:
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
        for task in list(self._tasks):
            task.cancel()

    # ----------------------------------------------------- data-plane check
    def needs_remote_check(self, transactional_id: str) -> bool:
        """A cluster, and the id's coordinator is not this node (now)."""
        return self.markers is not None and self.state_error(transactional_id) != Err.NONE

    async def verify_remote(self, transactional_id: str, producer_id: int, epoch: int,
                            topic: str, partition: int) -> int:
        """The produce error for a transactional append another node's
        coordinator was asked about (Kafka's AddPartitionsToTxnManager)."""
        code = await self.markers.verify(transactional_id, producer_id, epoch, topic, partition)
        if code in (Err.NONE, Err.INVALID_PRODUCER_EPOCH):
            return code
        if code == Err.PRODUCER_FENCED:
            return Err.INVALID_PRODUCER_EPOCH
        if code in (Err.TRANSACTION_ABORTABLE, Err.INVALID_PRODUCER_ID_MAPPING,
                    Err.INVALID_TXN_STATE):
            return Err.INVALID_TXN_STATE  # TRANSACTION_ABORTABLE for Produce v11
        return Err.NOT_ENOUGH_REPLICAS  # the coordinator cannot answer now: retriable

    def verify_append(self, producer_id: int, epoch: int, topic: str, partition: int) -> int:
        tid = self.core.by_producer.get(producer_id)
        if tid is None:
            if self.durability.replicated:
                # a cluster: the coordinator is another node, asked before the
                # produce ran (broker/txn_verify.py); no transactional id to ask with
                return Err.INVALID_TXN_STATE
            if not self.loaded:
                return Err.NOT_LEADER_OR_FOLLOWER  # retriable: the producer tries again
        elif not self.partitions[self.core.partition_of(tid)].loaded:
            return Err.NOT_LEADER_OR_FOLLOWER
        return self.core.in_transaction(producer_id, epoch, topic, partition)
