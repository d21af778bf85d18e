"""Fetch sessions for followers, the leader's half (KIP-227, Kafka's
FetchSession and FetchManager).

A follower's fetch covers every partition it follows on this leader (a
third of the internal topics' partitions and more), and most of them are
idle: sessionless, each round sends, reads, encodes and decodes all of
them.  In a session the follower lists only the partitions whose fetch
offset (or leader epoch) changed and those it drops (forgotten), and the
answer carries only partitions with records, an error, a moved high
watermark, last stable offset or log start, or that the request listed;
the rest are as the follower last heard.  Each fetch counts as one for
every partition of the session (caught-up times, the ISR, the high
watermark), but the leader reads only those it has to look at: a partition
found idle (Replica.follower_idle: the follower at the log end, told the
high watermark and log start) is left out of the session's fetches until
news on its log (the append notifier: an append, a fsync, a high watermark,
role, epoch or ISR change), its follower's caught-up time carried meanwhile
by the session's clock (`ms`, set at every fetch: Replica's SessionClock).
So a fetch costs what changed, not every partition the follower follows.
Every REVISIT_MS a session looks at all its partitions again, so news the
notifier never carried (a log start moved by retention) still arrives.

Only followers' fetches (replica id >= 0) get a session: a consumer that
asks for one is answered without (session id 0), which Kafka's clients take
as "full fetches from now on".  One session per follower node: a new one
ends its previous one.  An unknown id answers FETCH_SESSION_ID_NOT_FOUND, a
wrong epoch INVALID_FETCH_SESSION_EPOCH; either way the follower starts a
new session with a full fetch.
"""
from __future__ import annotations

import random
from typing import Any

from ..protocol.errors import Err

FINAL_EPOCH = -1      # sessionless (with an id: close that session)
INITIAL_EPOCH = 0     # a full fetch that opens a session
NO_SESSION = 0
_MAX_EPOCH = 0x7FFFFFFF
REVISIT_MS = 1000


class FetchSession:
    __slots__ = ("id", "replica", "epoch", "partitions", "sent", "ms", "look", "idle",
                 "idle_log", "watched", "news", "waiter", "revisit_ms")

    def __init__(self, session_id: int, replica: int) -> None:
        self.id = session_id
        self.replica = replica
        self.epoch = 1          # the epoch its next (incremental) request carries
        # (topic, partition) -> (the topic's request entry without partitions, the
        # partition's request entry); topic is the name (v < 13) or the id
        self.partitions: dict[tuple, tuple[dict, dict]] = {}
        # (topic, partition) -> (high watermark, last stable offset, log start) last answered
        self.sent: dict[tuple, tuple[int, int, int]] = {}
        self.ms = 0             # the time of its latest fetch (Replica's SessionClock)
        self.look: dict[tuple, None] = {}        # keys the next fetch reads
        self.idle: dict[int, tuple] = {}         # id(log) -> (key, replica) left out
        self.idle_log: dict[tuple, int] = {}     # key -> id(log) of those left out
        # id(log) -> the last fetch's watch entry of it (topic, log, replica,
        # follower, end seen): what news on that log must beat to wake it
        self.watched: dict[int, tuple] = {}
        self.news = False       # news put an idle partition back: a parked fetch reads again
        # the parked fetch's future, woken by news on its logs (Any: the
        # loop's own future type, which the compiled build must not check)
        self.waiter: Any = None
        self.revisit_ms = 0     # when it next looks at every partition again

    def add(self, req: dict, by_id: bool) -> set:
        """The request's partitions into the session: -> their keys."""
        asked = set()
        for treq in req["topics"]:
            topic = treq["topic_id"] if by_id else treq["topic"]
            head = {k: v for k, v in treq.items() if k != "partitions"}
            for preq in treq["partitions"]:
                key = (topic, preq["partition"])
                self.partitions[key] = (head, preq)
                asked.add(key)
                self._unidle(key)
                self.look[key] = None
        return asked

    def forget(self, req: dict, by_id: bool) -> None:
        for treq in req.get("forgotten_topics_data") or ():
            topic = treq["topic_id"] if by_id else treq["topic"]
            for index in treq["partitions"]:
                self.partitions.pop((topic, index), None)
                self.sent.pop((topic, index), None)
                self._unidle((topic, index))
                self.look.pop((topic, index), None)

    # ------------------------------------------------ idle partitions

    def set_idle(self, key: tuple, plog, replica) -> None:
        """follower_idle said yes with this session as its clock: leave the
        partition out of the next fetches until news on `plog`."""
        self.look.pop(key, None)
        self.idle[id(plog)] = (key, replica)
        self.idle_log[key] = id(plog)

    def _unidle(self, key: tuple) -> None:
        log_id = self.idle_log.pop(key, None)
        if log_id is not None:
            _, replica = self.idle.pop(log_id)
            replica.settle_follower(self.replica)

    def on_news(self, plog) -> object:
        """News on `plog` (None: on every log): an idle partition of it is
        read again.  -> its replica (the caller settles it once for all
        sessions), or None.  Wakes a parked fetch reading the log."""
        log_id = id(plog)
        entry = self.idle.pop(log_id, None)
        if entry is not None:
            del self.idle_log[entry[0]]
            self.look[entry[0]] = None
            self.news = True
        if self.waiter is not None and (entry is not None or self._moved(log_id)):
            if not self.waiter.done():
                self.waiter.set_result(plog)
        return entry[1] if entry is not None else None

    def _moved(self, log_id: int) -> bool:
        """Would the parked fetch read `log_id`'s log again now (its news
        test, DataPlane._has_news, for that log)?  A follower reads to the
        log end: an fsync or a high watermark moving past what it saw wakes
        nothing (the fetch would only park again, a loop turn later)."""
        seen = self.watched.get(log_id)
        if seen is None:
            return False
        _, plog, replica, follower, end = seen
        if replica is None or not follower:
            return True     # not a follower's read: the fetch judges for itself
        return plog.log_end_offset > end or not replica.is_leader

    def on_all_news(self) -> None:
        """News on everything (a role change, a stop): every partition is
        read again; wakes a parked fetch with None (as the notifier does)."""
        for key, replica in self.idle.values():
            replica.on_log_news()
            self.look[key] = None
        self.idle.clear()
        self.idle_log.clear()
        self.news = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def revisit(self) -> None:
        """Every partition is read again (each follower's progress settled)."""
        for key in list(self.idle_log):
            self._unidle(key)
            self.look[key] = None

    def close(self) -> None:
        """The session ends: its clock stops, so what it carried settles."""
        for key in list(self.idle_log):
            self._unidle(key)
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def look_request(self, req: dict) -> dict:
        """`req` with the partitions this fetch reads: those listed, those
        with news, those not yet found idle."""
        topics: dict = {}
        partitions = self.partitions
        for key in self.look:
            head, preq = partitions[key]
            entry = topics.get(key[0])
            if entry is None:
                entry = topics[key[0]] = {**head, "partitions": []}
            entry["partitions"].append(preq)
        return {**req, "topics": list(topics.values())}

    def full_request(self, req: dict) -> dict:
        """`req` with every partition of the session in it, at its stored offset."""
        topics: dict = {}
        for (topic, _), (head, preq) in self.partitions.items():
            entry = topics.get(topic)
            if entry is None:
                entry = topics[topic] = {**head, "partitions": []}
            entry["partitions"].append(preq)
        return {**req, "topics": list(topics.values())}


