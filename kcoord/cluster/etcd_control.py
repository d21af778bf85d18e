"""The control plane of one node, on etcd (the I/O around decisions.py).

- registration: <prefix>/nodes/<id> under the node's lease (etcd_session);
- the view: one read of the prefix, then a watch from the next revision,
  applied to a ClusterView; partition listeners hear every state change;
- controller election: create-if-absent of <prefix>/controller under the
  lease, with <prefix>/controller_epoch bumped in the same transaction;
- the controller (etcd_controller.py) writes partition states; the leader
  of a partition writes its ISR through `alter_isr`, a compare-and-set on
  the state's mod revision."""
from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from typing import Callable

from .aio import bounded, cancel_and_wait
from .etcd_session import EtcdSession, parse_endpoints
from .state import IneligibleReplica, PartitionState, PartitionStateListener
from .view import (
    ClusterView,
    Keys,
    NodeInfo,
    TopicRecord,
    encode_controller,
    encode_node,
    encode_state,
    encode_topic,
)

log = logging.getLogger("kcoord.cluster")

# compares per batched ISR transaction: etcd takes at most 128 (--max-txn-ops);
# a proposal holds one, plus two per replica it adds
ISR_TXN_COMPARES = 120


# Applying one etcd answer may move ~100 leaderships.  The loop runs between
# them (requests answered) once each YIELD_EVERY_S of applying, not after
# every one: at load 17 a loop turn took ~37 ms, so one change a turn spread
# a takeover of 109 leaderships over 4 s (seed 262), and the registrations of
# the nodes coming back, queued behind them in the watch, reached the
# controller 2.2 s after they were written (the heal missed its goal).
YIELD_EVERY_S = 0.005


class _Turns:
    """Yields to the loop once YIELD_EVERY_S has passed since the last yield."""

    def __init__(self) -> None:
        self._since = time.perf_counter()   # (uvloop's loop.time() is the turn's)

    async def maybe_yield(self) -> None:
        if time.perf_counter() - self._since >= YIELD_EVERY_S:
            await asyncio.sleep(0)
            self._since = time.perf_counter()


def _settle(done: asyncio.Future, result) -> None:
    if not done.done():  # its caller may have been cancelled meanwhile
        done.set_result(result)


