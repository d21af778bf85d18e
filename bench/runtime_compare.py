"""Issue 11 (the runtime reshaped): kcoord before and after, side by side in
one run, on the hot paths the reshaping touched: OffsetCommit CPU per
commit, classic Heartbeat and KIP-848 ConsumerGroupHeartbeat CPU per
request, and the load's replay rate.

"before" is a checkout of the tree before the change (a git worktree, path
in KCOORD_BASE_TREE, default /work/wt/runtime-base); "after" is this tree,
or the checkout in KCOORD_AFTER_TREE (so edits made while it runs do not
change what is measured).
The two servers take turns, run after run (before, after, before, ...), so
each sees the same spread of load from the rest of the machine; each run
records the load average, and the figures are medians over the runs.

    python -m bench runtime_compare [--quick] [--seconds S]

RUNTIME_COMPARE_ONLY=consumer_heartbeat[,...] runs only the named workloads
(no load or pipeline data generated unless named) and writes
bench/results/runtime_compare_<names>.md/json instead.
RUNTIME_COMPARE_ONLY=hot_paths is issue 22's figure: OffsetCommit, both
heartbeats and the load replay, results in
bench/results/runtime_compare_hot_paths.md. Its request workloads run in
paired turns (bench/turns.py): per round, fresh servers of both trees run at
once, each with its load generator set up and warmed up, and the generators
take 0.5 s turns A B, B A, ... (2 pairs discarded, 30 kept, 3 rounds), servers
pinned to CPU 0 and generators to CPU 1; the figure is the median of the
90 per-pair changes with its bootstrap 95 % interval, which decides "within
5 %" when it lies below +5 %. The load replay (a 6 M-record log) keeps whole
paired restarts, up to 8, none starting past RUNTIME_COMPARE_BUDGET_S (300 s)
after the turns and the log's generation. About 10 minutes on 2 quiet cores
(with 20 pairs it took 12 under load 1-26):

    git worktree add --detach /tmp/kcoord-before 626dd63
    git worktree add --detach /tmp/kcoord-after main
    cd /tmp/kcoord-after && KCOORD_BASE_TREE=/tmp/kcoord-before KCOORD_AFTER_TREE=. \\
      RUNTIME_COMPARE_SETTINGS=group.coordinator.append.linger.ms=10 \\
      RUNTIME_COMPARE_ONLY=hot_paths python -m bench runtime_compare

An A/A run (both variables naming the same tree) shows the bench's own
spread: its intervals must contain 0.
RUNTIME_COMPARE_TURNS=rounds,pairs,seconds changes the turns (0: whole runs
as for the other workloads; set, it also turns the request workloads of any
RUNTIME_COMPARE_ONLY list); RUNTIME_COMPARE_PIN=0 leaves the placement to
the scheduler.
RUNTIME_COMPARE_REPS=N: N runs of each tree (default 3, 2 with --quick).
RUNTIME_COMPARE_SETTINGS=key=value,...: server settings for both trees (to
pin a default that changed between them, e.g. the append linger).
The load replay removes the coordinator snapshots beside the logs before
each run (a tree that writes them would otherwise replay nothing the next
time).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path

from .common import ROOT, KcoordServer, loadavg, median, run_loadgen, table, timed, write_results
from .turns import (SERVER_CPU, TurnTaker, alternate, bootstrap_interval, paired_changes, pin,
                    pin_cpus, us_per_request)

BASE_TREE = Path(os.environ.get("KCOORD_BASE_TREE", "/work/wt/runtime-base")).resolve()
AFTER_TREE = Path(os.environ.get("KCOORD_AFTER_TREE", ROOT)).resolve()
TREES = {"before": BASE_TREE, "after": AFTER_TREE}
SETTINGS = dict(kv.split("=", 1) for kv in os.environ.get("RUNTIME_COMPARE_SETTINGS", "").split(",")
                if "=" in kv)
SNAPSHOT_FILE = "coordinator.snapshot"  # server/shard_snapshot.py's FILE_NAME


@contextlib.contextmanager
def tree(path: Path):
    """Servers started inside run the kcoord of `path` (`python -m` puts the
    working directory first on sys.path)."""
    cwd, pp = os.getcwd(), os.environ.get("PYTHONPATH")
    os.chdir(path)
    os.environ["PYTHONPATH"] = str(path)
    try:
        yield
    finally:
        os.chdir(cwd)
        if pp is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = pp


def start(which: str, settings: dict | None = None, data_dir: Path | None = None) -> KcoordServer:
    server = KcoordServer(settings={**SETTINGS, **(settings or {})}, data_dir=data_dir)
    with tree(TREES[which]):
        server.start()
    return server


# ------------------------------------------------------------ workloads
# Each request workload: a server's settings, and a job that prepares the
# started server and returns (generator spec, generator module, timeout).
def offset_commit_job(server: KcoordServer, args) -> tuple[dict, str, float]:
    from .offset_commit import PARTITIONS, TOPIC, create_topic
    create_topic(server.bootstrap)
    connections = 20 if args.quick else 100
    spec = {"port": server.port, "pid": server.pid, "kind": "offset_commit",
            "topic": TOPIC, "partitions": PARTITIONS, "version": 8,
            "connections": connections, "depth": 8,
            "requests": 20_000 if args.quick else 200_000,
            "seconds": args.seconds or (5 if args.quick else 10),
            "warmup": connections * 8 * 3}
    return spec, "bench.loadgen", spec["seconds"] * 3 + 180


def classic_heartbeat_job(server: KcoordServer, args) -> tuple[dict, str, float]:
    groups = 20 if args.quick else 100
    spec = {"port": server.port, "pid": server.pid, "groups": groups, "per_group": 10,
            "connections": 10, "requests": 100_000 if args.quick else 400_000,
            "seconds": args.seconds or (5 if args.quick else 10),
            # long enough for a member idle while the other tree takes its turns
            "warmup": groups * 10 * 20, "session_timeout_ms": 600_000,
            "setup_seconds": 90, "group_prefix": "cmp-hb"}
    return spec, "bench.classic_heartbeat", spec["seconds"] * 3 + 210


def consumer_heartbeat_job(server: KcoordServer, args) -> tuple[dict, str, float]:
    from .consumer_heartbeat import create_topic
    create_topic(server.bootstrap)
    groups = 20 if args.quick else 100
    spec = {"port": server.port, "pid": server.pid, "groups": groups, "per_group": 10,
            "connections": 10, "requests": 100_000 if args.quick else 400_000,
            "seconds": args.seconds or (5 if args.quick else 10), "rounds": 1,
            "warmup": groups * 10 * 20, "setup_seconds": 180, "group_prefix": "cmp-cghb"}
    return spec, "bench.consumer_heartbeat", spec["seconds"] + 460


REQUEST_JOBS = {
    "offset_commit": ({}, offset_commit_job),
    "classic_heartbeat": ({"group.initial.rebalance.delay.ms": "0"}, classic_heartbeat_job),
    # sessions long enough for a member idle while the other tree's server sets up
    "consumer_heartbeat": ({"group.consumer.session.timeout.ms": "600000",
                            "group.consumer.max.session.timeout.ms": "600000"},
                           consumer_heartbeat_job),
}


def request_workload(name: str, which: str, args) -> dict:
    """One server run of a request workload: its own server, one measured phase."""
    settings, job = REQUEST_JOBS[name]
    server = start(which, settings)
    try:
        spec, module, timeout = job(server, args)
        return run_loadgen(spec, timeout, module=module)
    finally:
        server.stop()


def turns_workload(name: str, args, rounds: int, pairs: int, seconds: float) -> dict[str, list]:
    """A request workload measured in paired turns (bench/turns.py): per round
    both trees' servers run at once (fresh processes each round, the first
    to start alternating), their generators taking `seconds`-long turns."""
    settings, job = REQUEST_JOBS[name]
    pinned = pin_cpus()
    out: dict[str, list] = {"before": [], "after": []}
    for rnd in range(rounds):
        order = ["before", "after"] if rnd % 2 == 0 else ["after", "before"]
        servers: dict[str, KcoordServer] = {}
        takers: dict[str, TurnTaker] = {}
        with timed(f"runtime_compare {name} round {rnd + 1}/{rounds}: {pairs} paired turns of "
                   f"{seconds:g}s (load average {loadavg()})"):
            try:
                for which in order:
                    servers[which] = server = start(which, settings)
                    if pinned:
                        pin(server.pid, SERVER_CPU)
                    spec, module, timeout = job(server, args)
                    takers[which] = TurnTaker({**spec, "seconds": seconds}, module, pinned)
                    takers[which].ready(timeout)
                turns = alternate({w: takers[w] for w in order}, pairs, seconds + 120)
                finals = {w: takers.pop(w).finish(seconds + 120) for w in order}
                for which in ("before", "after"):
                    out[which] += [_turn_row(t, rnd, finals[which]) for t in turns[which]]
            except Exception as exc:
                for which in ("before", "after"):  # keeps the two lists paired
                    out[which].append({"error": f"round {rnd + 1}: {type(exc).__name__}: {exc}",
                                       "loadavg": [loadavg(), loadavg()]})
            finally:
                for taker in takers.values():
                    taker.proc.kill()
                for server in servers.values():
                    server.stop()
    return out


def _turn_row(turn: dict, rnd: int, final: dict) -> dict:
    """One turn as a run row; the generator's error codes (sampled) and the
    KIP-848 check that every member was still steady come from its final result."""
    n, load = turn["requests"], loadavg()
    row = {"server_cpu_us_per_request": us_per_request(turn), "round": rnd + 1,
           "server_user_us_per_request": turn["user_s"] / n * 1e6 if n else None,
           "server_system_us_per_request": turn["system_s"] / n * 1e6 if n else None,
           "requests": n, "wall_s": turn["wall_s"], "loadavg": [load, load],
           # batching: how often the server was scheduled in / made a read or write call
           "server_slices_per_request": turn["slices"] / n if n else None,
           "server_syscalls_per_request": turn["syscalls"] / n if n else None}
    bad = {k: v for k, v in (final.get("errors") or {}).items() if str(k) != "0"}
    if bad or final.get("out_of_order") or (final.get("verify") or {}).get("not_steady"):
        # the round measured error answers (e.g. expired members): not the figure
        row["error"] = f"round {rnd + 1}: error codes {bad}, verify {final.get('verify')}"[:300]
        row["server_cpu_us_per_request"] = None
    return row


def load_replay(which: str, args, data_dir: Path) -> dict:
    from .load import measure
    for snapshot in data_dir.rglob(SNAPSHOT_FILE):
        snapshot.unlink()  # every run replays the whole log
    with tree(TREES[which]):
        r = measure(data_dir, timeout=600, settings=SETTINGS)
        # the replay runs beside the listener, so the CPU read at "listening"
        # may already hold part of it: count from the start and take off
        # the same tree's start on an empty data dir instead
        empty_dir = Path(tempfile.mkdtemp(prefix="kcoord-cmp-empty-"))
        try:
            empty = measure(empty_dir / "data", timeout=600, settings=SETTINGS)
        finally:
            shutil.rmtree(empty_dir, ignore_errors=True)
    r["empty_start_cpu_s"] = empty.get("server_cpu_s")
    return r


def _replay_from_start(rows: list[dict]) -> None:
    """records/CPU-s from the start, less the median of the tree's empty
    starts (one start's CPU is too noisy to take off run by run)."""
    startup = median([r.get("empty_start_cpu_s") for r in rows])
    for r in rows:
        cpu = r.get("server_cpu_s")
        if startup is not None and cpu is not None and cpu > startup:
            r["records_per_cpu_s_from_start"] = r["records_loaded"] / (cpu - startup)


def pipeline_decoder(which: str, args, data_dir: Path) -> dict:
    """The lag pipeline's decoder (bench/pipeline_bench.decode_rate) in a
    process of its own running the tree's kcoord."""
    import json
    import subprocess
    import sys
    code = ("import json, sys; from pathlib import Path; "
            "from bench.pipeline_bench import decode_rate; "
            f"print(json.dumps(decode_rate(Path({str(data_dir)!r}), 10**9)))")
    path = TREES[which]
    out = subprocess.run([sys.executable, "-c", code], cwd=path, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(path)}, timeout=600)
    lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
    if not lines:
        return {"error": f"decoder run failed: {out.stderr[-500:]}"}
    return json.loads(lines[-1])


