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
heartbeats and the load replay, 8 paired runs of 5 measured seconds each
(about 6-7 minutes on 2 quiet cores; no pair starts that would end past
RUNTIME_COMPARE_BUDGET_S, 450 s, after the data is generated, so a loaded
machine gives fewer pairs, at least 2, rather than a longer run), results in
bench/results/runtime_compare_hot_paths.md; its "paired" column (the median
of each pair's after/before) is the figure, as it cancels slow drifts of
the machine's load:

    git worktree add --detach ../kcoord-before 626dd63
    git worktree add --detach ../kcoord-after main
    cd ../kcoord-after && KCOORD_BASE_TREE=../kcoord-before KCOORD_AFTER_TREE=. \\
      RUNTIME_COMPARE_SETTINGS=group.coordinator.append.linger.ms=10 \\
      RUNTIME_COMPARE_ONLY=hot_paths python -m bench runtime_compare

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
def offset_commit(which: str, args) -> dict:
    from .offset_commit import PARTITIONS, TOPIC, create_topic
    server = start(which)
    try:
        create_topic(server.bootstrap)
        connections = 20 if args.quick else 100
        spec = {"port": server.port, "pid": server.pid, "kind": "offset_commit",
                "topic": TOPIC, "partitions": PARTITIONS, "version": 8,
                "connections": connections, "depth": 8,
                "requests": 20_000 if args.quick else 200_000,
                "seconds": args.seconds or (5 if args.quick else 10),
                "warmup": connections * 8 * 3}
        return run_loadgen(spec, timeout=spec["seconds"] * 3 + 180)
    finally:
        server.stop()


def classic_heartbeat(which: str, args) -> dict:
    server = start(which, {"group.initial.rebalance.delay.ms": "0"})
    try:
        groups = 20 if args.quick else 100
        spec = {"port": server.port, "pid": server.pid, "groups": groups, "per_group": 10,
                "connections": 10, "requests": 100_000 if args.quick else 400_000,
                "seconds": args.seconds or (5 if args.quick else 10),
                "warmup": groups * 10 * 20, "session_timeout_ms": 10_000,
                "setup_seconds": 90, "group_prefix": f"cmp-hb-{which}"}
        return run_loadgen(spec, spec["seconds"] * 3 + 210, module="bench.classic_heartbeat")
    finally:
        server.stop()


def consumer_heartbeat(which: str, args) -> dict:
    from .consumer_heartbeat import create_topic
    server = start(which)
    try:
        create_topic(server.bootstrap)
        groups = 20 if args.quick else 100
        spec = {"port": server.port, "pid": server.pid, "groups": groups, "per_group": 10,
                "connections": 10, "requests": 100_000 if args.quick else 400_000,
                "seconds": args.seconds or (5 if args.quick else 10), "rounds": 1,
                "warmup": groups * 10 * 20, "setup_seconds": 180,
                "group_prefix": f"cmp-cghb-{which}"}
        return run_loadgen(spec, timeout=spec["seconds"] + 460, module="bench.consumer_heartbeat")
    finally:
        server.stop()


def load_replay(which: str, args, data_dir: Path) -> dict:
    from .load import measure
    for snapshot in data_dir.rglob(SNAPSHOT_FILE):
        snapshot.unlink()  # every run replays the whole log
    with tree(TREES[which]):
        return measure(data_dir, timeout=600, settings=SETTINGS)


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
    "offset_commit": (offset_commit, "server_cpu_us_per_request", "us CPU/commit"),
    "classic_heartbeat": (classic_heartbeat, "server_cpu_us_per_request", "us CPU/heartbeat"),
    "consumer_heartbeat": (consumer_heartbeat, "server_cpu_us_per_request", "us CPU/heartbeat"),
    "load_replay": (None, "records_per_cpu_s", "records/CPU-s"),
    "pipeline_decoder": (None, "records_per_cpu_s", "records/CPU-s"),
}


