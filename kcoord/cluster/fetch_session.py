"""A follower's fetch session with one leader (KIP-227, Kafka's
FetchSessionHandler), sans-I/O: which partitions a fetch lists, and the
answer for every partition of the round, filled in from what the follower
last heard for those the leader left out (nothing new for them).

The first fetch is full (epoch 0) and opens the session; after it each
fetch lists only the partitions whose fetch offset or leader epoch changed
and forgets those no longer fetched.  Any failure (an error for the
session, a lost answer, a dropped connection) starts over with a full
fetch: a session is only as good as both sides agreeing on it.
"""
from __future__ import annotations

from ..protocol.errors import Err

SESSION_ERRORS = {Err.FETCH_SESSION_ID_NOT_FOUND, Err.INVALID_FETCH_SESSION_EPOCH}
_MAX_EPOCH = 0x7FFFFFFF


def _same(sent: dict, entry: dict) -> bool:
    """Does `entry` ask what `sent` asked (the leader's session holds it)?"""
    return (sent["fetch_offset"] == entry["fetch_offset"]
            and sent["current_leader_epoch"] == entry["current_leader_epoch"])


class FollowerSession:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.session_id = 0
        self.epoch = 0                       # 0: the next fetch is full and opens one
        self._sent: dict[tuple, dict] = {}   # key -> its partition entry last sent
        self._heard: dict[tuple, dict] = {}  # key -> the last answer for it

    def request(self, parts: dict[tuple, dict]) -> tuple[int, int, dict, list]:
        """`parts`: (topic, partition) -> its partition entry, every
        partition fetched this round.  -> (session id, epoch, the entries
        to list, (topic, partition) keys to forget)."""
        if self.epoch == 0:
            return self.session_id, 0, dict(parts), []
        sent = self._sent
        # a fetch carried across rounds lists the very entry sent before: only
        # the others are compared (a new entry may repeat what was sent)
        listed = {k: p for k, p in parts.items() if sent.get(k) is not p}
        for k in [k for k, p in listed.items() if k in sent and _same(sent[k], p)]:
            del listed[k]
        forgotten = [] if sent.keys() <= parts.keys() else [k for k in sent if k not in parts]
        return self.session_id, self.epoch, listed, forgotten

    def answers(self, response: dict, parts: dict[tuple, dict]) -> dict[tuple, dict]:
        """The answer for each partition of `parts` to a response without a
        top-level error (those the leader left out: no records, as last
        heard; one never heard of is missing: the caller fails it)."""
        got, left_out = self.answered(response, parts)
        out = {}
        for key in parts:
            p = got.get(key)
            if p is None:
                last = left_out.get(key)
                if last is None:
                    continue    # never answered: the caller fails its request
                p = {**last, "records": b"", "error_code": Err.NONE}
            out[key] = p
        return out

    def answered(self, response: dict, parts: dict[tuple, dict]) -> tuple[dict, dict]:
        """-> (the partitions the response carries, those of `parts` the
        leader left out that were heard before -> their last answer: nothing
        new for them).  A key of `parts` in neither was never answered: the
        caller fails its request."""
        got = {(t["topic"], p["partition_index"]): p
               for t in response["responses"] for p in t["partitions"]}
        heard = self._heard
        heard.update(got)
        left_out = {key: heard[key] for key in parts if key not in got and key in heard}
        session_id = response.get("session_id", 0)
        if session_id == 0:     # the leader keeps no session: full fetches from now on
            self.reset()
            return got, left_out
        self.session_id = session_id
        self.epoch = 1 if self.epoch >= _MAX_EPOCH else self.epoch + 1
        self._sent = dict(parts)    # the entries as listed (not changed after)
        if len(heard) > len(parts):
            for key in [k for k in heard if k not in parts]:
                del heard[key]
        return got, left_out
