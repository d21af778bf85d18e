"""Checkers over fault-harness histories (pure functions of the history).

1. offsets register, per (group, partition) key: every acknowledged commit
   is seen by every later fetch until a commit acknowledged later replaces
   it (real-time order of a register with unique values); a commit refused
   with a fencing error is never seen; a fetch never sees a value nobody
   wrote or one written after it returned; two fetches in real-time order
   never go back.  A commit with an unknown outcome may take effect at any
   time after its invocation, or never.
2. queue: an acknowledged record is in the final log at the offset it was
   acknowledged with; no value twice in the log; a consumer read only what
   the final log holds at that offset; a group never re-consumes an offset
   below a commit acknowledged before (duplicates beyond redelivery); an
   acknowledged commit never passes what the group consumed.
3. transactions: no read_committed read of an aborted transaction's record
   (G1a); in the final committed output every input offset below the
   consuming group's committed offset appears exactly once and none at or
   above it; every acknowledged transaction's output is there.

Each returns {"anomalies": {kind: [examples...]}, "counts": {...}}; unknown
outcomes are counted, never guessed.
"""
from __future__ import annotations

import bisect
from collections import defaultdict

from .history import FAIL, INF, OK, UNKNOWN, Op

FENCING_ERRORS = {22, 25, 27, 82, 110, 113}  # ILLEGAL_GENERATION .. STALE_MEMBER_EPOCH
MAX_EXAMPLES = 20


class _Anomalies:
    def __init__(self) -> None:
        self.by_kind: dict[str, list] = defaultdict(list)
        self.totals: dict[str, int] = defaultdict(int)

    def add(self, kind: str, example) -> None:
        self.totals[kind] += 1
        if len(self.by_kind[kind]) < MAX_EXAMPLES:
            self.by_kind[kind].append(example)

    def result(self, counts: dict) -> dict:
        return {"anomalies": {k: {"count": self.totals[k], "examples": v}
                              for k, v in self.by_kind.items()},
                "counts": counts}


def anomaly_count(result: dict) -> int:
    return sum(a["count"] for a in result["anomalies"].values())


def _brief(op: Op) -> dict:
    return {"id": op.id, "process": op.process, "f": op.f, "key": op.key, "value": op.value,
            "outcome": op.outcome, "invoke": round(op.invoke, 3),
            "complete": None if op.complete == INF else round(op.complete, 3),
            "node": op.node, "error": op.error}


# ----------------------------------------------------------- 1: register
def check_register(ops: list[Op], initial=None) -> dict:
    """ops: f "write" (value unique per key) and "read" (value: what the
    fetch saw, `initial` when nothing was committed)."""
    found = _Anomalies()
    counts = defaultdict(int)
    keys: dict[object, list[Op]] = defaultdict(list)
    for op in ops:
        if op.f in ("write", "read"):
            keys[_hashable(op.key)].append(op)
            counts[f"{op.f}:{op.outcome}"] += 1
    for key, kops in keys.items():
        _check_key(key, kops, initial, found)
    return found.result(dict(counts))


def _hashable(key):
    return tuple(key) if isinstance(key, list) else key


