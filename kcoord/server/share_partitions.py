"""The share partitions this node leads (Kafka's SharePartitionManager): each
(group, topic, partition)'s SharePartition, loaded from the persister on
first use, its acquisition-lock timers on the server's clock, and its writes to
the persister, one at a time, answered before an acknowledgement is done.

Reading the log for an acquisition goes through the data plane (its logs,
high watermarks, transaction state); fetches long-poll on the data plane's
AppendNotifier, which this module also wakes when records become AVAILABLE
again (a release, a lock expiry, a rolled-back acknowledgement).
"""
from __future__ import annotations

import asyncio
import logging
import weakref
from dataclasses import dataclass
from typing import Any, Callable

from ..broker.data_handlers import high_watermark
from ..coordinator.group_configs import duration_ms
from ..log import OffsetOutOfRange
from ..protocol.errors import Err
from ..share.events import NO_EVENTS, ShareEvents
from ..share.log_batches import Aborted, read_batches, records_for
from ..share.partition import Acquired, SharePartition, ShareLimits
from ..share.persister import ShareKey, SharePersister
from .clock import WallClock
from .stall_grace import STALL_GRACE_S, fired_after_a_stall

log = logging.getLogger("kcoord.share")

READ_BYTES = 1 << 20          # bytes read from a log per partition and fetch (at least one batch)
RETRY_S = 1.0                 # a failed write is tried again after this (Kafka's first back-off)

# persister error -> what the client is told (Kafka's SharePartition mapping)
_LOAD_ERRORS = {
    Err.NOT_COORDINATOR: Err.COORDINATOR_NOT_AVAILABLE,
    Err.COORDINATOR_NOT_AVAILABLE: Err.COORDINATOR_NOT_AVAILABLE,
    Err.COORDINATOR_LOAD_IN_PROGRESS: Err.COORDINATOR_NOT_AVAILABLE,
    Err.FENCED_LEADER_EPOCH: Err.NOT_LEADER_OR_FOLLOWER,
    Err.FENCED_STATE_EPOCH: Err.NOT_LEADER_OR_FOLLOWER,
    Err.GROUP_ID_NOT_FOUND: Err.GROUP_ID_NOT_FOUND,
    Err.UNKNOWN_TOPIC_OR_PARTITION: Err.UNKNOWN_TOPIC_OR_PARTITION,
}
# after these the share partition is dropped and loaded again on next use
_DROP = {Err.NOT_LEADER_OR_FOLLOWER, Err.GROUP_ID_NOT_FOUND, Err.UNKNOWN_TOPIC_OR_PARTITION}


def client_error(code: int) -> int:
    return Err.NONE if code == Err.NONE else _LOAD_ERRORS.get(code, Err.UNKNOWN_SERVER_ERROR)


@dataclass(slots=True)
class Loaded:
    """A share partition for a request, or the error its partition answers."""
    partition: SharePartition | None = None
    error_code: int = Err.NONE


class GroupSidePersister:
    """The persister as the group coordinator uses it: a share partition's
    state initialized anew (AlterShareGroupOffsets) or deleted (DeleteGroups,
    DeleteShareGroupOffsets) also leaves this leader's memory, so the next
    fetch loads what the share coordinator now holds."""

    def __init__(self, persister: SharePersister, manager: "SharePartitionManager") -> None:
        self.persister = persister
        self.manager = manager

    async def initialize(self, key: ShareKey, state_epoch: int, start_offset: int) -> int:
        code = await self.persister.initialize(key, state_epoch, start_offset)
        self.manager.drop((key.group_id, key.topic_id, key.partition), Err.INVALID_RECORD_STATE)
        return code

    async def delete(self, key: ShareKey) -> int:
        code = await self.persister.delete(key)
        self.manager.drop((key.group_id, key.topic_id, key.partition), Err.INVALID_RECORD_STATE)
        return code

    def __getattr__(self, name: str):
        return getattr(self.persister, name)        # read, write, summary: as they are