# ------------------------------------------------------------ orchestration
WORKLOADS = {
    "offset_commit": (request_workload, "server_cpu_us_per_request", "us CPU/commit"),
    "classic_heartbeat": (request_workload, "server_cpu_us_per_request", "us CPU/heartbeat"),
    "consumer_heartbeat": (request_workload, "server_cpu_us_per_request", "us CPU/heartbeat"),
    "load_replay": (None, "records_per_cpu_s_from_start", "records/CPU-s"),
    "pipeline_decoder": (None, "records_per_cpu_s", "records/CPU-s"),
}


# Issue 22's figure: the four hot paths, short enough for one quiet-machine
# run (about 8-10 minutes on 2 cores); the request workloads in paired turns
HOT_PATHS = ["offset_commit", "classic_heartbeat", "consumer_heartbeat", "load_replay"]
HOT_PATHS_REPS, HOT_PATHS_SECONDS = 8, 5.0
HOT_PATHS_BUDGET_S = 300  # no replay rep starts that would end past this (after the turns)
TURNS = (3, 30, 0.5)  # rounds (fresh servers), paired turns per round, seconds per turn


def run(args) -> dict:
    if not (BASE_TREE / "kcoord").is_dir():
        raise SystemExit(f"no base tree at {BASE_TREE} (git worktree add {BASE_TREE} <commit>)")
    only = [w for w in os.environ.get("RUNTIME_COMPARE_ONLY", "").split(",") if w]
    label = None
    if only == ["hot_paths"]:
        label, only = "hot_paths", list(HOT_PATHS)
        args.seconds = args.seconds or HOT_PATHS_SECONDS
    unknown = [n for n in only if n not in WORKLOADS]
    if unknown:
        raise SystemExit(f"RUNTIME_COMPARE_ONLY: unknown workload: {', '.join(unknown)}")
    default_reps = HOT_PATHS_REPS if label else (2 if args.quick else 3)
    reps = int(os.environ.get("RUNTIME_COMPARE_REPS") or default_reps)
    budget = float(os.environ.get("RUNTIME_COMPARE_BUDGET_S")
                   or (HOT_PATHS_BUDGET_S if label else 0))
    names = only or list(WORKLOADS)
    turns = _turns_setting() if label or os.environ.get("RUNTIME_COMPARE_TURNS") else None
    turned = [n for n in names if n in REQUEST_JOBS] if turns else []
    # hot_paths: a log long enough that the replay's CPU dwarfs the start-up's noise
    records = 200_000 if args.quick else (6_000_000 if label else 2_000_000)
    tmp = Path(tempfile.mkdtemp(prefix="kcoord-cmp-"))
    runs: dict[str, dict[str, list]] = {w: {"before": [], "after": []} for w in names}
    generated: dict = {}
    print(f"[bench] runtime_compare: {', '.join(names)}; "
          + (f"{', '.join(turned)} in {turns[0]} rounds of {turns[1]} paired {turns[2]:g}s turns "
             f"(pinned: {pin_cpus()}), the rest " if turned else "")
          + f"{reps} paired runs; load average {loadavg()}", flush=True)
    for name in turned:
        runs[name] = turns_workload(name, args, *turns)
    try:
        data, pipeline_data = tmp / "load-data", tmp / "pipeline-data"
        if "load_replay" in names:
            from .load import generate
            generated = generate(data, records, 200)
        if "pipeline_decoder" in names:
            from .pipeline_bench import workload_params
            from kcoord.pipeline.generate import generate as generate_pipeline_log
            generate_pipeline_log(pipeline_data, workers=1,
                                  **workload_params(100_000 if args.quick else 1_000_000))
        started, rep_s = time.monotonic(), 0.0
        for rep in range(reps):
            elapsed = time.monotonic() - started
            if budget and rep >= 2 and elapsed + rep_s > budget:
                print(f"[bench] runtime_compare: {rep} paired runs done in {elapsed:.0f}s; "
                      f"another would pass the {budget:.0f}s budget", flush=True)
                reps = rep
                break
            order = ["before", "after"] if rep % 2 == 0 else ["after", "before"]
            rep_start = time.monotonic()
            for name in names:
                if name in turned:
                    continue
                for which in order:
                    start_load = loadavg()
                    with timed(f"runtime_compare {name} {which} {rep + 1}/{reps} "
                               f"(load average {start_load})"):
                        try:
                            r = _one_run(name, which, args, data, pipeline_data)
                        except Exception as exc:
                            r = {"error": f"{type(exc).__name__}: {exc}"}
                        r["loadavg"] = [start_load, loadavg()]
                        runs[name][which].append(r)
            rep_s = time.monotonic() - rep_start
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if "load_replay" in runs:
        for which in ("before", "after"):
            _replay_from_start(runs["load_replay"][which])
    return report(runs, reps, records, generated, args, only, label, turns if turned else None)


