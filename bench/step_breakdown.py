"""Where a replicated transaction spends its time, from the nodes' step
trace (kcoord/log/step_trace.py: the `kcoord.trace` logger at DEBUG).

    breakdown({node_id: [log lines]}) -> dict

Per durable step (a client's or a coordinator's request answered by the
node leading what it writes): the median time from the request to its
write's append, the leader's fsync, the replication (leader fsynced ->
high watermark past the write: the followers fetched, fsynced and
reported), and high watermark -> answer.  Per follower fetch round that
carried records: the leader's answers (a write's append -> the first and
the last of its followers' parked fetches answered: followers read the
unfsynced tail, so they are answered before the leader's fsync, one after
the other on its loop, and the high watermark waits for the last), the
answer -> appended, the follower's fsync, fsynced -> next fetch sent,
and that fetch's way to the leader.  Counts per transaction: fsyncs
(leaders and followers) and fetch rounds carrying records.
"""
from __future__ import annotations

import bisect
import statistics

STEP_APIS = {22: "InitProducerId", 24: "AddPartitionsToTxn", 0: "Produce acks=all",
             25: "AddOffsetsToTxn", 28: "TxnOffsetCommit", 26: "EndTxn",
             27: "WriteTxnMarkers (coordinator -> leader)"}
FETCH = 1
REPLICA_CLIENT = "kcoord-replica-"


def parse(lines) -> list[tuple[float, str, list[str]]]:
    """(time, event, fields) of the trace lines among a node's log lines."""
    out = []
    for line in lines:
        at = line.find("kcoord.trace: ")
        if at < 0:
            continue
        parts = line[at + len("kcoord.trace: "):].split()
        if len(parts) >= 2:
            out.append((float(parts[1]), parts[0], parts[2:]))
    out.sort(key=lambda e: e[0])
    return out


def _ms(values) -> float | None:
    return round(1000 * statistics.median(values), 2) if values else None


def _writes(events) -> list[dict]:
    """Each traced write of a node: its sync, flushed, replicated times and logs."""
    by_id: dict[str, dict] = {}
    for t, name, f in events:
        if name == "sync":
            by_id[f[0]] = {"sync": t, "logs": f[1] if len(f) > 1 else ""}
        elif name in ("flushed", "replicated") and f and f[0] in by_id:
            by_id[f[0]][name] = t
    return [w for w in by_id.values() if "replicated" in w and "flushed" in w]


def _requests(events, since: float) -> list[dict]:
    """Each request of a step API in and out of a node, after `since`."""
    open_: dict[tuple, float] = {}
    out = []
    for t, name, f in events:
        if name not in ("req", "ans") or len(f) < 2 or t < since:
            continue
        api, client = int(f[0]), f[2] if len(f) > 2 else ""
        if api not in STEP_APIS:
            continue
        key = (api, f[1], client)
        if name == "req":
            open_[key] = t
        elif key in open_:
            label = STEP_APIS[api]
            if api == 24 and client.startswith("kcoord-"):
                label = "AddPartitionsToTxn verify (a leader asks the coordinator)"
            out.append({"step": label, "req": open_.pop(key), "ans": t})
    return out


def _first_after(times: list[float], t: float) -> float | None:
    i = bisect.bisect_right(times, t)
    return times[i] if i < len(times) else None