class FetchSessions:
    def __init__(self, seed: int | None = None) -> None:
        self._by_id: dict[int, FetchSession] = {}
        self._by_replica: dict[int, int] = {}
        # ids from a random start: a restarted leader does not hand out the
        # ids its previous process gave (a follower reconnects anyway)
        self._next = random.Random(seed).randrange(1, _MAX_EPOCH)

    def __len__(self) -> int:
        return len(self._by_id)

    def sessions(self):
        return self._by_id.values()

    def resolve(self, req: dict, replica: int, by_id: bool, *, whole: bool = True):
        """-> (error, session or None, the request to read, the keys it listed).
        An incremental fetch's request to read is every partition of the
        session, or (not `whole`) None: the caller reads session.look_request."""
        session_id, epoch = req.get("session_id", NO_SESSION), req.get("session_epoch",
                                                                        FINAL_EPOCH)
        if epoch == FINAL_EPOCH or epoch < INITIAL_EPOCH:
            self._close(session_id, replica)
            return Err.NONE, None, req, set()
        if epoch == INITIAL_EPOCH:
            self._close(session_id, replica)
            self._close(self._by_replica.get(replica, NO_SESSION), replica)
            session = FetchSession(self._new_id(), replica)
            self._by_id[session.id] = session
            self._by_replica[replica] = session.id
            asked = session.add(req, by_id)
            return Err.NONE, session, req, asked
        known = self._by_id.get(session_id)
        if known is None or known.replica != replica:
            return Err.FETCH_SESSION_ID_NOT_FOUND, None, req, set()
        if known.epoch != epoch:
            return Err.INVALID_FETCH_SESSION_EPOCH, None, req, set()
        known.epoch = 1 if epoch >= _MAX_EPOCH else epoch + 1
        asked = known.add(req, by_id)
        known.forget(req, by_id)
        return Err.NONE, known, known.full_request(req) if whole else None, asked

    @staticmethod
    def respond(session: FetchSession | None, response: dict, full: bool, asked: set,
                by_id: bool) -> dict:
        """The answer to send: with a session, its id and (incremental) only
        the partitions the follower does not know yet."""
        if session is None:
            return response
        sent = session.sent
        topics = []
        for tresp in response["responses"]:
            topic = tresp["topic_id"] if by_id else tresp["topic"]
            keep = []
            for p in tresp["partitions"]:
                key = (topic, p["partition_index"])
                now = (p["high_watermark"], p["last_stable_offset"], p["log_start_offset"])
                if (full or p["records"] or p["error_code"] != Err.NONE or key in asked
                        or sent.get(key) != now):
                    sent[key] = now
                    keep.append(p)
            if keep:
                topics.append({**tresp, "partitions": keep})
        return {**response, "session_id": session.id, "responses": topics}

    def _new_id(self) -> int:
        while True:
            self._next = self._next % _MAX_EPOCH + 1
            if self._next not in self._by_id:
                return self._next

    def _close(self, session_id: int, replica: int) -> None:
        session = self._by_id.get(session_id)
        if session is not None and session.replica == replica:
            del self._by_id[session_id]
            session.close()
            if self._by_replica.get(replica) == session_id:
                del self._by_replica[replica]
