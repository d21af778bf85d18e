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
from .state import PartitionState
from .view import encode_state

if TYPE_CHECKING:
    from .etcd_control import EtcdControlPlane

log = logging.getLogger("kcoord.cluster.controller")


class EtcdController:
    def __init__(self, plane: "EtcdControlPlane", epoch: int, create_revision: int) -> None:
        self.plane = plane
        self.epoch = epoch
        self.create_revision = create_revision
        self._dirty = asyncio.Event()
        self._task: asyncio.Task | None = None
        # node -> lease of the incarnation last seen: a node that came back under
        # a new lease (restart, or paused past its lease) counts as gone once, so
        # its leaderships move and it rejoins as a follower
        self._sessions: dict[int, int] = {}

    def start(self) -> None:
        self._sessions = dict(self.plane.view.sessions)
        self._task = asyncio.get_running_loop().create_task(self._run())
        self.poke()

    def poke(self) -> None:
        self._dirty.set()

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def stop(self) -> None:
        self.cancel()
        if self._task is not None:
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass

    async def _run(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            try:
                failed = await self.reconcile_once()
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
        bounced = {n for n, lease in view.sessions.items()
                   if n in self._sessions and self._sessions[n] != lease}
        stopping = view.stopping() | bounced
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
        for new in decisions.reconcile(states, live - bounced, stopping, self.plane.unclean):
            writes.append((view.state(new.topic, new.partition), new))
        if not writes:
            self._sessions = dict(view.sessions)
            return False
        results = await asyncio.gather(*(self._write(old, new) for old, new in writes),
                                       return_exceptions=True)
        failed = [r for r in results if r is not True]
        for (old, new), r in zip(writes, results):
            if r is True and (old is None or old.leader != new.leader):
                log.info("partition %s-%d: leader %d epoch %d isr %s", new.topic, new.partition,
                         new.leader, new.leader_epoch, list(new.isr))
        if bounced and not failed:
            # the bounce is handled once its leaderships were moved
            self._sessions.update({n: view.sessions[n] for n in bounced})
        for n, lease in view.sessions.items():
            self._sessions.setdefault(n, lease)
        return bool(failed)

    async def _write(self, old: PartitionState | None, new: PartitionState) -> bool:
        plane = self.plane
        key = plane.keys.partition(new.topic, new.partition).encode()
        t = plane.txn
        compare = [t.create(plane.keys.controller.encode()) == self.create_revision,
                   t.mod(key) == (0 if old is None else old.version)]
        if old is None:
            compare.append(t.create(key) == 0)
        ok, _ = await plane.client.transaction(compare=compare,
                                               success=[t.put(key, encode_state(new))],
                                               failure=[])
        return ok
