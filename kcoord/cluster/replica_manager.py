"""The replica manager: this node's replicas of the data partitions, wired to
the control plane, the logs and the network (Kafka's ReplicaManager).

It is the control plane's PartitionStateListener: each state becomes a
Replica (replica.py) transition over the partition's local log; a follower
is fetched for by one ReplicaFetcher per leader node (fetcher.py); a
leader's ISR proposals go to the state store's alter_isr (retried until it
answers: no answer is not a refusal); writes that wait for the high
watermark are futures completed from the replicas' outputs.

With a coordinator runtime, `__consumer_offsets` is replicated too (its
shards load and unload with leadership in shard_ownership.py), and the
runtime's group commit answers a write once the high watermark has passed
it (`cluster/durability.py`, built from this manager); its batches carry
the leader epoch.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import time
from dataclasses import dataclass, replace
from typing import Callable

from ..log.fsync_batcher import FsyncBatcher
from ..protocol.errors import Err
from .fetcher import ReplicaFetcher
from .replica import (
    BecameLeader, Completed, FetchServed, HighWatermarkMoved, ProposeIsr, Replica,
    ReplicationConfig, Role, SettleEpoch,
)
from .state import NO_LEADER, IneligibleReplica, PartitionState
from ..protocol.internal_topics import OFFSETS_TOPIC, SHARE_STATE_TOPIC, TXN_TOPIC

log = logging.getLogger("kcoord.cluster.replicas")

# internal topics replicated when this node runs the coordinators
COORDINATED_TOPICS = (OFFSETS_TOPIC, TXN_TOPIC, SHARE_STATE_TOPIC)


def wall_ms() -> int:
    """Wall time in ms: the clock of a manager given none (tests of the cluster alone)."""
    return int(time.time() * 1000)


class _Leadership:
    """The times of one leadership taken here, for the log (monotonic s)."""
    __slots__ = ("epoch", "began", "settled", "first_offset", "first_at")

    def __init__(self, epoch: int, began: float) -> None:
        self.epoch, self.began = epoch, began
        self.settled = 0.0
        self.first_offset, self.first_at = -1, 0.0


@dataclass(frozen=True)
class FetcherConfig:
    fetch_wait_max_ms: int = 500        # replica.fetch.wait.max.ms
    fetch_max_bytes: int = 1048576      # replica.fetch.max.bytes
    request_timeout_ms: int = 30000     # replica.socket.timeout.ms
    retry_backoff_ms: int = 100         # replica.fetch.backoff.ms


class ReplicaManager:
    def __init__(self, node_id: int, catalogue, store, address_of, *,
                 replication: ReplicationConfig, fetcher: FetcherConfig | None = None,
                 syncer=None, on_high_watermark=None, coordinated: bool = False,
                 now_ms: Callable[[], int] | None = None) -> None:
        self.node_id = node_id
        self.now_ms = now_ms or wall_ms  # the server's clock: ISR lag, caught-up times
        self.catalogue = catalogue
        self.store = store                  # PartitionStateStore (alter_isr)
        self.address_of = address_of        # node id -> (host, port) or None
        self.replication = replication
        self.config = fetcher or FetcherConfig()
        self.syncer = syncer                # async callable(list of logs): fsync them
        # callable(fn) -> future: fn() in an fsync thread (None: on the loop)
        self.in_thread: Callable[[Callable[[], None]], asyncio.Future] | None = None
        # wakes the long polls reading a log (with None: all of them)
        self.on_high_watermark = on_high_watermark
        # the coordinators run here: __consumer_offsets and __transaction_state
        # are replicated too (their shards follow leadership)
        self.coordinated = coordinated
        self.replicas: dict[tuple[str, int], Replica] = {}
        self.fetchers: dict[int, ReplicaFetcher] = {}
        # leader id -> [(key, replica)] of the replicas following it here, built
        # on demand, dropped on any role or replica change (a fetch round asks
        # it twice: no walk over every replica of the node)
        self._following: dict[int, list] | None = None
        self._pending_states: dict[tuple[str, int], PartitionState] = {}
        self._log_keys: dict[int, tuple[str, int]] = {}  # id(log) -> key, checked on use
        self._waiters: dict[object, asyncio.Future] = {}
        self._tick_task: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()
        self._running = False
        self.min_isr_for = None     # topic name -> min.insync.replicas (its override)
        self.on_log_role_change = None  # callable(log): this node's role on it changed
        self.role_listeners: list = []  # called after any replica here changes role
        # notices at once a lapse of this node's etcd lease (EtcdSession.check_lapse)
        self.check_session: Callable[[], None] = _no_check
        # for the log: each leadership taken here until its first write is
        # answered (BecameLeader -> epoch durable -> first write acknowledged)
        self._leaderships: dict[tuple[str, int], _Leadership] = {}
        self._first_writes: dict[object, tuple] = {}   # waiter token -> (key, leadership)
        self._checkpointing: set[int] = set()   # id() of logs whose epoch checkpoint is being written

    # ---------------------------------------------------------- lifecycle
    def start(self) -> None:
        self._running = True
        self._tick_task = asyncio.get_running_loop().create_task(self._ticker())
        for state in list(self._pending_states.values()):
            self._apply(state)

    async def stop(self) -> None:
        self._running = False
        for task in [self._tick_task, *self._tasks]:
            if task is not None:
                task.cancel()
        for fetcher in list(self.fetchers.values()):
            await fetcher.stop()
        self.fetchers.clear()

    # ------------------------------------------------- control plane input
    def on_partition_state(self, state: PartitionState) -> None:
        if not self.manages(state.topic):
            return
        self._pending_states[(state.topic, state.partition)] = state
        if self._running:
            self._apply(state)

    def manages(self, name: str) -> bool:
        """User topics, and __consumer_offsets, __transaction_state and
        __share_group_state when the coordinators follow leadership."""
        if name in COORDINATED_TOPICS:
            return self.coordinated
        topic = self.catalogue.get(name)
        return topic is None or not topic.internal

    def on_session_lost(self) -> None:
        for key, replica in self.replicas.items():
            self.handle(key, replica.on_session_lost(self.now_ms()))

    def on_session_restored(self) -> None:
        for key, replica in list(self.replicas.items()):
            self.handle(key, replica.on_session_restored(self.now_ms()))

    def eligibility_changed(self) -> None:
        """A node's registration or handled incarnation changed (the view):
        leaders add the followers that are caught up and may join now."""
        if not self._running:
            return
        now = self.now_ms()
        for key, replica in list(self.replicas.items()):
            if replica.role is Role.LEADER:
                self.handle(key, replica.on_eligibility_changed(now))

    def topic_changed(self) -> None:
        """The local catalogue changed: replicas of a deleted (or reopened)
        log go, their waiting writes failed; states that waited for a log
        apply now."""
        if not self._running:
            return
        for key, replica in list(self.replicas.items()):
            topic = self.catalogue.get(key[0])
            if (topic is not None and key[1] < len(topic.partitions)
                    and topic.partitions[key[1]] is replica.log):
                continue
            del self.replicas[key]
            self._following = None
            if topic is None:
                self._pending_states.pop(key, None)
            gone = replace(replica.state, leader=NO_LEADER, isr=(), replicas=(),
                           version=replica.state.version + 1)
            self.handle(key, replica.on_state(gone, self.now_ms()))
        for state in list(self._pending_states.values()):
            self._apply(state)
        self._sync_fetchers()

    def _apply(self, state: PartitionState) -> None:
        key = (state.topic, state.partition)
        replica = self.replicas.get(key)
        if replica is None:
            if self.node_id not in state.replicas:
                return
            topic = self.catalogue.get(state.topic)
            if topic is None or not 0 <= state.partition < len(topic.partitions):
                return      # not mirrored yet: applied on topic_changed
            plog = topic.partitions[state.partition]
            # The high watermark is not persisted: a replica starts from its
            # log start and learns it from its leader (or its ISR as leader).
            config = self.replication
            if self.min_isr_for is not None:
                config = replace(config, min_insync_replicas=self.min_isr_for(state.topic))
            replica = Replica(self.node_id, plog, config, high_watermark=plog.log_start_offset,
                              isr_eligible=getattr(self.store, "isr_eligible", None))
            self.replicas[key] = replica
            self._following = None
        self.handle(key, replica.on_state(state, self.now_ms()))
        self._news(replica)
        self._sync_fetchers()

    def _news(self, replica: Replica) -> None:
        """A new state (an ISR change too): followers' fetch sessions that
        left the partition out as idle look at it again."""
        if self.on_high_watermark is not None:
            self.on_high_watermark(replica.log)

    def _sync_fetchers(self) -> None:
        leaders = {r.state.leader for r in self.replicas.values() if r.role is Role.FOLLOWER}
        for leader in leaders - set(self.fetchers):
            fetcher = ReplicaFetcher(self, leader)
            self.fetchers[leader] = fetcher
            fetcher.start()
        for leader in set(self.fetchers) - leaders:
            fetcher = self.fetchers.pop(leader)
            self._spawn(fetcher.stop())
        for fetcher in self.fetchers.values():
            fetcher.wake.set()

    def _followers_of(self, leader: int) -> list:
        following = self._following
        if following is None:
            following = self._following = {}
            for key, replica in self.replicas.items():
                if replica.role is Role.FOLLOWER:
                    following.setdefault(replica.state.leader, []).append((key, replica))
        return following.get(leader, [])

    def requests_for(self, leader: int, carried=()) -> list:
        """(key, replica, request) of each partition following `leader` here
        with a request to send; those in `carried` (their fetch still in
        flight: the fetcher looks at them itself) are passed over."""
        out = []
        for key, replica in self._followers_of(leader):
            if key in carried:
                continue
            if replica.role is Role.FOLLOWER and replica.state.leader == leader:
                request = replica.next_request()
                if request is not None:
                    out.append((key, replica, request))
        return out

    def has_request_ready(self, leader: int) -> bool:
        """Does a partition following `leader` wait for a request to be sent
        (one that became its follower, or finished truncating)?"""
        return any(r.role is Role.FOLLOWER and r.state.leader == leader and r.has_request_ready
                   for _, r in self._followers_of(leader))

    # --------------------------------------------------------- outputs
    def handle(self, key, outs) -> None:
        for out in outs:
            if isinstance(out, Completed):
                for token in out.tokens:
                    fut = self._waiters.pop(token, None)
                    if fut is not None and not fut.done():
                        fut.set_result(out.error)
                    if self._first_writes and token in self._first_writes:
                        self._log_first_write(self._first_writes.pop(token), out.error)
            elif isinstance(out, ProposeIsr):
                if out.why:
                    log.info("%s-%d: proposing ISR %s: %s", key[0], key[1],
                             list(out.proposed.isr), out.why)
                self._spawn(self._alter_isr(key, out.proposed))
            elif isinstance(out, SettleEpoch):
                self._spawn(self._settle_epoch(key, out.epoch))
            elif isinstance(out, HighWatermarkMoved):
                replica = self.replicas.get(key)
                if self.on_high_watermark is not None and replica is not None:
                    self.on_high_watermark(replica.log)   # its long polls only
            else:
                log.info("%s-%d: %s", key[0], key[1], out)
                self._leaderships.pop(key, None)
                if isinstance(out, BecameLeader):
                    self._leaderships[key] = _Leadership(out.epoch, time.monotonic())
                self._following = None
                self._role_changed(key, out)
                if self.on_high_watermark is not None:
                    self.on_high_watermark()     # role changes wake long polls too

    def _role_changed(self, key, out) -> None:
        replica = self.replicas.get(key)
        if replica is None:
            return
        # (Shards load and unload with leadership in shard_ownership.py, a
        # listener called before this one, so a shard is gone before its
        # log is truncated.)
        replica.log.stamp_epoch = out.epoch if isinstance(out, BecameLeader) else None
        if self.on_log_role_change is not None:
            # producer state (LSO, sequences, open transactions) was built from
            # this log as it was; a follower's appends and truncations never
            # touched it: rebuilt from the replicated log on next use
            self.on_log_role_change(replica.log)
        for listener in self.role_listeners:
            listener()

    async def _alter_isr(self, key, proposed: PartitionState) -> None:
        backoff = self.config.retry_backoff_ms / 1000.0
        while self._running:
            asked = time.monotonic()
            try:
                result = await self.store.alter_isr(proposed)
            except asyncio.CancelledError:
                raise
            except IneligibleReplica as exc:
                log.info("%s-%d: ISR change refused: %s", key[0], key[1], exc)
                replica = self.replicas.get(key)
                if replica is not None:
                    self.handle(key, replica.on_isr_ineligible(proposed))
                return
            except Exception as exc:
                log.warning("%s-%d: ISR change not answered (%s); asking again",
                            key[0], key[1], exc)
                await asyncio.sleep(backoff)
                continue
            if result is None:
                log.warning("%s-%d: ISR change to %s refused (the stored state moved on): "
                            "acknowledging nothing until a newer state arrives",
                            key[0], key[1], list(proposed.isr))
            else:
                log.info("%s-%d: ISR now %s (epoch %d)%s", key[0], key[1], list(result.isr),
                         result.leader_epoch, _answered_after(asked))
            replica = self.replicas.get(key)
            if replica is not None:
                self.handle(key, replica.on_isr_result(proposed, result, self.now_ms()))
                self._news(replica)
            return

    async def _settle_epoch(self, key, epoch: int) -> None:
        """A new leader's epoch made durable off the loop (its log, then the
        epoch checkpoint: the fsyncs Kafka's makeLeader does in place); the
        leader takes writes from then on."""
        backoff = self.config.retry_backoff_ms / 1000.0
        while self._running:
            replica = self.replicas.get(key)
            if replica is None or not replica.is_leader or replica.leader_epoch != epoch:
                return
            plog = replica.log
            try:
                await self.flush([plog])
                version, text = plog.epochs_snapshot()
                if self.in_thread is not None:
                    await self.in_thread(functools.partial(plog.store_epochs, version, text))
                else:
                    plog.store_epochs(version, text)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.error("%s-%d: making leader epoch %d durable failed (%r); trying again",
                          key[0], key[1], epoch, exc)
                await asyncio.sleep(backoff)
                continue
            replica = self.replicas.get(key)
            led = self._leaderships.get(key)
            if led is not None and led.epoch == epoch:
                led.settled = time.monotonic()
            if replica is not None:
                self.handle(key, replica.on_epoch_settled(epoch, self.now_ms()))
                for listener in self.role_listeners:
                    listener()      # fences waiting for a writable leader look again
            return

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _ticker(self) -> None:
        interval = max(self.replication.replica_lag_time_max_ms / 2000.0, 0.05)
        while True:
            await asyncio.sleep(interval)
            now = self.now_ms()
            for key, replica in list(self.replicas.items()):
                if replica.role is Role.LEADER:
                    self.handle(key, replica.tick(now))

    def checkpoint_epochs(self, logs) -> None:
        """Followers' logs that appended a new leader epoch (append_raw with
        defer_epochs): its checkpoint is written in an fsync thread, not on
        the loop (a file fsync, a rename and a directory fsync each: after
        a leader moved, every partition it led changes epoch at once on
        every follower).  Until it is written a crash takes the epoch from
        the batches (the log's recovery point stops short of them); the
        checkpoint is not on the acknowledgement path."""
        for plog in logs:
            if id(plog) in self._checkpointing:
                continue     # one write in flight per log; the next fetch round asks again
            pending = plog.epochs_pending()
            if pending is None:
                continue
            version, text, where = pending
            if self.in_thread is None:
                plog.store_epochs(version, text)
                plog.on_epochs_stored(version, where)
            else:
                self._checkpointing.add(id(plog))
                self._spawn(self._checkpoint_off_loop(plog, version, text, where))

    async def _checkpoint_off_loop(self, plog, version: int, text: str, where) -> None:
        try:
            await self.in_thread(functools.partial(plog.store_epochs, version, text))
            plog.on_epochs_stored(version, where)
        except asyncio.CancelledError:
            raise
        except Exception as exc:   # the next fetch round tries again
            log.error("%s: writing the leader epoch checkpoint failed (%r)", plog.path, exc)
        finally:
            self._checkpointing.discard(id(plog))

    async def flush(self, logs) -> None:
        if self.syncer is not None:
            await self.syncer(logs)
        else:
            for plog in logs:
                plog.flush()

    # ------------------------------------------------------- leader side
    def replica(self, topic: str, partition: int) -> Replica | None:
        return self.replicas.get((topic, partition))

    def leader_hint(self, topic: str, partition: int):
        """(leader id, leader epoch, (host, port) or None) of a partition as
        the control plane last said, for NOT_LEADER_OR_FOLLOWER answers
        (KIP-951); None when unknown."""
        state = self._pending_states.get((topic, partition))
        if state is None or state.leader < 0:
            return None
        return state.leader, state.leader_epoch, self.address_of(state.leader)

    def serve_follower_fetch(self, topic: str, partition: int, follower: int,
                             fetch_offset: int, current_leader_epoch: int) -> FetchServed:
        """A follower's Fetch of a partition led here (Kafka's
        ReplicaManager.fetchMessages for a replica): records its position
        (which may move the high watermark, expand the ISR, complete
        writes), handled here; -> how far it may read, or the error."""
        replica = self.replicas.get((topic, partition))
        if replica is None:
            return FetchServed(Err.NOT_LEADER_OR_FOLLOWER, -1, -1)
        served, outs = replica.serve_follower_fetch(follower, fetch_offset, current_leader_epoch,
                                                    self.now_ms())
        self.handle((topic, partition), outs)
        return served

    def replica_of_log(self, plog) -> tuple[tuple[str, int], Replica] | None:
        """((topic, partition), replica) of a local log, None if not replicated here."""
        key = self._log_keys.get(id(plog))  # a coordinator asks before every write: no scan
        replica = self.replicas.get(key) if key is not None else None
        if replica is not None and replica.log is plog:
            return key, replica
        for key, replica in self.replicas.items():
            if replica.log is plog:
                self._log_keys[id(plog)] = key
                return key, replica
        return None

    def serve_error(self, plog) -> int:
        """May this node answer from its memory of `plog` as its leader now?
        NONE, or NOT_LEADER_OR_FOLLOWER: it does not lead the log, or cannot
        tell whether it still does (its lease may have lapsed, or an ISR
        change was refused), so another node may already lead it and have
        acknowledged writes this one has not seen."""
        self.check_session()
        found = self.replica_of_log(plog)
        if found is None or not found[1].serves_reads:
            return Err.NOT_LEADER_OR_FOLLOWER
        return Err.NONE

    def on_flushed(self, logs) -> None:
        now = self.now_ms()
        for plog in logs:
            # the cached log -> replica lookup: every fsync round of every
            # replicated write ends here, and a map of all replicas (each
            # __consumer_offsets and __transaction_state partition) built per
            # round cost more than the round's own bookkeeping
            found = self.replica_of_log(plog)
            if found is not None:
                self.handle(found[0], found[1].on_flushed(now))

    def await_high_watermark(self, topic: str, partition: int, end_offset: int) -> asyncio.Future:
        """A future of the error code once the high watermark reaches `end_offset`."""
        fut = asyncio.get_running_loop().create_future()
        replica = self.replicas.get((topic, partition))
        if replica is None:
            fut.set_result(Err.NOT_LEADER_OR_FOLLOWER)
            return fut
        token = object()
        self._waiters[token] = fut
        led = self._leaderships.get((topic, partition))
        if led is not None and led.first_offset < 0 and end_offset > replica.epoch_start_offset:
            # (a wait for what was there before the epoch, such as a loading
            # shard's fence, is no write of this leadership)
            led.first_offset, led.first_at = end_offset, time.monotonic()
            self._first_writes[token] = ((topic, partition), led)
        self.handle((topic, partition), replica.await_offset(end_offset, token))
        return fut

    def _log_first_write(self, found, error: int) -> None:
        """A new leadership's first replicated write answered: the steps
        from taking the leadership to it, and which replica the high
        watermark waited for last (this node: its own fsync)."""
        key, led = found
        replica = self.replicas.get(key)
        now = time.monotonic()
        log.info("%s-%d: the first write of epoch %d (to offset %d) answered %s %.0f ms after "
                 "its append, %.0f ms after the leadership began (epoch durable at %s); the "
                 "high watermark waited last for node %s; ISR %s", key[0], key[1], led.epoch,
                 led.first_offset, _code_name(error),
                 (now - led.first_at) * 1000, (now - led.began) * 1000,
                 f"+{(led.settled - led.began) * 1000:.0f} ms" if led.settled else "?",
                 replica.hwm_waited_for if replica is not None else "?",
                 list(replica.state.isr) if replica is not None and replica.state else "?")


def fetcher_config(config) -> FetcherConfig:
    """The followers' fetch settings.  A request unanswered for a lease TTL
    (past its long poll) is given up and its connection made again: a cut
    between follower and leader drops the answer on the floor, and TCP's
    retransmission backoff (doubling from 200 ms) would deliver it only
    seconds after the cut healed, or replica.socket.timeout.ms (30 s)
    later, while the leader's ISR waits for this follower.  A leader that
    cannot answer within a lease TTL is as good as gone to the cluster too;
    a reconnect costs one full fetch."""
    ttl_ms = config["etcd.lease.ttl.ms"]
    return FetcherConfig(fetch_wait_max_ms=config["replica.fetch.wait.max.ms"],
                         fetch_max_bytes=config["replica.fetch.max.bytes"],
                         request_timeout_ms=min(FetcherConfig.request_timeout_ms,
                                                max(ttl_ms, 1000)))


def _answered_after(asked: float) -> str:
    """For the log: how long etcd took to answer, when that was long."""
    took = time.monotonic() - asked
    return f" (etcd answered after {took:.2f}s)" if took > 0.5 else ""


def _code_name(code: int) -> str:
    try:
        return Err(code).name
    except ValueError:
        return str(code)


def _no_check() -> None:
    return None


def build_replica_manager(config, catalogue, cluster, data_plane, fsync: FsyncBatcher,
                          now_ms: Callable[[], int] | None = None) -> ReplicaManager:
    """This node's ReplicaManager, built before the ClusterNode starts (the
    coordinator runtimes' durability is built from it); started by
    start_replication once the control plane runs."""
    default_min_isr = config["min.insync.replicas"]

    def min_isr_for(name: str) -> int:
        topic = catalogue.get(name)
        configs = topic.configs if topic is not None else {}
        return int(configs.get("min.insync.replicas", default_min_isr))

    async def syncer(logs):
        await fsync.sync(logs)

    # the state store is the node (alter_isr by compare-and-set in etcd), and
    # the leader's inter-broker listener is where its registration says
    manager = ReplicaManager(
        config["node.id"], catalogue, cluster, cluster.peer_address,
        replication=ReplicationConfig(config["replica.lag.time.max.ms"], default_min_isr),
        fetcher=fetcher_config(config),
        syncer=syncer, on_high_watermark=data_plane.appended.notify, coordinated=True,
        now_ms=now_ms)
    manager.peer_properties = cluster.peer_properties  # TLS/SASL of the inter-broker listener
    manager.endpoint_of = cluster.client_endpoint
    manager.min_isr_for = min_isr_for
    manager.in_thread = fsync.call_in_thread
    manager.on_log_role_change = data_plane.forget_txn_state
    return manager


def start_replication(manager: ReplicaManager, cluster, data_plane) -> None:
    """Start the manager on a started ClusterNode: it follows the control
    plane's partition states, and the data plane asks it from now on."""
    plane = cluster.plane
    data_plane.replication = manager
    manager.check_session = plane.session.check_lapse
    plane.listeners.append(manager)
    plane.view_listeners.append(
        lambda change: manager.topic_changed() if change[0] == "topic" else None)
    plane.view_listeners.append(
        lambda change: manager.eligibility_changed() if change[0] in ("incarnation", "node")
        else None)
    manager.start()
    for state in plane.partition_states():
        manager.on_partition_state(state)
