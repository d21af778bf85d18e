"""Fetch sessions for followers, the leader's half (KIP-227, Kafka's
FetchSession and FetchManager).

A follower's fetch covers every partition it follows on this leader (a
third of the internal topics' partitions and more), and most of them are
idle: sessionless, each round sends, reads, encodes and decodes all of
them.  In a session the follower lists only the partitions whose fetch
offset (or leader epoch) changed and those it drops (forgotten), and the
answer carries only partitions with records, an error, a moved high
watermark, last stable offset or log start, or that the request listed;
the rest are as the follower last heard.  The leader still reads every
partition of the session at its stored fetch offset, so each fetch counts
as one for all of them (caught-up times, the ISR, the high watermark).

Only followers' fetches (replica id >= 0) get a session: a consumer that
asks for one is answered without (session id 0), which Kafka's clients take
as "full fetches from now on".  One session per follower node: a new one
ends its previous one.  An unknown id answers FETCH_SESSION_ID_NOT_FOUND, a
wrong epoch INVALID_FETCH_SESSION_EPOCH; either way the follower starts a
new session with a full fetch.
"""
from __future__ import annotations

import random

from ..protocol.errors import Err

FINAL_EPOCH = -1      # sessionless (with an id: close that session)
INITIAL_EPOCH = 0     # a full fetch that opens a session
NO_SESSION = 0
_MAX_EPOCH = 0x7FFFFFFF


class FetchSession:
    __slots__ = ("id", "replica", "epoch", "partitions", "sent")

    def __init__(self, session_id: int, replica: int) -> None:
        self.id = session_id
        self.replica = replica
        self.epoch = 1          # the epoch its next (incremental) request carries
        # (topic, partition) -> (the topic's request entry without partitions, the
        # partition's request entry); topic is the name (v < 13) or the id
        self.partitions: dict[tuple, tuple[dict, dict]] = {}
        # (topic, partition) -> (high watermark, last stable offset, log start) last answered
        self.sent: dict[tuple, tuple[int, int, int]] = {}

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
        return asked

    def forget(self, req: dict, by_id: bool) -> None:
        for treq in req.get("forgotten_topics_data") or ():
            topic = treq["topic_id"] if by_id else treq["topic"]
            for index in treq["partitions"]:
                self.partitions.pop((topic, index), None)
                self.sent.pop((topic, index), None)

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

    def resolve(self, req: dict, replica: int, by_id: bool):
        """-> (error, session or None, the request to read, the keys it listed)."""
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
        session = self._by_id.get(session_id)
        if session is None or session.replica != replica:
            return Err.FETCH_SESSION_ID_NOT_FOUND, None, req, set()
        if session.epoch != epoch:
            return Err.INVALID_FETCH_SESSION_EPOCH, None, req, set()
        session.epoch = 1 if epoch >= _MAX_EPOCH else epoch + 1
        asked = session.add(req, by_id)
        session.forget(req, by_id)
        return Err.NONE, session, session.full_request(req), asked

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
            if self._by_replica.get(replica) == session_id:
                del self._by_replica[replica]
