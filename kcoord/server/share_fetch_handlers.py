"""ShareFetch (78) and ShareAcknowledge (79): share sessions, acknowledgements
and acquisitions on the partition leader (Kafka's KafkaApis share handlers
and SharePartitionManager's request flow).

A ShareFetch first checks the member id and its session epoch (top-level
errors), applies its piggy-backed acknowledgements (answered once durable),
then acquires from every partition of the session, rotated by the session
epoch so none starves, up to MaxRecords; with nothing acquired it long-polls
on the data plane's notifier until MinBytes are acquired or MaxWaitMs ends.
A share partition still loading its state (a new leader reading it from a
share coordinator perhaps not yet elected) holds the fetch no longer: it
answers with nothing acquired from it, and the load goes on for the next.
Epoch -1 acknowledges and then ends the session, releasing the member's
records, as does the close of the connection the session was opened on.
"""
from __future__ import annotations

import asyncio
import logging

from ..protocol.api import error_response, serves
from ..protocol.errors import Err
from ..share.partition import REJECT, RENEW, check_ack_batches
from ..share.sessions import ShareSessionCache
from .share_partitions import SharePartitionManager

log = logging.getLogger("kcoord.share")

MAX_MEMBER_ID = 36
RECORD_LIMIT = 1   # ShareAcquireMode (v2): at most MaxRecords records, batches cut
# a share partition's load is waited for this long even by a shorter MaxWaitMs
# (one read of its state takes a round trip); a load retrying towards a share
# coordinator not yet elected is not waited for: the fetch answers without it
LOAD_WAIT_S = 0.5


def _leader() -> dict:
    return {"leader_id": -1, "leader_epoch": -1}


def _fetch_entry(index: int, code: int = Err.NONE) -> dict:
    return {"partition_index": index, "error_code": code, "error_message": None,
            "acknowledge_error_code": Err.NONE, "acknowledge_error_message": None,
            "current_leader": _leader(), "records": b"", "acquired_records": []}


def _member_ok(req: dict) -> bool:
    member = req.get("member_id")
    return bool(member) and len(member) <= MAX_MEMBER_ID and req.get("group_id") is not None


def _acks_by_partition(req: dict) -> dict:
    """(topic id, partition) -> acknowledgement batches (a topic id may repeat)."""
    out: dict = {}
    for t in req["topics"]:
        for p in t["partitions"]:
            batches = p.get("acknowledgement_batches") or []
            if batches:
                out.setdefault((t["topic_id"], p["partition_index"]), []).extend(batches)
    return out


def _group_by_topic(entries: dict) -> list[dict]:
    """{(topic id, partition): entry} -> the responses array (topics in first-seen order)."""
    topics: dict[bytes, list] = {}
    for (topic_id, _), entry in entries.items():
        topics.setdefault(topic_id, []).append(entry)
    return [{"topic_id": t, "partitions": parts} for t, parts in topics.items()]


