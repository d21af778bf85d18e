"""Workload 1, the offsets register: per (group, partition), OffsetCommit
with the member's generation and OffsetFetch, from several processes.

Each process is a classic group member (JoinGroup/SyncGroup over kcoord's
own codec, rejoining whenever it is told the group rebalances), so a
member whose generation is gone is refused with a fencing error; values
are unique (one counter for all processes), so a fetch names the commit it
saw.  A commit refused with a fencing error is a definite failure (it was
refused before anything was appended); any other error, a timeout or a
lost connection is an unknown outcome."""
from __future__ import annotations

import itertools
import random
import threading
import time

from .checkers import FENCING_ERRORS
from .cluster import join_threads, start_threads
from .history import FAIL, OK, UNKNOWN, History
from .wire import (
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    SYNC_GROUP,
    connect,
)

TOPIC = "register"
PARTITIONS = 2
MEMBER_ID_REQUIRED = 79
# A request unanswered this long gets an unknown outcome and the member reconnects,
# as librdkafka does after its socket timeout.  No longer than the recovery goal
# (lease TTL + 1 s, 3 s in the harness): a request sent into a cut that healed
# meanwhile waits for TCP's backed-off retransmission, and a longer timeout would
# keep the member idle well past the heal (gaps.py counts that time as the client's).
REQUEST_TIMEOUT_S = 3.0
# JoinGroup (and a follower's SyncGroup) waits for the rebalance, up to its
# rebalance timeout: Kafka's clients give it that plus their request timeout
REBALANCE_TIMEOUT_MS = 4000
JOIN_TIMEOUT_S = REBALANCE_TIMEOUT_MS / 1000 + REQUEST_TIMEOUT_S
_NO_ANSWER = (OSError, ConnectionError)  # a garbled answer (AssertionError...) is an answer


class RegisterWorkload:
    def __init__(self, history: History, addrs: dict[int, tuple[str, int]], groups: int = 3,
                 processes_per_group: int = 2, seed: int = 0, pace_s: float = 0.05) -> None:
        self.history, self.addrs = history, addrs
        self.groups = [f"reg-{i}" for i in range(groups)]
        self.per_group = processes_per_group
        self.seed, self.pace_s = seed, pace_s
        self.values = itertools.count(1)
        self._value_lock = threading.Lock()
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []

    def next_value(self) -> int:
        with self._value_lock:
            return next(self.values)

    def start(self) -> None:
        self.threads = start_threads((self._process, (g, f"{g}/m{i}"))
                                     for g in self.groups for i in range(self.per_group))

    def join(self, timeout: float = 30.0) -> None:
        join_threads(self.threads, self.stop, timeout)

    # ------------------------------------------------------------ a process
    def _process(self, group: str, name: str) -> None:
        rng = random.Random(f"{self.seed}/{name}")
        member = Member(self.history, self.addrs, group, name, self.next_value)
        while not self.stop.is_set():
            try:
                if not member.ready():
                    time.sleep(0.1)
                    continue
                if rng.random() < 0.5:
                    member.write(rng.randrange(PARTITIONS))
                else:
                    member.read()
                member.heartbeat_if_due()
            except (OSError, ConnectionError, AssertionError, ValueError):
                member.drop()
                time.sleep(0.1)
            time.sleep(self.pace_s * rng.random() * 2)
        member.drop()


