"""Structured Streaming: keep `lag` and `status` (and `offsets`) current.

The `kcoord_offsets` stream source hands each micro-batch the records
appended since the last one.  `foreachBatch` folds them into a small state
kept beside the checkpoint:

  window   the last `intervals` applied commit events (commits and tombstones)
           per (group, topic, partition): all Burrow looks at
  pending  transactional commits whose transaction has no marker yet

then evaluates the state against the user topics' current log ends and
rewrites the snapshot tables for the evaluation date.  State is written per
batch id (`state/<id>/`) and read from the newest id below the batch being
processed, so a batch Spark replays after a failure sees the same input.
"""
from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

from .jobs import (
    EVENT_COLUMNS,
    Settings,
    commit_events,
    data_dir_log_ends,
    data_time,
    server_observations,
    source_options,
    window_events,
    write_snapshots,
)

# what the state and the commit-event stage need from each record
SLIM = ["log_partition", "offset", "timestamp", "record_type", "value_version", "tombstone",
        "producer_id", "transactional", "control_type", "group", "topic", "partition",
        "committed_offset", "leader_epoch", "metadata", "commit_timestamp", "expire_timestamp",
        "error"]


class StreamState:
    def __init__(self, spark, data_dir, out_dir, state_dir, *, bootstrap=None,
                 settings: Settings | None = None, clock: str = "wall", as_of: int | None = None,
                 log=print, client_properties: dict | None = None) -> None:
        self.spark = spark
        self.data_dir = None if data_dir is None else str(data_dir)
        self.client_properties = client_properties
        self.out_dir = Path(out_dir)
        self.state_dir = Path(state_dir)
        self.bootstrap = bootstrap
        self.settings = settings or Settings()
        self.clock = clock
        self.fixed_as_of = as_of
        self.log = log
        self.batches = 0
        self.last_rows = 0
        self.last_input_at = time.time()
        self.partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))

    def _previous(self, batch_id: int) -> Path | None:
        done = sorted((int(p.name), p) for p in self.state_dir.glob("*")
                      if p.name.isdigit() and (p / "_DONE").exists() and int(p.name) < batch_id)
        return done[-1][1] if done else None

    def process(self, batch_df, batch_id: int) -> None:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F
        spark = self.spark
        t0 = time.time()
        new = batch_df.filter(F.col("error").isNull() & (F.col("record_type").isin(0, 1)
                                                         | F.col("control_type").isNotNull())) \
            .select(*SLIM).persist(StorageLevel.MEMORY_AND_DISK)
        rows = new.count()
        prev = self._previous(batch_id)
        if prev is not None:
            window_prev = spark.read.parquet(str(prev / "window"))
            pending_prev = spark.read.parquet(str(prev / "pending"))
            records = new.unionByName(pending_prev)
        else:
            window_prev = None
            records = new
        events = commit_events(records).persist(StorageLevel.MEMORY_AND_DISK)
        pending = events.filter(F.col("txn") == "open").select(*SLIM)
        applied = events.filter(F.col("txn").isNull() | (F.col("txn") == "committed")) \
            .select(*EVENT_COLUMNS).withColumn("txn", F.lit(None).cast("string"))
        if window_prev is not None:
            applied = applied.unionByName(
                window_prev.withColumn("txn", F.lit(None).cast("string")))
        window = window_events(applied, self.settings.intervals)

        target = self.state_dir / str(batch_id)
        if target.exists():
            shutil.rmtree(target)
        window.write.parquet(str(target / "window"))
        pending.write.parquet(str(target / "pending"))
        (target / "_DONE").write_text(str(batch_id))
        events.unpersist()
        new.unpersist()
        for old in self.state_dir.glob("*"):
            if old.name.isdigit() and int(old.name) < batch_id:
                shutil.rmtree(old, ignore_errors=True)

        window = spark.read.parquet(str(target / "window"))
        if self.bootstrap:
            obs = server_observations(self.bootstrap, self.client_properties)
        else:
            obs = data_dir_log_ends(self.data_dir)
        if self.fixed_as_of is not None:
            as_of = self.fixed_as_of
        elif self.clock == "wall":
            as_of = int(time.time() * 1000)
        else:
            newest = window.agg(F.max("commit_timestamp")).collect()[0][0]
            as_of = data_time([newest] if newest is not None else [], obs)
        bc = spark.sparkContext.broadcast(obs)
        from .timelag import dir_lookup, wire_lookup
        lookup = (wire_lookup(self.bootstrap, self.client_properties) if self.bootstrap
                  else dir_lookup(self.data_dir))
        ev = write_snapshots(window, bc, as_of, self.settings, self.partitions, self.out_dir,
                             time_lag=lookup)
        statuses = {r["status"]: r["count"] for r in
                    ev.filter((F.col("scope") == "group") & F.col("live"))
                    .groupBy("status").count().collect()}
        ev.unpersist()
        bc.unpersist()
        self.batches += 1
        self.last_rows = rows
        if rows:
            self.last_input_at = time.time()
        self.log(f"[stream] batch {batch_id}: {rows} commit records, groups "
                 f"{dict(sorted(statuses.items()))}, as of "
                 f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(as_of / 1000))}, "
                 f"{time.time() - t0:.1f}s")


def run_stream(spark, data_dir, out_dir, *, checkpoint=None, bootstrap=None,
               bootstrap_server: str | None = None, client_properties: dict | None = None,
               settings: Settings | None = None, trigger_seconds: float = 10.0,
               clock: str = "wall", as_of: int | None = None, max_batches: int | None = None,
               until_idle: float | None = None, available_now: bool = False,
               log=print) -> StreamState:
    """Run the streaming pipeline.

    available_now: process what is in the log now, then stop (Trigger.AvailableNow).
    Otherwise runs until interrupted, max_batches micro-batches, or until_idle
    seconds without new records.
    """
    out_dir = Path(out_dir)
    checkpoint = Path(checkpoint) if checkpoint else out_dir / "_checkpoint"
    state = StreamState(spark, data_dir, out_dir, checkpoint / "state",
                        bootstrap=bootstrap_server or bootstrap, settings=settings, clock=clock,
                        as_of=as_of, log=log, client_properties=client_properties)
    options = source_options(data_dir, bootstrap_server, client_properties)
    options.pop("split", None)
    stream = spark.readStream.format("kcoord_offsets").options(**options).load()
    writer = stream.writeStream.foreachBatch(state.process) \
        .option("checkpointLocation", str(checkpoint / "query")) \
        .queryName("kcoord-pipeline")
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{trigger_seconds} seconds")
    query = writer.start()
    stop = threading.Event()
    try:
        while query.isActive and not stop.is_set():
            query.awaitTermination(1.0)
            if max_batches is not None and state.batches >= max_batches:
                break
            if until_idle is not None and state.batches and \
                    time.time() - state.last_input_at > until_idle:
                break
    except KeyboardInterrupt:
        log("[stream] interrupted")
    finally:
        if query.isActive:
            query.stop()
    if query.exception():
        raise query.exception()
    return state