class ShareFetchHandlers:
    def __init__(self, manager: SharePartitionManager) -> None:
        self.shares = manager
        self.data = manager.data
        self.catalogue = manager.catalogue
        self.sessions = ShareSessionCache(int(manager._broker("group.share.max.share.sessions",
                                                              2000)))

    # ----------------------------------------------------------- sessions
    def connection_closed(self, connection) -> None:
        """Sessions opened on a closed connection end: their records go back."""
        for session in self.sessions.on_connection(connection):
            self.sessions.remove(session)
            self.shares.release(session.group_id, session.member_id)

    def _end_session(self, session) -> None:
        self.sessions.remove(session)
        self.shares.release(session.group_id, session.member_id)

    # ------------------------------------------------------------ helpers
    def _topic(self, topic_id: bytes, index: int):
        """(topic, error code) for a partition this node may serve."""
        topic = self.catalogue.by_id.get(topic_id)
        if topic is None:
            return None, Err.UNKNOWN_TOPIC_ID
        if not 0 <= index < len(topic.partitions):
            return None, Err.UNKNOWN_TOPIC_OR_PARTITION
        replica = self.data._replicated(topic, index)
        if isinstance(replica, int):
            return None, replica
        return topic, Err.NONE

    def _leaders(self, top: dict, entries: dict, listener: str) -> None:
        """KIP-951 for NOT_LEADER_OR_FOLLOWER partitions (a cluster): the
        leader in CurrentLeader, its endpoint in NodeEndpoints."""
        if self.data.replication is None:
            return
        for (topic_id, index), entry in entries.items():
            if Err.NOT_LEADER_OR_FOLLOWER in (entry["error_code"],
                                              entry.get("acknowledge_error_code")):
                topic = self.catalogue.by_id.get(topic_id)
                if topic is not None:
                    self.data._point_to_leader(entry, topic.name, index)
        self.data._add_endpoints(top, entries.values())
        self.data._on_listener(top, listener)

    async def _acknowledge(self, group_id: str, member: str, acks: dict, max_type: int) -> dict:
        """Apply every partition's acknowledgements -> {(topic id, p): code},
        once the changes are durable."""
        return await self._answers(self._start_acks(group_id, member, acks, max_type))

    @staticmethod
    async def _answers(started: dict) -> dict:
        return {tp: code if isinstance(code, int) else await code
                for tp, code in started.items()}

    def _start_acks(self, group_id: str, member: str, acks: dict, max_type: int) -> dict:
        """Apply every partition's acknowledgements now -> {(topic id, p):
        code, or a future of it done once the change is durable}."""
        results: dict = {}
        for (topic_id, index), batches in acks.items():
            code = check_ack_batches(batches, max_type)
            topic = None
            if code == Err.NONE:
                topic, code = self._topic(topic_id, index)
            if code == Err.NONE:
                sp = self.shares.partitions.get((group_id, topic_id, index))
                if sp is None:      # not loaded here: nothing was acquired from it
                    code = Err.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    code = self.shares.acknowledge(group_id, member, topic_id, index, sp, batches)
            results[(topic_id, index)] = code
        return results

    # ---------------------------------------------------------- ShareFetch
    @serves("ShareFetch")
    async def share_fetch(self, ctx, req: dict) -> dict:
        version = ctx.api_version
        lock_ms = 0
        top = {"throttle_time_ms": 0, "error_code": Err.NONE, "error_message": None,
               "acquisition_lock_timeout_ms": 0, "responses": [], "node_endpoints": []}
        if not _member_ok(req):
            return error_response(ctx.api_key, ctx.api_version, req, Err.INVALID_REQUEST,
                                  "member id must be 1 to 36 characters")
        group_id, member, epoch = req["group_id"], req["member_id"], req["share_session_epoch"]
        lock_ms = self.shares.lock_ms(group_id)
        top["acquisition_lock_timeout_ms"] = lock_ms
        renew = version >= 2 and req.get("is_renew_ack")
        if renew and (req["max_bytes"] or req["min_bytes"] or req["max_records"]
                      or req["max_wait_ms"]):
            return error_response(ctx.api_key, ctx.api_version, req, Err.INVALID_REQUEST,
                                  "a renewing ShareFetch must not fetch (zero limits)")
        acks = _acks_by_partition(req)
        if epoch == 0 and acks:
            return error_response(ctx.api_key, ctx.api_version, req, Err.INVALID_REQUEST,
                                  "acknowledgements in a request opening a share session")
        requested = list(dict.fromkeys((t["topic_id"], p["partition_index"])
                                       for t in req["topics"] for p in t["partitions"]))
        forgotten = [(t["topic_id"], p) for t in req.get("forgotten_topics_data") or ()
                     for p in t["partitions"]]
        sctx = self.sessions.for_fetch(group_id, member, epoch, requested, forgotten,
                                       ctx.connection)
        if sctx.error_code == Err.SHARE_SESSION_LIMIT_REACHED:
            await self._wait(req["max_wait_ms"])     # Kafka holds it for MaxWaitMs first
        if sctx.error_code:
            return error_response(ctx.api_key, ctx.api_version, req, sctx.error_code)
        session = sctx.session
        # acknowledgements applied first (their records are not acquirable until
        # durable), the fetch meanwhile, the answer once both are done (Kafka's order)
        started = self._start_acks(group_id, member, acks, RENEW if renew else REJECT)
        entries: dict = {}
        if not sctx.final and not renew:
            entries = await self._fetch(group_id, member, session, req, sctx.full, set(sctx.added))
        ack_codes = await self._answers(started)
        for tp, code in ack_codes.items():
            entry = entries.get(tp)
            if entry is None:
                entry = entries[tp] = _fetch_entry(tp[1])
            entry["acknowledge_error_code"] = code
        if sctx.final:
            self._end_session(session)
        self._leaders(top, entries, ctx.listener)
        top["responses"] = _group_by_topic(entries)
        return top

    async def _wait(self, max_wait_ms: int) -> None:
        if max_wait_ms > 0 and not self.data.stopping:
            await asyncio.sleep(max_wait_ms / 1000.0)

    async def _fetch(self, group_id: str, member: str, session, req: dict, full: bool,
                     added: set) -> dict:
        """Acquire from the session's partitions, long-polling for MinBytes."""
        keys = list(session.partitions)
        if keys:
            shift = session.epoch % len(keys)       # round-robin start, so none starves
            keys = keys[shift:] + keys[:shift]
        entries: dict = {}
        # share partitions being loaded are waited for up to MaxWaitMs (at least
        # LOAD_WAIT_S), as Kafka's delayed share fetch: they join `loaded` as
        # their loads end
        loading: dict = {}
        for tp in keys:
            topic, code = self._topic(*tp)
            if code == Err.NONE:
                loading[tp] = (topic, self.shares.load(group_id, topic, tp[1]))
            else:
                self._failed(session, entries, tp, code)
        loaded: list = []
        max_records = max(req.get("max_records", 0), 0)
        max_bytes = max(req["max_bytes"], 0)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(req["max_wait_ms"], 0) / 1000.0
        load_deadline = max(deadline, loop.time() + LOAD_WAIT_S)
        min_bytes = max(req["min_bytes"], 1)
        while True:
            if self.sessions.get(group_id, member) is not session:
                break        # the session ended meanwhile (connection closed): acquire nothing
            waiter = self.data.appended.wait()   # armed before acquiring: no wake-up is missed
            self._take_loaded(session, loading, loaded, entries)
            size = self._acquire_once(group_id, member, loaded, max_records, max_bytes,
                                      req.get("batch_size", 0), entries,
                                      req.get("share_acquire_mode", 0) == RECORD_LIMIT)
            remaining = (load_deadline if loading else deadline) - loop.time()
            if (size >= min_bytes or entries.keys() - {tp for tp, _, _ in loaded}
                    or remaining <= 0 or self.data.stopping or not max_records or not max_bytes
                    or not (loaded or loading)):
                waiter.cancel()
                break
            try:
                await asyncio.wait_for(waiter, remaining)
            except asyncio.TimeoutError:
                pass
        # still loading: answered with nothing acquired, no error (Kafka's while a
        # share partition initializes); the next fetch finds the same load
        for tp in [tp for tp, _, _ in loaded] + list(loading):
            if tp not in entries and (full or tp in added):
                entries[tp] = _fetch_entry(tp[1])
        return entries

    @staticmethod
    def _failed(session, entries: dict, tp: tuple, code: int) -> None:
        entries[tp] = _fetch_entry(tp[1], code)
        if code in (Err.UNKNOWN_TOPIC_ID, Err.UNKNOWN_TOPIC_OR_PARTITION):
            session.partitions.pop(tp, None)

    def _take_loaded(self, session, loading: dict, loaded: list, entries: dict) -> None:
        """Move the share partitions whose loads ended from `loading` to
        `loaded` (or their error into `entries`)."""
        for tp, (topic, fut) in list(loading.items()):
            if not fut.done():
                continue
            del loading[tp]
            if fut.cancelled():
                code = Err.UNKNOWN_SERVER_ERROR
            else:
                one = fut.result()
                if one.error_code == Err.NONE:
                    loaded.append((tp, topic, one.partition))
                    continue
                code = one.error_code
            self._failed(session, entries, tp, code)

    def _acquire_once(self, group_id: str, member: str, loaded: list, max_records: int,
                      max_bytes: int, batch_size: int, entries: dict, strict: bool) -> int:
        now = self.shares.clock.ms()
        size = 0
        acquired = 0
        # MaxBytes split evenly over the partitions that can acquire now (Kafka's
        # share fetch); each still reads at least one batch
        ready = sum(1 for _, _, sp in loaded if sp.can_acquire())
        share = max_bytes // max(ready, 1)
        for tp, topic, sp in loaded:
            if acquired >= max_records or size >= max_bytes:
                break
            if self.shares.partitions.get((group_id,) + tp) is not sp:
                continue                        # dropped meanwhile (fenced, deleted)
            got = self.shares.acquire(group_id, member, topic, tp[1], sp,
                                      max_records - acquired, min(share, max_bytes - size),
                                      batch_size, now, strict)
            if got is None:
                continue
            entry = entries.get(tp) or _fetch_entry(tp[1])
            entry["records"] = got.records
            entry["acquired_records"] = [
                {"first_offset": r.first, "last_offset": r.last, "delivery_count": r.delivery_count}
                for r in got.ranges]
            entries[tp] = entry
            acquired += got.count
            size += len(got.records)
        return size

    # ---------------------------------------------------- ShareAcknowledge
    @serves("ShareAcknowledge")
    async def share_acknowledge(self, ctx, req: dict) -> dict:
        top = {"throttle_time_ms": 0, "error_code": Err.NONE, "error_message": None,
               "acquisition_lock_timeout_ms": 0, "responses": [], "node_endpoints": []}
        if not _member_ok(req):
            return error_response(ctx.api_key, ctx.api_version, req, Err.INVALID_REQUEST,
                                  "member id must be 1 to 36 characters")
        group_id, member = req["group_id"], req["member_id"]
        top["acquisition_lock_timeout_ms"] = self.shares.lock_ms(group_id)
        renew = ctx.api_version >= 2 and req.get("is_renew_ack")
        sctx = self.sessions.for_acknowledge(group_id, member, req["share_session_epoch"])
        if sctx.error_code:
            return error_response(ctx.api_key, ctx.api_version, req, sctx.error_code)
        acks = {}
        for t in req["topics"]:
            for p in t["partitions"]:
                acks.setdefault((t["topic_id"], p["partition_index"]), []).extend(
                    p.get("acknowledgement_batches") or [])
        codes = await self._acknowledge(group_id, member, {k: v for k, v in acks.items() if v},
                                        RENEW if renew else REJECT)
        if sctx.final:
            self._end_session(sctx.session)
        entries = {tp: {"partition_index": tp[1], "error_code": codes.get(tp, Err.NONE),
                        "error_message": None, "current_leader": _leader()}
                   for tp in acks}
        self._leaders(top, entries, ctx.listener)
        top["responses"] = _group_by_topic(entries)
        return top