# Issue 22's figure: the four hot paths, paired runs, short enough for one
# quiet-machine run (about 6-8 minutes on 2 cores)
HOT_PATHS = ["offset_commit", "classic_heartbeat", "consumer_heartbeat", "load_replay"]
HOT_PATHS_REPS, HOT_PATHS_SECONDS = 8, 5.0
HOT_PATHS_BUDGET_S = 450  # no rep starts that would end past this (the run stays under 8 min)


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
    records = 200_000 if args.quick else 2_000_000
    tmp = Path(tempfile.mkdtemp(prefix="kcoord-cmp-"))
    runs: dict[str, dict[str, list]] = {w: {"before": [], "after": []} for w in names}
    generated: dict = {}
    print(f"[bench] runtime_compare: {', '.join(names)}; {reps} paired runs; "
          f"load average {loadavg()}", flush=True)
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
    return report(runs, reps, records, generated, args, only, label)


def _one_run(name: str, which: str, args, data: Path, pipeline_data: Path) -> dict:
    fn = WORKLOADS[name][0]
    if fn is not None:
        return fn(which, args)
    if name == "load_replay":
        return load_replay(which, args, data)
    return pipeline_decoder(which, args, pipeline_data)


def _value(r: dict, key: str):
    v = r.get(key)
    return v if isinstance(v, (int, float)) else None


def _paired(before: list, after: list) -> list[float]:
    """after/before - 1 (percent) of the runs made back to back (same rep)."""
    return [(a - b) / b * 100 for b, a in zip(before, after) if a is not None and b]


def report(runs: dict, reps: int, records: int, generated: dict, args,
           only: list[str] | None = None, label: str | None = None) -> dict:
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
        paired = _paired(values["before"], values["after"])
        loads = [_load1(r["loadavg"][0]) for w in ("before", "after") for r in runs[name][w]]
        errors = [r["error"] for w in ("before", "after") for r in runs[name][w] if "error" in r]
        summary[name] = {"unit": unit, "before": med["before"], "after": med["after"],
                         "change_pct": change, "paired_change_pct": median(paired),
                         "paired_changes_pct": paired, "runs": values,
                         "loadavg_at_start": loads, "errors": errors}
        fmt = (lambda v: "-" if v is None else f"{v:,.1f}")
        pct = (lambda v: "-" if v is None else f"{v:+.1f}%")
        rows.append([name, unit, fmt(med["before"]), fmt(med["after"]), pct(change),
                     pct(median(paired)), " ".join(f"{v:+.0f}" for v in sorted(paired)),
                     " ".join(fmt(v) for v in values["before"]),
                     " ".join(fmt(v) for v in values["after"]),
                     f"{min(loads):.1f}-{max(loads):.1f}" if loads else "-",
                     "; ".join(errors)[:200] or ""])
    head = (f"before = {BASE_TREE} ({_rev(BASE_TREE)}), after = {AFTER_TREE} ({_rev(AFTER_TREE)}); "
            f"{reps} runs each, alternating (before, after, then after, before, ...); "
            "change: of the medians; paired: the median of each rep's after/before."
            + (f" Both trees with {SETTINGS}." if SETTINGS else "")
            + (f" {args.seconds:g} s measured per server run." if args.seconds else ""))
    md = [head]
    if only:
        md.append("Only " + ", ".join(only) + " (RUNTIME_COMPARE_ONLY"
                  + (f"={label}" if label else "") + ").")
    if "load_replay" in runs:
        md.append(f"Load replay: {records:,} OffsetCommit records (200 commits per key) in "
                  f"{generated.get('bytes', 0) / 1e6:.0f} MB, clean restart; records per "
                  "CPU-second of the server (and its load workers) between listening and 'all "
                  "shards loaded' (higher is better).")
    md.append("CPU per request: the server's user+system CPU over the measured phase divided "
              "by the requests answered (lower is better).")
    if "pipeline_decoder" in runs:
        md.append("Pipeline decoder: bench/pipeline_bench.py's decode_rate (the lag pipeline's "
                  "pure-Python decoder, one process, no Spark) over a generated log of "
                  f"{100_000 if args.quick else 1_000_000:,} commits.")
    md += ["The machine may be shared with other test runs: the load average at the start of "
           "each run is given.", "",
           table(["workload", "unit", "before", "after", "change", "paired",
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
