"""Start-up replay of the __consumer_offsets log (issue 4): pre-generate 1 M
and 10 M offset-commit records in a data dir, start `kcoord serve` on it and
time until every shard is loaded.
Goal: at least 1 M records/s, and a restart with 10 M records under 10 s.

The data is written with kcoord's own pieces: offset_record (the record a
commit produces), coordinator_runtime.encode_record, records.build_batch and
PartitionLog, into offsets.topic.num.partitions partitions, each group in
the partition its id hashes to.  Batches hold 100 records (a group commit of
ten 10-partition commits).  Every key is committed many times over, as in a
log between two compactions.

Timings come from the server's log: "kcoord listening" (after every log is
opened) and "all shards loaded: N records in T s".  Each data dir is
started twice: after a clean stop (the data dir's clean-shutdown marker is
there, written by the generator's or the previous server's close: active
segments are opened without a recovery scan), then as after a crash (the
marker removed first: every active segment is CRC-scanned).
"""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from .common import CLK_TCK, KcoordServer, table, timed, write_results

GOAL_RATE = 1_000_000
GOAL_10M_S = 10.0
PARTITIONS = 50          # offsets.topic.num.partitions (Kafka's default)
KEYS_PER_GROUP = 10      # one topic, 10 partitions
BATCH = 100              # records per batch
# KCOORD_BENCH_DATA: where the generated logs go (default /tmp; each engineer
# its own directory when several run benches on one machine)
DATA_ROOT = Path(os.environ.get("KCOORD_BENCH_DATA", "/tmp"))
# this bench measures replay: no coordinator snapshots (bench/snapshot_restart.py has them)
NO_SNAPSHOTS = {"group.coordinator.snapshot.interval.records": "0"}


