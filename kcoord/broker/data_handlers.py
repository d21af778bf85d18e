"""Produce, Fetch and ListOffsets on the partition logs."""
from __future__ import annotations

import asyncio
import logging
import time
import weakref

from ..log import OffsetOutOfRange, step_trace
from ..log.fsync_batcher import FsyncBatcher
from ..protocol.api import API_KEYS, APIS, error_item, error_response, serves
from ..protocol.errors import CorruptRecordError, Err
from ..protocol.records import iter_batches, set_log_append_time, validate_batch, LOG_OVERHEAD
from .append_notifier import AppendNotifier
from .fetch_sessions import REVISIT_MS, FetchSessions
from .batch_timestamps import InvalidTimestamps, check_batch, timestamp_bounds
from .catalogue import Catalogue
from .txn_state import PartitionTxnState, control_batch
from .txn_verify import unverified

PRODUCE = API_KEYS["Produce"]
PRODUCE_MAX = APIS[PRODUCE].max_version
PARTITION = ("topic_data", "partition_data")

log = logging.getLogger("kcoord.broker")

NO_RESPONSE_ACKS = 0
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL = -1, -2, -3, -4


def now_ms() -> int:
    return int(time.time() * 1000)


class _Parked:
    """A parked fetch's deadline: `expire()` (its timer) marks it expired
    and resolves the waiter it is parked on, as a wake-up of all would."""

    __slots__ = ("waiter", "expired")

    def __init__(self) -> None:
        self.waiter: asyncio.Future | None = None
        self.expired = False

    def expire(self) -> None:
        self.expired = True
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


def high_watermark(topic, plog) -> int:
    """What readers may see.  The coordinator's log (an internal topic) shows
    only what is durable: its writer acknowledges a record after the fsync,
    and a record whose fsync failed may still be dropped.  A user topic
    shows its whole log (one node: nothing to wait for)."""
    return plog.durable_end_offset if topic.internal else plog.log_end_offset


def below(data, hw: int):
    """The whole batches of `data` that end before offset `hw`."""
    end = 0
    for pos, header in iter_batches(data):
        if header.base_offset + header.last_offset_delta >= hw:
            break
        end = pos + LOG_OVERHEAD + header.batch_length
    return data[:end]


