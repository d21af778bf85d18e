"""A history of operations, as Jepsen records one: each operation has an
invocation and a completion time (time.monotonic, shared by every process
on the machine, so nemesis events and operations line up), the process and
node that ran it, and an outcome: ok, fail (definitely did not happen) or
unknown (may have happened: a timeout, a lost connection, a retriable
error after the write may have been appended)."""
from __future__ import annotations

import itertools
import threading
import time
from dataclasses import asdict, dataclass, field

OK, FAIL, UNKNOWN = "ok", "fail", "unknown"
INF = float("inf")


@dataclass
class Op:
    process: str
    f: str                      # write / read / produce / consume / commit / txn ...
    key: object = None
    value: object = None
    invoke: float = 0.0
    complete: float = INF
    outcome: str = UNKNOWN
    node: int | None = None
    error: object = None
    extra: dict = field(default_factory=dict)
    id: int = 0

    def to_json(self) -> dict:
        d = asdict(self)
        if d["complete"] == INF:
            d["complete"] = None
        if isinstance(d["key"], tuple):
            d["key"] = list(d["key"])
        return d


class History:
    def __init__(self) -> None:
        self.ops: list[Op] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def invoke(self, process: str, f: str, key=None, value=None, node=None, **extra) -> Op:
        op = Op(process, f, key, value, time.monotonic(), INF, UNKNOWN, node, None, extra,
                next(self._ids))
        with self._lock:
            self.ops.append(op)
        return op

    @staticmethod
    def complete(op: Op, outcome: str, value=None, error=None, node=None, **extra) -> Op:
        now = time.monotonic()
        op.complete = now if outcome != UNKNOWN else INF
        if outcome == UNKNOWN:
            extra["returned"] = now  # the client stopped waiting (not when it took effect)
        op.outcome = outcome
        if value is not None:
            op.value = value
        if node is not None:
            op.node = node
        op.error = error
        op.extra.update(extra)
        return op

    def no_answer(self, process: str, key, sent: float, what: str, error: str,
                  node=None) -> Op:
        """A request other than the workload's own operations that its client gave up
        on (f "no-answer", from `sent` to now): the time the client could not act."""
        op = self.invoke(process, "no-answer", key, what, node=node)
        op.invoke = sent
        return self.complete(op, FAIL, error=error)

    def snapshot(self) -> list[Op]:
        with self._lock:
            return list(self.ops)

    def counts(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for op in self.snapshot():
            per = out.setdefault(op.f, {OK: 0, FAIL: 0, UNKNOWN: 0})
            per[op.outcome] += 1
        return out
