"""Restart of a 100 M-record __consumer_offsets through the coordinator
snapshots (issue 26), and replay records per CPU-second.
Goals: a restart in < 10 s, clean and after a crash; replay >= 4.4 M
offset-commit records per CPU-second (Kafka's JMH figure,
GroupCoordinatorShardLoadingBenchmark: 16.8 M records in about 3.8 s).

The log is written directly with kcoord's log writer (PartitionLog), not
over the wire: per partition, one round of offset commits (every key of
the partition's groups once, 100 records per batch, value v3) is built
once and appended `commits per key` times (the log assigns the offsets).
Then `kcoord serve` is started on it four times:
1. no snapshot yet: the full replay (records per replay CPU-second), and
   each shard, having replayed more than the interval, writes its snapshot
   before it serves;
2. after that clean stop: the restart loads every snapshot, replays nothing;
3. after a crash: the most the shards can have past their snapshots
   together (the bound of TAIL_BOUND_INTERVALS intervals, less a batch per
   shard, spread over every shard, none reaching the interval) appended
   past each shard's recovery point and the clean-shutdown marker removed,
   as a kill -9 leaves the data dir (every active segment CRC-checked and
   reindexed from its recovery point on), so each shard loads its snapshot
   and replays its tail;
4. the same data dir with snapshots off: today's full replay, for the ratio.
Then the cost of the bound while serving: one catch-up (what the worker
does) of a shard with the bound's share of the tail, timed in-process.
Free disk space is checked first; the data dir is deleted at the end.
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from kcoord.server.snapshot_schedule import TAIL_BOUND_INTERVALS

from .common import table, timed, write_results
from .load import BATCH, DATA_ROOT, KEYS_PER_GROUP, PARTITIONS, measure

GOAL_RESTART_S = 10.0
GOAL_REPLAY = 4_400_000
RECORDS = 100_000_000
COMMITS_PER_KEY = 200
BYTES_PER_RECORD = 70      # an offset commit of this shape in its batch, measured
INTERVAL = 100_000         # group.coordinator.snapshot.interval.records (the default)
SPARE_DISK = 5 << 30       # left free for everyone else


def _round_batches(groups: list[str], now: int) -> bytes:
    """One round: every key of `groups` committed once, in batches of BATCH."""
    from kcoord.coordinator.offsets import OffsetValue, offset_record
    from kcoord.protocol.record_codec import encode_record
    from kcoord.protocol.records import build_batch

    out, batch = bytearray(), []
    for group in groups:
        for tp in range(KEYS_PER_GROUP):
            rec = offset_record(group, "orders", tp, OffsetValue(
                offset=1000 + tp, leader_epoch=0, metadata="", commit_timestamp=now,
                expire_timestamp=None))
            batch.append((*encode_record(rec), [], now))
            if len(batch) == BATCH:
                out += build_batch(batch)
                batch.clear()
    if batch:
        out += build_batch(batch)
    return bytes(out)


def _open_logs(data_dir: Path):
    from kcoord.broker.catalogue import Catalogue
    from kcoord.server.config import Config
    from kcoord.server.coordinator_runtime import CoordinatorRuntime

    config = Config(data_dir=data_dir)
    config.set("offsets.topic.num.partitions", str(PARTITIONS))
    catalogue = Catalogue(data_dir, config.values)
    runtime = CoordinatorRuntime(catalogue, config)  # creates __consumer_offsets as serve does
    return catalogue, runtime


def generate(data_dir: Path, records: int, commits_per_key: int) -> dict:
    from kcoord.coordinator.partitioner import partition_for

    if data_dir.exists():
        shutil.rmtree(data_dir)
    t0 = time.monotonic()
    catalogue, runtime = _open_logs(data_dir)
    logs = [s.plog for s in runtime.shards]
    ngroups = max(1, records // (KEYS_PER_GROUP * commits_per_key))
    by_partition: list[list[str]] = [[] for _ in range(PARTITIONS)]
    for g in range(ngroups):
        group = f"consumer-group-{g:06d}"
        by_partition[partition_for(group, PARTITIONS)].append(group)
    now = int(time.time() * 1000)
    written = 0
    for plog, groups in zip(logs, by_partition):
        if not groups:
            continue
        one_round = _round_batches(groups, now)
        for _ in range(commits_per_key):
            plog.append(one_round)
        written += commits_per_key * len(groups) * KEYS_PER_GROUP
        plog.flush()
    catalogue.close()
    size = sum(f.stat().st_size for f in data_dir.rglob("*.log"))
    return {"records": written, "groups": ngroups, "keys": ngroups * KEYS_PER_GROUP,
            "commits_per_key": commits_per_key, "bytes": size,
            "generate_s": time.monotonic() - t0}


def append_tail(data_dir: Path, per_shard: int, shards: int = PARTITIONS) -> int:
    """`per_shard` more commits on each of the first `shards` shards that
    have records (their groups' keys again, whole batches), as written
    after the last snapshot.  Each shard's recovery point is left where it
    was, before the tail: a server writes a new one only once the active
    segment has grown RECOVERY_POINT_BYTES past the last (a tail of less
    is past the point when the server is killed), where this writer's
    first flush would write one at the log's end (no recovery scan)."""
    from kcoord.log.recovery_point import FILE_NAME as POINT
    from kcoord.protocol.records import iter_batches

    points = {p: p.read_bytes() for p in data_dir.glob(f"*/{POINT}")}
    catalogue, runtime = _open_logs(data_dir)
    added = 0
    for plog in [s.plog for s in runtime.shards if s.plog.log_end_offset][:shards]:
        first = plog.read(plog.log_start_offset, 1 << 20)
        batches = [first[pos:pos + 12 + h.batch_length] for pos, h in iter_batches(first)]
        n = 0
        i = 0
        while n + BATCH <= per_shard:
            plog.append(batches[i % len(batches)])
            n += BATCH
            i += 1
        added += n
        plog.flush()
    catalogue.close()
    for path, point in points.items():
        path.write_bytes(point)
    return added


def measure_catch_up(data_dir: Path, tail: int) -> dict:
    """CPU of one catch-up (the worker's job) of a shard `tail` records past
    its snapshot: decode the snapshot, replay the tail, encode, write."""
    from kcoord.server.shard_snapshot import snapshot_mark
    from kcoord.server.snapshot_catchup import catch_up, segments_of

    append_tail(data_dir, tail, shards=1)
    catalogue, runtime = _open_logs(data_dir)
    try:
        shard = next(s for s in runtime.shards if s.plog.log_end_offset)
        mark = snapshot_mark(shard.plog.path)
        t0 = time.process_time()
        result = catch_up(str(shard.plog.path), segments_of(shard.plog), mark,
                          shard.plog.log_end_offset, runtime.core_config, shard.index)
        cpu = time.process_time() - t0
    finally:
        catalogue.close()
    replayed = result[1] if result else 0
    return {"tail": tail, "replayed": replayed, "cpu_s": cpu,
            "from_snapshot": mark is not None and mark.end > 0,
            "us_per_record_written": cpu / tail * 1e6}


def run(args) -> dict:
    records = int(args.records) if args.records else RECORDS
    if args.quick:
        records = 2_000_000
    per_key = COMMITS_PER_KEY
    data_dir = DATA_ROOT / "kcoord-bench-snapshot"
    need = records * BYTES_PER_RECORD * 11 // 10
    free = shutil.disk_usage(DATA_ROOT).free
    if free - need < SPARE_DISK:
        raise SystemExit(f"snapshot_restart: {need / 1e9:.1f} GB needed for the log, "
                         f"{free / 1e9:.1f} GB free (keeping {SPARE_DISK >> 30} GiB spare)")
    on = {"group.coordinator.snapshot.interval.records": str(INTERVAL)}
    off = {"group.coordinator.snapshot.interval.records": "0"}
    runs: dict = {}
    try:
        with timed(f"snapshot_restart: writing {records:,} records"):
            meta = generate(data_dir, records, per_key)
        with timed("snapshot_restart: first start, full replay, snapshots written"):
            runs["first"] = measure(data_dir, timeout=1800, settings=on)
        snap_bytes = sum(f.stat().st_size for f in data_dir.rglob("coordinator.snapshot"))
        with timed("snapshot_restart: clean restart"):
            runs["clean"] = measure(data_dir, timeout=600, settings=on)
        with timed("snapshot_restart: restart after a crash"):
            per_shard = min(INTERVAL, TAIL_BOUND_INTERVALS * INTERVAL // PARTITIONS) - BATCH
            tail = append_tail(data_dir, per_shard)
            runs["crash"] = measure(data_dir, timeout=600, crash=True, settings=on)
        with timed("snapshot_restart: restart without snapshots"):
            runs["off"] = measure(data_dir, timeout=1800, settings=off)
        with timed("snapshot_restart: one catch-up of the bound's share of the tail"):
            catch = measure_catch_up(data_dir, per_shard)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    return report(records, meta, runs, tail, snap_bytes, catch, args)


def _s(v) -> str:
    return "-" if v is None else f"{v:.2f}"


def _n(v) -> str:
    return "-" if v is None else f"{v:,.0f}"


def report(records: int, meta: dict, runs: dict, tail: int, snap_bytes: int, catch: dict,
           args) -> dict:
    def row(label: str, r: dict, replayed: int) -> list:
        if "error" in r:
            return [label, "-", "-", "-", "-", "-", r["error"]]
        return [label, replayed, r["to_listening_s"], r["replay_s"], r["restart_s"],
                r["server_cpu_s"], r.get("records_per_cpu_s") or "-"]

    total = meta["records"] + tail
    rows = [row("first start: full replay, then each shard writes its snapshot", runs["first"],
                meta["records"]),
            row("clean restart: every shard from its snapshot", runs["clean"], 0),
            row(f"after a crash: snapshot + the worst tail ({tail:,} records over all shards, "
                f"the bound of {TAIL_BOUND_INTERVALS} intervals) past each shard's recovery "
                "point, so the tail's bytes are CRC-checked and reindexed", runs["crash"], tail),
            row("snapshots off: full replay", runs["off"], total)]
    clean_s = runs["clean"].get("restart_s")
    crash_s = runs["crash"].get("restart_s")
    rate = runs["off"].get("records_per_cpu_s")

    def verdict(ok) -> str:
        return "not measured" if ok is None else "met" if ok else "MISSED"

    sections = [
        f"__consumer_offsets with {PARTITIONS} partitions, {meta['records']:,} offset-commit "
        f"records (value v3), {meta['keys']:,} distinct keys (each committed "
        f"{meta['commits_per_key']} times), {BATCH} records per batch, uncompressed, "
        f"{meta['bytes'] / 1e9:.2f} GB of log, written with the log writer in "
        f"{meta['generate_s']:.0f} s. `group.coordinator.snapshot.interval.records` = "
        f"{INTERVAL:,}; the snapshots took {snap_bytes / 1e6:.1f} MB. Restart = from starting "
        "`kcoord serve` to the log line 'all shards loaded' (interpreter start-up and the "
        "opening of every log included); replay = the runtime's time from the start of loading "
        "to the last shard loaded; server CPU = utime+stime of the server and its load "
        "workers; records per replay CPU-s = records replayed / the CPU from listening to "
        "'all shards loaded'.",
        "",
        table(["start", "records replayed", "start to listening s", "replay s",
               "restart total s", "server CPU s", "records per replay CPU-s"], rows),
        "",
        "Wall times depend on the shared cores (see the load averages above); CPU figures "
        "do not.",
        "",
        f"The bound's cost while serving: one catch-up of a shard {catch['tail']:,} records "
        f"past its snapshot (the bound's share of one shard when the tails are even, the "
        f"worst case for how often the bound fires) took {catch['cpu_s']:.3f} CPU-s in the "
        f"worker ({catch['replayed']:,} records replayed, from a snapshot: "
        f"{catch['from_snapshot']}): at most one such job per {catch['tail']:,} records "
        f"written, {catch['us_per_record_written']:.2f} µs of worker CPU per record written.",
        "",
        f"Goals (issue 26): restart of {records / 1e6:.0f} M records < {GOAL_RESTART_S:.0f} s, "
        f"clean: **{verdict(None if clean_s is None else clean_s < GOAL_RESTART_S)}**, after a "
        f"crash: **{verdict(None if crash_s is None else crash_s < GOAL_RESTART_S)}**; replay "
        f">= {GOAL_REPLAY:,} records per CPU-second: "
        f"**{verdict(None if rate is None else rate >= GOAL_REPLAY)}**"
        + (f" ({rate:,.0f})." if rate else "."),
    ]
    first = runs["first"].get("records_per_cpu_s")
    summary = [
        [f"restart of a {records / 1e6:.0f} M-record __consumer_offsets through the snapshots "
         "(clean; after a crash with the worst tail)",
         f"{_s(clean_s)} s; {_s(crash_s)} s (snapshots off: {_s(runs['off'].get('restart_s'))} s)",
         f"< {GOAL_RESTART_S:.0f} s both",
         f"clean {verdict(None if clean_s is None else clean_s < GOAL_RESTART_S)}, after a "
         f"crash {verdict(None if crash_s is None else crash_s < GOAL_RESTART_S)}"],
        ["replay, offset-commit records per CPU-second (server and load workers)",
         f"{_n(rate)} (snapshots off, {total:,} records); first start {_n(first)}",
         f">= {GOAL_REPLAY:,} (Kafka's JMH figure)",
         "met" if rate and rate >= GOAL_REPLAY else "MISSED"]]
    raw = {"records": records, "data": meta, "tail_records": tail, "catch_up": catch,
           "snapshot_bytes": snap_bytes, "runs": runs, "summary": summary}
    name = "snapshot_restart" if not args.quick else "snapshot_restart_quick"
    md = write_results(name, "Restart through the coordinator snapshots", sections, raw)
    print(md.read_text())
    print(json.dumps({k: v.get("restart_s") for k, v in runs.items()}))
    return raw