def groups_for(records: int, commits_per_key: int) -> int:
    # 200 commits of every key: 1 M -> 500 groups (5,000 keys), 10 M -> 5,000 groups
    return max(1, records // (KEYS_PER_GROUP * commits_per_key))


def generate(data_dir: Path, records: int, commits_per_key: int) -> dict:
    """Write `records` offset commits into a fresh kcoord data dir."""
    from kcoord.coordinator.offsets import OffsetValue, offset_record
    from kcoord.coordinator.partitioner import partition_for
    from kcoord.protocol.records import build_batch
    from kcoord.server.config import Config
    from kcoord.server.coordinator_runtime import CoordinatorRuntime
    from kcoord.protocol.record_codec import encode_record
    from kcoord.broker.catalogue import Catalogue

    if data_dir.exists():
        shutil.rmtree(data_dir)
    config = Config(data_dir=data_dir)
    config.set("offsets.topic.num.partitions", str(PARTITIONS))
    catalogue = Catalogue(data_dir, config.values)
    runtime = CoordinatorRuntime(catalogue, config)  # creates __consumer_offsets as serve does
    logs = [s.plog for s in runtime.shards]
    ngroups = groups_for(records, commits_per_key)
    groups = [f"consumer-group-{g:05d}" for g in range(ngroups)]
    part_of = [partition_for(g, PARTITIONS) for g in groups]
    pending: list[list] = [[] for _ in range(PARTITIONS)]
    now = int(time.time() * 1000)
    written = 0
    rnd = 0
    t0 = time.monotonic()
    while written < records:
        for g, group in enumerate(groups):
            p = part_of[g]
            for tp in range(KEYS_PER_GROUP):
                if written >= records:
                    break
                rec = offset_record(group, "orders", tp, OffsetValue(
                    offset=rnd * 1000 + tp, leader_epoch=0, metadata="",
                    commit_timestamp=now, expire_timestamp=None))
                key, value = encode_record(rec)
                batch = pending[p]
                batch.append((key, value, [], now))
                written += 1
                if len(batch) >= BATCH:
                    logs[p].append(build_batch(batch))
                    batch.clear()
        rnd += 1
    for p, batch in enumerate(pending):
        if batch:
            logs[p].append(build_batch(batch))
    for plog in logs:
        plog.flush()
    catalogue.close()
    size = sum(f.stat().st_size for f in data_dir.rglob("*.log"))
    return {"records": written, "groups": ngroups, "keys": ngroups * KEYS_PER_GROUP,
            "commits_per_key": rnd, "bytes": size, "generate_s": time.monotonic() - t0}


def cpu_with_children(pid: int) -> float:
    """utime+stime of the process and of its reaped children (the load's
    worker processes, once they have exited), from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as fh:
        text = fh.read()
    fields = text[text.rindex(")") + 2:].split()
    return sum(int(f) for f in fields[11:15]) / CLK_TCK  # utime, stime, cutime, cstime


def live_children(pid: int) -> list[str]:
    """The load's worker processes still alive (multiprocessing's resource
    tracker lives as long as the server: waiting for it only timed out)."""
    out: list[str] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += (task / "children").read_text().split()
        except OSError:
            pass
    return [c for c in out if b"resource_tracker" not in _cmdline(c)]


def _cmdline(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def measure(data_dir: Path, timeout: float, crash: bool = False,
            settings: dict[str, str] | None = None) -> dict:
    """Start kcoord serve on data_dir; time until all shards are loaded.
    crash: remove the clean-shutdown marker first, as a kill leaves the
    data dir (the stop at the end is clean and writes it again)."""
    from kcoord.log.clean_shutdown import CLEAN_SHUTDOWN_FILE
    if crash:
        (data_dir / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
    server = KcoordServer(data_dir=data_dir,
                          settings={"offsets.topic.num.partitions": str(PARTITIONS),
                                    **(settings or {})})
    t0 = time.monotonic()
    server.start()
    t_listen = time.monotonic() - t0
    cpu_listen = cpu_with_children(server.pid)
    lines = server.proc.log_lines
    deadline = time.monotonic() + timeout
    done_line = None
    try:
        while time.monotonic() < deadline:
            done_line = next((x for x in lines if "all shards loaded" in x), None)
            if done_line:
                break
            time.sleep(0.01)
        t_all = time.monotonic() - t0
        cpu = None
        if done_line:
            # the load's worker processes stop once every shard is loaded:
            # their CPU counts once they are reaped
            until = time.monotonic() + 30
            while live_children(server.pid) and time.monotonic() < until:
                time.sleep(0.05)
            cpu = cpu_with_children(server.pid)
        shard_lines = [x for x in lines if "loaded shard" in x]
        open_line = next((x for x in lines if "loaded" in x and "topics" in x), "")
    finally:
        server.proc.stop()
    if done_line is None:
        return {"error": f"no 'all shards loaded' line within {timeout:.0f}s",
                "log_tail": lines[-5:]}
    loaded = sum(int(x.split(": ", 2)[2].split(" records")[0]) for x in shard_lines)
    replay_s = float(done_line.rsplit(" in ", 1)[1].rstrip("s"))
    return {"restart_s": t_all, "to_listening_s": t_listen, "replay_s": replay_s,
            "server_cpu_s": cpu, "replay_cpu_s": cpu - cpu_listen,
            "records_per_cpu_s": loaded / (cpu - cpu_listen) if cpu > cpu_listen else None,
            "records_loaded": loaded, "shards_with_records": len(shard_lines),
            "records_per_s": loaded / replay_s if replay_s else None,
            "all_loaded_line": done_line.split(": ", 1)[-1],
            "clean_shutdown": "(clean shutdown" in open_line,
            "open_line": open_line.split(": ", 1)[-1]}


def run(args) -> dict:
    """Shapes: (records, commits per key).  200 commits per key is a log
    between compactions; 1 commit per key (every record a new key) is the
    worst case for the loader, which replays the latest commit of each key."""
    if args.records:
        sizes = [int(x) for x in args.records.split(",")]
        shapes = [(n, 200) for n in sizes] + [(min(sizes), 1)]
    elif args.quick:
        shapes = [(200_000, 200), (200_000, 1)]
    else:
        shapes = [(1_000_000, 200), (10_000_000, 200), (1_000_000, 1)]
    results = []
    for n, per_key in shapes:
        data_dir = DATA_ROOT / f"kcoord-bench-load-{n}" if per_key == 200 else \
            DATA_ROOT / f"kcoord-bench-load-{n}-x{per_key}"
        meta_file = data_dir / "bench-meta.json"
        with timed(f"load: data for {n:,} records, {per_key} commits per key"):
            if args.keep_data and meta_file.exists():
                meta = json.loads(meta_file.read_text())
                meta["reused"] = True
            else:
                meta = generate(data_dir, n, per_key)
                meta_file.write_text(json.dumps(meta))
        with timed(f"load: restart with {n:,} records"):
            m = measure(data_dir, timeout=600, settings=NO_SNAPSHOTS)
        with timed(f"load: restart with {n:,} records after a crash"):
            c = measure(data_dir, timeout=600, crash=True, settings=NO_SNAPSHOTS)
        results.append({"records": n, "commits_per_key": per_key, "data": meta, **m,
                        "after_crash": c})
        if not args.keep_data:
            shutil.rmtree(data_dir, ignore_errors=True)
    return report(results, args)


def report(results: list[dict], args) -> dict:
    rows = []
    ok_rate, ok_10m, crash_10m = True, None, None
    for r in results:
        d = r["data"]
        shape = f"{r['commits_per_key']} per key"
        if "error" in r:
            rows.append([r["records"], shape, d["keys"], d["bytes"] / 1e6, "-", "-", "-", "-", "-",
                         "-", "-", "-", r["error"]])
            ok_rate = False
            continue
        c = r.get("after_crash") or {}
        rows.append([r["records"], shape, d["keys"], d["bytes"] / 1e6, r["to_listening_s"],
                     r["replay_s"], r["restart_s"], r["records_per_s"], r["server_cpu_s"],
                     r.get("records_per_cpu_s"),
                     c.get("to_listening_s", "-"), c.get("restart_s", c.get("error", "-")),
                     ("ok" if r["records_loaded"] == r["records"] else
                      f"loaded {r['records_loaded']:,} of {r['records']:,}")
                     + ("" if r.get("clean_shutdown") else " (no clean-shutdown marker!)")])
        if r["commits_per_key"] > 1:  # the goal's shape: a log of repeated commits
            ok_rate = ok_rate and r["records_per_s"] >= GOAL_RATE
            if r["records"] >= 10_000_000:
                ok_10m = r["restart_s"] < GOAL_10M_S
                crash_10m = (r.get("after_crash") or {}).get("restart_s")
    sections = [
        f"__consumer_offsets with {PARTITIONS} partitions, offset-commit records (value v3) of "
        f"groups with {KEYS_PER_GROUP} partitions each, {BATCH} records per batch, uncompressed; "
        "either every key committed 200 times (a log between compactions, the goal's shape) or "
        "every record a new key (the loader's worst case: it replays the latest commit of each "
        "key, so here every record). Restart = from starting `kcoord serve` to the "
        "log line 'all shards loaded' (includes interpreter start-up and the opening of every "
        "log before the server listens), after a clean stop (the clean-shutdown marker lets "
        "active segments open without a recovery scan); replay = the runtime's own time from "
        "start of loading to the last shard loaded; records/s = records / replay; server CPU = "
        "the process's utime+stime from its start to that line, plus that of the worker "
        "processes that scan shards of 4 MB or more (counted once they exit after the load). "
        "The last columns start the "
        "same data dir again without the marker, as after a crash: every active segment is "
        "CRC-scanned before the server listens.",
        "",
        table(["records", "commits", "distinct keys", "log MB", "start to listening s",
               "replay s", "restart total s", "records/s (replay)", "server CPU s",
               "records per replay CPU-s", "after a crash: start to listening s",
               "after a crash: restart total s", "check"], rows),
        "",
        "Wall times depend on how much of the shared cores the server gets while other "
        "engineers' suites run; records per replay CPU-second (utime+stime of the server and "
        "its load workers from listening to 'all shards loaded') is the contention-independent "
        "figure.",
        "",
        f"Goals (issue 4): >= {GOAL_RATE:,} records/s: **{'met' if ok_rate else 'MISSED'}**; "
        f"10 M restart < {GOAL_10M_S:.0f} s: **"
        + ("not run" if ok_10m is None else "met" if ok_10m else "MISSED") + "**"
        + (f" (a clean restart; after a crash, with the recovery scan: {crash_10m:.2f} s)."
           if crash_10m else "."),
    ]
    raw = {"results": results}
    md = write_results("load", "Start-up replay of __consumer_offsets", sections, raw)
    print(md.read_text())
    return raw
