"""The batch pipeline: __consumer_offsets records -> Parquet tables.

Tables (Parquet, partitioned by `date`, UTC):

  commits            every offset commit (date of its commit timestamp); transactional
                     commits say whether their transaction committed, aborted or is open
  offsets            the latest offset per (group, topic, partition) with tombstones and
                     transaction markers applied: what the coordinator loads (as-of date)
  group_generations  one row per classic generation / KIP-848 assignment epoch (its date)
  lag                per live (group, topic, partition): committed offset, log end, lag
                     in records, lag in seconds at the consumer's recent rate (as-of date)
  status             Burrow's evaluation per partition and per group (as-of date)

Snapshot tables (offsets, lag, status) are written for the evaluation time
`as_of` (default: the newest timestamp in the data); a rerun replaces the
partitions for the dates it writes and leaves other dates alone.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa

from ..observe import burrow_rules as burrow
from .generations import GENERATION_FIELDS, decoded_records, generation_rows
from .schema import ddl

TABLES = ["commits", "offsets", "group_generations", "lag", "status", "share_groups"]

EVAL_FIELDS = [
    ("scope", "string"),            # "partition" or "group"
    ("group", "string"),
    ("topic", "string"),
    ("partition", "int"),
    ("live", "boolean"),            # false: the latest event is a tombstone
    ("committed_offset", "bigint"),
    ("leader_epoch", "int"),
    ("metadata", "string"),
    ("commit_timestamp", "bigint"),
    ("expire_timestamp", "bigint"),
    ("log_partition", "int"),
    ("log_offset", "bigint"),
    ("log_end_offset", "bigint"),
    ("lag", "bigint"),
    ("lag_seconds", "double"),
    ("status", "string"),
    ("complete", "double"),
    ("window_commits", "int"),
    ("start_offset", "bigint"),
    ("start_timestamp", "bigint"),
    ("end_offset", "bigint"),
    ("end_timestamp", "bigint"),
    ("partitions", "int"),
    ("max_lag_topic", "string"),
    ("max_lag_partition", "int"),
]

EVENT_COLUMNS = ["group", "topic", "partition", "log_partition", "offset", "tombstone",
                 "committed_offset", "leader_epoch", "metadata", "commit_timestamp",
                 "expire_timestamp"]


class Settings:
    def __init__(self, intervals: int = burrow.DEFAULT_INTERVALS,
                 refresh_ms: int = burrow.DEFAULT_REFRESH_MS, allowed_lag: int = 0,
                 minimum_complete: float = 0.0,
                 min_distance_s: int = burrow.DEFAULT_MIN_DISTANCE_S) -> None:
        self.intervals = intervals
        self.min_distance_ms = min_distance_s * 1000
        self.refresh_ms = refresh_ms
        self.allowed_lag = allowed_lag
        self.minimum_complete = minimum_complete


# ----------------------------------------------------------------- inputs


# What the commit path needs (flat columns: cheap to hand from Python to the JVM
# and to stage as Parquet), and what the generations job needs.
# What the pipeline reads: flat columns (cheap to hand from Python to the JVM and
# to stage as Parquet), with group records' values as raw bytes that the
# generations job decodes (the nested columns are never built).
MAIN_COLUMNS = ["log_partition", "segment", "offset", "timestamp", "record_type",
                "value_version", "tombstone", "producer_id", "transactional", "control_type",
                "group", "topic", "partition", "member_id", "committed_offset", "leader_epoch",
                "metadata", "commit_timestamp", "expire_timestamp", "error", "error_detail",
                "raw_value"]


SPLIT_CONF = "spark.sql.files.maxPartitionBytes"


COUNT_KEYS = ["record_type", "tombstone", "error", "control_type"]


def source_options(data_dir=None, bootstrap_server: str | None = None,
                   client_properties: dict | None = None, split: str = "partition",
                   verify_crc: bool = True) -> dict:
    """The kcoord_offsets options for a data dir, or for a server over the wire."""
    opts = {"split": split, "verifyCrc": str(verify_crc).lower()}
    if bootstrap_server:
        opts["bootstrap"] = bootstrap_server
        opts.update({f"kafka.{k}": str(v) for k, v in (client_properties or {}).items()})
    else:
        opts["path"] = str(data_dir)
    return opts


def stage_records(spark, data_dir, path, split: str = "partition", verify_crc: bool = True,
                  columns: list[str] = MAIN_COLUMNS, options: dict | None = None):
    """Decode the log once into a Parquet stage at `path`.

    -> (the stage as a DataFrame, the record counts: one dict per distinct
    (record_type, tombstone, error, control_type) with n, max_commit,
    min_commit (commit timestamps) and max_ts (record timestamps)).

    The same input partitions and reader code as the kcoord_offsets source (one
    Spark task per log partition, or per segment; over the wire, one per log
    partition fetching from its leader), but each task writes its Arrow
    batches to Parquet with pyarrow, in the Python worker: the rows never
    cross into the JVM to be converted and encoded there.  The tasks count
    the rows as they write them.  `options`: the source's options
    (source_options); default: the data dir."""
    import shutil

    from pyspark.sql.types import StructType

    from .decode import RecordBatchBuilder
    from .schema import spark_schema
    from .source import OffsetsReader
    from .tasks import file_size, spread
    options = dict(options or source_options(data_dir, split=split, verify_crc=verify_crc))
    if options.get("bootstrap"):
        from .wire_source import WireOffsetsReader
        reader = WireOffsetsReader(options, columns)
    else:
        reader = OffsetsReader(options, columns)
    parts = reader.partitions()
    path = Path(path)
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    target, cols = str(path), list(columns)
    schema = RecordBatchBuilder(columns=cols).schema
    # dictionaries for the strings only (few groups, topics, members): offsets and
    # timestamps are nearly all distinct, so encoding them was half the write's CPU
    # and made the partition pass's read of the file twice as slow as plain pages
    strings = [f.name for f in schema if pa.types.is_string(f.type)]

    def write(_, chunks):
        import os

        import pyarrow.parquet as pq
        counts: dict = {}
        for chunk in chunks:
            for index, part in chunk:   # one file per input partition (whole log partitions)
                tmp = os.path.join(target, f".part-{index:05d}.parquet.tmp")
                with pq.ParquetWriter(tmp, schema, compression="none",
                                      use_dictionary=strings) as out:
                    for batch in reader.read(part):
                        out.write_batch(batch)
                        _count(counts, batch)
                os.replace(tmp, os.path.join(target, f"part-{index:05d}.parquet"))
        yield counts

    sc = spark.sparkContext
    counts: dict = {}
    # a few tasks per core, each reading several log partitions (tasks.py: a task's fixed cost)
    chunks = spread(parts, sc.defaultParallelism,
                    lambda part: sum(file_size(s) for s in getattr(part, "segments", ())) or 1)
    for part_counts in sc.parallelize(chunks, len(chunks)).mapPartitionsWithIndex(write).collect():
        _merge_counts(counts, part_counts)
    # Read back in a few splits per core (Spark's default of 128 MB would make
    # 3 splits of 10 M records for 2 cores: the last one runs alone).  The
    # setting is the session's: run_pipeline puts the old value back.
    size = sum(f.stat().st_size for f in path.glob("*.parquet"))
    split_bytes = max(8 << 20, size // (3 * sc.defaultParallelism) + 1)
    spark.conf.set(SPLIT_CONF, str(min(split_bytes, 128 << 20)))
    full = spark_schema("records+")
    records = spark.read.schema(StructType([full[c] for c in cols])).parquet(target)
    return records, [dict(zip(COUNT_KEYS, key), **v) for key, v in counts.items()]


def _count(counts: dict, batch) -> None:
    """Add one Arrow batch of records to counts: {(type, tombstone, error, control): stats}."""
    grouped = pa.Table.from_batches([batch]).group_by(COUNT_KEYS, use_threads=False).aggregate(
        [([], "count_all"), ("commit_timestamp", "max"), ("commit_timestamp", "min"),
         ("timestamp", "max")])
    for r in grouped.to_pylist():
        _merge_counts(counts, {tuple(r[k] for k in COUNT_KEYS): {
            "n": r["count_all"], "max_commit": r["commit_timestamp_max"],
            "min_commit": r["commit_timestamp_min"], "max_ts": r["timestamp_max"]}})


def _merge_counts(into: dict, more: dict) -> None:
    def pick(f, a, b):
        return b if a is None else a if b is None else f(a, b)
    for key, v in more.items():
        have = into.get(key)
        if have is None:
            into[key] = dict(v)
            continue
        have["n"] += v["n"]
        have["max_commit"] = pick(max, have["max_commit"], v["max_commit"])
        have["min_commit"] = pick(min, have["min_commit"], v["min_commit"])
        have["max_ts"] = pick(max, have["max_ts"], v["max_ts"])


def log_end_observations(log_ends_df, current_only: bool = False
                         ) -> dict[tuple[str, int], list[tuple[int, int]]]:
    """{(topic, partition): [(log end, timestamp)]}, collected to the driver.

    current_only (log ends from a running server, no history): each partition's
    one observation stands for every time, so a commit's lag is measured
    against the current log end."""
    out: dict[tuple[str, int], list[tuple[int, int]]] = {}
    table = log_ends_df.toArrow()
    for t, p, end, ts in zip(*(table.column(c).to_pylist() for c in
                               ("topic", "partition", "log_end_offset", "timestamp"))):
        out.setdefault((t, p), []).append((end, -(1 << 62) if current_only else ts))
    return out


def server_observations(bootstrap: str, client_properties: dict | None = None
                        ) -> dict[tuple[str, int], list[tuple[int, int]]]:
    """Log ends from a running server (ListOffsets in the driver): each partition's
    one observation stands for every time (see log_end_observations)."""
    from .logend import server_log_ends
    return {(t, p): [(end, -(1 << 62))] for t, p, end, _ in
            server_log_ends(bootstrap, client_properties=client_properties)}


def server_topic_names(bootstrap: str, client_properties: dict | None = None) -> dict[str, str]:
    from .wire import Cluster
    cluster = Cluster(bootstrap, client_properties)
    try:
        cluster.refresh(None)
        return cluster.topic_names()
    finally:
        cluster.close()


def data_dir_log_ends(data_dir, resolution_ms: int = 1000
                      ) -> dict[tuple[str, int], list[tuple[int, int]]]:
    """What log_end_observations makes of the kcoord_log_ends source over a data
    dir, read in the driver: batch headers only, too little work for a job."""
    from .logend import partition_history, user_partitions
    return {(t, p): list(partition_history(d, resolution_ms))
            for t, p, d in user_partitions(data_dir)}


# ----------------------------------------------------------------- stages


def commit_events(records):
    """Offset commit records (values and tombstones), transactions resolved.

    Adds `txn`: null for a plain commit, else committed / aborted / open,
    from the first control record of the same producer after it in the same
    log partition (Kafka's loader applies only committed transactional offsets).
    """
    from pyspark.sql import functions as F
    base = records.filter(F.col("error").isNull() & F.col("record_type").isin(0, 1))
    plain = base.filter(~F.coalesce(F.col("transactional"), F.lit(False))) \
        .withColumn("txn", F.lit(None).cast("string"))
    txn = base.filter(F.col("transactional"))
    markers = records.filter(F.col("control_type").isNotNull()).select(
        F.col("log_partition").alias("m_lp"), F.col("producer_id").alias("m_pid"),
        F.col("offset").alias("m_off"), F.col("control_type").alias("m_type"))
    keys = txn.select("log_partition", "producer_id", "offset")
    first = keys.join(markers, (keys.log_partition == markers.m_lp)
                      & (keys.producer_id == markers.m_pid) & (markers.m_off > keys["offset"])) \
        .groupBy("log_partition", "offset").agg(F.min_by("m_type", "m_off").alias("m_type"))
    resolved = txn.join(first, ["log_partition", "offset"], "left").withColumn(
        "txn", F.when(F.col("m_type") == 1, "committed").when(F.col("m_type") == 0, "aborted")
        .otherwise("open")).drop("m_type")
    return plain.unionByName(resolved)


def commits_table(events):
    from pyspark.sql import functions as F
    return events.filter(~F.col("tombstone")).select(
        F.to_date(F.timestamp_millis("commit_timestamp")).alias("date"),
        "group", "topic", "partition", "committed_offset", "leader_epoch", "metadata",
        "commit_timestamp", "expire_timestamp", "log_partition",
        F.col("offset").alias("log_offset"), F.col("timestamp").alias("record_timestamp"),
        "value_version", F.col("record_type").alias("key_type"), "txn")


def window_events(events, intervals: int):
    """The last `intervals` applied events (commits and tombstones) per key.

    A top-k aggregate (max_by with k) rather than a window function: no sort of
    every commit, just partial aggregation before the shuffle."""
    from pyspark.sql import functions as F
    applied = events.filter(F.col("txn").isNull() | (F.col("txn") == "committed"))
    payload = [c for c in EVENT_COLUMNS if c not in ("group", "topic", "partition")]
    order = F.col("offset") * F.lit(1 << 16) + F.col("log_partition")  # log order, then partition
    top = applied.groupBy("group", "topic", "partition").agg(
        F.max_by(F.struct(*payload), order, intervals).alias("w"))
    return top.select("group", "topic", "partition", F.explode("w").alias("e")) \
        .select("group", "topic", "partition", *[F.col("e")[c].alias(c) for c in payload])


def evaluate(window_df, observations_bc, as_of: int, settings: Settings, partitions: int):
    """Burrow per partition and per group, from the window rows (mapInArrow, by group)."""
    schema = ddl(EVAL_FIELDS)
    arrow_fields = EVAL_FIELDS

    def run(batches):
        obs = observations_bc.value
        histories: dict = {}
        rows: dict = {}
        for b in batches:
            for r in b.to_pylist():
                rows.setdefault((r["group"], r["topic"], r["partition"]), []).append(r)
        out = evaluate_keys(rows, obs, histories, as_of, settings)
        if out:
            yield pa.RecordBatch.from_pylist(out, schema=_arrow(arrow_fields))

    return window_df.repartition(partitions, "group").mapInArrow(run, schema)


def _arrow(fields):
    from .schema import _arrow_type
    return pa.schema([pa.field(n, _arrow_type(t)) for n, t in fields])


def evaluate_keys(rows: dict, obs: dict, histories: dict, as_of: int,
                  settings: Settings) -> list[dict]:
    """Plain-Python core of `evaluate`: {key: [event rows]} -> partition and group rows."""
    by_group: dict[str, list[dict]] = {}
    for key in sorted(rows, key=lambda k: (k[0], k[1], k[2])):
        # the last `intervals` in log order (window rows of several tasks may hold more)
        evs = sorted(rows[key], key=lambda r: (r["offset"], r["log_partition"]))
        evs = evs[-settings.intervals:]
        group, topic, partition = key
        latest = evs[-1]
        hist = histories.get((topic, partition))
        if hist is None and (topic, partition) in obs:
            hist = histories[(topic, partition)] = burrow.LogEndHistory(obs[(topic, partition)])
        row = {"scope": "partition", "group": group, "topic": topic, "partition": partition,
               "live": not latest["tombstone"], "log_partition": latest["log_partition"],
               "log_offset": latest["offset"]}
        if latest["tombstone"]:
            by_group.setdefault(group, []).append(row)
            continue
        for c in ("committed_offset", "leader_epoch", "metadata", "commit_timestamp",
                  "expire_timestamp"):
            row[c] = latest[c]
        slots: list = []
        for r in evs:
            if r["tombstone"]:
                slots = []
                continue
            burrow.add_commit(slots, r["committed_offset"], r["commit_timestamp"],
                              settings.min_distance_ms)
        window = []
        for offset, ts in slots[-settings.intervals:]:
            end = hist.at(ts) if hist else None
            window.append(burrow.Commit(offset, ts, None if end is None else max(0, end - offset)))
        log_end = hist.at(as_of) if hist else None
        lag = None if log_end is None else max(0, log_end - latest["committed_offset"])
        samples = hist.samples(as_of, settings.intervals, settings.refresh_ms) if hist else []
        status, complete = burrow.evaluate_partition(
            window, samples, lag or 0, as_of, settings.intervals, settings.allowed_lag,
            settings.minimum_complete)
        row.update({"log_end_offset": log_end, "lag": lag,
                    "lag_seconds": burrow.lag_seconds(window, lag),
                    "status": burrow.STATUS_NAMES[status], "complete": complete,
                    "window_commits": len(window),
                    "start_offset": window[0].offset, "start_timestamp": window[0].timestamp,
                    "end_offset": window[-1].offset, "end_timestamp": window[-1].timestamp})
        by_group.setdefault(group, []).append(row)
    out = []
    for group, prow in by_group.items():
        out.extend(prow)
        live = [r for r in prow if r["live"]]
        if not live:
            continue
        codes = [burrow.STATUS_NAMES.index(r["status"]) for r in live]
        worst = max(live, key=lambda r: r["lag"] or 0)  # ties: the first in key order
        out.append({
            "scope": "group", "group": group, "live": True,
            "status": burrow.STATUS_NAMES[burrow.group_status(codes)],
            "complete": sum(1 for r in live if r["complete"] == 1.0) / len(live),
            "lag": sum(r["lag"] or 0 for r in live), "partitions": len(live),
            "max_lag_topic": worst["topic"], "max_lag_partition": worst["partition"],
            "end_timestamp": max(r["end_timestamp"] for r in live),
            "commit_timestamp": max(r["commit_timestamp"] for r in live)})
    return out


def write_snapshots(window_df, observations_bc, as_of: int, settings: Settings, partitions: int,
                    out_dir: Path, tables=("offsets", "lag", "status"), rows: dict | None = None,
                    time_lag=None, stats: dict | None = None):
    """Evaluate the window rows and write the snapshot tables for as_of's date.

    time_lag: lookup({(topic, partition, offset)}) -> {key: timestamp of the first
    record at that offset} (timelag.py); the exact time lag of each lagging
    partition comes from it.  -> the evaluated rows, persisted (the caller
    unpersists them).  Rows written per table go into `rows`."""
    rows = {} if rows is None else rows
    from pyspark.sql import functions as F
    day = as_of_date(as_of)
    ev = evaluate(window_df, observations_bc, as_of, settings, partitions) \
        .withColumn("date", F.lit(day).cast("date")) \
        .withColumn("as_of", F.lit(as_of).cast("bigint")).persist()
    ev.count()  # evaluated here, so the time-lag step's own cost can be told apart
    t0 = time.time()
    ev = add_time_lag(ev, time_lag, as_of, stats)
    if stats is not None and "time_lag" in stats:
        stats["time_lag"]["step_s"] = round(time.time() - t0, 3)
    part = ev.filter((F.col("scope") == "partition") & F.col("live"))
    if "offsets" in tables:
        rows["offsets"] = _write(part.select(
            "date", "group", "topic", "partition", "committed_offset", "leader_epoch", "metadata",
            "commit_timestamp", "expire_timestamp", "log_partition", "log_offset"),
            out_dir / "offsets", day)
    if "lag" in tables:
        rows["lag"] = _write(part.select(
            "date", "as_of", "group", "topic", "partition", "committed_offset",
            "commit_timestamp", "log_end_offset", "lag", "lag_seconds",
            "first_unconsumed_timestamp", "time_lag_seconds"), out_dir / "lag", day)
    if "status" in tables:
        rows["status"] = _write(status_view(ev), out_dir / "status", day)
    return ev


TIME_LAG_SCHEMA = "topic string, partition int, committed_offset bigint, " \
    "first_unconsumed_timestamp bigint"


def add_time_lag(ev, lookup, as_of: int, stats: dict | None = None):
    """Add first_unconsumed_timestamp and time_lag_seconds to the evaluated rows
    (persisted; the result is persisted and ev unpersisted).

    Partition rows: as_of minus the timestamp of the record at the committed
    offset when there is lag, 0 without lag, null when the log end or the
    record is unknown.  Group rows: the largest of their live partitions'."""
    from pyspark.sql import functions as F
    spark = ev.sparkSession
    found: dict = {}
    if lookup is not None:
        lagging = ev.filter((F.col("scope") == "partition") & F.col("live") & (F.col("lag") > 0)) \
            .select("topic", "partition", "committed_offset").distinct().collect()
        wants = {(r["topic"], r["partition"], r["committed_offset"]) for r in lagging}
        t0 = time.time()
        found = lookup(wants) if wants else {}
        if stats is not None:
            stats["time_lag"] = {"lagging_partitions": len(wants), "found": len(found),
                                 "lookup_s": round(time.time() - t0, 3)}
    stamps = spark.createDataFrame([(t, p, o, ts) for (t, p, o), ts in sorted(found.items())],
                                   TIME_LAG_SCHEMA)
    part = ev.filter(F.col("scope") == "partition") \
        .join(F.broadcast(stamps), ["topic", "partition", "committed_offset"], "left")
    wait = F.lit(as_of) - F.col("first_unconsumed_timestamp")  # null: the record is unknown
    part = part.withColumn("time_lag_seconds", F.when(
        F.col("lag") == 0, F.lit(0.0)).when(
        F.col("lag") > 0, F.when(wait < 0, F.lit(0)).otherwise(wait) / 1000.0).cast("double"))
    worst = part.filter(F.col("live")).groupBy("group").agg(
        F.max("time_lag_seconds").alias("g_time_lag"))
    grp = ev.filter(F.col("scope") == "group").join(worst, "group", "left") \
        .withColumn("time_lag_seconds", F.col("g_time_lag")) \
        .withColumn("first_unconsumed_timestamp", F.lit(None).cast("bigint")).drop("g_time_lag")
    out = part.unionByName(grp).persist()
    out.count()
    ev.unpersist()
    return out


def status_view(ev):
    from pyspark.sql import functions as F
    return ev.filter(F.col("live")).select(
        "date", "as_of", "scope", "group", "topic", "partition", "status", "complete",
        F.col("lag").alias("current_lag"), "time_lag_seconds",
        F.col("commit_timestamp").alias("last_commit_timestamp"), "window_commits",
        "start_offset", "start_timestamp", "end_offset", "end_timestamp", "partitions",
        "max_lag_topic", "max_lag_partition")


def generations(records, partitions: int, topic_names: dict | None = None):
    """Group records (with their raw values) -> one row per generation / epoch."""
    from pyspark.sql import functions as F
    cols = ["group", "record_type", "tombstone", "member_id", "timestamp", "log_partition",
            "offset", "raw_value"]
    fields = GENERATION_FIELDS
    names0 = dict(topic_names or {})
    src = records.filter(F.col("error").isNull() & F.col("record_type").between(2, 8)) \
        .select(*cols).repartition(partitions, "group") \
        .sortWithinPartitions("group", "log_partition", "offset")

    def run(batches):
        rows = (r for b in batches for r in b.to_pylist())
        out = list(generation_rows(decoded_records(rows, dict(names0))))
        if out:
            yield pa.RecordBatch.from_pylist(out, schema=_arrow(fields))

    df = src.mapInArrow(run, ddl(fields))
    return df.withColumn("date", F.to_date(F.timestamp_millis("timestamp")))


# -------------------------------------------------------------------- run


def run_pipeline(spark, data_dir, out_dir, **kw) -> dict:
    """Read the data dir, write every table under out_dir, return the run summary.

    The records are decoded once into a Parquet stage (out_dir/_stage, removed
    at the end) that every later step reads.  Keywords: see _run_pipeline."""
    saved = spark.conf.get(SPLIT_CONF, None)
    try:
        return _run_pipeline(spark, data_dir, out_dir, **kw)
    finally:
        if saved is None:
            spark.conf.unset(SPLIT_CONF)
        else:
            spark.conf.set(SPLIT_CONF, saved)


def _run_pipeline(spark, data_dir, out_dir, *, as_of: int | None = None,
                  bootstrap: str | None = None, bootstrap_server: str | None = None,
                  client_properties: dict | None = None, split: str = "partition",
                  settings: Settings | None = None, report: bool = True,
                  partitions: int | None = None, keep_stage: bool = False, log=print) -> dict:
    import shutil

    from pyspark import StorageLevel

    from .preflight import check_inputs
    check_inputs(None if bootstrap_server else data_dir, bootstrap_server,
                 client_properties or {}, bootstrap)
    settings = settings or Settings()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    timings: dict[str, float] = {}
    table_rows: dict[str, int] = {}
    stats: dict = {}
    partitions = partitions or int(spark.conf.get("spark.sql.shuffle.partitions"))

    def step(name, t0):
        timings[name] = round(time.time() - t0, 3)
        log(f"[pipeline] {name}: {timings[name]:.1f}s")

    t0 = time.time()
    stage = out_dir / "_stage"
    # uncompressed: the stage lives for one run
    # bootstrap_server: everything over the wire; bootstrap: log ends only
    options = source_options(data_dir, bootstrap_server, client_properties, split)
    records, counts = stage_records(spark, data_dir, stage / "records", options=options)
    step("decode", t0)

    t0 = time.time()
    live = bootstrap_server or bootstrap
    if live:
        obs = server_observations(live, client_properties)
    else:
        obs = data_dir_log_ends(data_dir)
    step("log ends", t0)

    if as_of is None and live:
        as_of = int(time.time() * 1000)  # log ends are live: evaluate now
    if as_of is None:
        stamps = [r["max_commit"] for r in counts if r["max_commit"] is not None]
        stamps += [r["max_ts"] for r in counts if r["max_ts"] is not None and r["error"] is None]
        as_of = data_time(stamps, obs)

    t0 = time.time()
    from .logend import topic_id_names
    names = (server_topic_names(bootstrap_server, client_properties) if bootstrap_server
             else topic_id_names(data_dir))
    one_pass = options.get("split") == "partition"  # stage files of whole log partitions
    gens = None
    if one_pass:
        # the generations are replayed in the same pass (a group sits in one log partition)
        written, window, group_records, report_input = commits_in_one_pass(
            spark, records, stage, out_dir, as_of_date(as_of), settings.intervals, names)
        table_rows.update(written)
    else:
        group_records = records
        events = commit_events(records)
        table_rows["commits"] = _write(commits_table(events), out_dir / "commits",
                                       as_of_date(as_of))
        window = window_events(events, settings.intervals).toArrow()
    step("commits, group_generations" if one_pass else "commits", t0)

    t0 = time.time()
    from . import snapshot_tables
    from .timelag import dir_lookup, wire_lookup
    lookup = wire_lookup(live, client_properties) if live else dir_lookup(data_dir)
    # a few window rows per key, one output row per key: evaluated in the driver
    status_rows = snapshot_tables.write_snapshots(window, obs, as_of, settings, out_dir,
                                                  table_rows, time_lag=lookup, stats=stats)
    step("offsets, lag, status", t0)

    if not one_pass:
        t0 = time.time()
        gens = generations(group_records, partitions, names).select(
            "date", *[n for n, _ in GENERATION_FIELDS]).persist(StorageLevel.MEMORY_AND_DISK)
        table_rows["group_generations"] = _write(gens, out_dir / "group_generations",
                                                 as_of_date(as_of))
        step("group_generations", t0)

    t0 = time.time()
    from .share_jobs import SHARE_GROUP_FIELDS, SHARE_GROUP_TABLE, SHARE_METADATA, \
        share_groups_table
    from .snapshot_tables import rows_table, write_date
    history = None
    if live:
        from .logend import server_log_end_history

        def history(tps, times):       # live log ends: the past ones by ListOffsets
            return server_log_end_history(live, tps, times, client_properties)
    has_share = any(r["record_type"] == SHARE_METADATA and r["error"] is None for r in counts)
    share_rows, share_live = share_groups_table(
        spark, group_records if has_share else None, names, obs,
        None if bootstrap_server else data_dir, bootstrap_server, client_properties, history)
    # one row per share partition, built in the driver: written without a job
    table_rows[SHARE_GROUP_TABLE] = write_date(rows_table(share_rows, SHARE_GROUP_FIELDS),
                                               out_dir / SHARE_GROUP_TABLE, as_of_date(as_of))
    step("share_groups", t0)

    summary = _summary(records, counts, out_dir, as_of, data_dir, obs, table_rows)
    summary["share_groups"] = {
        "groups": sorted(share_live | {r["group"] for r in share_rows}),
        "partitions": len(share_rows),
        "with_problems": sorted({r["group"] for r in share_rows if r["problems"]})}
    summary["share_partitions"] = share_rows   # small: one row per share partition
    # where the records came from: a data dir, or a bootstrap address read over the wire
    summary["data_dir"] = None if bootstrap_server else str(data_dir)
    summary["bootstrap_server"] = bootstrap_server
    summary["source"] = (f"{bootstrap_server} (over the wire)" if bootstrap_server
                         else f"{data_dir} (data dir)")
    summary["statuses"] = {
        "groups": _tally(r["status"] for r in status_rows if r["scope"] == "group"),
        "partitions": _tally(r["status"] for r in status_rows if r["scope"] == "partition")}
    if report:
        t0 = time.time()
        from .report import write_report
        span = [r["min_commit"] for r in counts if r["min_commit"] is not None] + \
            [r["max_commit"] for r in counts if r["max_commit"] is not None]
        if not one_pass:
            from .report import spark_buckets
            pairs = gens.select("group", "timestamp").collect()
            report_input = (spark_buckets(events), lambda: [tuple(r) for r in pairs])
        buckets, gen_pairs = report_input
        write_report(out_dir, buckets, obs, status_rows, gen_pairs(), summary, as_of,
                     (min(span), max(span)) if span else None, live_ends=bool(live),
                     history=history)
        step("report", t0)
    summary["timings_s"] = timings
    summary.update(stats)
    summary["elapsed_s"] = round(time.time() - started, 3)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    if gens is not None:
        gens.unpersist()
    if not keep_stage:
        shutil.rmtree(stage, ignore_errors=True)
    return summary


def commits_in_one_pass(spark, records, stage: Path, out_dir: Path, empty_date: str,
                        intervals: int, topic_names: dict):
    """The commits and group_generations tables and the small inputs of the later stages
    from partition_pass (stage files of whole log partitions).  -> ({table: rows written},
    the window rows (Arrow), the group records, the report's inputs (lag_series buckets,
    a function -> (group, timestamp) of each generation), read with pyarrow from this
    run's dates of the tables)."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    from . import partition_pass
    from .report import arrow_buckets
    by_date = partition_pass.run(spark, stage / "records", stage, intervals, topic_names)
    written = {}
    for name in partition_pass.TABLES:
        partition_pass.place_dates(stage / name, out_dir / name)
        written[name] = sum(by_date[name].values())
    if written["commits"] == 0:
        spark_schema = commits_table(commit_events(records)).schema
        _write_empty(out_dir / "commits", to_arrow_schema(StructType(
            [f for f in spark_schema.fields if f.name != "date"]), timezone="UTC"), empty_date)
    if written["group_generations"] == 0:
        _write_empty(out_dir / "group_generations", _arrow(GENERATION_FIELDS), empty_date)
    import pyarrow.parquet as pq
    window = pq.read_table(str(stage / "window"))  # a few rows per key: for the driver
    groups = spark.read.schema(records.select(*partition_pass.GROUP_COLUMNS).schema) \
        .parquet(str(stage / "groups"))

    def this_run(name, columns, filters=None) -> pa.Table:
        days = sorted(by_date[name]) or [empty_date]  # none: the empty file with the schema
        return pa.concat_tables([pq.read_table(str(out_dir / name / f"date={day}"),
                                               columns=columns, filters=filters) for day in days])

    commit_cols = ["group", "topic", "partition", "log_offset", "committed_offset",
                   "commit_timestamp", "txn"]
    buckets = arrow_buckets(lambda groups: this_run("commits", commit_cols,
                                                    [("group", "in", list(groups))]))

    def gen_pairs():
        t = this_run("group_generations", ["group", "timestamp"])
        return list(zip(t["group"].to_pylist(), t["timestamp"].to_pylist(), strict=True))
    return written, window, groups, (buckets, gen_pairs)


def data_time(stamps, obs: dict) -> int:
    """The default evaluation time: the newest timestamp in the data."""
    stamps = list(stamps) + [max(ts for _, ts in series) for series in obs.values() if series]
    return max(stamps) if stamps else int(time.time() * 1000)


def as_of_date(as_of: int) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(as_of / 1000))


def _write(df, path: Path, empty_date: str) -> int:
    """Write a table partitioned by date (replacing the dates it has); -> rows written.

    An empty result still leaves a readable table: its `empty_date`
    partition is replaced by one empty Parquet file with the schema."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F
    ob = Observation()
    df.observe(ob, F.count(F.lit(1)).alias("rows")).write.mode("overwrite") \
        .partitionBy("date").parquet(str(path))
    n = int(ob.get.get("rows", 0) or 0)
    if n == 0:
        from pyspark.sql.pandas.types import to_arrow_schema
        from pyspark.sql.types import StructType
        schema = StructType([f for f in df.schema.fields if f.name != "date"])
        _write_empty(Path(path), to_arrow_schema(schema, timezone="UTC"), empty_date)
    return n


def _write_empty(path: Path, schema: pa.Schema, empty_date: str) -> None:
    """Replace the `empty_date` partition by one empty Parquet file with the schema."""
    import shutil

    import pyarrow.parquet as pq
    target = path / f"date={empty_date}"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    pq.write_table(schema.empty_table(), str(target / "part-00000-empty.parquet"))


def _tally(items) -> dict:
    out: dict = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return dict(sorted(out.items()))


RECORD_NAMES = {0: "offset_commit_v0_key", 1: "offset_commit", 2: "group_metadata",
                3: "consumer_group_metadata", 4: "consumer_group_partition_metadata",
                5: "consumer_group_member_metadata", 6: "consumer_group_target_assignment_metadata",
                7: "consumer_group_target_assignment_member",
                8: "consumer_group_current_member_assignment",
                10: "share_group_member_metadata", 11: "share_group_metadata",
                12: "share_group_target_assignment_metadata",
                13: "share_group_target_assignment_member",
                14: "share_group_current_member_assignment",
                15: "share_group_state_partition_metadata"}


def _summary(records, counts, out_dir: Path, as_of: int, data_dir, obs, rows: dict) -> dict:
    from pyspark.sql import functions as F
    by_type: dict[str, int] = {}
    tombstones = 0
    errors: dict[str, int] = {}
    control = 0
    total = 0
    for r in counts:
        n = r["n"]
        if r["error"] is not None:
            errors[r["error"]] = errors.get(r["error"], 0) + n
            continue
        total += n
        if r["control_type"] is not None:
            control += n
            continue
        name = RECORD_NAMES.get(r["record_type"], f"type_{r['record_type']}")
        by_type[name] = by_type.get(name, 0) + n
        if r["tombstone"]:
            tombstones += n
    details = []
    if errors:
        for r in records.filter(F.col("error").isNotNull()).select(
                "log_partition", "segment", "offset", "error", "error_detail").limit(100).collect():
            details.append(r.asDict())
    return {
        "data_dir": str(data_dir), "out_dir": str(out_dir), "as_of": as_of,
        "as_of_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(as_of / 1000)),
        "records": total, "records_by_type": dict(sorted(by_type.items())),
        "tombstones": tombstones, "control_records": control,
        "bad_input": dict(sorted(errors.items())), "bad_input_total": sum(errors.values()),
        "bad_input_details": details, "user_partitions": len(obs),
        "table_rows": {t: rows.get(t, 0) for t in TABLES},
    }
