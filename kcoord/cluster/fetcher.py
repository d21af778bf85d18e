"""A follower's fetcher: one asyncio task per leader node (Kafka's
ReplicaFetcherThread), speaking Kafka's protocol with kcoord's own codec.

Each round asks every partition this node follows on that leader what it
needs (Replica.next_request): OffsetForLeaderEpoch for those still
truncating, one long-poll Fetch (replica id, current leader epoch, fetch
offset = log end) for the others.  Fetched batches are appended with the
leader's offsets and epochs, fsynced (in a worker thread), and only then is
the answer handed to the replica, so the next fetch offset is durable.

In a fetch session the leader leaves out partitions with nothing new for
the follower; their fetches stay in flight across rounds (`_carried`),
listed in the session again each round without a new request built,
answered, or handed back, so a round costs what changed.
"""
from __future__ import annotations

import asyncio
import logging
import ssl
from typing import Any

from ..log import step_trace
from ..protocol.errors import Err
from ..protocol.client import AsyncExchange
from ..protocol.records import LOG_OVERHEAD, iter_batches
from ..security.client import SaslLoginError, open_connection
from .fetch_session import SESSION_ERRORS, FollowerSession
from .aio import bounded, cancel_and_wait, drop
from .replica import EpochQuery, FetchQuery, FetchServed

log = logging.getLogger("kcoord.cluster.fetcher")

FETCH, OFFSET_FOR_LEADER_EPOCH = 1, 23
FETCH_VERSION, EPOCH_VERSION = 12, 4       # by topic name, replica id in the body
_AUTHORIZATION_ERRORS = {Err.TOPIC_AUTHORIZATION_FAILED, Err.CLUSTER_AUTHORIZATION_FAILED}


class PeerRefused(Exception):
    """The leader refused the follower's request as a whole (e.g.
    CLUSTER_AUTHORIZATION_FAILED: the inter-broker principal lacks
    CLUSTER_ACTION)."""


class LeaderConnection:
    """One connection to a leader's inter-broker listener, secured as the
    client properties say (TLS, SASL login: kcoord/security/client.py);
    one request at a time."""

    def __init__(self, host: str, port: int, client_id: str, props: dict | None = None) -> None:
        self.host, self.port, self.client_id = host, port, client_id
        self.props = props or {"security.protocol": "PLAINTEXT"}
        # (Any: objects of the loop's own types, which the compiled build
        # must not check against asyncio's)
        self._writer: Any = None
        self._exchange: AsyncExchange | None = None
        # the fetch session lives as long as the connection: a lost answer
        # or a reconnect starts over with a full fetch
        self.session = FollowerSession()

    async def call(self, api_key: int, version: int, body: dict, timeout: float) -> dict:
        if self._exchange is None:
            reader, self._writer = await bounded(open_connection(
                self.host, self.port, self.props, timeout, self.client_id), timeout)
            self._exchange = AsyncExchange(reader, self._writer, self.client_id, bounded)
        return await self._exchange.call(api_key, version, body, timeout)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._writer = None
        self._exchange = None
        self.session.reset()


def batches_from(data, offset: int) -> bytes:
    """The whole batches of `data` that hold offsets at or after `offset`."""
    start = None
    end = 0
    for pos, header in iter_batches(data):
        if start is None and header.base_offset + header.last_offset_delta >= offset:
            start = pos
        end = pos + LOG_OVERHEAD + header.batch_length
    return bytes(data[start:end]) if start is not None else b""


class Wake:
    """The fetcher's wake-up: asyncio.Event's set/clear/wait for its one
    waiter (the fetcher's task), without a task or a waiter list per wait:
    a fetch round waits on it every time."""

    __slots__ = ("_set", "_waiter")

    def __init__(self) -> None:
        self._set = False
        self._waiter: Any = None    # the loop's future (see LeaderConnection)

    def set(self) -> None:
        self._set = True
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def set_by(self, _done: object) -> None:
        """set(), as a done callback."""
        self.set()

    def clear(self) -> None:
        self._set = False

    def is_set(self) -> bool:
        return self._set

    async def wait(self) -> None:
        if self._set:
            return
        waiter = self._waiter
        if waiter is None or waiter.done():
            waiter = self._waiter = asyncio.get_running_loop().create_future()
        await waiter