class Member:
    """One process: a classic member of `group` that commits and fetches."""

    def __init__(self, history: History, addrs: dict[int, tuple[str, int]], group: str,
                 name: str, next_value=None) -> None:
        self.history, self.addrs, self.group, self.name = history, addrs, group, name
        self.next_value = next_value
        self.conn = None
        self.node = None
        self.member_id = ""
        self.generation = -1
        self.last_heartbeat = 0.0

    def drop(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.conn, self.node = None, None

    def _ask(self, api_key: int, version: int, body: dict, what: str,
             timeout: float = REQUEST_TIMEOUT_S) -> dict:
        """One request of the member's own (not a commit or a fetch), its wait
        recorded in the history when no answer came."""
        sent = time.monotonic()
        conn = self.conn
        conn.timeout = timeout
        try:
            return conn.request(api_key, version, body)
        except _NO_ANSWER as exc:
            self.history.no_answer(self.name, (self.group,), sent, what, type(exc).__name__,
                                   node=self.node)
            raise
        finally:
            conn.timeout = REQUEST_TIMEOUT_S

    def _coordinator(self) -> bool:
        for node_id in random.sample(sorted(self.addrs), len(self.addrs)):
            sent = time.monotonic()
            try:
                with connect(self.addrs[node_id], timeout=REQUEST_TIMEOUT_S) as c:
                    r = c.request(FIND_COORDINATOR, 3, {"key": self.group, "key_type": 0})
            except _NO_ANSWER as exc:
                self.history.no_answer(self.name, (self.group,), sent, "find-coordinator",
                                       type(exc).__name__, node=node_id)
                continue
            if r["error_code"] == 0 and r["node_id"] in self.addrs:
                self.node = r["node_id"]
                self.conn = connect(self.addrs[self.node], timeout=REQUEST_TIMEOUT_S)
                return True
        return False

    def ready(self) -> bool:
        if self.conn is None:
            # a new coordinator keeps the member and its generation, as Kafka's
            # clients do (only a fencing error makes them join again)
            if not self._coordinator():
                self._joined(None, "no-coordinator")
                return False
        if self.generation < 0:
            return self._join()
        return True

    def _joined(self, code: int | None, error=None) -> bool:
        """A join attempt in the history (f "join", wall-clock stamped to
        match the nodes' logs): why a group could not commit after a heal."""
        op = self.history.invoke(self.name, "join", (self.group,), None, node=self.node,
                                 wall=round(time.time(), 3))
        self.history.complete(op, OK if code == 0 else FAIL, error=error if code is None else code)
        return code == 0

    def _join(self) -> bool:
        r = self._ask(JOIN_GROUP, 5, {
            "group_id": self.group, "session_timeout_ms": 10000,
            "rebalance_timeout_ms": REBALANCE_TIMEOUT_MS,
            "member_id": self.member_id, "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}]}, "join", JOIN_TIMEOUT_S)
        if r["error_code"] == MEMBER_ID_REQUIRED:
            self.member_id = r["member_id"]
            return False
        if r["error_code"]:
            if r["error_code"] == 25:  # UNKNOWN_MEMBER_ID: start over
                self.member_id = ""
            self.drop() if r["error_code"] in (14, 15, 16) else None
            return self._joined(r["error_code"], "join")
        self.member_id = r["member_id"]
        s = self._ask(SYNC_GROUP, 3, {
            "group_id": self.group, "generation_id": r["generation_id"],
            "member_id": self.member_id, "group_instance_id": None,
            "assignments": [{"member_id": m["member_id"], "assignment": b""}
                            for m in r["members"]] if r["leader"] == self.member_id else []},
            "sync", JOIN_TIMEOUT_S)  # a follower's waits for the leader's assignment
        if s["error_code"]:
            if s["error_code"] in (14, 15, 16):
                self.drop()
            return self._joined(s["error_code"], "sync")
        self.generation = r["generation_id"]
        self.last_heartbeat = time.monotonic()
        return self._joined(0)

    def heartbeat_if_due(self) -> None:
        if self.conn is None or self.generation < 0 or time.monotonic() - self.last_heartbeat < 1:
            return
        r = self._ask(HEARTBEAT, 3, {"group_id": self.group, "generation_id": self.generation,
                                     "member_id": self.member_id, "group_instance_id": None},
                      "heartbeat")
        self.last_heartbeat = time.monotonic()
        self._after_error(r["error_code"])

    def _after_error(self, code: int) -> None:
        if code in FENCING_ERRORS:
            self.generation = -1
            if code == 25:
                self.member_id = ""
        elif code:
            self.drop()

    def write(self, partition: int) -> None:
        value = self.next_value()
        h = self.history
        op = h.invoke(self.name, "write", (self.group, partition), value, node=self.node,
                      generation=self.generation)
        try:
            r = self.conn.request(OFFSET_COMMIT, 8, {
                "group_id": self.group, "generation_id_or_member_epoch": self.generation,
                "member_id": self.member_id, "group_instance_id": None,
                "topics": [{"name": TOPIC, "partitions": [{
                    "partition_index": partition, "committed_offset": value,
                    "committed_leader_epoch": -1, "committed_metadata": self.name}]}]})
        except (OSError, ConnectionError, AssertionError, ValueError) as exc:
            h.complete(op, UNKNOWN, error=type(exc).__name__)
            raise
        code = r["topics"][0]["partitions"][0]["error_code"]
        if code == 0:
            h.complete(op, OK)
        elif code in FENCING_ERRORS:
            h.complete(op, FAIL, error=code)
        else:
            h.complete(op, UNKNOWN, error=code)
        self._after_error(code)

    def read(self) -> None:
        h = self.history
        ops = [h.invoke(self.name, "read", (self.group, p), None, node=self.node)
               for p in range(PARTITIONS)]
        try:
            r = self.conn.request(OFFSET_FETCH, 7, {
                "group_id": self.group, "require_stable": False,
                "topics": [{"name": TOPIC, "partition_indexes": list(range(PARTITIONS))}]})
        except (OSError, ConnectionError, AssertionError, ValueError) as exc:
            for op in ops:
                h.complete(op, FAIL, error=type(exc).__name__)  # a read changes nothing
            raise
        parts = {p["partition_index"]: p for t in r["topics"] for p in t["partitions"]}
        for p, op in enumerate(ops):
            part = parts.get(p)
            code = r.get("error_code") or (part["error_code"] if part else -1)
            if code:
                h.complete(op, FAIL, error=code)
            else:
                value = part["committed_offset"]
                h.complete(op, OK, value=None if value < 0 else value)
        self._after_error(r.get("error_code", 0))


def final_reads(history: History, addrs: dict[int, tuple[str, int]], groups: list[str],
                timeout: float = 60.0) -> int:
    """After every fault healed: one fetch of every key, retried until a
    coordinator answers (recorded as reads of process 'final')."""
    done = 0
    for group in groups:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = Member(history, addrs, group, "final")
            try:
                if m._coordinator():
                    ops_before = len(history.ops)
                    m.read()
                    new = history.ops[ops_before:]
                    if all(op.outcome == OK for op in new):
                        done += 1
                        m.drop()
                        break
            except (OSError, ConnectionError, AssertionError, ValueError):
                pass
            m.drop()
            time.sleep(0.2)
    return done