def _turns_setting() -> tuple[int, int, float] | None:
    """RUNTIME_COMPARE_TURNS=rounds,pairs,seconds (default TURNS); 0 = whole runs instead."""
    text = os.environ.get("RUNTIME_COMPARE_TURNS", "")
    if text.strip() == "0":
        return None
    if not text:
        return TURNS
    rounds, pairs, seconds = text.split(",")
    return int(rounds), int(pairs), float(seconds)


def _one_run(name: str, which: str, args, data: Path, pipeline_data: Path) -> dict:
    if name in REQUEST_JOBS:
        return request_workload(name, which, args)
    if name == "load_replay":
        return load_replay(which, args, data)
    return pipeline_decoder(which, args, pipeline_data)


def _value(r: dict, key: str):
    v = r.get(key)
    return v if isinstance(v, (int, float)) else None


def _split_cell(split: dict, one: str, other: str) -> str:
    """'before one/other; after one/other' of the per-request medians."""
    f = (lambda v: "-" if v is None else f"{v:.2f}")
    return "; ".join(f"{f(split[f'{w}_{one}'])}/{f(split[f'{w}_{other}'])}"
                     for w in ("before", "after"))


def report(runs: dict, reps: int, records: int, generated: dict, args,
           only: list[str] | None = None, label: str | None = None,
           turns: tuple | None = None) -> dict:
    rows = []
    summary = {}
    for name, (_, key, unit) in WORKLOADS.items():
        if only and name not in only:
            continue
        values = {w: [_value(r, key) for r in runs[name][w]] for w in ("before", "after")}
        med = {w: median([v for v in values[w] if v is not None]) for w in ("before", "after")}
        change = None
        if med["before"] and med["after"]:
            change = (med["after"] - med["before"]) / med["before"] * 100
        paired = paired_changes(values["before"], values["after"])
        interval = bootstrap_interval(paired)
        split = {f"{w}_{part}": median([r.get(f"server_{part}_per_request")
                                        for r in runs[name][w]])
                 for w in ("before", "after")
                 for part in ("user_us", "system_us", "slices", "syscalls")}
        loads = [_load1(r["loadavg"][0]) for w in ("before", "after") for r in runs[name][w]]
        errors = [r["error"] for w in ("before", "after") for r in runs[name][w] if "error" in r]
        summary[name] = {"unit": unit, "before": med["before"], "after": med["after"],
                         "change_pct": change, "paired_change_pct": median(paired),
                         "paired_changes_pct": paired, "paired_interval_95_pct": interval,
                         "per_request_medians": split, "runs": values,
                         "loadavg_at_start": loads, "errors": errors}
        fmt = (lambda v: "-" if v is None else f"{v:,.1f}")
        pct = (lambda v: "-" if v is None else f"{v:+.1f}%")
        rows.append([name, unit, fmt(med["before"]), fmt(med["after"]), pct(change),
                     pct(median(paired)),
                     f"{interval[0]:+.1f}%..{interval[1]:+.1f}%" if interval else "-",
                     _split_cell(split, "user_us", "system_us"),
                     _split_cell(split, "slices", "syscalls"), " ".join(f"{v:+.0f}" for v in sorted(paired)),
                     " ".join(fmt(v) for v in values["before"]),
                     " ".join(fmt(v) for v in values["after"]),
                     f"{min(loads):.1f}-{max(loads):.1f}" if loads else "-",
                     "; ".join(errors)[:200] or ""])
    head = (f"before = {BASE_TREE} ({_rev(BASE_TREE)}), after = {AFTER_TREE} ({_rev(AFTER_TREE)}); "
            + (f"request workloads: {turns[0]} rounds (fresh servers, both trees' running at once) "
               f"of {turns[1]} paired turns of {turns[2]:g} s each (A B, B A, ...; "
               f"servers pinned to one CPU and generators to the other: {pin_cpus()}); "
               "the load replay: " if turns else "")
            + f"{reps} runs each, alternating (before, after, then after, before, ...); "
            "change: of the medians; paired: the median of each pair's after/before, with its "
            "bootstrap 95 % interval (a change is decided when the interval is on one side "
            "of the threshold)."
            + (f" Both trees with {SETTINGS}." if SETTINGS else "")
            + (f" {args.seconds:g} s measured per server run." if args.seconds else ""))
    md = [head]
    if only:
        md.append("Only " + ", ".join(only) + " (RUNTIME_COMPARE_ONLY"
                  + (f"={label}" if label else "") + ").")
    if "load_replay" in runs:
        md.append(f"Load replay: {records:,} OffsetCommit records (200 commits per key) in "
                  f"{generated.get('bytes', 0) / 1e6:.0f} MB, clean restart; records per "
                  "CPU-second of the server (and its load workers) from its start to 'all "
                  "shards loaded', less the same tree's start on an empty data dir (higher is "
                  "better; the CPU read at 'listening' may already hold part of the replay).")
    md.append("CPU per request: the server's CPU over the measured phase divided by the "
              "requests answered (lower is better); in turns it is the sum of its threads' "
              "/proc schedstat run time (ns), the user/system split from /proc stat (10 ms ticks); "
              "slices: times its threads were scheduled in, syscalls: its read+write calls "
              "(/proc io), both per request: they show a change of batching.")
    if "pipeline_decoder" in runs:
        md.append("Pipeline decoder: bench/pipeline_bench.py's decode_rate (the lag pipeline's "
                  "pure-Python decoder, one process, no Spark) over a generated log of "
                  f"{100_000 if args.quick else 1_000_000:,} commits.")
    md += ["The machine may be shared with other test runs: the load average at the start of "
           "each run is given.", "",
           table(["workload", "unit", "before", "after", "change", "paired", "paired 95%",
                  "user/system us (before; after)", "slices/syscalls (before; after)",
                  "paired changes (%)", "before runs", "after runs", "loadavg", "errors"], rows)]
    out = {"summary": summary, "runs": runs, "quick": bool(args.quick)}
    name = "runtime_compare" + ("_" + (label or "_".join(only)) if only else "")
    path = write_results(name, "Runtime reshaping: before and after in one run"
                         + (" (part)" if only and not label else ""), md, out)
    print(md[-1], f"\n[bench] written to {path}", flush=True)
    return out


def _load1(text: str) -> float:
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return float("nan")


def _rev(path: Path) -> str:
    import subprocess
    try:
        return subprocess.run(["git", "-C", str(path), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
    except Exception:
        return "?"