class ReplicaFetcher:
    def __init__(self, manager, leader_id: int) -> None:
        self.manager = manager
        self.leader_id = leader_id
        self.wake = Wake()
        self.task: Any = None       # the loop's task (see LeaderConnection)
        self._conn: LeaderConnection | None = None
        self._address: Any = None   # (host, port) of the connection
        self._last_refusal: str | None = None  # the security failure last logged
        # key -> (replica, its fetch still in flight, its partition entry):
        # left out of the leader's last answer (nothing new), fetched on
        self._carried: dict[tuple, tuple] = {}

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        await cancel_and_wait(self.task, 5.0)
        if self._conn is not None:
            self._conn.close()

    def _connection(self) -> LeaderConnection | None:
        address = self.manager.address_of(self.leader_id)
        if address is None:
            return None
        if self._conn is None or address != self._address:
            if self._conn is not None:
                self._conn.close()
            host, port = address
            self._conn = LeaderConnection(host, port, f"kcoord-replica-{self.manager.node_id}",
                                          getattr(self.manager, "peer_properties", None))
            self._address = address
        return self._conn

    async def _run(self) -> None:
        backoff = self.manager.config.retry_backoff_ms / 1000.0
        while True:
            requests = self._round_requests()
            if not requests:
                self.wake.clear()
                try:
                    await bounded(self.wake.wait(), 1.0)
                except asyncio.TimeoutError:
                    pass
                continue
            conn = self._connection()
            failed = False
            try:
                if conn is None:
                    raise ConnectionError(f"node {self.leader_id} has no known address")
                queries = [(k, r, q) for k, r, q in requests if isinstance(q, EpochQuery)]
                fetches = [(k, r, q) for k, r, q in requests if isinstance(q, FetchQuery)]
                if queries:
                    self._carried = {}
                    await self._ask_epochs(conn, queries)
                    # the truncated ones fetch now too: one fetch for all
                    for _, replica, request in fetches:
                        replica.on_request_failed(request, self.manager.now_ms())
                    continue
                if fetches:
                    await self._fetch(conn, fetches)
            except asyncio.CancelledError:
                self._carried = {}
                for _, replica, request in requests:
                    replica.on_request_failed(request, self.manager.now_ms())
                raise
            except (SaslLoginError, ssl.SSLError, PeerRefused) as exc:
                # misconfigured security: say so once per distinct cause, keep retrying
                reason = f"{type(exc).__name__}: {exc}"
                if reason != self._last_refusal:
                    log.error("replica fetcher to node %d cannot use its inter-broker "
                              "listener: %s", self.leader_id, reason)
                    self._last_refusal = reason
                failed = True
            except Exception as exc:  # connection lost, leader gone: retry after a backoff
                log.debug("fetch from node %d failed: %s", self.leader_id, exc)
                failed = True
            if failed:
                # (no await inside an except or finally block of a compiled
                # module: mypyc loses or crashes on the exception in flight)
                if conn is not None:
                    conn.close()
                self._carried = {}
                for _, replica, request in requests:
                    replica.on_request_failed(request, self.manager.now_ms())
                await asyncio.sleep(backoff)

    def _round_requests(self) -> list:
        """This round's requests: the carried fetches still awaited, then
        every other partition's.  In that order: a carried fetch dropped (a
        role or leader change) is no longer carried when requests_for, which
        passes over the carried ones, asks its replica anew."""
        carried = self._still_carried()
        return self.manager.requests_for(self.leader_id, self._carried) + carried

    def _still_carried(self) -> list:
        """The carried fetches whose replica still waits on them (a role or
        leader change drops its request: then it builds a new one)."""
        carried = self._carried
        if not carried:
            return []
        leader = self.leader_id
        out = []
        for key, (replica, q, _) in list(carried.items()):
            if replica.awaits(q) and replica.state.leader == leader:
                out.append((key, replica, q))
            else:
                del carried[key]
                replica.on_request_failed(q, self.manager.now_ms())
        return out

    async def _ask_epochs(self, conn, queries) -> None:
        topics: dict[str, list] = {}
        for (topic, p), _, q in queries:
            topics.setdefault(topic, []).append(
                {"partition": p, "current_leader_epoch": q.current_leader_epoch,
                 "leader_epoch": q.epoch})
        body = {"replica_id": self.manager.node_id,
                "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]}
        timeout = self.manager.config.request_timeout_ms / 1000.0
        response = await conn.call(OFFSET_FOR_LEADER_EPOCH, EPOCH_VERSION, body, timeout)
        answers = {(t["topic"], p["partition"]): p
                   for t in response["topics"] for p in t["partitions"]}
        refused = {a["error_code"] for a in answers.values()} & _AUTHORIZATION_ERRORS
        if refused:  # the inter-broker principal lacks CLUSTER_ACTION (or DESCRIBE)
            raise PeerRefused(f"OffsetForLeaderEpoch error code {min(refused)} (the "
                              f"inter-broker principal needs CLUSTER_ACTION on the cluster)")
        for key, replica, q in queries:
            a = answers.get(key)
            if a is None:
                replica.on_request_failed(q, self.manager.now_ms())
                continue
            self.manager.handle(key, replica.on_epoch_answer(
                q, a["error_code"], a["leader_epoch"], a["end_offset"], self.manager.now_ms()))
        if any(a["error_code"] != Err.NONE for a in answers.values()):
            await asyncio.sleep(self.manager.config.retry_backoff_ms / 1000.0)

    async def _unless_new_follower(self, call):
        """The answer to `call`, or None (the call cancelled) as soon as some
        partition following this leader has a request waiting.  The call's
        end sets the wake too, so a round waits on one future: a wake (a
        state change: the only way a partition gets a request ready while
        this round's requests are out) looks at the partitions."""
        call = asyncio.ensure_future(call)
        wake = self.wake
        set_by = wake.set_by    # one bound method, so the removal finds it
        call.add_done_callback(set_by)
        # The cleanup runs after the try, not in a finally: mypyc (this module
        # is compiled) loses the exception in flight, a cancellation too, when
        # a finally block awaits, and the fetcher then never stops.
        failure: BaseException | None = None
        try:
            while True:
                wake.clear()
                if call.done():
                    break
                await wake.wait()
                if call.done() or self.manager.has_request_ready(self.leader_id):
                    break
        except BaseException as exc:
            failure = exc
        call.remove_done_callback(set_by)
        if failure is not None or not call.done():
            if not call.done():
                await cancel_and_wait(call, 5.0)
            else:
                drop(call)  # it ended as we were cancelled: its exception is retrieved
            if failure is not None:
                raise failure
            return None
        return call.result()

    async def _fetch(self, conn, fetches) -> None:
        cfg = self.manager.config
        carried, self._carried = self._carried, {}
        parts = {}
        for key, _, q in fetches:
            held = carried.get(key)
            if held is not None and held[1] is q:
                parts[key] = held[2]
            else:
                parts[key] = {"partition": key[1], "current_leader_epoch": q.current_leader_epoch,
                              "fetch_offset": q.fetch_offset, "last_fetched_epoch": -1,
                              "log_start_offset": -1, "partition_max_bytes": cfg.fetch_max_bytes}
        session_id, epoch, listed, forgotten = conn.session.request(parts)
        topics: dict[str, list] = {}
        for (topic, _), entry in listed.items():
            topics.setdefault(topic, []).append(entry)
        gone: dict[str, list] = {}
        for topic, p in forgotten:
            gone.setdefault(topic, []).append(p)
        body = {"cluster_id": None, "replica_id": self.manager.node_id,
                "max_wait_ms": cfg.fetch_wait_max_ms, "min_bytes": 1,
                "max_bytes": 0x7FFFFFFF, "isolation_level": 0, "session_id": session_id,
                "session_epoch": epoch,
                "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
                "forgotten_topics_data": [{"topic": t, "partitions": ps}
                                          for t, ps in gone.items()],
                "rack_id": ""}
        timeout = (cfg.fetch_wait_max_ms + cfg.request_timeout_ms) / 1000.0
        step_trace.event("fetch-sent", self.leader_id, len(listed), len(fetches))
        response = await self._unless_new_follower(conn.call(FETCH, FETCH_VERSION, body,
                                                             timeout))
        step_trace.event("fetch-answer", self.leader_id)
        if response is None:
            # A partition that just became a follower of this leader would
            # otherwise wait out the long poll (replica.fetch.wait.max.ms)
            # before its first request, and the new leader's high watermark,
            # so every write acknowledged after a failover, with it.  Drop the
            # poll (the connection, which carries one request at a time) and
            # ask again for all: nothing was appended, the offsets stand.
            conn.close()
            for _, replica, q in fetches:
                replica.on_request_failed(q, self.manager.now_ms())
            return
        if response.get("error_code", Err.NONE) in SESSION_ERRORS:
            conn.session.reset()    # gone on the leader (it restarted?): a full fetch next
            for _, replica, q in fetches:
                replica.on_request_failed(q, self.manager.now_ms())
            return
        if response.get("error_code", Err.NONE) != Err.NONE:
            raise PeerRefused(f"Fetch error code {response['error_code']}"
                              + (" (CLUSTER_AUTHORIZATION_FAILED: the inter-broker principal "
                                 "needs CLUSTER_ACTION on the cluster)"
                                 if response["error_code"] == Err.CLUSTER_AUTHORIZATION_FAILED
                                 else ""))
        self._last_refusal = None
        answers, left_out = conn.session.answered(response, parts)
        appended = []
        errors = False
        answered = []
        for item in fetches:
            key, replica, q = item
            a = answers.get(key)
            if a is None:
                if key in left_out:     # nothing new: still fetching it
                    self._carried[key] = (replica, q, parts[key])
                else:
                    replica.on_request_failed(q, self.manager.now_ms())
                continue
            answered.append(item)
            errors |= a["error_code"] != Err.NONE
            data = batches_from(a["records"] or b"", q.fetch_offset)
            if a["error_code"] == Err.NONE and data and replica.accepts_fetched(q):
                replica.log.append_raw(data, defer_epochs=True)
                appended.append(replica.log)
        if appended:
            if step_trace.on():
                step_trace.event("fetch-appended", self.leader_id, step_trace.names(appended))
            await self.manager.flush(appended)     # durable before it is reported
            self.manager.checkpoint_epochs(appended)   # a new epoch's, off the loop
            step_trace.event("fetch-flushed", self.leader_id)
        for key, replica, q in answered:
            a = answers[key]
            served = FetchServed(a["error_code"], a["high_watermark"], -1, a["log_start_offset"])
            self.manager.handle(key, replica.on_fetch_answer(q, served, self.manager.now_ms()))
            # The leader's log start moved (retention, DeleteRecords): follow
            # it, never past what is committed here (Kafka's follower does
            # maybeIncrementLogStartOffset the same way).
            start = a["log_start_offset"]
            if (a["error_code"] == Err.NONE and start > replica.log.log_start_offset
                    and start <= replica.high_watermark):
                replica.log.advance_log_start(start)
        if errors:
            await asyncio.sleep(cfg.retry_backoff_ms / 1000.0)