class EtcdControlPlane:
    def __init__(self, node_id: int, host: str, port: int, endpoints, prefix: str = "/kcoord",
                 lease_ttl_ms: int = 2000, unclean: bool = False, endpoints_by_listener=(),
                 tls=None) -> None:
        self.node_id = node_id
        self.host, self.port = host, port
        # (listener name, host, port) of every advertised listener, registered with the node
        self.endpoints = tuple(endpoints_by_listener)
        self.keys = Keys(prefix)
        self.view = ClusterView(self.keys)
        self.session = EtcdSession(parse_endpoints(endpoints), lease_ttl_ms, tls)
        self.session.on_expired = self._reregister
        self.session.on_lapsed = self._lapsed
        self.session.on_restored = self._restored
        self.unclean = unclean
        # Kafka's auto leader rebalance: seconds between checks (None: off), threshold %
        self.rebalance_interval_s: float | None = None
        self.imbalance_pct = 10
        self.listeners: list[PartitionStateListener] = []
        # called with each change apply() reports, after the view took it
        self.view_listeners: list[Callable[[tuple], None]] = []
        self.stopping = False
        self.controller = None  # the EtcdController while this node is controller
        self._watch_task: asyncio.Task | None = None
        self._watch = None
        self._changed = asyncio.Event()  # set after every applied change (waiters re-check)
        self._campaigning = False
        self._campaign_again = False  # asked while an attempt was out (_campaign)
        # (topic, partition) -> the state this node's last alter_isr wrote (the
        # watch may not have brought it yet; the leader proposes on top of it)
        self._isr_written: dict[tuple[str, int], PartitionState] = {}
        # ISR proposals of this loop turn, sent together (alter_isr)
        self._isr_queue: list = []
        self._isr_tasks: set[asyncio.Task] = set()

    @property
    def client(self):
        return self.session.client

    @property
    def txn(self):
        return self.session.client.transactions

    # ------------------------------------------------------------ start/stop
    async def start(self) -> None:
        await self.session.open()
        await self._register()
        await self._sync()
        self._watch_task = asyncio.get_running_loop().create_task(self._watch_loop())
        await self._campaign()
        log.info("node %d registered in etcd (prefix %s); controller is %s", self.node_id,
                 self.keys.prefix, self.view.controller and self.view.controller.node_id)

    async def cluster_id(self, candidate: str) -> str:
        """The cluster's id under the prefix; candidate when this node is the
        first to start on the prefix (a create-if-absent, so one id wins)."""
        key = self.keys.cluster_id.encode()
        await self.client.transaction(compare=[self.txn.create(key) == 0],
                                      success=[self.txn.put(key, candidate.encode())], failure=[])
        result = await self.client.get(key)
        return result.value.decode()

    async def _register(self) -> None:
        info = NodeInfo(self.node_id, self.host, self.port, self.stopping, self.endpoints,
                        self.session.resumes)
        # a put under the new lease takes the key over from a previous incarnation's lease
        await self.client.put(self.keys.node(self.node_id).encode(), encode_node(info),
                              lease=self.session.lease_id)

    def _lapsed(self) -> None:
        self._tell_listeners("on_session_lost")

    def _restored(self) -> None:
        self._tell_listeners("on_session_restored")

    def _tell_listeners(self, method: str) -> None:
        """Call the optional `method` of every listener that has it."""
        for listener in list(self.listeners):
            call = getattr(listener, method, None)
            if call is not None:
                try:
                    call()
                except Exception:
                    log.exception("%s listener failed", method)

    async def _reregister(self) -> None:
        await self._register()
        await self._campaign()

    async def stop(self, controlled: bool = True, timeout: float = 10.0) -> None:
        """Controlled shutdown (leaderships handed over first, bounded by
        timeout), then the lease is revoked so every key of this node goes."""
        if controlled and self.session.client is not None:
            try:
                await self.controlled_shutdown(timeout)
            except Exception:
                log.exception("controlled shutdown failed; stopping anyway")
        if self.controller is not None:
            await self.controller.stop()
            self.controller = None
        await cancel_and_wait(self._watch_task, 5.0)
        for task in list(self._isr_tasks):
            await cancel_and_wait(task, 5.0)
        await self.session.close(revoke=True)

    # ----------------------------------------------------------------- view
    async def _sync(self) -> None:
        """Read every key of the prefix into a fresh view (at one revision)."""
        result = await self.client.get_prefix(self.keys.prefix.encode() + b"/")
        view = ClusterView(self.keys)
        for kv in result:
            view.apply(kv.key.decode(), kv.value, kv.mod_revision, kv.create_revision,
                       kv.lease)
        view.revision = result.header.revision
        old, self.view = self.view, view
        # tell listeners about every partition (a resync may have missed events)
        turns = _Turns()
        for state in view.partitions.values():
            if old.partitions.get((state.topic, state.partition)) != state:
                self._notify(("partition", state))
                await turns.maybe_yield()   # the loop runs between transitions
        for name in set(old.topics) | set(view.topics):
            if old.topics.get(name) != view.topics.get(name):
                self._notify(("topic", name))
        self._notify(("node", None))
        if old.incarnations.get(self.node_id) != view.incarnations.get(self.node_id):
            self._notify(("incarnation", self.node_id))
        self._notify(("controller", None))
        self._notify(("security", None))  # the whole set: a resync may have missed deletes

    async def _watch_loop(self) -> None:
        while True:
            try:
                self._watch = await self.client.watch_prefix(
                    self.keys.prefix.encode() + b"/", start_revision=self.view.revision + 1)
                turns = _Turns()
                async for event in self._watch:
                    kv = event.kv
                    deleted = event.kind == "DELETE"
                    change = self.view.apply(kv.key.decode(), None if deleted else kv.value,
                                             kv.mod_revision, kv.create_revision, kv.lease)
                    self.view.revision = max(self.view.revision, kv.mod_revision)
                    if change is not None:
                        self._notify(change)
                        await turns.maybe_yield()  # (YIELD_EVERY_S)
            except asyncio.CancelledError:
                if self._watch is not None:
                    try:  # bounded: a broken stream may never answer the cancel
                        await bounded(self._watch.cancel(), 2.0)
                    except (Exception, asyncio.CancelledError):
                        pass
                raise
            except Exception as exc:  # etcd restarted, compacted or unreachable: resync
                log.warning("etcd watch ended (%s); reading the view again", exc)
                await asyncio.sleep(0.2)
                try:
                    await self._sync()
                except Exception as exc2:
                    log.warning("etcd resync failed: %s", exc2)

    def incarnation_handled(self) -> bool:
        """Has the controller handled this incarnation (lease)?  Until then a
        stored state naming this node leader was written for an earlier
        incarnation, whose unfsynced tail followers may hold: the controller
        moves it to a new epoch first (a bounce), so it is not acted on."""
        return self.view.incarnations.get(self.node_id) == self.session.lease_id

    def may_act_on(self, state: PartitionState) -> bool:
        """Is `state` for this node's listeners now? Not one naming this node
        leader before its incarnation was handled (incarnation_handled)."""
        return state.leader != self.node_id or self.incarnation_handled()

    def partition_states(self) -> list[PartitionState]:
        """The view's partition states this node acts on (listeners' seeding)."""
        return [s for s in self.view.partitions.values() if self.may_act_on(s)]

    def _tell_state(self, state: PartitionState) -> None:
        if not self.may_act_on(state):
            return  # delivered once the incarnation is handled, if still current
        for listener in list(self.listeners):
            try:
                listener.on_partition_state(state)
            except Exception:
                log.exception("partition state listener failed for %s-%d",
                              state.topic, state.partition)

    def _notify(self, change: tuple) -> None:
        kind, what = change
        if kind == "partition" and isinstance(what, PartitionState):
            self._tell_state(what)
        if kind == "incarnation" and what == self.node_id and self.incarnation_handled():
            # the held leaderships: what the view holds now is at an epoch written after
            for state in list(self.view.partitions.values()):
                if state.leader == self.node_id:
                    self._tell_state(state)
            # Every state written before the controller recorded this lease has
            # reached the listeners (the watch is in revision order), and from
            # here this node counts as live: a leadership it still holds is
            # current.  After a resume (this process back under a new lease) no
            # newer state comes for those, so acknowledging resumes here; after
            # a bounce every leadership it had was rewritten anyway.
            if not self.session.lapsed:
                self._tell_listeners("on_session_restored")
        if kind == "controller" and self.view.controller is None and not self.stopping:
            asyncio.get_running_loop().create_task(self._campaign())
        if kind == "controller":
            self._controller_changed()
        for listener in list(self.view_listeners):
            try:
                listener(change)
            except Exception:
                log.exception("cluster view listener failed on %s", change)
        if self.controller is not None:
            self.controller.poke()
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Wait (bounded) until predicate() holds on the view."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate():
            left = deadline - loop.time()
            if left <= 0:
                return False
            try:
                await bounded(self._changed.wait(), left)
            except asyncio.TimeoutError:
                return predicate()
        return True

    # ----------------------------------------------------------- controller
    async def _campaign(self) -> None:
        """Try to become controller (create-if-absent under the lease)."""
        if self.stopping or self.session.client is None:
            return
        if self._campaigning:
            # e.g. registered again under a new lease while an attempt under
            # the expired one is out: that one fails; try again right after it
            self._campaign_again = True
            return
        self._campaigning = True
        lease = self.session.lease_id
        try:
            k, t = self.keys, self.txn
            epoch = self.view.controller_epoch + 1
            ok, responses = await self.client.transaction(
                compare=[t.create(k.controller.encode()) == 0,
                         t.mod(k.controller_epoch.encode()) == self.view.controller_epoch_version],
                success=[t.put(k.controller.encode(), encode_controller(self.node_id, epoch),
                               lease=self.session.lease_id),
                         t.put(k.controller_epoch.encode(), str(epoch).encode())],
                failure=[])
            if ok:
                log.info("node %d is the controller (epoch %d)", self.node_id, epoch)
        except Exception as exc:  # etcd busy or away: try again while nobody leads
            log.warning("controller election attempt failed: %s", exc)
            if lease != self.session.lease_id:
                self._campaign_again = True  # it was the old lease's: no wait
            else:
                asyncio.get_running_loop().call_later(0.5, self._campaign_if_vacant)
        finally:
            self._campaigning = False
            if self._campaign_again:
                self._campaign_again = False
                asyncio.get_running_loop().call_soon(self._campaign_if_vacant)

    def _campaign_if_vacant(self) -> None:
        if self.view.controller is None and not self.stopping:
            asyncio.get_running_loop().create_task(self._campaign())

    def _controller_changed(self) -> None:
        from .etcd_controller import EtcdController
        c = self.view.controller
        mine = c is not None and c.node_id == self.node_id and not self.stopping_done
        if mine and (self.controller is None
                     or self.controller.create_revision != c.create_revision):
            if self.controller is not None:
                self.controller.cancel()
            self.controller = EtcdController(self, c.epoch, c.create_revision)
            self.controller.start()
        elif not mine and self.controller is not None:
            log.info("node %d is no longer the controller", self.node_id)
            self.controller.cancel()
            self.controller = None

    stopping_done = False

    # ------------------------------------------------------- state writes
    async def alter_isr(self, proposed: PartitionState) -> PartitionState | None:
        """PartitionStateStore.alter_isr: compare-and-set on the mod revision.
        A replica it adds must still be the eligible incarnation the view
        shows (Kafka's broker epoch check of AlterPartition): its registration
        unchanged and recorded as handled; else IneligibleReplica.

        The proposals of one loop turn (a fetch answered for many partitions
        at once, a node back after a heal) go to etcd together, as Kafka's
        AlterPartition carries many partitions: one transaction holding every
        proposal's own compares and puts.  etcd applies a transaction only if
        every compare holds, so either each partition's compare held at the
        revision of its write, or nothing was written and each is then sent
        alone with its own compares: a stale proposal fails by itself and
        never takes another partition's write with it, nor is written on the
        strength of another's compare."""
        key = self.keys.partition(proposed.topic, proposed.partition).encode()
        t = self.txn
        added = self._added_to_isr(proposed)
        compare = [t.mod(key) == proposed.version]
        for node in added:
            if not self.view.isr_eligible(node):
                raise IneligibleReplica(f"node {node} may not join the ISR yet")
            compare += [t.mod(self.keys.node(node).encode()) == self.view.registered[node],
                        t.value(self.keys.incarnation(node).encode())
                        == str(self.view.sessions[node]).encode()]
        loop = asyncio.get_running_loop()
        done: asyncio.Future = loop.create_future()
        if not self._isr_queue:
            loop.call_soon(self._send_isr_batch)
        self._isr_queue.append((proposed, key, compare, added, done))
        return await done

    def _send_isr_batch(self) -> None:
        queue, self._isr_queue = self._isr_queue, []
        chunk: list = []
        keys: set[bytes] = set()
        compares = 0
        for item in queue:
            _, key, compare, _, _ = item
            if chunk and (key in keys or compares + len(compare) > ISR_TXN_COMPARES):
                self._spawn_isr(chunk)
                chunk, keys, compares = [], set(), 0
            chunk.append(item)
            keys.add(key)
            compares += len(compare)
        if chunk:
            self._spawn_isr(chunk)

    def _spawn_isr(self, chunk: list) -> None:
        task = asyncio.get_running_loop().create_task(self._write_isr_chunk(chunk))
        self._isr_tasks.add(task)
        task.add_done_callback(self._isr_tasks.discard)

    async def _write_isr_chunk(self, chunk: list) -> None:
        try:
            if len(chunk) > 1:
                t = self.txn
                ok, responses = await self.client.transaction(
                    compare=[c for _, _, compare, _, _ in chunk for c in compare],
                    success=[t.put(key, encode_state(proposed))
                             for proposed, key, _, _, _ in chunk],
                    failure=[])
                if ok:
                    for (proposed, _, _, _, done), response in zip(chunk, responses):
                        _settle(done, self._isr_written_as(
                            proposed, response.response_put.header.revision))
                    return
            # alone, or a batch in which some compare failed: each on its own
            await asyncio.gather(*(self._write_isr_alone(*item) for item in chunk))
        except asyncio.CancelledError:
            for *_, done in chunk:
                done.cancel()
            raise
        except Exception as exc:  # etcd unreachable: each caller asks again
            for *_, done in chunk:
                if not done.done():
                    done.set_exception(exc)

    async def _write_isr_alone(self, proposed: PartitionState, key: bytes, compare: list,
                               added: set[int], done: asyncio.Future) -> None:
        t = self.txn
        try:
            ok, responses = await self.client.transaction(
                compare=compare, success=[t.put(key, encode_state(proposed))],
                failure=[t.get(key)] if added else [])
            if not ok:
                stored = responses[0] if added else []
                if stored and stored[0][1].mod_revision == proposed.version:
                    raise IneligibleReplica(f"nodes {sorted(added)} changed registration")
                _settle(done, None)
                return
            _settle(done, self._isr_written_as(proposed,
                                               responses[0].response_put.header.revision))
        except Exception as exc:
            if not done.done():
                done.set_exception(exc)

    def _isr_written_as(self, proposed: PartitionState, revision: int) -> PartitionState:
        written = PartitionState(proposed.topic, proposed.partition, proposed.leader,
                                 proposed.leader_epoch, tuple(proposed.isr),
                                 tuple(proposed.replicas), revision)
        self._isr_written[(written.topic, written.partition)] = written
        return written

    def _added_to_isr(self, proposed: PartitionState) -> set[int]:
        """The replicas `proposed` adds to the ISR of the state it replaces
        (as the view or this node's last write of it holds it; neither: a
        stale version, which the compare refuses anyway)."""
        where = (proposed.topic, proposed.partition)
        for old in (self.view.state(*where), self._isr_written.get(where)):
            if old is not None and old.version == proposed.version:
                return set(proposed.isr) - set(old.isr)
        return set()

    async def replace_state(self, old: PartitionState, new: PartitionState) -> bool:
        """Compare-and-set a partition state decided outside the controller's
        loop (ElectLeaders): written only if `old` is still the stored one."""
        key = self.keys.partition(new.topic, new.partition).encode()
        ok, _ = await self.client.transaction(
            compare=[self.txn.mod(key) == old.version],
            success=[self.txn.put(key, encode_state(new))], failure=[])
        return ok

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           configs: dict[str, str] | None = None) -> TopicRecord | None:
        """Add a topic to the catalogue if absent: the record, or None when
        the name is taken.  The controller then places its replicas."""
        record = TopicRecord(name, uuid.uuid4().bytes, partitions, replication_factor,
                             dict(configs or {}))
        key = self.keys.topic(name).encode()
        ok, _ = await self.client.transaction(
            compare=[self.txn.create(key) == 0],
            success=[self.txn.put(key, encode_topic(record))], failure=[])
        return record if ok else None

    async def delete_topic(self, name: str) -> bool:
        """Remove a topic and its partition states; False when it was absent."""
        key = self.keys.topic(name).encode()
        prefix = f"{self.keys.partitions}{name}/".encode()
        from aetcd.utils import prefix_range_end
        ok, _ = await self.client.transaction(
            compare=[self.txn.create(key) > 0],
            success=[self.txn.delete(key),
                     self.txn.delete(prefix, range_end=prefix_range_end(prefix))],
            failure=[])
        return ok

    async def set_partition_count(self, name: str, count: int) -> bool:
        """Grow a topic (CreatePartitions); the controller places the new ones."""
        return await self._rewrite_topic(name, lambda record: TopicRecord(
            name, record.topic_id, count, record.replication_factor, record.configs))

    async def put_configs(self, entity_type: str, name: str, configs: dict[str, str]) -> None:
        """Replace a broker's or group's dynamic config overrides (none: remove them)."""
        key = self.keys.config(entity_type, name).encode()
        op = self.txn.put(key, json.dumps(configs, sort_keys=True).encode()) if configs \
            else self.txn.delete(key)
        await self.client.transaction(compare=[], success=[op], failure=[])

    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> bool:
        """Replace a topic's config overrides (AlterConfigs); every node's
        mirror applies them to its logs."""
        return await self._rewrite_topic(name, lambda record: TopicRecord(
            name, record.topic_id, record.partitions, record.replication_factor,
            dict(configs)))

    async def _rewrite_topic(self, name: str, rewrite) -> bool:
        """Compare-and-set a topic's record to rewrite(the view's copy); False
        when the topic is absent or its record changed meanwhile."""
        record = self.view.topics.get(name)
        if record is None:
            return False
        key = self.keys.topic(name).encode()
        result = await self.client.get(key)
        if result is None:
            return False
        ok, _ = await self.client.transaction(
            compare=[self.txn.mod(key) == result.mod_revision],
            success=[self.txn.put(key, encode_topic(rewrite(record)))], failure=[])
        return ok

    # -------------------------------------------------- controlled shutdown
    async def controlled_shutdown(self, timeout: float) -> None:
        """Mark this node stopping, wait (bounded) until the controller moved
        every leadership and ISR place it can move (another in-sync replica is
        live), as KRaft's controlled shutdown leaves the broker in no ISR."""
        self.stopping = True
        await self._register()

        def handed_over() -> bool:
            live = self.view.serving() - {self.node_id}
            return not any(self.node_id in s.isr and any(r in live for r in s.isr)
                           for s in self.view.partitions.values())

        done = await self.wait_for(handed_over, timeout)
        log.info("controlled shutdown of node %d: %s", self.node_id,
                 "leaderships handed over" if done else "timed out; stopping anyway")
        self.stopping_done = True
        if self.controller is not None:
            # resign: the next controller takes over at once instead of after the lease
            await self.controller.stop()
            self.controller = None
            try:
                t = self.txn
                await self.client.transaction(
                    compare=[t.create(self.keys.controller.encode()) ==
                             self.view.controller.create_revision],
                    success=[t.delete(self.keys.controller.encode())], failure=[])
            except Exception as exc:
                log.warning("resigning as controller failed: %s", exc)