def _check_key(key, kops: list[Op], initial, found: _Anomalies) -> None:
    writes = {op.value: op for op in kops if op.f == "write"}
    # the initial value: written before everything, done before everything
    ok_writes = sorted((w for w in writes.values() if w.outcome == OK),
                       key=lambda w: w.complete)
    done_at = [w.complete for w in ok_writes]
    # running max of invocation times over writes completed by done_at[i]
    max_invoke = []
    best = -INF
    for w in ok_writes:
        best = max(best, w.invoke)
        max_invoke.append(best)
    reads = [op for op in kops if op.f == "read" and op.outcome == OK]

    def span(value) -> tuple[float, float] | None:
        if value == initial:
            return -INF, -INF
        w = writes.get(value)
        if w is None:
            return None
        return w.invoke, (w.complete if w.outcome == OK else INF)

    spans = {}
    for r in reads:
        s = span(r.value)
        if s is None:
            found.add("phantom-read", {"key": key, "read": _brief(r)})
            continue
        w = writes.get(r.value)
        if w is not None and w.outcome == FAIL:
            found.add("fenced-commit-seen", {"key": key, "read": _brief(r), "write": _brief(w)})
            continue
        if s[0] > r.complete:
            found.add("future-read", {"key": key, "read": _brief(r), "write": _brief(w)})
            continue
        spans[r.id] = s
        # the latest-invoked acknowledged write that completed before this read began
        i = bisect.bisect_left(done_at, r.invoke)
        if i and s[1] < max_invoke[i - 1]:
            newer = next(w2 for w2 in ok_writes[:i] if w2.invoke == max_invoke[i - 1])
            found.add("stale-read" if r.value != initial else "lost-commit",
                      {"key": key, "read": _brief(r), "saw": None if w is None else _brief(w),
                       "acknowledged-before": _brief(newer)})
    # monotonic reads: a read after another read never sees an older write
    ordered = sorted((r for r in reads if r.id in spans), key=lambda r: r.complete)
    by_invoke = sorted((r for r in reads if r.id in spans), key=lambda r: r.invoke)
    j, best_r, best_op = 0, -INF, None
    for r in by_invoke:
        while j < len(ordered) and ordered[j].complete < r.invoke:
            start = spans[ordered[j].id][0]
            if start > best_r:
                best_r, best_op = start, ordered[j]
            j += 1
        if spans[r.id][1] < best_r:
            found.add("non-monotonic-read", {"key": key, "read": _brief(r),
                                             "earlier-read": _brief(best_op)})


# ----------------------------------------------------------- 2: queue
def check_queue(ops: list[Op], final_log: dict[int, dict[int, object]],
                final_committed: dict[tuple[str, int], int] | None = None,
                final_epochs: dict[int, dict[int, int]] | None = None) -> dict:
    """ops: "produce" (value; extra partition, offset when ok), "consume"
    (key (group, partition); value; extra offset), "commit" (key (group,
    partition), value: the committed offset).  final_log: partition ->
    offset -> value, read after every fault healed; final_epochs: the
    producer epoch of each of those records.  A value written again under
    another producer epoch is the client re-sending after it bumped its
    epoch (librdkafka does on message timeouts, KIP-360): no broker can
    tell that copy from a new record, so it is counted, not an anomaly;
    twice in one epoch is one."""
    found = _Anomalies()
    counts = defaultdict(int)
    where: dict[object, list[tuple[int, int]]] = defaultdict(list)
    for p, entries in final_log.items():
        for o, v in entries.items():
            where[v].append((p, o))
    for v, places in where.items():
        if len(places) > 1:
            epochs = [(final_epochs or {}).get(p, {}).get(o) for p, o in places]
            if final_epochs is not None and len(set(epochs)) == len(epochs):
                counts["duplicate-across-producer-epochs"] += 1
            else:
                found.add("duplicate-in-log", {"value": v, "at": places, "epochs": epochs})
    for op in ops:
        if op.f != "produce":
            continue
        counts[f"produce:{op.outcome}"] += 1
        if op.outcome != OK:
            if op.outcome == UNKNOWN:
                counts["produce:unknown-present"] += bool(where.get(op.value))
            continue
        at = (op.extra.get("partition"), op.extra.get("offset"))
        if not where.get(op.value):
            found.add("lost-write", _brief(op))
        elif at[1] is not None and at not in where[op.value]:
            found.add("moved-write", {"op": _brief(op), "now-at": where[op.value]})
    consumed: dict[tuple, list[Op]] = defaultdict(list)
    for op in ops:
        if op.f == "consume" and op.outcome == OK:
            counts["consume:ok"] += 1
            p, o = op.key[1], op.extra["offset"]
            if final_log.get(p, {}).get(o, _MISSING) != op.value:
                found.add("divergent-read", {"op": _brief(op),
                                             "log-has": final_log.get(p, {}).get(o)})
            consumed[_hashable(op.key)].append(op)
    commits: dict[tuple, list[Op]] = defaultdict(list)
    for op in ops:
        if op.f == "commit":
            counts[f"commit:{op.outcome}"] += 1
            if op.outcome == OK:
                commits[_hashable(op.key)].append(op)
    for key, cops in commits.items():
        for c in cops:
            # committed offset c.value says every offset below it was consumed
            # by the group before the commit completed
            before = [x.extra["offset"] for x in consumed.get(key, []) if x.complete <= c.complete]
            if c.value > (max(before) + 1 if before else 0) and c.value > 0:
                found.add("committed-ahead-of-consumed",
                          {"commit": _brief(c), "max-consumed-before": max(before, default=None)})
    for key, cons in consumed.items():
        acked = sorted((c.complete, c.value) for c in commits.get(key, []))
        times = [t for t, _ in acked]
        best = []
        m = -1
        for _, v in acked:
            m = max(m, v)
            best.append(m)
        first_seen: dict[int, Op] = {}
        for op in sorted(cons, key=lambda x: x.complete):
            o = op.extra["offset"]
            if o not in first_seen:
                first_seen[o] = op
                continue
            counts["consume:redelivered"] += 1
            i = bisect.bisect_left(times, op.invoke)
            if i and best[i - 1] > o:
                found.add("duplicate-beyond-redelivery",
                          {"op": _brief(op), "first": _brief(first_seen[o]),
                           "committed-before": best[i - 1]})
    if final_committed:
        for key, offset in final_committed.items():
            acked = [c.value for c in commits.get(key, [])]
            if acked and offset < max(acked):
                found.add("lost-commit", {"key": key, "final": offset, "acked": max(acked)})
    return found.result(dict(counts))


