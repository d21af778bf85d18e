"""Group commit across every shard of the coordinator runtime: one round
appends each waiting shard's records as one batch and fsyncs them all
together off the event loop; replies are released only after that."""
from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol

from ..log import PartitionLog
from ..log.durability import Durability, LocalDurability
from .clock import WallClock


class Committable(Protocol):
    """What the group commit asks of a shard (ShardRuntime is the one)."""

    plog: PartitionLog

    def take(self, now: int) -> Any:
        """Append the pending records as one batch: -> the batch to release
        once durable, or None (nothing pending, or the append failed and
        the shard already failed its writes)."""

    def release(self, batch: Any, error: BaseException | None) -> None:
        """The batch is durable (error None) or will not be: answer its writes."""


# records of one shard that start a lingering round at once (Kafka flushes a
# batch that has no room left; coordinator records are some 100 bytes, its
# batches at most 1 MiB)
FULL_BATCH_RECORDS = 8192


class FsyncRounds:
    """Group commit across every shard of the runtime: rounds of appends made
    durable together (fsync batching; not consumer groups' commits).

    A shard with records to write joins the next round.  With the adaptive
    linger (-1, the default, as Kafka's KAFKA-19826; 0 is the same here) a
    round starts once the loop has run the work already queued on it (the
    requests read in that iteration have all written): no linger on an idle
    path, and under load everything written while a round is durable-bound
    joins the next.  A positive `group.coordinator.append.linger.ms` starts
    it that long after its first write, or at once when a shard's batch
    fills (FULL_BATCH_RECORDS).  Either way it starts as soon as the round
    before it is durable, so at most one round is under way: each shard of the round appends its
    pending records as one batch (on the loop, to the page cache), then the
    durability object makes all of them durable together and the loop
    serves meanwhile; once they are all done the waiting writes are
    released, shard by shard (a shard whose append or sync failed fails its
    writes and reloads).  Everything written during a round joins the next
    one.

    `durability` is the declared seam (log/durability.py): single node,
    fsync in worker threads (LocalDurability); replicated, the high
    watermark passing each log's end at the time of the call
    (cluster/durability.py).  A NotReplicated error of lost leadership
    unloads the shard (its requests get NOT_COORDINATOR); any other error
    fails the waiting requests (COORDINATOR_NOT_AVAILABLE) and reloads the
    shard.  The shards are Committable (take, release)."""

    def __init__(self, linger_ms: float, durability: Durability | None = None,
                 metrics=None, clock: WallClock | None = None) -> None:
        self.linger = linger_ms / 1000.0
        # the server's clock (clock.py): the batches' timestamps; the linger
        # is I/O batching and stays on the event loop
        self.clock = clock if clock is not None else WallClock()
        self.metrics = metrics  # observe.events.ServerMetrics (sync latency) or None
        self._sync_started = 0.0
        self.durability = durability if durability is not None else LocalDurability()
        self._queue: list[Committable] = []
        self._scheduled = False
        self._timer: asyncio.TimerHandle | None = None
        self._in_flight = False
        # offsets.commit.timeout.ms (seconds) when set (replicated): a shard's
        # batch not durable that long after its first write answers its
        # requests COORDINATOR_NOT_AVAILABLE (ShardRuntime.time_out)
        self.write_timeout: float | None = None
        self.rounds = 0  # rounds begun (metrics and tests)

    def add(self, shard: Committable) -> None:
        self._queue.append(shard)
        if not self._scheduled and not self._in_flight:
            self._scheduled = True
            loop = asyncio.get_running_loop()
            if self.linger > 0:
                self._timer = loop.call_later(self.linger, self._round)
            else:
                loop.call_soon(self._round)   # behind the work already queued

    def filled(self) -> None:
        """A shard's pending batch is full: a lingering round starts now."""
        self.hurry()

    def hurry(self) -> None:
        """Start the lingering round now (a transaction's steps wait on it one
        after another, so the linger would be paid once per step; batching
        with other writers matters less there).  A round under way is not
        disturbed: the next one starts as soon as it is durable."""
        if self._timer is not None and not self._in_flight:
            self._timer.cancel()
            self._timer = None
            asyncio.get_running_loop().call_soon(self._round)

    def _round(self) -> None:
        self._scheduled = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._in_flight or not self._queue:
            return
        if self.durability.closed:  # stopping: write and fsync right here
            self.flush_now()
            return
        shards, self._queue = self._queue, []
        now = self.clock.ms()
        jobs = []
        for shard in shards:
            batch = shard.take(now)
            if batch is not None:
                jobs.append((shard, batch))
        if not jobs:
            return
        self._in_flight = True
        self.rounds += 1
        if self.metrics is not None:
            self._sync_started = time.perf_counter()
        self.durability.sync([job[0].plog for job in jobs],
                             lambda errors: self._synced(jobs, errors))

    def _synced(self, jobs: list, errors: list) -> None:
        self._in_flight = False
        if self.metrics is not None:
            self.metrics.synced(time.perf_counter() - self._sync_started)
        # What was written meanwhile has waited long enough: its round starts
        # now, before this round's answers are written to the sockets (they
        # are written at once when released, network.py), so its fsyncs run
        # meanwhile.  After a failed fsync the shard must first fail what it
        # wrote since, so then the release comes first.
        started = False
        if self._queue and not self._scheduled and not any(errors):
            self._round()
            started = True
        # Released last request first: a connection's answers then wait for
        # its earliest one and leave in one write (network.py writes the
        # finished answers at the head of its queue after each completion).
        for (shard, batch), error in zip(reversed(jobs), reversed(errors)):
            shard.release(batch, error)
        if not started and self._queue and not self._scheduled:
            self._round()

    def flush_now(self) -> None:
        """Append and fsync every pending write on the caller's thread (stop)."""
        shards, self._queue = self._queue, []
        now = self.clock.ms()
        for shard in shards:
            batch = shard.take(now)
            if batch is None:
                continue
            try:
                shard.plog.flush()
            except Exception as exc:
                shard.release(batch, exc)
            else:
                shard.release(batch, None)

    def close(self) -> None:
        """Wait for the fsyncs under way, then write what is pending."""
        self.durability.close()
        self.flush_now()
