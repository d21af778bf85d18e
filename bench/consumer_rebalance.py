"""KIP-848 rebalance convergence (issue 6): a new confluent-kafka consumer
(group.protocol=consumer) joins a stable group of 2, 9 or 49 (so groups of
3, 10 and 50); how long from its subscribe() until every member holds its
new assignment?  The same scenario against kcoord and the librdkafka mock
cluster (the only peer with KIP-848; Tansu has no ConsumerGroupHeartbeat)
in one run.

    python -m bench consumer_rebalance [--quick] [--peers kcoord,mock]

How it is measured:
- both servers get the same group settings: heartbeat interval HEARTBEAT_MS
  and session timeout SESSION_MS (kcoord: group.consumer.heartbeat.interval.ms
  and its minimum, group.consumer.session.timeout.ms; the mock:
  rd_kafka_mock_set_group_consumer_heartbeat_interval_ms and
  _session_timeout_ms through ctypes, in bench/mock_helper.py's process); the server picks the assignor
  (kcoord: uniform, its default; the mock: its simple range assignment);
- consumers (confluent-kafka, group.protocol=consumer, no client-side
  assignor settings) live in a few worker processes (`python -m
  bench.consumer_rebalance worker`), one polling thread per consumer; the
  worker prints a timestamped event (CLOCK_MONOTONIC, shared by all
  processes) from every on_assign, on_revoke and on_lost callback.  With
  KIP-848 these callbacks are incremental (partitions added, partitions
  taken away), so each member's holding is the sum of its callbacks;
- the new consumer is created (bootstrap and coordinator lookup happen
  then) and 1 s later subscribes: t0 is taken right before subscribe(),
  after which its first ConsumerGroupHeartbeat (epoch 0) leaves;
- converged = the time of the last callback after which the members'
  holdings cover the topic's partitions exactly once and are balanced
  (largest minus smallest at most one; both servers' assignors balance a
  single topic), with no further callback within SETTLE_S, minus t0;
- each trial then closes the new consumer (a leave heartbeat, epoch -1)
  and waits until the others are converged again (reported too).

A KIP-848 join cannot finish within one heartbeat: the new member's
partitions are held by the others, who learn at their next heartbeat that
they must give some up (up to one interval), revoke and acknowledge at once
(librdkafka sends that heartbeat without waiting), and the new member gets
the released partitions at its own next heartbeat (up to one more
interval).  So both servers are expected near one to two heartbeat
intervals; the interval is a server setting, the same for both here.
"""
from __future__ import annotations

import json
import queue
import sys
import time
import uuid

from .common import MockServer, start_peer, table, timed, write_results
from .rebalance_common import (CALLBACKS, EventPump, Worker, join_one, leave_one,
                               measure_sizes, run_worker, start_group, stats)

HEARTBEAT_MS = 1000
SESSION_MS = 45000
PARTITIONS = 100
TOPIC = "bench-consumer-rebalance"
SETTLE_S = 2.5          # no callback for this long after convergence: the group is stable
STABLE_TIMEOUT_S = 120  # bound on every wait for a group to settle


def consumer_config(bootstrap: str, group: str) -> dict:
    return {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "socket.nagle.disable": True, "log_level": 3}