class DataPlane:
    def __init__(self, catalogue: Catalogue, config, fsync: FsyncBatcher, clock=None) -> None:
        self.catalogue = catalogue
        # the server's one clock (its ms()): append and marker times, timestamp bounds
        self.now_ms = clock.ms if clock is not None else now_ms
        self.config = config
        self.sync = fsync
        self.appended = AppendNotifier()
        self.stopping = False  # the server is stopping: long polls answer now
        # per partition log: open transactions, LSO, aborted transactions (built on first use)
        self._txn_states: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        # (producer id, epoch, topic, partition) -> error code: is the partition in
        # that producer's ongoing transaction?  Set by the transaction coordinator.
        self.txn_verifier = None
        # in a cluster, the transaction runtime: needs_remote_check(tid) and
        # async verify_remote(tid, pid, epoch, topic, partition) -> code;
        # answers kept for the produce they were asked for (txn_verify.py)
        self.txn_remote = None
        self._verified: dict[tuple, int] = {}
        # kcoord.cluster's ReplicaManager in a cluster: user topics are then
        # replicated (leader-only produce and fetch, acks=-1 at the high
        # watermark, follower fetches); None on a single node.
        self.replication = None
        self.fetch_sessions = FetchSessions()  # followers' fetch sessions (KIP-227)
        self.appended.listener = self._session_news

    def txn_state(self, plog) -> PartitionTxnState:
        state = self._txn_states.get(plog)
        if state is None:
            state = self._txn_states[plog] = PartitionTxnState.scan(plog)
        return state

    def write_marker(self, topic_name: str, index: int, producer_id: int, epoch: int,
                     commit: bool, coordinator_epoch: int):
        """Append an end-transaction marker to a data partition.  -> (error
        code, the log to fsync or None).  A deleted partition is skipped."""
        topic = self.catalogue.get(topic_name)
        if topic is None or not 0 <= index < len(topic.partitions):
            return Err.UNKNOWN_TOPIC_OR_PARTITION, None
        plog = topic.partitions[index]
        state = self.txn_state(plog)
        code = state.check_marker(producer_id, epoch, coordinator_epoch)
        if code:
            return code, None
        now = self.now_ms()
        offset, _ = plog.append(control_batch(producer_id, epoch, commit, coordinator_epoch, now))
        aborted = state.on_marker(producer_id, epoch, 1 if commit else 0, coordinator_epoch,
                                  offset, now)
        if aborted is not None:
            state.index_abort(plog.active.base_offset, aborted)
        self.appended.notify(plog)
        return Err.NONE, plog

    async def write_marker_durable(self, topic_name: str, index: int, producer_id: int,
                                   epoch: int, commit: bool, coordinator_epoch: int) -> int:
        """A marker written and durable (a replicated partition: led here and
        past the high watermark), for WriteTxnMarkers: -> the error code."""
        topic = self.catalogue.get(topic_name)
        if topic is None or not 0 <= index < len(topic.partitions) or topic.internal:
            return Err.UNKNOWN_TOPIC_OR_PARTITION
        replica = self._replicated(topic, index, write=True)
        if isinstance(replica, int):
            return replica
        code, plog = self.write_marker(topic_name, index, producer_id, epoch, commit,
                                       coordinator_epoch)
        if plog is None:
            return code
        end = plog.log_end_offset
        trace_id = step_trace.sync_started([plog])
        await self.sync.sync([plog])
        if replica is None:
            return Err.NONE
        step_trace.write_event("flushed", trace_id)
        self.replication.on_flushed([plog])
        self.appended.notify(plog)
        code = await self.replication.await_high_watermark(topic_name, index, end)
        step_trace.write_event("replicated", trace_id)
        return code

    def forget_txn_state(self, plog) -> None:
        """The log changed under its producer state (leadership moved, a
        truncation): rebuilt from the log on next use."""
        self._txn_states.pop(plog, None)

    def in_sync_replicas(self, topic, index: int) -> int:
        if self.replication is not None and self.replication.manages(topic.name):
            replica = self.replication.replica(topic.name, index)
            return len(replica.state.isr) if replica is not None and replica.is_leader else 0
        return 1  # one node: the leader is the whole ISR

    def _replicated(self, topic, index: int, *, write: bool = False):
        """The leader replica of a replicated partition, None when the
        partition is not replicated (single node, internal topic), or an
        error code (this node does not lead it; to `write`: not yet, its
        new epoch is not durable)."""
        if self.replication is None or not self.replication.manages(topic.name):
            return None
        replica = self.replication.replica(topic.name, index)
        if replica is None or not (replica.accepts_writes if write else replica.is_leader):
            return Err.NOT_LEADER_OR_FOLLOWER
        return replica

    # ------------------------------------------------------------- Produce
    @serves("Produce")
    def produce(self, ctx, req: dict):
        if self.txn_remote is not None:
            pending = [k for k in unverified(self, req) if k[1:] not in self._verified]
            if pending:  # KIP-890: ask the coordinator node first
                return self._produce_verified(ctx, req, pending)
        acks = req["acks"]
        if acks not in (0, 1, -1):
            return error_response(PRODUCE, ctx.api_version, req, Err.INVALID_REQUIRED_ACKS)
        touched = []
        responses = []
        replicated = []
        for tdata in req["topic_data"]:
            parts = []
            for pdata in tdata["partition_data"]:
                result, plog = self._append(tdata["name"], pdata["index"], pdata["records"],
                                            acks, ctx.api_version)
                parts.append(result)
                if plog is not None:
                    touched.append(plog)
                    if self.replication is not None and result.get("replicated"):
                        replicated.append((tdata["name"], result, plog.log_end_offset))
                result.pop("replicated", None)
            responses.append({"name": tdata["name"], "partition_responses": parts})
        self.appended.notify_logs(touched)
        response = {"responses": responses, "throttle_time_ms": 0}
        if self.replication is not None:
            self._add_endpoints(response, (p for t in responses for p in t["partition_responses"]))
            self._on_listener(response, ctx.listener)
        if replicated:
            done = self._replicated_ack(touched, replicated, response, acks)
            if acks != -1:
                # acks=1 is answered at append; the fsync still moves the high watermark
                asyncio.ensure_future(done)
                return None if acks == NO_RESPONSE_ACKS else response
            return done
        if acks == NO_RESPONSE_ACKS:
            return None  # Kafka never answers acks=0
        if acks == -1 and touched:
            return self._after_sync(touched, response)
        return response

    def _after_sync(self, logs, response) -> asyncio.Future:
        """The response, once `logs` are on disk: a future the fsync round
        settles itself (no task: a lone producer's every acks=-1 Produce
        waits on this, so each loop iteration saved is latency saved)."""
        fut = asyncio.get_running_loop().create_future()

        def synced(error: BaseException | None) -> None:
            if fut.done():
                return
            if error is None:
                fut.set_result(response)
            else:  # a failed fsync never acknowledges what it covered
                fut.set_exception(error)
        self.sync.sync_call(logs, synced)
        return fut

    async def _produce_verified(self, ctx, req: dict, pending: list):
        codes = await asyncio.gather(*(self.txn_remote.verify_remote(*k) for k in pending))
        for key, code in zip(pending, codes):
            self._verified[key[1:]] = code
        try:
            result = self.produce(ctx, req)
        finally:
            for key in pending:
                self._verified.pop(key[1:], None)
        if result is not None and not isinstance(result, dict):
            result = await result
        return result

    async def _replicated_ack(self, logs, replicated, response, acks: int):
        """fsync, then (acks=-1) wait for the high watermark to pass each
        write: answered once every in-sync replica has it on disk."""
        trace_id = step_trace.sync_started(logs)
        await self.sync.sync(logs)
        step_trace.write_event("flushed", trace_id)
        self.replication.on_flushed(logs)
        self.appended.notify_logs(logs)   # the high watermark may have moved
        if acks == -1:
            waits = [(result, self.replication.await_high_watermark(name, result["index"], end))
                     for name, result, end in replicated]
            for result, fut in waits:
                error = await fut
                if error != Err.NONE:
                    result["error_code"] = error
            step_trace.write_event("replicated", trace_id)
        return response

    @staticmethod
    def _part_error(index: int, code: int, message: str | None = None) -> dict:
        # every field of the newest version: the encoder drops what a version lacks
        return error_item(PRODUCE, PRODUCE_MAX, PARTITION, {"index": index}, code, message)

    def _append(self, topic_name: str, index: int, records, acks: int = 1, version: int = 3):
        topic = self.catalogue.get(topic_name)
        if topic is None or not 0 <= index < len(topic.partitions):
            return self._part_error(index, Err.UNKNOWN_TOPIC_OR_PARTITION), None
        if topic.internal:  # only the coordinator writes its log (Kafka's ReplicaManager)
            return self._part_error(index, Err.INVALID_TOPIC_EXCEPTION,
                                    f"Cannot append to internal topic {topic_name}"), None
        plog = topic.partitions[index]
        replica = self._replicated(topic, index, write=True)
        if isinstance(replica, int):
            entry = self._part_error(index, replica)
            self._point_to_leader(entry, topic.name, index)
            return entry, None
        if acks == -1 and self.in_sync_replicas(topic, index) < int(topic.configs.get(
                "min.insync.replicas", self.config.values.get("min.insync.replicas", 1))):
            return self._part_error(index, Err.NOT_ENOUGH_REPLICAS,
                                    "fewer in-sync replicas than min.insync.replicas"), None
        if not records:
            return self._part_error(index, Err.CORRUPT_MESSAGE, "empty record set"), None
        max_bytes = int(topic.configs.get("max.message.bytes", self.config["message.max.bytes"]))
        headers = []
        log_append = topic.configs.get("message.timestamp.type") == "LogAppendTime"
        if not log_append:  # CreateTime: LogValidator's checks of every record's timestamp
            before_ms, after_ms = timestamp_bounds(topic.configs, self.catalogue.defaults)
            now = self.now_ms()
        try:
            count = 0
            end = 0
            for pos, header in iter_batches(records):
                validate_batch(records, pos)
                if LOG_OVERHEAD + header.batch_length > max_bytes:
                    return self._part_error(index, Err.MESSAGE_TOO_LARGE,
                                            f"batch larger than {max_bytes} bytes"), None
                if not log_append:
                    records, header = check_batch(records, pos, header, now, before_ms, after_ms)
                headers.append(header)
                end = pos + LOG_OVERHEAD + header.batch_length
                count += 1
            if count == 0 or end != len(records):
                raise CorruptRecordError("record set holds a partial batch")
        except CorruptRecordError as exc:
            return self._part_error(index, Err.CORRUPT_MESSAGE, str(exc)), None
        except InvalidTimestamps as exc:
            entry = self._part_error(index, Err.INVALID_TIMESTAMP, str(exc))
            entry["record_errors"] = [{"batch_index": i, "batch_index_error_message": message}
                                      for i, message in exc.errors]
            return entry, None
        if len(headers) == 1 and headers[0].base_sequence >= 0:
            # an idempotent producer's retry of a batch already written: its offset again
            dup = self.txn_state(plog).duplicate_of(headers[0])
            if dup is not None:
                # (the log is returned so acks=-1 still waits for it to be durable
                # and, replicated, for the high watermark: the first send may be
                # in this log only, as Kafka's requiredOffset waits for it too)
                return {"index": index, "error_code": Err.NONE, "base_offset": dup,
                        "log_append_time_ms": -1, "log_start_offset": plog.log_start_offset,
                        "error_message": None, "replicated": replica is not None}, plog
        code = self._check_producers(topic_name, index, plog, headers, version)
        if code:
            return self._part_error(index, code), None
        append_time = -1
        if log_append:
            append_time = self.now_ms()
            records = bytearray(records)
            for pos, _ in iter_batches(records):
                set_log_append_time(records, pos, append_time)
        if replica is not None:
            base, _last = plog.append(records, leader_epoch=replica.leader_epoch)
        else:
            base, _last = plog.append(records)
        if any(h.producer_id >= 0 for h in headers):
            state = self.txn_state(plog)
            offset = base
            for header in headers:
                state.on_data(header, offset)
                offset += header.last_offset_delta + 1
        return {"index": index, "error_code": Err.NONE, "base_offset": base,
                "log_append_time_ms": append_time, "log_start_offset": plog.log_start_offset,
                "error_message": None, "replicated": replica is not None}, plog

    def _check_producers(self, topic_name: str, index: int, plog, headers, version: int) -> int:
        """Producer-state checks of a Produce: no client control batches, no
        stale epochs, no plain batch inside an open transaction, and a
        transaction's first batch on a partition only if the partition was
        added to it (KIP-890 part 1)."""
        if all(h.producer_id < 0 and not h.is_control for h in headers):
            return Err.NONE
        state = self.txn_state(plog)
        previous: dict = {}
        for h in headers:
            code = state.check_append(h, previous.get(h.producer_id))
            previous[h.producer_id] = h
            if code:
                return code
            if h.is_transactional and h.producer_id not in state.ongoing:
                verify = self.txn_verifier
                code = self._verified.get((h.producer_id, h.producer_epoch, topic_name, index))
                if code is None:
                    code = (Err.INVALID_TXN_STATE if verify is None
                            else verify(h.producer_id, h.producer_epoch, topic_name, index))
                if code == Err.INVALID_TXN_STATE and version >= 11:
                    code = Err.TRANSACTION_ABORTABLE
                if code:
                    return code
        return Err.NONE

    # --------------------------------------------------------------- Fetch
    @serves("Fetch")
    async def fetch(self, ctx, req: dict) -> dict:
        follower = max(req.get("replica_id", -1), (req.get("replica_state") or {}).get(
            "replica_id", -1))
        if follower < 0 or self.replication is None or ctx.api_version < 7:
            return await self._long_poll(ctx, req)
        # a follower's fetch: in its session, only what changed travels
        by_id = ctx.api_version >= 13
        error, session, full, asked = self.fetch_sessions.resolve(req, follower, by_id,
                                                                  whole=False)
        if error:
            return {"throttle_time_ms": 0, "error_code": error, "session_id": 0,
                    "responses": []}
        if session is not None and full is None:   # incremental: what changed only
            response = await self._session_poll(ctx, session, req, asked)
            return self.fetch_sessions.respond(session, response, False, asked, by_id)
        response = await self._long_poll(ctx, full)
        return self.fetch_sessions.respond(session, response, True, asked, by_id)

    def _session_news(self, plog) -> None:
        """The append notifier's news, for the followers' fetch sessions:
        a partition a session left out as idle is read again, its
        followers' caught-up times settled (Replica.on_log_news) before
        the fsync this news may precede moves the leader's end."""
        sessions = self.fetch_sessions.sessions()
        if not sessions:
            return
        if plog is None:
            for session in sessions:
                session.on_all_news()
            return
        settled = None
        for session in sessions:
            replica = session.on_news(plog)
            if replica is not None and replica is not settled:
                replica.on_log_news()
                settled = replica

    async def _session_poll(self, ctx, session, req: dict, asked: set) -> dict:
        """An incremental fetch of a follower's session: reads only the
        partitions it has to look at (FetchSession.look), parks until news
        on any log of the session (its waiter, woken by _session_news)."""
        loop = asyncio.get_running_loop()
        version = ctx.api_version
        idle = (session, asked)

        def arm() -> asyncio.Future:
            waiter = session.waiter = loop.create_future()
            return waiter

        def read(watch: list):
            now = self.replication.now_ms()
            session.ms = now     # every partition left out is fetched now too
            if now >= session.revisit_ms:
                session.revisit()
                session.revisit_ms = now + REVISIT_MS
            session.news = False  # from here on, news on an idle partition reads again
            out = self._fetch_once(version, session.look_request(req), watch, idle)
            session.watched = {id(entry[1]): entry for entry in watch}
            return out

        def disarm(_waiter) -> None:
            session.waiter = None   # resolved by the session's news, never awaited

        return await self._park_and_read(ctx, req, arm, read,
                                         lambda watch: session.news or self._has_news(watch),
                                         disarm)

    async def _long_poll(self, ctx, req: dict) -> dict:
        version = ctx.api_version
        logs = self._fetched_logs(version, req)
        return await self._park_and_read(
            ctx, req, lambda: self.appended.wait(logs),
            lambda watch: self._fetch_once(version, req, watch), self._has_news,
            lambda waiter: waiter.cancel())  # off the notifier's lists

    async def _park_and_read(self, ctx, req: dict, arm, read, news, disarm) -> dict:
        """Kafka's DelayedFetch, for both kinds of fetch: `read(watch)` (-> the
        response, bytes read, any error; `watch` filled with what it read);
        answer when that is enough (min_bytes, an error), past the deadline or
        when the server stops; else park on `arm()`'s future and read again
        only when `news(watch)` says a partition has more to read than it saw
        (DelayedFetch.tryComplete), not on every wake-up; a wake-up of all (a
        role change) or the deadline reads again at once.  Armed before each
        read and each look, so no news in between is missed; `disarm(waiter)`
        lets go of a future no longer waited on."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(req["max_wait_ms"], 0) / 1000.0
        min_bytes = req["min_bytes"]
        # One timer for the whole poll: at the deadline it marks the poll
        # expired and resolves the waiter parked on (None, as a wake-up of
        # all).  The waiter is awaited directly, so news wakes this task in
        # the loop's next turn (asyncio.wait_for would add a future, a
        # callback and a turn to every replicated write's path: followers'
        # fetches park here).  The mark, not the clock, says the deadline
        # passed: a timer may fire a little before loop.time() reaches it
        # (uvloop counts whole milliseconds).
        parked = _Parked()
        timer = None
        try:
            while True:
                waiter = arm()
                watch: list = []
                response, size, errors = read(watch)
                self._on_listener(response, ctx.listener)
                if (size >= min_bytes or errors or parked.expired
                        or deadline <= loop.time() or self.stopping):
                    disarm(waiter)
                    return response
                if timer is None:
                    timer = loop.call_at(deadline, parked.expire)
                while True:
                    parked.waiter = waiter
                    woken = await waiter
                    if self.stopping:
                        # woken by the stop: answer what was read; a poll whose client
                        # left may only run once the logs are closed, so read no more
                        disarm(waiter)
                        return response
                    if woken is None:  # the deadline, or a wake-up of all (a role change)
                        break
                    waiter = arm()  # re-armed before looking
                    if parked.expired or news(watch):
                        disarm(waiter)
                        break       # read again, armed anew
        finally:
            if timer is not None:
                timer.cancel()

    def _fetched_logs(self, version: int, req: dict) -> list:
        """The logs a Fetch reads (those that exist), for its wake-ups."""
        by_id = version >= 13
        catalogue = self.catalogue
        logs = []
        for treq in req["topics"]:
            topic = (catalogue.by_id.get(treq["topic_id"]) if by_id
                     else catalogue.get(treq["topic"]))
            if topic is None:
                continue
            partitions = topic.partitions
            for preq in treq["partitions"]:
                index = preq["partition"]
                if 0 <= index < len(partitions):
                    logs.append(partitions[index])
        return logs

    @staticmethod
    def _has_news(watch: list) -> bool:
        """Has a partition read by a parked fetch more to read than it saw?"""
        for topic, plog, replica, follower, seen in watch:
            if replica is None:
                end = high_watermark(topic, plog)
            elif follower:
                end = plog.log_end_offset    # followers read the unfsynced tail too
            else:
                end = replica.high_watermark
            if end > seen or (replica is not None and not replica.is_leader):
                return True
        return False

    def stop_waiting(self) -> None:
        """Answer every long-polling fetch now (the server is stopping)."""
        self.stopping = True
        self.appended.notify()

    def _fetch_once(self, version: int, req: dict, watch: list | None = None, idle=None):
        """-> (response, bytes read, any error).  `idle`: (a follower's fetch
        session, the partitions its request listed) to leave out the others
        that have nothing new for it."""
        # the clock serve_follower_fetch records follower fetches with
        now = self.replication.now_ms() if idle is not None else 0
        budget = req["max_bytes"] if req["max_bytes"] > 0 else 0x7FFFFFFF
        total = 0
        errors = False
        responses = []
        by_id = version >= 13
        read_committed = req.get("isolation_level", 0) == 1
        follower = max(req.get("replica_id", -1), (req.get("replica_state") or {}).get(
            "replica_id", -1))
        for treq in req["topics"]:
            topic = (self.catalogue.by_id.get(treq["topic_id"]) if by_id
                     else self.catalogue.get(treq["topic"]))
            parts = []
            for preq in treq["partitions"]:
                index = preq["partition"]
                if (idle is not None and topic is not None and 0 <= index < len(topic.partitions)
                        and self._idle_in_session(
                            idle, (treq["topic_id"] if by_id else treq["topic"], index), topic,
                            preq, follower, now)):
                    continue
                entry = {"partition_index": index, "error_code": Err.NONE, "high_watermark": -1,
                         "last_stable_offset": -1, "log_start_offset": -1,
                         "aborted_transactions": None, "preferred_read_replica": -1,
                         "records": b""}
                parts.append(entry)
                if topic is None or not 0 <= index < len(topic.partitions):
                    entry["error_code"] = (Err.UNKNOWN_TOPIC_ID if by_id
                                           else Err.UNKNOWN_TOPIC_OR_PARTITION)
                    errors = True
                    continue
                plog = topic.partitions[index]
                replica = None
                if self.replication is not None and self.replication.manages(topic.name):
                    hw, read_end, replica = self._replicated_read(topic, index, preq, follower,
                                                                  entry)
                    if hw is None:
                        errors = True
                        continue
                else:
                    hw = read_end = high_watermark(topic, plog)
                if watch is not None:  # what a parked fetch wakes up for
                    watch.append((topic, plog, replica, follower >= 0, read_end))
                state = self._fetch_txn_state(topic, plog, read_committed)
                lso = hw if state is None else state.last_stable_offset(hw)
                entry["high_watermark"] = hw
                entry["last_stable_offset"] = lso
                entry["log_start_offset"] = plog.log_start_offset
                limit = min(preq["partition_max_bytes"], budget - total)
                fetch_offset = preq["fetch_offset"]
                try:
                    if fetch_offset == read_end and fetch_offset >= plog.log_start_offset:
                        data = b""    # caught up (most partitions of a follower's fetch)
                    else:
                        data = plog.read(fetch_offset, max(limit, 0), min_one=(total == 0))
                except OffsetOutOfRange:
                    entry["error_code"] = Err.OFFSET_OUT_OF_RANGE
                    errors = True
                    continue
                if read_end < plog.log_end_offset:
                    data = below(data, read_end)
                if read_committed and state is not None:
                    data, upper = self._below(data, lso)
                    entry["aborted_transactions"] = [
                        {"producer_id": a.producer_id, "first_offset": a.first_offset}
                        for a in state.aborted_between(fetch_offset, upper)]
                entry["records"] = data
                total += len(data)
            responses.append({"topic": treq.get("topic", ""), "topic_id": treq.get("topic_id"),
                              "partitions": parts})
        response = {"throttle_time_ms": 0, "error_code": Err.NONE, "session_id": 0,
                    "responses": responses}
        if self.replication is not None:
            self._add_endpoints(response, (p for t in responses for p in t["partitions"]))
        return response, total, errors

    def _idle_in_session(self, idle, key, topic, preq: dict, follower: int, now: int) -> bool:
        """A partition of a follower's fetch session that its request did not
        list and that has nothing new for it (no records past its position,
        the high watermark and log start it knows): its fetch recorded, and
        left out of this answer and of the session's fetches until news on
        its log (FetchSession.set_idle) -> True."""
        session, asked = idle
        if key in asked:
            return False
        last = session.sent.get(key)
        plog = topic.partitions[key[1]]
        if last is None or last[2] != plog.log_start_offset:
            return False
        replica = self.replication.replica(topic.name, key[1])
        if replica is None or not replica.follower_idle(
                follower, preq["fetch_offset"], preq.get("current_leader_epoch", -1), last[0],
                now, session):
            return False
        session.set_idle(key, plog, replica)
        return True

    def _fetch_txn_state(self, topic, plog, read_committed: bool):
        """The partition's transactional state for a fetch, or None.  Internal
        topics have none here: the coordinators write them directly (their
        readers resolve markers themselves).  read_uncommitted does not make
        a first scan of the log just to report the LSO."""
        if topic.internal:
            return None
        if read_committed:
            return self.txn_state(plog)
        return self._txn_states.get(plog)

    @staticmethod
    def _below(data, lso: int):
        """The whole batches of `data` that end below the LSO (read_committed),
        and the offset just past them (the LSO when there are none)."""
        cut = 0
        upper = lso
        for pos, header in iter_batches(data):
            if header.next_offset > lso:
                break
            cut = pos + header.size
            upper = header.next_offset
        if cut == len(data):
            return data, upper
        return data[:cut], upper

    def _point_to_leader(self, entry: dict, name: str, index: int) -> None:
        """KIP-951: a NOT_LEADER_OR_FOLLOWER answer names the current leader
        (Produce v10+, Fetch v12+ tagged fields; ignored by older versions)."""
        hint = self.replication.leader_hint(name, index)
        if hint is not None:
            entry["current_leader"] = {"leader_id": hint[0], "leader_epoch": hint[1]}
            entry["_leader_address"] = (hint[0], hint[2])

    def _on_listener(self, response: dict, listener: str) -> None:
        """node_endpoints at the listener the request came in on (a cluster
        registers every listener; a node without it is left out, as Kafka does)."""
        endpoint_of = getattr(self.replication, "endpoint_of", None)
        rows = response.get("node_endpoints")
        if not rows or endpoint_of is None:
            return
        kept = []
        for row in rows:
            found = endpoint_of(row["node_id"], listener)
            if found is not None:
                row["host"], row["port"] = found
                kept.append(row)
        response["node_endpoints"] = kept

    @staticmethod
    def _add_endpoints(response: dict, entries) -> None:
        """The endpoints of the leaders named in current_leader (Produce v10+,
        Fetch v16+ node_endpoints)."""
        nodes = {}
        for entry in entries:
            found = entry.pop("_leader_address", None)
            if found is not None and found[1] is not None:
                nodes[found[0]] = found[1]
        if nodes:
            response["node_endpoints"] = [
                {"node_id": n, "host": h, "port": p, "rack": None}
                for n, (h, p) in sorted(nodes.items())]

    def _replicated_read(self, topic, index: int, preq: dict, follower: int, entry: dict):
        """(high watermark, how far this reader may read, the replica) of a
        replicated partition; Nones with entry's error set when refused.  A
        follower's fetch records its position on the leader (and may move
        the high watermark); consumers read up to the high watermark."""
        replica = self.replication.replica(topic.name, index)
        current = preq.get("current_leader_epoch", -1)
        if follower >= 0:
            served = self.replication.serve_follower_fetch(topic.name, index, follower,
                                                           preq["fetch_offset"], current)
            if served.error != Err.NONE:
                entry["error_code"] = served.error
                return None, None, None
            return served.high_watermark, served.read_end, replica
        error = Err.NOT_LEADER_OR_FOLLOWER if replica is None else replica.check_current_epoch(
            current)
        if error == Err.NONE and not replica.is_leader:
            error = Err.NOT_LEADER_OR_FOLLOWER
        if error != Err.NONE:
            entry["error_code"] = error
            self._point_to_leader(entry, topic.name, index)
            return None, None, None
        return replica.high_watermark, replica.high_watermark, replica

    # ---------------------------------------------------------- ListOffsets
    @serves("ListOffsets")
    def list_offsets(self, _ctx, req: dict) -> dict:
        topics = []
        for treq in req["topics"]:
            topic = self.catalogue.get(treq["name"])
            parts = []
            for preq in treq["partitions"]:
                index = preq["partition_index"]
                entry = {"partition_index": index, "error_code": Err.NONE, "timestamp": -1,
                         "offset": -1, "leader_epoch": -1}
                parts.append(entry)
                if topic is None or not 0 <= index < len(topic.partitions):
                    entry["error_code"] = Err.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                plog = topic.partitions[index]
                replica = self._replicated(topic, index)
                if isinstance(replica, int):
                    entry["error_code"] = replica
                    continue
                if replica is not None:
                    error = replica.check_current_epoch(preq.get("current_leader_epoch", -1))
                    if error != Err.NONE:
                        entry["error_code"] = error
                        continue
                ts = preq["timestamp"]
                bound = (replica.high_watermark if replica is not None
                         else high_watermark(topic, plog))
                if req.get("isolation_level", 0) == 1 and not topic.internal:
                    bound = self.txn_state(plog).last_stable_offset(bound)  # up to the LSO
                if ts == LATEST:
                    entry["offset"] = bound
                elif ts in (EARLIEST, EARLIEST_LOCAL):
                    entry["offset"] = plog.log_start_offset
                elif ts == MAX_TIMESTAMP:
                    found = plog.max_timestamp_offset()
                    if found is not None:
                        entry["offset"], entry["timestamp"] = found
                elif ts >= 0:
                    found = plog.offset_for_timestamp(ts)
                    if found is not None:
                        # records below the log start (DeleteRecords) are gone
                        entry["offset"] = max(found[0], plog.log_start_offset)
                        entry["timestamp"] = found[1]
                else:
                    entry["error_code"] = Err.INVALID_REQUEST
                if (ts >= 0 or ts == MAX_TIMESTAMP) and entry["offset"] >= bound:
                    entry["offset"] = entry["timestamp"] = -1  # not stable yet
                if entry["offset"] >= 0:
                    entry["leader_epoch"] = replica.leader_epoch if replica is not None else 0
            topics.append({"name": treq["name"], "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}
