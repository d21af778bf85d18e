"""The coordinator runtimes' durability in a cluster (log/durability.py's
Durability): a write is durable once every in-sync replica has it on disk."""
from __future__ import annotations

import asyncio
import functools
from typing import Callable

from ..log.durability import NotReplicated
from ..log import step_trace
from ..log.fsync_batcher import FsyncBatcher
from ..log.waiters import Waiters
from ..protocol.errors import Err
from .replica_manager import ReplicaManager


class ReplicatedDurability:
    """A group-commit round is durable once each shard log is fsynced here
    and its high watermark has passed what was appended.  A shard this node
    no longer leads reports NotReplicated, which fails the round's writes
    of that shard (the runtime answers them)."""

    replicated = True  # the runtime enforces offsets.commit.timeout.ms on its rounds

    def __init__(self, manager: ReplicaManager, fsync: FsyncBatcher) -> None:
        self.manager = manager
        self.fsync = fsync
        self.closed = False
        self._role_waiters = Waiters()
        manager.role_listeners.append(self.roles_changed)

    async def replayed(self, plog, end_offset: int, epoch: int) -> None:
        """The takeover fence, awaited by a shard that has replayed its log
        up to `end_offset` before it serves: returns once this node leads the
        log in leader epoch `epoch` (or a newer one) and the high watermark
        has reached `end_offset`.  A new leader's log may end with records
        that were never acknowledged and that a truncation may still remove;
        Kafka's runtime serves a shard at its last committed offset, here
        the shard stays COORDINATOR_LOAD_IN_PROGRESS until everything it
        replayed is committed.  Waits (an unload cancels it) while this
        node is not, or not yet, that leader."""
        manager = self.manager
        while True:
            found = manager.replica_of_log(plog)
            if found is not None:
                key, replica = found
                if replica.accepts_writes and replica.leader_epoch >= epoch:
                    code = await manager.await_high_watermark(key[0], key[1], end_offset)
                    if code != Err.NOT_LEADER_OR_FOLLOWER:
                        # reached (NOT_ENOUGH_REPLICAS_AFTER_APPEND: reached with
                        # an ISR below min.insync.replicas, committed all the same)
                        return
                    continue
            await self._role_waiters.wait()

    def committed_end(self, plog) -> int:
        """Offsets below it are committed (the high watermark) while this node
        leads the log; else its log start (nothing may be cut here)."""
        found = self.manager.replica_of_log(plog)
        if found is None or not found[1].is_leader:
            return plog.log_start_offset
        return found[1].high_watermark

    def append_error(self, plog) -> int:
        """Kafka's check before an acks=all append: this node leads the log
        and its ISR holds min.insync.replicas; else nothing is appended."""
        found = self.manager.replica_of_log(plog)
        if found is None:
            return Err.NOT_LEADER_OR_FOLLOWER
        return found[1].check_append(-1)

    def serve_error(self, plog) -> int:
        """May a shard answer a read from its memory of `plog` now?  Only
        while this node surely leads the log (ReplicaManager.serve_error)."""
        return self.manager.serve_error(plog)

    def roles_changed(self) -> None:
        """A replica here became leader, follower or neither (the manager's
        role listener): fences waiting for leadership look again."""
        self._role_waiters.wake()

    def sync(self, logs: list, done: Callable[[list], None]) -> None:
        ends = [plog.log_end_offset for plog in logs]
        if self.manager.on_high_watermark is not None:
            for plog in logs:   # followers' parked fetches read the appended tail at once
                self.manager.on_high_watermark(plog)
        trace_id = step_trace.sync_started(logs)
        self.fsync.sync_then(logs, lambda errors: self._flushed(logs, ends, errors, done,
                                                                trace_id))

    def _flushed(self, logs: list, ends: list, errors: list, done, trace_id: int) -> None:
        step_trace.write_event("flushed", trace_id)
        manager = self.manager
        flushed = [plog for plog, e in zip(logs, errors) if e is None]
        manager.on_flushed(flushed)
        if manager.on_high_watermark is not None:
            for plog in flushed:    # long polls on them: the high watermark may have moved
                manager.on_high_watermark(plog)
        waits = []
        for i, plog in enumerate(logs):
            if errors[i] is not None:
                continue
            # (the cached lookup: a map of every replica built per fsync round
            # cost more than the round's own bookkeeping)
            found = manager.replica_of_log(plog)
            if found is None:
                errors[i] = NotReplicated(Err.NOT_LEADER_OR_FOLLOWER)
            else:
                key = found[0]
                waits.append((i, manager.await_high_watermark(key[0], key[1], ends[i])))
        if not waits:
            done(errors)
            return
        # done() runs from the last high-watermark future's callback: no task
        # (and no extra loop turn) per replicated write
        remaining = [len(waits)]

        def reached(i: int, fut: asyncio.Future) -> None:
            if fut.cancelled():     # the manager stopped: nobody is answered (as before)
                return
            code = fut.result()
            if code != Err.NONE:
                errors[i] = NotReplicated(code)
            remaining[0] -= 1
            if remaining[0] == 0:
                step_trace.write_event("replicated", trace_id)
                done(errors)

        for i, fut in waits:
            fut.add_done_callback(functools.partial(reached, i))

    def close(self) -> None:
        self.closed = True
