"""Pipeline benchmark: generated __consumer_offsets logs -> every table, end to end.

    python bench/pipeline_bench.py                          # 10M and 100M, local[2] and cluster
    python bench/pipeline_bench.py --records 1000000        # a smaller run
    python bench/pipeline_bench.py --records 10000000 --modes local

For each record count: generate the log (not timed in the throughput), time
the pure-Python decoder on one process (records per second per core), then
run `run_pipeline` end to end (decode, commits, offsets, lag, status,
group_generations, report) on local[2] in this process, and the same job
through `kcoord pipeline run --master spark://...` on a standalone cluster of
two one-core workers on 127.0.0.1.  Results go to bench/results/pipeline.md
and pipeline.json.  Goals (issue 7): 10 M records to all tables in under 90 s
on local[2]; the data source decodes at least 1 M records per second per core.

Other engineers' test suites share the machine's two cores; the load average
at the start and end of each run is recorded beside its figures.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import RESULTS, git_rev, loadavg  # noqa: E402


def cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


class TreeCpu:
    """CPU of this process and its descendants (the Spark JVM, its Python workers):
    a thread samples each one's own utime+stime every 0.2 s and keeps the last value
    of those that exit (a reaped child's CPU is not read from its parent, which would
    count it twice).  Per-step CPU stays comparable when others' load stretches wall
    times; a process living less than 0.2 s is missed."""

    def __init__(self) -> None:
        import threading
        self.tick = os.sysconf("SC_CLK_TCK")
        self.seen: dict[tuple[int, str], float] = {}   # (pid, start time) -> CPU s
        self.stop = threading.Event()
        self.sample()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stop.wait(0.2):
            self.sample()

    def sample(self) -> None:
        parent: dict[int, int] = {}
        cpu: dict[int, tuple[str, float]] = {}
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                f = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parent[int(d.name)] = int(f[1])
            cpu[int(d.name)] = (f[19], (int(f[11]) + int(f[12])) / self.tick)
        me = os.getpid()
        for pid, (started, c) in cpu.items():
            p = pid
            while p > 1 and p != me:
                p = parent.get(p, 0)
            if p == me:
                self.seen[(pid, started)] = c

    def total(self) -> float:
        self.sample()
        return sum(self.seen.values())


def parse_count(text: str) -> int:
    text = text.strip().upper()
    mult = {"K": 10**3, "M": 10**6, "G": 10**9}.get(text[-1:], 1)
    return int(float(text.rstrip("KMG")) * mult)


def workload_params(records: int) -> dict:
    """1000 groups x 10 partitions each over 20 topics x 10 partitions, 50 log partitions
    (kcoord serve's default), commits every minute: 10 k commit records per tick."""
    return dict(groups=1000, topics=20, partitions=10, partitions_per_group=10,
                commits=records, log_partitions=50, seed=42, rate=100,
                segment_bytes=256 << 20)


def generate_log(records: int, workdir: Path, workers: int, log) -> tuple[Path, dict, float]:
    from kcoord.pipeline.generate import MANIFEST, generate
    data = workdir / f"data-{records}"
    manifest_path = data / MANIFEST
    params = workload_params(records)
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        if {k: manifest["params"].get(k) for k in params} == params:
            log(f"reusing {data}")
            return data, manifest, 0.0
        shutil.rmtree(data)
    t0 = time.time()
    manifest = generate(data, workers=workers, **params)
    took = time.time() - t0
    log(f"generated {manifest['records']['offset_commits']:,} commits "
        f"({manifest['records']['records']:,} records) in {took:.0f}s")
    return data, manifest, took


def decode_rate(data: Path, max_records: int = 2_000_000) -> dict:
    """Single-process decoder throughput over whole partitions (no Spark)."""
    from kcoord.pipeline import segments
    import pyarrow as pa
    pa.array([1]).take(pa.array([0]))  # pyarrow's first-use setup is not decoding
    n = 0
    nbytes = 0
    wall0, cpu0 = time.perf_counter(), cpu_seconds()
    for p, d in segments.partition_dirs(data):
        for rb in segments.read_partition(d, p):
            n += rb.num_rows
        nbytes += sum(path.stat().st_size for _, path in segments.segment_files(d))
        if n >= max_records:
            break
    wall, cpu = time.perf_counter() - wall0, cpu_seconds() - cpu0
    return {"records": n, "bytes": nbytes, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "records_per_cpu_s": round(n / cpu) if cpu else None,
            "records_per_wall_s": round(n / wall) if wall else None}


def serve_log(data: Path, log, listen: str | None = None):
    """`kcoord serve` over the generated data dir, started and fully loaded (its
    shards replay the log at start: that CPU is not left to overlap the run)."""
    from bench.common import KcoordServer
    # the generated records are old: no retention, no offset expiry while it runs
    server = KcoordServer({"offsets.topic.num.partitions": "50", "log.retention.ms": "-1",
                           "offsets.retention.check.interval.ms": "86400000"}, data_dir=data,
                          listen=listen)
    t0 = time.time()
    server.start()
    deadline = time.time() + 1800
    while not any("all shards loaded" in line for line in server.proc.log_lines):
        if time.time() > deadline:
            server.stop()
            raise RuntimeError("kcoord serve did not load the log in 30 min")
        time.sleep(0.5)
    log(f"kcoord serve on {server.bootstrap}, log loaded in {time.time() - t0:.0f}s")
    return server


def time_lag_cost(data: Path, bootstrap: str, wants_n: int = 10_000) -> dict:
    """The time-lag lookups alone: seconds per 1,000 lagging partitions, over the
    wire (batched Fetches) and from the data dir (header index + one pread each)."""
    import random

    from kcoord.pipeline.logend import partition_history, user_partitions
    from kcoord.pipeline.timelag import dir_lookup, wire_lookup
    rng = random.Random(1)
    ends = {(t, p): partition_history(d, 0)[-1][0] for t, p, d in user_partitions(data)}
    tps = sorted(tp for tp, end in ends.items() if end > 1)
    wants = set()
    while len(wants) < wants_n:
        t, p = tps[rng.randrange(len(tps))]
        wants.add((t, p, rng.randrange(max(1, ends[(t, p)] - 5000), ends[(t, p)])))
    out = {"lagging_partitions": len(wants), "distinct_topic_partitions": len(tps)}
    for name, lookup in (("wire", wire_lookup(bootstrap)), ("data dir", dir_lookup(data))):
        t0, c0 = time.perf_counter(), cpu_seconds()
        found = lookup(wants)
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
        out[name] = {"found": len(found), "wall_s": round(wall, 3),
                     "s_per_1000": round(wall / len(wants) * 1000, 3),
                     "client_cpu_s_per_1000": round(cpu / len(wants) * 1000, 3)}
    return out


def run_local(data: Path, out: Path, log, bootstrap_server: str | None = None) -> dict:
    from kcoord.pipeline.jobs import run_pipeline
    from kcoord.pipeline.session import build_session
    t0 = time.time()
    spark = build_session("local[2]", "kcoord-pipeline-bench", shuffle_partitions=8,
                          progress=False, conf={"spark.driver.memory": "8g",
                                                "spark.ui.enabled": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    started = time.time() - t0
    steps_cpu: dict[str, float] = {}
    tree = TreeCpu()
    last = [tree.total()]

    def step_log(msg):  # "[pipeline] NAME: 1.2s" ends each step: note its CPU too
        if msg.startswith("[pipeline] ") and ":" in msg:
            now = tree.total()
            steps_cpu[msg[11:].rsplit(":", 1)[0]] = round(now - last[0], 1)
            last[0] = now
            msg += f" ({steps_cpu[msg[11:].rsplit(':', 1)[0]]} CPU-s)"
        log(msg)
    try:
        if out.exists():
            shutil.rmtree(out)
        t0 = time.time()
        summary = run_pipeline(spark, None if bootstrap_server else data, out, log=step_log,
                               bootstrap_server=bootstrap_server)
        took = time.time() - t0
    finally:
        tree.stop.set()
        spark.stop()
    return {"session_start_s": round(started, 1), "pipeline_s": round(took, 1),
            "summary": summary, "steps_cpu_s": steps_cpu}


def run_cluster(data: Path, out: Path, workdir: Path, log) -> dict:
    from kcoord.pipeline.cluster import StandaloneCluster
    cluster = StandaloneCluster(workdir / "cluster", workers=2, cores=1, memory="6g")
    t0 = time.time()
    cluster.start()
    up = time.time() - t0
    try:
        if out.exists():
            shutil.rmtree(out)
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
        cmd = [sys.executable, "-m", "kcoord.cli", "pipeline", "run", "--data-dir", str(data),
               "--out", str(out), "--master", cluster.master_url, "--shuffle-partitions", "8",
               "--conf", "spark.executor.memory=5g", "--conf", "spark.driver.memory=4g",
               "--conf", "spark.ui.enabled=false", "--conf", "spark.ui.showConsoleProgress=false"]
        t0 = time.time()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
        took = time.time() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"cluster run failed:\n{proc.stderr[-4000:]}")
        for line in proc.stdout.splitlines() + proc.stderr.splitlines():
            if line.startswith("[pipeline]"):
                log("  cluster " + line)
        summary = json.loads((out / "summary.json").read_text())
    finally:
        cluster.stop()
    return {"cluster_start_s": round(up, 1), "pipeline_s": round(took, 1), "summary": summary}


def write_results(new_runs: list[dict], meta: dict) -> None:
    """Results of this invocation are added to those already in pipeline.json, so
    runs made at different times (and loads) stay side by side."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    runs = [dict(r, date=r.get("date", meta["date"]), git=r.get("git", meta.get("git")))
            for r in new_runs]
    path = RESULTS / "pipeline.json"
    if path.exists() and not meta.get("fresh"):
        try:
            old = json.loads(path.read_text())
            earlier = [r for r in old.get("runs", []) if r.get("date") != meta["date"]]
            runs = earlier + runs
        except ValueError:
            pass
    path.write_text(json.dumps({"meta": meta, "runs": runs}, indent=1, default=str))
    lines = [
        "# Pipeline: __consumer_offsets -> commits, offsets, group_generations, lag, status, report",
        "",
        f"- last run: {meta['date']}",
        f"- machine: {meta['machine']}",
        f"- command: `{meta['command']}`",
        "- workload: `kcoord pipeline generate` with 1000 groups x 10 partitions, 20 topics x 10 "
        "partitions, 50 __consumer_offsets partitions, one commit per partition per minute "
        "(10 k commit records per tick), special groups that lag, stall, stop and rewind",
        "- local: `run_pipeline` on local[2] in one process (driver memory 8g), shuffle partitions 8",
        "- over the wire: the same local[2] run reading __consumer_offsets and the log ends "
        "from `kcoord serve` on the generated data dir (`--bootstrap-server`; the server has "
        "loaded the log before the clock starts); goal (issue 16): <= 1.5x the data-dir run",
        "- cluster: `kcoord pipeline run --master spark://127.0.0.1:PORT`, standalone master + "
        "2 workers x 1 core (spark-daemon.sh), executor memory 5g",
        "- the two cores are shared with other engineers' test suites: see the load averages",
        "",
        "Goals (issue 7): 10 M records to all tables in under 90 s on local[2]; the data "
        "source decodes at least 1 M records per second per core. Goals (issue 26): 10 M "
        "records to all tables in <= 2x the run's own decode stage; over the wire <= 1.3x "
        "the data-dir run.",
        "",
        "`code` is the kcoord commit measured: runs before 9d5b816 predate the single decode "
        "pass (group records' raw values in the stage) and other speed-ups; runs before "
        "050c19b use the per-record decoder (no column-wise parse of commit batches); runs "
        "before ba0caee stage the records through the JVM (source -> Spark rows -> Parquet) "
        "instead of writing the stage with pyarrow in the Python tasks. Earlier runs are kept "
        "for comparison. Generation is not part of the pipeline time.",
        "",
        "| date | code | records | mode | pipeline s | records/s end to end | decode (1 process) "
        "rec/CPU-s | generate s | load avg start -> end | goal | notes |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        n = r["records"]
        rate = f"{n / r['pipeline_s']:,.0f}" if r.get("pipeline_s") else "-"
        dec = r.get("decode", {}).get("records_per_cpu_s")
        goal = "-"
        if r.get("pipeline_s") and r.get("requested") == 10_000_000 and r["mode"] == "local[2]":
            goal = "met (<90 s)" if r["pipeline_s"] < 90 else "MISSED (>=90 s)"
        notes = r.get("notes", "")
        if r.get("time_lag"):
            tl = r["time_lag"]
            notes = (notes + " " if notes else "") + (
                f"time lag: {tl['lagging_partitions']:,} lagging partitions looked up in "
                f"{tl['lookup_s']}s;")
        if r.get("time_lag_lookup"):
            tl = r["time_lag_lookup"]
            notes += " lookup cost per 1,000 lagging partitions: " + ", ".join(
                f"{k} {tl[k]['s_per_1000']}s" for k in ("wire", "data dir") if k in tl) + ";"
        if r.get("timings"):
            notes = (notes + " " if notes else "") + "steps: " + ", ".join(
                f"{k} {v:.0f}s" for k, v in r["timings"].items())
            if r["timings"].get("decode"):  # issue 26's goal: <= 2x
                notes += f"; all tables / decode stage {r['pipeline_s'] / r['timings']['decode']:.2f}x"
        cpu = r.get("steps_cpu_s")
        if cpu and cpu.get("decode"):  # the same ratio in CPU: less moved by others' load
            notes += "; CPU-s (process tree): " + ", ".join(f"{k} {v:.0f}" for k, v in cpu.items()) \
                + f"; all tables / decode stage in CPU {sum(cpu.values()) / cpu['decode']:.2f}x"
        gen = r.get("generate_s")
        gen = "reused" if gen == 0 else gen
        lines.append(
            f"| {r.get('date', '')} | {r.get('git', '?')} | {n:,} | {r['mode']} | {r.get('pipeline_s', '-')} | {rate} | "
            f"{f'{dec:,}' if dec else '-'} | {gen} | "
            f"{r.get('load_start', '?')} -> {r.get('load_end', '?')} | {goal} | {notes} |")
    # the latest measurement per log size
    decoded = {r["records"]: (r["decode"]["records_per_cpu_s"], r.get("git", "?"), r.get("date"))
               for r in runs if r.get("decode")}
    lines += ["", "Decoder goal (>= 1 M records per CPU-second, one process; latest run per log "
              "size): " + (", ".join(
                  f"{n:,} records: {'met' if rate >= 1_000_000 else 'MISSED'} ({rate:,}/s, "
                  f"code {git}, {date})" for n, (rate, git, date) in decoded.items())
                  or "not measured"), ""]
    missing = meta.get("not_run") or []
    if missing:
        lines += ["Not run in this invocation: " + "; ".join(missing), ""]
    (RESULTS / "pipeline.md").write_text("\n".join(lines))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", default="10M,100M",
                   help="comma-separated commit-record counts (e.g. 1M,10M,100M)")
    p.add_argument("--modes", default="local,cluster",
                   help="local, wire (local[2] reading from `kcoord serve` over the Kafka "
                        "protocol, with the time-lag lookup cost), cluster")
    p.add_argument("--workdir", default="/tmp/kcoord-pipeline-bench",
                   help="where generated logs and outputs go (generated logs are reused)")
    p.add_argument("--gen-workers", type=int, default=2)
    p.add_argument("--listen", default=None, metavar="127.0.0.X:PORT",
                   help="where the wire mode's server listens (default: 127.0.0.1, any port)")
    p.add_argument("--keep", action="store_true", help="keep the generated logs afterwards")
    p.add_argument("--fresh", action="store_true",
                   help="start bench/results/pipeline.* afresh instead of adding to them")
    args = p.parse_args(argv)
    counts = [parse_count(x) for x in args.records.split(",") if x.strip()]
    modes = [m.strip() for m in args.modes.split(",") if m.strip() and m.strip() != "none"]
    bad = [m for m in modes if m not in ("local", "wire", "cluster")]
    if bad:
        p.error(f"unknown mode(s) {bad}: use local, cluster or none (decoder only)")
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    def log(msg):
        print(msg, flush=True)

    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores "
                   f"(shared), Python {platform.python_version()}",
        "command": "python bench/pipeline_bench.py " + " ".join(argv or sys.argv[1:]),
        "not_run": [],
        "fresh": args.fresh,
        "git": git_rev("kcoord/pipeline", "+changes"),
    }
    try:
        meta["machine"] = Path("/proc/cpuinfo").read_text().split("model name")[1] \
            .split(":", 1)[1].splitlines()[0].strip() + f", {os.cpu_count()} cores (shared)"
    except (OSError, IndexError):
        pass
    runs: list[dict] = []
    for n in counts:
        log(f"==== {n:,} records ====")
        data, manifest, gen_s = generate_log(n, workdir, args.gen_workers, log)
        dec = decode_rate(data)
        log(f"decoder: {dec['records_per_cpu_s']:,} records per CPU-second "
            f"({dec['records']:,} records, {dec['cpu_s']}s CPU)")
        if not modes:  # --modes none: the decoder figure alone
            runs.append({"requested": n, "records": manifest["records"]["offset_commits"],
                         "log_records": manifest["records"]["records"],
                         "generate_s": round(gen_s, 1), "decode": dec, "mode": "decoder only",
                         "load_start": loadavg(), "load_end": loadavg()})
            write_results(runs, meta)
        for mode in modes:
            rec = {"requested": n, "records": manifest["records"]["offset_commits"], "log_records":
                   manifest["records"]["records"], "generate_s": round(gen_s, 1),
                   "decode": dec, "load_start": loadavg()}
            try:
                if mode == "local":
                    rec["mode"] = "local[2]"
                    res = run_local(data, workdir / f"out-local-{n}", log)
                elif mode == "wire":
                    rec["mode"] = "local[2] over the wire"
                    server = serve_log(data, log, args.listen)
                    try:
                        rec["load_start"] = loadavg()
                        res = run_local(data, workdir / f"out-wire-{n}", log, server.bootstrap)
                        rec["time_lag_lookup"] = time_lag_cost(data, server.bootstrap)
                        log(f"time-lag lookups: {rec['time_lag_lookup']}")
                    finally:
                        server.stop()
                else:
                    rec["mode"] = "cluster 2x1 core"
                    res = run_cluster(data, workdir / f"out-cluster-{n}", workdir, log)
                rec["pipeline_s"] = res["pipeline_s"]
                rec["timings"] = res["summary"].get("timings_s", {})
                if res.get("steps_cpu_s"):
                    rec["steps_cpu_s"] = res["steps_cpu_s"]
                rec["table_rows"] = res["summary"]["table_rows"]
                rec["statuses"] = res["summary"]["statuses"]
                if res["summary"].get("time_lag"):
                    rec["time_lag"] = res["summary"]["time_lag"]
                rec["notes"] = (f"session start {res['session_start_s']}s not counted"
                                if "session_start_s" in res else
                                f"cluster start {res['cluster_start_s']}s not counted; "
                                "time includes the driver JVM start")
            except Exception as exc:  # record the failure and go on
                rec.setdefault("mode", mode)
                rec["notes"] = f"FAILED: {type(exc).__name__}: {str(exc)[-300:]}"
                log(rec["notes"])
            rec["load_end"] = loadavg()
            runs.append(rec)
            log(f"{rec['mode']}: {rec.get('pipeline_s')} s ({rec.get('notes', '')})")
            write_results(runs, meta)
        if not args.keep and n >= 100_000_000:
            shutil.rmtree(data, ignore_errors=True)
    write_results(runs, meta)
    try:  # bench/results/README.md: the pipeline's rows, every other row kept as it is
        from bench.summary import write
        write(["pipeline"])
    except Exception as exc:  # the pipeline results stand on their own
        log(f"README summary not rewritten: {type(exc).__name__}: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