_MISSING = object()


# ----------------------------------------------------------- 3: transactions
def check_transactions(ops: list[Op], final_output: list[tuple[str, object]],
                       final_committed: dict[int, int]) -> dict:
    """ops: "txn" (value: list of output values; extra inputs [(p, o)];
    outcome ok = committed, fail = aborted for sure), "read" of the
    read_committed reader (value: an output value seen).  Output values are
    "p:o:txn" strings naming the input record.  final_output: every output
    value a read_committed reader saw at the end; final_committed: input
    partition -> the transactional group's committed offset."""
    found = _Anomalies()
    counts = defaultdict(int)
    txn_of: dict[object, Op] = {}
    for op in ops:
        if op.f == "txn":
            counts[f"txn:{op.outcome}"] += 1
            for v in op.value or []:
                txn_of[v] = op
    for op in ops:
        if op.f == "txn-read" and op.outcome == OK:
            counts["txn-read:ok"] += 1
            t = txn_of.get(op.value)
            if t is not None and t.outcome == FAIL:
                found.add("aborted-read", {"read": _brief(op), "txn": _brief(t)})
    per_input: dict[tuple[int, int], int] = defaultdict(int)
    seen_values = set()
    for v in final_output:
        seen_values.add(v)
        t = txn_of.get(v)
        if t is not None and t.outcome == FAIL:
            found.add("aborted-read", {"value": v, "txn": _brief(t)})
        p, o, _ = str(v).split(":", 2)
        per_input[(int(p), int(o))] += 1
    for (p, o), n in per_input.items():
        if n > 1:
            found.add("duplicate-output", {"input": [p, o], "times": n})
        if o >= final_committed.get(p, 0):
            found.add("output-ahead-of-offsets",
                      {"input": [p, o], "committed": final_committed.get(p, 0)})
    for p, committed in final_committed.items():
        missing = [o for o in range(committed) if (p, o) not in per_input]
        for o in missing:
            found.add("lost-output", {"input": [p, o], "committed": committed})
    for op in ops:
        if op.f == "txn" and op.outcome == OK:
            lost = [v for v in op.value or [] if v not in seen_values]
            if lost:
                found.add("committed-txn-missing", {"txn": _brief(op), "missing": lost[:5]})
        if op.f == "txn" and op.outcome == UNKNOWN:
            counts["txn:unknown-visible"] += any(v in seen_values for v in op.value or [])
    return found.result(dict(counts))