def breakdown(node_lines: dict[int, list[str]], transactions: int) -> dict:
    nodes = {n: parse(lines) for n, lines in node_lines.items()}
    starts = [t for ev in nodes.values() for t, name, f in ev if name == "req" and f[:1] == ["22"]]
    since = min(starts) if starts else 0.0
    steps: dict[str, dict[str, list]] = {}
    fsyncs = {"leader": 0, "follower": 0}
    rounds = 0
    first_answer, last_answer = [], []
    to_append, follower_fsync, refetch, to_leader = [], [], [], []
    answers_to: dict[tuple[int, str], list[float]] = {}   # (leader, follower) -> fetch answers
    reqs_from: dict[tuple[int, str], list[float]] = {}    # (leader, follower) -> fetches in
    for n, ev in nodes.items():
        for t, name, f in ev:
            if name in ("req", "ans") and len(f) > 2 and f[0] == str(FETCH) \
                    and f[2].startswith(REPLICA_CLIENT):
                (answers_to if name == "ans" else reqs_from).setdefault(
                    (n, f[2][len(REPLICA_CLIENT):]), []).append(t)
    for n, ev in nodes.items():
        writes = [w for w in _writes(ev) if w["sync"] >= since]
        fsyncs["leader"] += len(writes)
        for r in _requests(ev, since):
            row = steps.setdefault(r["step"], {k: [] for k in
                                               ("total", "append", "fsync", "repl", "after")})
            row["total"].append(r["ans"] - r["req"])
            mine = [w for w in writes if r["req"] <= w["sync"] and w["replicated"] <= r["ans"]]
            if mine:
                w = max(mine, key=lambda x: x["replicated"])
                row["append"].append(w["sync"] - r["req"])
                row["fsync"].append(w["flushed"] - w["sync"])
                row["repl"].append(w["replicated"] - w["flushed"])
                row["after"].append(r["ans"] - w["replicated"])
        for w in writes:     # the leader's answers to its followers' parked fetches
            answered = []
            for (leader, _f), times in answers_to.items():
                if leader == n:
                    nxt = _first_after(times, w["sync"])
                    if nxt is not None and nxt - w["sync"] < 1.0:
                        answered.append(nxt - w["sync"])
            if answered:
                first_answer.append(min(answered))
                last_answer.append(max(answered))
        # this node as a follower: its fetch rounds that carried records
        last: dict[str, float] = {}
        for t, name, f in ev:
            if t < since or not f:
                continue
            leader = f[0]
            if name == "fetch-answer":
                last[leader] = t
            elif name == "fetch-appended" and leader in last:
                rounds += 1
                to_append.append(t - last[leader])
                last[leader + "+"] = t
            elif name == "fetch-flushed" and leader + "+" in last:
                fsyncs["follower"] += 1
                follower_fsync.append(t - last.pop(leader + "+"))
                last[leader + "!"] = t
            elif name == "fetch-sent" and leader + "!" in last:
                refetch.append(t - last.pop(leader + "!"))
                seen = reqs_from.get((int(leader), str(n)), [])
                nxt = _first_after(seen, t)
                if nxt is not None and nxt - t < 1.0:
                    to_leader.append(nxt - t)
    per = max(transactions, 1)
    return {
        "steps": {name: {"requests": len(v["total"]), "total_ms": _ms(v["total"]),
                         "to_append_ms": _ms(v["append"]), "leader_fsync_ms": _ms(v["fsync"]),
                         "replication_ms": _ms(v["repl"]), "hw_to_answer_ms": _ms(v["after"])}
                  for name, v in steps.items()},
        "follower_round": {"append_to_first_answer_ms": _ms(first_answer),
                           "append_to_last_answer_ms": _ms(last_answer),
                           "answer_to_appended_ms": _ms(to_append),
                           "follower_fsync_ms": _ms(follower_fsync),
                           "fsynced_to_next_fetch_ms": _ms(refetch),
                           "next_fetch_to_leader_ms": _ms(to_leader)},
        "per_transaction": {"leader_fsyncs": round(fsyncs["leader"] / per, 2),
                            "follower_fsyncs": round(fsyncs["follower"] / per, 2),
                            "fetch_rounds_with_records": round(rounds / per, 2)},
        "transactions": transactions,
    }


def tables(result: dict) -> list[str]:
    """Markdown of a breakdown."""
    from bench.common import table
    order = list(STEP_APIS.values())
    rows = [[name, s["requests"], s["total_ms"], s["to_append_ms"], s["leader_fsync_ms"],
             s["replication_ms"], s["hw_to_answer_ms"]]
            for name, s in sorted(result["steps"].items(),
                                  key=lambda kv: order.index(kv[0]) if kv[0] in order else 99)]
    fr = result["follower_round"]
    per = result["per_transaction"]
    return [
        table(["step", "requests", "total ms", "request -> append", "leader fsync",
               "replication (leader fsynced -> high watermark)", "high watermark -> answer"],
              rows),
        "",
        "One follower fetch round carrying records (medians, ms):",
        "",
        table(["leader append -> first follower's parked fetch answered",
               "-> last follower's answered", "answer -> appended (follower)",
               "follower fsync", "fsynced -> next fetch sent", "next fetch -> leader"],
              [[fr["append_to_first_answer_ms"], fr["append_to_last_answer_ms"],
                fr["answer_to_appended_ms"], fr["follower_fsync_ms"],
                fr["fsynced_to_next_fetch_ms"], fr["next_fetch_to_leader_ms"]]]),
        "",
        f"Per transaction ({result['transactions']} traced): {per['leader_fsyncs']} leader "
        f"writes fsynced and replicated, {per['follower_fsyncs']} follower fsyncs, "
        f"{per['fetch_rounds_with_records']} follower fetch rounds carrying records "
        "(two followers each).",
    ]
