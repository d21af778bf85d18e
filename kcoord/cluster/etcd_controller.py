"""The controller's loop: take decisions (decisions.py) on the view, write
them to etcd by compare-and-set.

Every write compares the partition key's mod revision (the state the
decision was taken on) and the controller key's create revision (this
controller is still the one elected), so a decision on a stale view or by
a deposed controller changes nothing.  After any change of the view the
loop runs again; a failed write is retried on the next view."""
from __future__ import annotations

import asyncio
import logging
import random
from typing import TYPE_CHECKING

from . import decisions
from .aio import bounded, cancel_and_wait
from .state import PartitionState
from .view import encode_state

if TYPE_CHECKING:
    from .etcd_control import EtcdControlPlane

log = logging.getLogger("kcoord.cluster.controller")

# partition writes per etcd transaction: etcd takes at most 128 compares (two
# per new partition, plus the controller's) and 128 puts in one (--max-txn-ops)
TXN_CHUNK = 60


class EtcdController:
    def __init__(self, plane: "EtcdControlPlane", epoch: int, create_revision: int) -> None:
        self.plane = plane
        self.epoch = epoch
        self.create_revision = create_revision
        self._dirty = asyncio.Event()
        self._task: asyncio.Task | None = None
        # node -> lease of the incarnation handled, recorded in etcd
        # (<prefix>/incarnations/<id>) so a controller elected later knows it
        # too: a node registered under another lease (restarted, or paused
        # past its lease) counts as gone once, so its leaderships move with a
        # new epoch and it rejoins as a follower.  This dict holds what this
        # controller wrote and the watch has not brought back yet.
        self._recorded: dict[int, int] = {}
        # until when (loop time) unregistered known nodes are awaited (_awaited)
        self._awaiting_until: float | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())
        self.poke()

    def poke(self) -> None:
        self._dirty.set()

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def stop(self) -> None:
        await cancel_and_wait(self._task, 5.0)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self.plane.rebalance_interval_s
        next_rebalance = None if interval is None else loop.time() + interval
        while True:
            rebalance = False
            if next_rebalance is None:
                await self._dirty.wait()
            else:
                try:
                    await bounded(self._dirty.wait(), max(0.0, next_rebalance - loop.time()))
                except asyncio.TimeoutError:
                    rebalance = True
                    next_rebalance = loop.time() + interval
            self._dirty.clear()
            try:
                failed = await (self.rebalance_once() if rebalance else self.reconcile_once())
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("controller pass failed")
                failed = True
            if failed:
                # the watch brings the fresher view; look again shortly even if it is quiet
                await asyncio.sleep(0.05)
                self._dirty.set()

    async def reconcile_once(self) -> bool:
        """One pass over the view; True if some write lost its compare."""
        view = self.plane.view
        live = view.live()
        handled = {**view.incarnations, **self._recorded}
        # a new lease is a bounce (leaderships move, ISR places go) unless the
        # registration says it is the same process back (view.resumed)
        bounced = {n for n, lease in view.sessions.items()
                   if n in handled and handled[n] != lease
                   and not view.resumed(n, handled[n])}
        stopping = view.stopping() | bounced
        awaited = self._awaited(handled, live)
        writes: list[tuple[PartitionState | None, PartitionState]] = []
        # new topics and partitions: place replicas on the serving nodes
        serving = sorted(live - stopping)
        for record in list(view.topics.values()):
            missing = [p for p in range(record.partitions)
                       if view.state(record.name, p) is None]
            if not missing or not serving:
                continue
            rf = min(record.replication_factor, len(serving))
            start = random.randrange(len(serving))
            for p in missing:
                replicas = decisions.place_replicas(1, rf, serving, start=start,
                                                    first_partition=p)[0]
                writes.append((None, decisions.initial_state(record.name, p, replicas, serving)))
        states = list(view.partitions.values())
        held_back = False
        for new in decisions.reconcile(states, (live | awaited) - bounced, stopping,
                                       self.plane.unclean):
            if new.leader in awaited and view.state(new.topic, new.partition).leader != new.leader:
                held_back = True  # not elected while unregistered: it may come back a restart
                continue
            writes.append((view.state(new.topic, new.partition), new))
        sessions = dict(view.sessions)
        failed = []
        if writes:
            results = await self._write_all(writes)
            failed = [r for r in results if r is not True]
            for (old, new), r in zip(writes, results):
                if r is True and (old is None or old.leader != new.leader):
                    log.info("partition %s-%d: leader %d epoch %d isr %s", new.topic,
                             new.partition, new.leader, new.leader_epoch, list(new.isr))
        # a bounce is handled once its leaderships were moved (not when a
        # decision was held back: one of them may be among those); a node seen
        # for the first time, or resumed, needs nothing moved
        record = {n: lease for n, lease in sessions.items()
                  if handled.get(n) != lease and not (n in bounced and (failed or held_back))}
        if record:
            if not await self._record_incarnations(record):
                failed.append(False)
        return bool(failed)

    def _awaited(self, handled: dict[int, int], live: set[int]) -> set[int]:
        """Known nodes not registered that this controller still waits for:
        their leaderships and ISR places stay as they are for now.  Only
        when this controller's own node had just come back as the same
        process after its lease expired (view.resumed): then every lease
        most likely lapsed at once (etcd paused past the TTL, or a majority
        cut from it), and every node registers again within a refresh
        interval or so.  Without waiting, the first to win the election
        would move the others' leaderships away a moment before they come
        back (and they, resumed, would have kept them).  Bounded: one lease
        TTL after the election, then a poke looks again; a controller elected
        otherwise (its node's lease lived) moves at once, as before."""
        loop = asyncio.get_running_loop()
        if self._awaiting_until is None:
            session = self.plane.session
            just_back = session.resumes and loop.time() - session.granted_at < session.ttl_s
            self._awaiting_until = loop.time() + (session.ttl_s if just_back else 0.0)
            if just_back:
                loop.call_at(self._awaiting_until, self.poke)
        if loop.time() >= self._awaiting_until:
            return set()
        return {n for n in handled if n not in live}

    async def _record_incarnations(self, record: dict[int, int]) -> bool:
        plane, t = self.plane, self.plane.txn
        ok, _ = await plane.client.transaction(
            compare=[t.create(plane.keys.controller.encode()) == self.create_revision],
            success=[t.put(plane.keys.incarnation(n).encode(), str(lease).encode())
                     for n, lease in record.items()],
            failure=[])
        if ok:
            self._recorded.update(record)
            # from here these incarnations may join ISRs (view.isr_eligible)
            log.info("incarnations handled: %s",
                     ", ".join(f"node {n} lease {lease:x}" for n, lease in sorted(record.items())))
        return ok

    async def rebalance_once(self) -> bool:
        """Leaders back to their preferred replicas where the imbalance is
        above the threshold (Kafka's auto.leader.rebalance.enable)."""
        view = self.plane.view
        moves = decisions.rebalance_preferred(view.partitions.values(), view.serving(),
                                              self.plane.imbalance_pct)
        if not moves:
            return False
        results = await self._write_all([(view.state(m.topic, m.partition), m) for m in moves])
        log.info("preferred leader election: %d of %d partitions moved",
                 sum(r is True for r in results), len(moves))
        return False  # a lost compare is simply retried at the next check

    async def _write_all(self, writes: list) -> list:
        """Each write's outcome (True, False or its exception).  A bounce
        rewrites about one state per partition: they go in chunks of one etcd
        transaction each (one raft entry, not one per partition, on the etcd
        every lease refresh also waits on); a chunk whose compare fails (a
        stale state in it) is written one by one, so only the stale fail."""
        chunks = [writes[i:i + TXN_CHUNK] for i in range(0, len(writes), TXN_CHUNK)]
        together = await asyncio.gather(*(self._write_chunk(c) for c in chunks),
                                        return_exceptions=True)
        results: list = []
        for chunk, ok in zip(chunks, together):
            if ok is True:
                results += [True] * len(chunk)
            else:
                results += await asyncio.gather(*(self._write(old, new) for old, new in chunk),
                                                return_exceptions=True)
        return results

    async def _write_chunk(self, chunk: list) -> bool:
        if len(chunk) == 1:
            return False  # written alone by the caller
        plane = self.plane
        t = plane.txn
        compare = [t.create(plane.keys.controller.encode()) == self.create_revision]
        success = []
        for old, new in chunk:
            key = plane.keys.partition(new.topic, new.partition).encode()
            compare += self._unchanged(key, old)
            success.append(t.put(key, encode_state(new)))
        ok, _ = await plane.client.transaction(compare=compare, success=success, failure=[])
        return ok

    def _unchanged(self, key: bytes, old: PartitionState | None) -> list:
        """The compares of a write decided on state `old` (None: a new partition)."""
        t = self.plane.txn
        compare = [t.mod(key) == (0 if old is None else old.version)]
        if old is None:
            compare.append(t.create(key) == 0)
        return compare

    async def _write(self, old: PartitionState | None, new: PartitionState) -> bool:
        plane = self.plane
        key = plane.keys.partition(new.topic, new.partition).encode()
        t = plane.txn
        compare = [t.create(plane.keys.controller.encode()) == self.create_revision,
                   *self._unchanged(key, old)]
        ok, _ = await plane.client.transaction(compare=compare,
                                               success=[t.put(key, encode_state(new))],
                                               failure=[])
        return ok
