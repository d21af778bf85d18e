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
"""
from __future__ import annotations

import asyncio
import logging
import time

from ..coordinator.txn_offsets import txn_marker
from ..protocol.errors import Err, ProtocolError
from ..protocol.records import build_batch, decode_batch
from ..txn.coordinator import Completion, TxnConfig, TxnCoordinator
from ..txn.records import TxnRecord, decode_key, decode_value, encode_key, encode_value
from .coordinator_runtime import LOADING
from .txn_batches import COORDINATOR_EPOCH

log = logging.getLogger("kcoord.txn")

TXN_TOPIC = "__transaction_state"
OFFSETS_TOPIC = "__consumer_offsets"
LOAD_CHUNK = 4 << 20
SHARD_WAIT_S = 0.05
COMPLETION_RETRY_S = 0.5


def wall_ms() -> int:
    return int(time.time() * 1000)


class TxnRuntime:
    def __init__(self, catalogue, config, data_plane, coordinator, group_sync,
                 producer_ids) -> None:
        self.catalogue = catalogue
        self.config = config
        self.data = data_plane
        self.coordinator = coordinator  # the group coordinator runtime (__consumer_offsets)
        self.sync = group_sync
        self.core = TxnCoordinator(TxnConfig.from_values(config.values), producer_ids.next_id)
        wanted = self.core.config.num_partitions
        topic = catalogue.get(TXN_TOPIC)
        if topic is None:
            topic = catalogue.create(TXN_TOPIC, wanted, {
                "cleanup.policy": "compact",
                "segment.bytes": str(config["transaction.state.log.segment.bytes"])})
        elif len(topic.partitions) != wanted:
            # Kafka refuses to load then; transactional ids would move partitions
            raise ValueError(f"transaction.state.log.num.partitions={wanted} but {TXN_TOPIC} "
                             f"has {len(topic.partitions)} partitions")
        self.logs = topic.partitions
        self.loaded = False
        self._completing: set[str] = set()
        self._tasks: set[asyncio.Task] = set()
        self._timers: list[asyncio.TimerHandle] = []
        self.records_loaded = 0
        data_plane.txn_verifier = self.verify_append

    # ------------------------------------------------------------- loading
    def start(self) -> None:
        self._spawn(self.load())

    async def load(self) -> None:
        start = time.monotonic()
        for plog in self.logs:
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
        self.loaded = True
        log.info("transaction state loaded: %d records, %d transactional ids in %.2fs",
                 self.records_loaded, len(self.core.txns), time.monotonic() - start)
        for completion in self.core.pending_completions():
            self._spawn(self._complete(completion))
        self._arm(self.config["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
                  self._abort_timed_out)
        self._arm(self.config["transaction.remove.expired.transaction.cleanup.interval.ms"],
                  self._expire_ids)

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
    async def write(self, records: list[TxnRecord]) -> None:
        """Replay now, append, and return once durable."""
        if not records:
            return
        self.core.replay_all(records)
        now = wall_ms()
        by_partition: dict[int, list] = {}
        for r in records:
            by_partition.setdefault(r.partition, []).append(
                (encode_key(r.transactional_id), encode_value(r.value), [], now))
        logs = []
        for partition, items in by_partition.items():
            plog = self.logs[partition]
            plog.append(build_batch(items, base_timestamp=now))
            logs.append(plog)
        await self.sync.sync(logs)

    async def write_and_complete(self, records: list[TxnRecord]) -> None:
        """Write; then finish every Prepare* the records started."""
        await self.write(records)
        waits = []
        for r in records:
            completion = self.core.completion(r.transactional_id)
            if completion is not None and r.transactional_id not in self._completing:
                waits.append(self._complete(completion))
        if waits:
            await asyncio.gather(*waits)

    # ---------------------------------------------------------- completion
    async def _complete(self, c: Completion) -> None:
        """Markers to every partition of the transaction, durable, then Complete*."""
        tid = c.transactional_id
        if tid in self._completing:
            return
        self._completing.add(tid)
        try:
            while True:
                try:
                    await self._write_markers(c)
                    break
                except Exception:
                    log.exception("markers of %s failed; retrying", tid)
                    await asyncio.sleep(COMPLETION_RETRY_S)
            current = self.core.completion(tid)
            if current is not None and (current.producer_id, current.producer_epoch,
                                        current.commit) == (c.producer_id, c.producer_epoch,
                                                            c.commit):
                # Complete* is not waited for: the markers are durable, and a
                # Prepare* found on load is completed again (the next write of
                # this id, on the same log, makes it durable anyway)
                self._spawn(self.write(self.core.complete(tid, wall_ms())))
        finally:
            self._completing.discard(tid)

    async def _write_markers(self, c: Completion) -> None:
        data_logs = []
        shard_writes = []
        for topic, index in c.partitions:
            if topic == OFFSETS_TOPIC:
                if not 0 <= index < len(self.coordinator.shards):
                    continue
                shard = self.coordinator.shards[index]
                while shard.state is LOADING:  # its replay must see every batch before the marker
                    await asyncio.sleep(SHARD_WAIT_S)
                if not shard.loaded:
                    raise RuntimeError(f"{OFFSETS_TOPIC}-{index} is not active")  # retried
                shard_writes.append(shard.write_records(
                    [txn_marker(c.producer_id, c.producer_epoch, c.commit)]))
                continue
            code, plog = self.data.write_marker(topic, index, c.producer_id, c.producer_epoch,
                                                c.commit, COORDINATOR_EPOCH)
            if plog is not None:
                data_logs.append(plog)
            elif code not in (Err.UNKNOWN_TOPIC_OR_PARTITION, Err.NONE):
                # a newer epoch already wrote there: this transaction is superseded
                log.warning("marker for %s on %s-%d refused (%d)", c.transactional_id, topic,
                            index, code)
        if shard_writes:
            self.coordinator.commit.hurry()  # the transaction waits on it: no linger
        if data_logs:
            await self.sync.sync(data_logs)
        for fut in shard_writes:
            await fut

    # -------------------------------------------------------------- timers
    def _arm(self, interval_ms: int, fn) -> None:
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self._timers.remove(handle_box[0])
            self._spawn(fn())
            self._arm(interval_ms, fn)
        handle_box = [loop.call_later(interval_ms / 1000.0, fire)]
        self._timers.append(handle_box[0])

    async def _abort_timed_out(self) -> None:
        records = self.core.abort_timed_out(wall_ms())
        if records:
            log.info("aborting %d timed-out transactions", len(records))
            await self.write_and_complete(records)

    async def _expire_ids(self) -> None:
        records = self.core.expire_ids(wall_ms())
        if records:
            log.info("expiring %d transactional ids", len(records))
            await self.write(records)

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def stop(self) -> None:
        for handle in self._timers:
            handle.cancel()
        self._timers.clear()
        for task in list(self._tasks):
            task.cancel()

    # ----------------------------------------------------- data-plane check
    def verify_append(self, producer_id: int, epoch: int, topic: str, partition: int) -> int:
        if not self.loaded:
            return Err.NOT_LEADER_OR_FOLLOWER  # retriable: the producer tries again
        return self.core.in_transaction(producer_id, epoch, topic, partition)