# ================================================================ orchestration
class Group(EventPump):
    """The orchestrator's view of one group: every member's incremental callbacks."""

    def __init__(self, events: queue.Queue) -> None:
        super().__init__(events)
        self.holding: dict[int, set[int]] = {}
        self.log: list[tuple[float, int, str, list[int]]] = []  # (t, member, kind, partitions)

    def on_callback(self, kind: str, k: int, t: float, parts: list[int]) -> None:
        held = self.holding.setdefault(k, set())
        if kind == "assign":
            held.update(parts)
        else:
            held.difference_update(parts)
        self.log.append((t, k, kind, parts))

    def double_owned(self) -> int:
        """Assigns (replayed in time order) of a partition another member had not
        yet given up per its callbacks."""
        owner: dict[int, int] = {}
        count = 0
        for t, k, kind, parts in sorted(self.log, key=lambda e: e[0]):
            for p in parts:
                if kind == "assign":
                    if owner.get(p, k) != k:
                        count += 1
                    owner[p] = k
                elif owner.get(p) == k:
                    del owner[p]
        return count

    def converged(self, members: set[int]) -> bool:
        """The members' holdings cover the topic exactly once, balanced."""
        sizes = [len(self.holding.get(k, ())) for k in members]
        seen: list[int] = []
        for k in members:
            seen.extend(self.holding.get(k, ()))
        return (len(seen) == PARTITIONS and set(seen) == set(range(PARTITIONS))
                and max(sizes) - min(sizes) <= 1)

    def wait_stable(self, members: set[int], since: float, timeout: float) -> float | None:
        """The time of the last callback once `members` are converged and no callback
        came for SETTLE_S (since: that callback must not be older); None on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.pump(0.05)
            if self.converged(members):
                last = max((t for t, *_ in self.log), default=0.0)
                if not self.pump(SETTLE_S):
                    return last if last >= since else since
        return None


def measure(peer, size: int, trials: int, workers_n: int) -> dict:
    group_id = f"bench-cg-rebalance-{peer.name.split()[0]}-{size}-{uuid.uuid4().hex[:8]}"
    events: queue.Queue = queue.Queue()
    group = Group(events)
    workers = [Worker("bench.consumer_rebalance", {"bootstrap": peer.bootstrap,
                                                   "group": group_id, "topic": TOPIC,
                                                   "worker": i}, events)
               for i in range(workers_n)]
    out: dict = {"size": size, "trials": [], "workers": workers_n}
    try:
        # ------------------------------------------------ the first size-1
        members = start_group(group, workers, size - 1, SETTLE_S, STABLE_TIMEOUT_S, out)
        if members is None:
            return out
        next_id = len(members)
        for trial in range(trials):
            k = next_id
            next_id += 1
            w = workers[trial % workers_n]
            # 1 s to bootstrap and find its coordinator
            t0, done = join_one(group, w, k, members, 1.0, STABLE_TIMEOUT_S)
            row: dict = {"trial": trial}
            if done is None:
                row["error"] = f"no convergence within {STABLE_TIMEOUT_S}s"
                out["trials"].append(row)
                break
            after = [e for e in group.log if e[0] >= t0]
            revokes = [e[0] for e in after if e[2] == "revoke" and e[1] != k]
            new_assigns = [e[0] for e in after if e[2] == "assign" and e[1] == k]
            row.update({
                "converged_ms": (done - t0) * 1000,
                "new_member_first_assign_ms": (min(new_assigns) - t0) * 1000
                if new_assigns else None,
                "first_revoke_ms": (min(revokes) - t0) * 1000 if revokes else None,
                "last_revoke_ms": (max(revokes) - t0) * 1000 if revokes else None,
                "callbacks": len(after),
                "new_member_assign_callbacks": len(new_assigns),
            })
            # ------------------------------------ the new consumer leaves again
            row["leave_converged_ms"] = leave_one(group, w, k, members, STABLE_TIMEOUT_S)
            group.holding.pop(k, None)
            out["trials"].append(row)
            print(f"[bench]   {peer.name} size {size} trial {trial}: {row}", flush=True)
            if row["leave_converged_ms"] is None:
                break
        out["errors"] = group.errors[:10]
        out["double_owned"] = group.double_owned()
        return out
    finally:
        for w in workers:
            w.stop()


def run(args) -> dict:
    sizes = [3, 10] if args.quick else [3, 10, 50]
    trials = 2 if args.quick else 5
    results: dict = {}
    for name in args.peers:
        if name == "tansu":
            results[name] = {"error": "no KIP-848: Tansu does not serve ConsumerGroupHeartbeat "
                             "(see /work/shared/PEERS.md)"}
            continue
        with timed(f"consumer_rebalance against {name}"):
            try:
                if name == "kcoord":
                    peer = start_peer("kcoord", settings={
                        "group.consumer.heartbeat.interval.ms": str(HEARTBEAT_MS),
                        "group.consumer.min.heartbeat.interval.ms": str(HEARTBEAT_MS),
                        "group.consumer.session.timeout.ms": str(SESSION_MS)})
                elif name == "mock":
                    peer = MockServer(topics=[(TOPIC, PARTITIONS)], helper_args=[
                        "--heartbeat-ms", str(HEARTBEAT_MS), "--session-ms", str(SESSION_MS)])
                    peer.start()
                else:
                    raise RuntimeError(f"unknown peer {name}")
            except Exception as exc:
                results[name] = {"error": f"could not start: {exc}"}
                continue
            topic = None if name == "mock" else (TOPIC, PARTITIONS)
            results[name] = measure_sizes(peer, topic, sizes, trials, measure)
    return report(results, sizes, trials)


def report(results: dict, sizes: list[int], trials: int) -> dict:
    rows, summary = [], {}
    for name, r in results.items():
        if "error" in r and not r.get("sizes"):
            rows.append([name, "-", "-", "-", "-", "-", "-", "-", "-", r["error"]])
            continue
        for size in sizes:
            s = r["sizes"].get(str(size), {})
            ok = [t for t in s.get("trials", []) if "converged_ms" in t]
            conv = stats([t["converged_ms"] for t in ok])
            leave = stats([t["leave_converged_ms"] for t in ok
                            if t.get("leave_converged_ms") is not None])
            first = stats([t["new_member_first_assign_ms"] for t in ok
                            if t.get("new_member_first_assign_ms") is not None])
            last_revoke = stats([t["last_revoke_ms"] for t in ok
                                  if t.get("last_revoke_ms") is not None])
            summary[(name, size)] = conv
            notes = []
            if s.get("error"):
                notes.append(s["error"])
            notes += [t["error"] for t in s.get("trials", []) if "error" in t]
            if s.get("errors"):
                notes.append(f"client errors: {s['errors'][:2]}")
            if s.get("double_owned"):
                notes.append(f"{s['double_owned']} assigns of a partition another member "
                             "still held (per the callbacks)")
            rows.append([name, size, conv.get("n", 0), conv.get("median"), conv.get("min"),
                         conv.get("max"), first.get("median"), last_revoke.get("median"),
                         leave.get("median"), "; ".join(notes) or "ok"])
    lines = []
    for size in sizes:
        k = summary.get(("kcoord", size), {})
        m = summary.get(("mock", size), {})
        if k and m:
            lines.append(f"- group of {size}: kcoord median {k['median']:,.0f} ms (worst "
                         f"{k['max']:,.0f}), librdkafka mock median {m['median']:,.0f} ms "
                         f"(worst {m['max']:,.0f}): kcoord "
                         + ("faster" if k["median"] < m["median"] else "NOT faster")
                         + f" ({k['median'] / HEARTBEAT_MS:.1f} vs "
                           f"{m['median'] / HEARTBEAT_MS:.1f} heartbeat intervals)")
        else:
            lines.append(f"- group of {size}: " + ", ".join(
                f"{n} {summary[(n, size)]['median']:,.0f} ms" if summary.get((n, size))
                else f"{n} not measured" for n in ("kcoord", "mock")))
    sections = [
        f"A group of N confluent-kafka consumers with group.protocol=consumer (KIP-848; N-1 "
        f"stable, then one more joins) on a {PARTITIONS}-partition topic; the server assigns "
        f"(kcoord: uniform, its default; librdkafka mock: its simple range assignment); both "
        f"servers use a heartbeat interval of {HEARTBEAT_MS} ms and a session timeout of "
        f"{SESSION_MS} ms. Consumers are spread over min(5, N) worker processes, one polling "
        f"thread each; {trials} trials per size (each trial adds a consumer, measures, then "
        "closes it and waits for the group to settle). Times are CLOCK_MONOTONIC stamps taken "
        "in the (incremental) on_assign / on_revoke / on_lost callbacks. t0 = the new "
        "consumer's subscribe() (created 1 s earlier, so its bootstrap and coordinator lookup "
        "are done). converged = the last callback after which the members' holdings cover the "
        "topic exactly once and are balanced, with no callback following for "
        f"{SETTLE_S} s, minus t0. first assign = the new consumer's first on_assign; last "
        "revoke = the last old member's on_revoke (each learns of the rebalance at its next "
        "heartbeat); leave = the same convergence after the new consumer's close() (a leave "
        "heartbeat).",
        "",
        table(["server", "N", "trials", "converged median ms", "min ms", "max ms",
               "first assign median ms", "last revoke median ms", "leave converged median ms",
               "notes"], rows),
        "",
        "Side by side (no numeric goal in issue 6 for this item):",
        "",
        *lines,
        "",
        "A KIP-848 join takes one to two heartbeat intervals by design; the servers do not "
        "push, they answer every heartbeat at once. The new member's first heartbeat gets "
        "nothing (every partition is held); each old member learns of the new target at its "
        "next heartbeat, within one interval, and revokes (acknowledged at once); the new "
        "member receives the released partitions at its own next heartbeat, one interval "
        "after its first. With a sticky assignor (kcoord's uniform) only the new member's "
        "share moves, so every release happens before that second heartbeat and the join "
        "converges in one interval at any group size. The mock's range assignment shifts the "
        "ranges of the old members too when one joins, so an old member may have to wait for "
        "its neighbour to release before it gets its new partitions at a later heartbeat: up "
        "to two intervals, more often the larger the group. kcoord answers a heartbeat that "
        "writes records (the join, and the one that hands the new member its partitions) "
        "only once they are fsynced (a few ms each on this disk); the mock keeps nothing on "
        "disk.",
    ]
    raw = {"results": results, "heartbeat_interval_ms": HEARTBEAT_MS,
           "session_timeout_ms": SESSION_MS, "partitions": PARTITIONS, "settle_s": SETTLE_S}
    md = write_results("consumer_rebalance",
                       "KIP-848 consumer group rebalance convergence (confluent-kafka, "
                       "group.protocol=consumer)", sections, raw)
    print(md.read_text())
    return raw


# ===================================================================== worker
def worker(spec: dict) -> None:
    run_worker(spec, consumer_config, CALLBACKS)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "worker":
        worker(json.loads(sys.argv[2]))