class SharePartitionManager:
    def __init__(self, catalogue, data, config, persister: SharePersister | None = None,
                 group_config: Callable[[str, str, Any], Any] | None = None,
                 clock: WallClock | None = None) -> None:
        self.catalogue = catalogue
        # the server's one clock (clock.py): acquisition locks expire on it
        self.clock = clock if clock is not None else WallClock()
        self.data = data          # the DataPlane: logs, high watermarks, txn state, notifier
        self.config = config
        self.persister = persister
        # group id, config name, default -> the group's value.  Until group-level
        # share configs are served, the broker default (the hook the group
        # coordinator's configs plug into).
        self.group_config = group_config or (lambda _group, _name, default: default)
        self.partitions: dict[tuple, SharePartition] = {}
        # key -> the counters its share partition bumps (/metrics sets it; none by default)
        self.events_for: Callable[[tuple], ShareEvents] = lambda _key: NO_EVENTS
        self._loading: dict[tuple, asyncio.Future] = {}
        self._tickets: dict[tuple, asyncio.Future] = {}
        self._timers: dict[tuple, asyncio.TimerHandle] = {}
        self._retries: set[tuple] = set()
        # a share partition dropped while its write was out -> the code for what waits
        self._dropped: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    # ------------------------------------------------------------ configs
    def _broker(self, name: str, default):
        value = self.config.values.get(name)
        return default if value is None else value

    def limits(self) -> ShareLimits:
        return ShareLimits(
            delivery_count_limit=int(self._broker("group.share.delivery.count.limit", 5)),
            max_record_locks=int(self._broker("group.share.partition.max.record.locks", 2000)))

    def lock_ms(self, group_id: str) -> int:
        default = int(self._broker("group.share.record.lock.duration.ms", 30000))
        return int(self.group_config(group_id, "share.record.lock.duration.ms", default))

    def read_committed(self, group_id: str) -> bool:
        level = self.group_config(group_id, "share.isolation.level", "read_uncommitted")
        return str(level).lower() == "read_committed"

    # ------------------------------------------------------------- loading
    async def get(self, group_id: str, topic, index: int) -> Loaded:
        """The loaded share partition, or the error code for the client."""
        return await asyncio.shield(self.load(group_id, topic, index))

    def load(self, group_id: str, topic, index: int) -> asyncio.Future:
        """A future of the Loaded share partition: done at once when it is in
        memory, else the one load in progress (started here if none).  A load
        ending wakes the long polls, so a fetch waiting on it acquires."""
        key = (group_id, topic.topic_id, index)
        sp = self.partitions.get(key)
        if sp is not None:
            if sp.leader_epoch == self.leader_epoch(topic, index):
                done = asyncio.get_running_loop().create_future()
                done.set_result(Loaded(sp))
                return done
            self.drop(key)            # led elsewhere meanwhile: its state moved on there
        fut = self._loading.get(key)
        if fut is None:
            fut = self._loading[key] = asyncio.ensure_future(self._load(key, topic, index))
            fut.add_done_callback(lambda _f, k=key: self._loaded(k))
        return fut

    def _loaded(self, key: tuple) -> None:
        self._loading.pop(key, None)
        self.data.appended.notify()

    async def _load(self, key: tuple, topic, index: int) -> Loaded:
        if self.persister is None:
            return Loaded(None, Err.COORDINATOR_NOT_AVAILABLE)
        try:
            state = await self.persister.read(ShareKey(*key), self.leader_epoch(topic, index))
            if self.catalogue.by_id.get(key[1]) is not topic:
                return Loaded(None, Err.UNKNOWN_TOPIC_OR_PARTITION)    # deleted while loading
        except Exception:
            log.exception("reading the share state of %s failed", key)
            return Loaded(None, Err.UNKNOWN_SERVER_ERROR)
        if state.error_code != Err.NONE:
            return Loaded(None, client_error(state.error_code))
        plog = topic.partitions[index]
        start = state.start_offset
        if start < 0:
            start = self._reset_offset(key[0], topic, index, plog)
        sp = SharePartition.loaded(state, start, self.limits())
        sp.leader_epoch = self.leader_epoch(topic, index)
        sp.events = self.events_for(key)
        sp.on_log_start(plog.log_start_offset)
        self.partitions[key] = sp
        return Loaded(sp)

    def _reset_offset(self, group_id: str, topic, index: int, plog) -> int:
        """share.auto.offset.reset for a share partition with no start yet:
        latest (the high watermark, Kafka's default), earliest (the log start)
        or by_duration:<ISO-8601> (the first offset at now - duration)."""
        policy = str(self.group_config(group_id, "share.auto.offset.reset", "latest")).lower()
        if policy == "earliest":
            return plog.log_start_offset
        if policy.startswith("by_duration:"):
            ms = duration_ms(policy.split(":", 1)[1])
            if ms is not None:
                found = plog.offset_for_timestamp(self.clock.ms() - ms)
                return found[0] if found is not None else self.hw(topic, index)
        return self.hw(topic, index)

    def _replica(self, topic, index: int):
        """The partition's replica in a cluster, None on a single node."""
        replication = self.data.replication
        if replication is not None and replication.manages(topic.name):
            return replication.replica(topic.name, index)
        return None

    def hw(self, topic, index: int) -> int:
        replica = self._replica(topic, index)
        if replica is not None:
            return replica.high_watermark
        return high_watermark(topic, topic.partitions[index])

    def leader_epoch(self, topic, index: int) -> int:
        replica = self._replica(topic, index)
        return replica.leader_epoch if replica is not None else 0

    def in_flight(self) -> list[tuple[tuple, tuple[int, int, int]]]:
        """Every share partition led here: (key, (records in its window, runs,
        records acquired now))."""
        return [(key, sp.in_flight()) for key, sp in list(self.partitions.items())]

    # ------------------------------------------------------------ acquire
    def acquire(self, group_id: str, member: str, topic, index: int, sp: SharePartition,
                max_records: int, max_bytes: int, batch_size: int, now: int,
                strict: bool = False) -> Acquired | None:
        """Read from the next fetch offset and acquire for `member`: the
        acquired ranges and the Records bytes that hold them (None: nothing)."""
        key = (group_id, topic.topic_id, index)
        plog = topic.partitions[index]
        sp.on_log_start(plog.log_start_offset)
        if not sp.can_acquire():
            self._persist(key)
            return None
        offset = sp.next_fetch_offset()
        read_end = self.hw(topic, index)
        aborted: list[Aborted] = []
        committed = self.read_committed(group_id) and not topic.internal
        if committed:
            state = self.data.txn_state(plog)
            read_end = state.last_stable_offset(read_end)
        if offset >= read_end:
            self._persist(key)
            return None
        try:
            data = plog.read(offset, max(min(max_bytes, READ_BYTES), 0), min_one=True)
        except OffsetOutOfRange:
            sp.on_log_start(plog.log_start_offset)
            self._persist(key)
            return None
        if committed:
            aborted = [Aborted(a.producer_id, a.first_offset, a.last_offset)
                       for a in state.aborted_between(offset, read_end)]
        read = read_batches(data, read_end, aborted)
        got = sp.acquire(member, max_records, read.batches, now, self.lock_ms(group_id),
                         batch_size, strict)
        for timer in got.timers:
            self._arm(key, timer.lock, timer.deadline_ms, now)
        self._persist(key)       # archived offsets (compaction, aborts) are state changes
        if not got.ranges:
            return None
        got.records = records_for(read, got.ranges)
        return got

    # -------------------------------------------------------- acknowledge
    def acknowledge(self, group_id: str, member: str, topic_id: bytes, index: int,
                    sp: SharePartition, batches: list[dict]) -> "asyncio.Future | int":
        """Apply the acknowledgements: an error code at once, or a future of
        the code, done once the change is durable."""
        key = (group_id, topic_id, index)
        now = self.clock.ms()
        res = sp.acknowledge(member, batches, now, self.lock_ms(group_id))
        for timer in res.timers:
            self._arm(key, timer.lock, timer.deadline_ms, now)
        if res.error_code != Err.NONE or res.ticket is None:
            return res.error_code
        fut = asyncio.get_running_loop().create_future()
        self._tickets[key + (res.ticket,)] = fut
        self._persist(key)
        return fut

    def release(self, group_id: str, member: str) -> None:
        """A member's share session ended: its ACQUIRED records on this node go back."""
        for key, sp in list(self.partitions.items()):
            if key[0] == group_id and sp.release_member(member):
                self._persist(key)
                self.data.appended.notify()

    # ------------------------------------------------------------- timers
    def _arm(self, key: tuple, lock: int, deadline: int, now: int) -> None:
        handle = self.clock.call_later(max(deadline - now, 0) / 1000.0, self._expire, key, lock,
                                       max(deadline, now))
        self._timers[key + (lock,)] = handle

    def _expire(self, key: tuple, lock: int, due: int | None = None) -> None:
        """Acquisition lock `lock` ran out (due: when, in ms; None after a
        stall's grace)."""
        self._timers.pop(key + (lock,), None)
        sp = self.partitions.get(key)
        if sp is None:
            return
        now = self.clock.ms()
        held = sp.locks.get(lock)
        if held is not None and now < held[1]:      # the loop's clock ran ahead of ours
            self._arm(key, lock, held[1], now)
            return
        if held is not None and due is not None and fired_after_a_stall(due, now):
            # a stall of this process: the acknowledgements queued meanwhile
            # are read first (stall_grace.py)
            self._timers[key + (lock,)] = self.clock.call_later(STALL_GRACE_S, self._expire,
                                                                key, lock, None)
            return
        if sp.expire(lock, now):
            self._persist(key)
            self.data.appended.notify()

    # --------------------------------------------------------- persisting
    def _persist(self, key: tuple) -> None:
        sp = self.partitions.get(key)
        if sp is None or self.persister is None:
            return
        write = sp.take_write()
        if write is not None:
            asyncio.ensure_future(self._write(key, sp, write))

    async def _write(self, key: tuple, sp: SharePartition, write) -> None:
        try:
            code = await self.persister.write(
                ShareKey(*key), sp.state_epoch, sp.leader_epoch, write.start_offset, write.batches,
                write.delivery_complete_count)
        except Exception:
            log.exception("writing the share state of %s failed", key)
            code = Err.UNKNOWN_SERVER_ERROR
        done = sp.write_done(write, code, self.clock.ms())
        answer = client_error(code)
        for ticket, _ in done.answers:
            fut = self._tickets.pop(key + (ticket,), None)
            if fut is not None and not fut.done():
                fut.set_result(answer)
        if done.changed:
            self.data.appended.notify()
        if answer in _DROP and self.partitions.get(key) is sp:
            self.drop(key, answer)
        if self.partitions.get(key) is not sp:     # dropped: what waited for a write fails
            self._abandon(key, sp, self._dropped.pop(sp, Err.NOT_LEADER_OR_FOLLOWER))
            return
        if code == Err.NONE:
            self._persist(key)
        elif key not in self._retries:
            self._retries.add(key)
            asyncio.get_running_loop().call_later(RETRY_S, self._retry, key)

    def _retry(self, key: tuple) -> None:
        self._retries.discard(key)
        self._persist(key)

    def drop(self, key: tuple, code: int = Err.NOT_LEADER_OR_FOLLOWER) -> None:
        """Forget a share partition (fenced, or its group or topic is gone):
        the next fetch loads it again.  Acknowledgements waiting for a write
        it will not send are answered `code` (a write out answers its own)."""
        sp = self.partitions.pop(key, None)
        for tkey in [k for k in self._timers if k[:3] == key]:
            self._timers.pop(tkey).cancel()
        if sp is not None:
            if sp.writing:
                self._dropped[sp] = code        # answered once its write is back
            else:
                self._abandon(key, sp, code)

    def _abandon(self, key: tuple, sp: SharePartition, code: int) -> None:
        for ticket in sp.abandon():
            fut = self._tickets.pop(key + (ticket,), None)
            if fut is not None and not fut.done():
                fut.set_result(code)

    def on_topics_changed(self) -> None:
        """The catalogue changed: share partitions of deleted topics go."""
        by_id = self.catalogue.by_id
        for key in [k for k in self.partitions if k[1] not in by_id]:
            self.drop(key, Err.UNKNOWN_TOPIC_OR_PARTITION)

    def on_roles_changed(self) -> None:
        """A replica here changed role (a cluster): the share partitions this
        node no longer leads at their epoch go, their acquisitions with them
        (not persisted, as in Kafka: the new leader reads the share
        coordinator's state, where they are Available)."""
        for key, sp in list(self.partitions.items()):
            topic = self.catalogue.by_id.get(key[1])
            replica = None if topic is None else self._replica(topic, key[2])
            if replica is not None and (not replica.is_leader
                                        or replica.leader_epoch != sp.leader_epoch):
                self.drop(key, Err.NOT_LEADER_OR_FOLLOWER)

    def close(self) -> None:
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
