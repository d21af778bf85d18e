"""The snapshot tables (offsets, lag, status) in one pass in the driver, with pyarrow.

Their input is small whatever the log's size: the last `intervals` commit
events per (group, topic, partition) (the window rows), and their output is
one row per key and group, which the run collects anyway for its summary and
report.  So the Burrow evaluation, the exact time lag and the three writes
run here, on Arrow tables, instead of as ~7 small Spark jobs (repartition +
mapInArrow, persist, the lagging-partition collect, join + union + persist,
three writes, the status collect) whose fixed cost dwarfed the work.  The
rows are those of jobs.write_snapshots (the streaming job's Spark plan),
tested side by side.
"""
from __future__ import annotations

import datetime
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .jobs import EVAL_FIELDS, Settings, as_of_date, evaluate_keys
from .schema import _arrow_type

# the columns time lag adds to the evaluated rows
TIME_LAG_FIELDS = [("first_unconsumed_timestamp", "bigint"), ("time_lag_seconds", "double")]
_TYPES = dict(EVAL_FIELDS + TIME_LAG_FIELDS + [("as_of", "bigint")])

OFFSETS_COLUMNS = ["group", "topic", "partition", "committed_offset", "leader_epoch", "metadata",
                   "commit_timestamp", "expire_timestamp", "log_partition", "log_offset"]
LAG_COLUMNS = ["as_of", "group", "topic", "partition", "committed_offset", "commit_timestamp",
               "log_end_offset", "lag", "lag_seconds", "first_unconsumed_timestamp",
               "time_lag_seconds"]
# (status table column, evaluated row column)
STATUS_COLUMNS = [("as_of", "as_of"), ("scope", "scope"), ("group", "group"), ("topic", "topic"),
                  ("partition", "partition"), ("status", "status"), ("complete", "complete"),
                  ("current_lag", "lag"), ("time_lag_seconds", "time_lag_seconds"),
                  ("last_commit_timestamp", "commit_timestamp"),
                  ("window_commits", "window_commits"), ("start_offset", "start_offset"),
                  ("start_timestamp", "start_timestamp"), ("end_offset", "end_offset"),
                  ("end_timestamp", "end_timestamp"), ("partitions", "partitions"),
                  ("max_lag_topic", "max_lag_topic"), ("max_lag_partition", "max_lag_partition")]


def evaluated_rows(window: pa.Table, obs: dict, as_of: int, settings: Settings) -> list[dict]:
    """Burrow per partition and per group from the window rows (jobs.evaluate)."""
    rows: dict = {}
    for r in window.to_pylist():
        rows.setdefault((r["group"], r["topic"], r["partition"]), []).append(r)
    out = evaluate_keys(rows, obs, {}, as_of, settings)
    for r in out:
        r["as_of"] = as_of
    return out


def add_time_lag(rows: list[dict], lookup, as_of: int, stats: dict | None = None) -> None:
    """first_unconsumed_timestamp and time_lag_seconds on each row (jobs.add_time_lag):
    partition rows get the timestamp of the record at their committed offset, group
    rows the largest time lag of their live partitions."""
    parts = [r for r in rows if r["scope"] == "partition"]
    found: dict = {}
    if lookup is not None:
        wants = {(r["topic"], r["partition"], r["committed_offset"]) for r in parts
                 if r["live"] and (r.get("lag") or 0) > 0}
        t0 = time.time()
        found = lookup(wants) if wants else {}
        if stats is not None:
            stats["time_lag"] = {"lagging_partitions": len(wants), "found": len(found),
                                 "lookup_s": round(time.time() - t0, 3)}
    worst: dict = {}
    for r in parts:
        ts = found.get((r["topic"], r["partition"], r.get("committed_offset")))
        lag = r.get("lag")
        r["first_unconsumed_timestamp"] = ts
        r["time_lag_seconds"] = (0.0 if lag == 0 else None if lag is None or ts is None
                                 else max(as_of - ts, 0) / 1000.0)
        if r["live"] and r["time_lag_seconds"] is not None:
            worst[r["group"]] = max(worst.get(r["group"], 0.0), r["time_lag_seconds"])
    for r in rows:
        if r["scope"] == "group":
            r["first_unconsumed_timestamp"] = None
            r["time_lag_seconds"] = worst.get(r["group"])


def _table(rows: list[dict], columns: list[tuple[str, str]]) -> pa.Table:
    """Arrow table of `rows`: (table column, row key) pairs, Spark's types (as_of is a
    literal there: not null)."""
    return rows_table(rows, [(name, _TYPES[key], key) for name, key in columns],
                      required={"as_of"})


def rows_table(rows: list[dict], fields, required=frozenset()) -> pa.Table:
    """Arrow table of driver rows: fields are (name, Spark type) or (name, Spark type,
    row key); columns in `required` not null, as Spark marks its literals."""
    fields = [f if len(f) == 3 else (f[0], f[1], f[0]) for f in fields]
    schema = pa.schema([pa.field(name, _arrow_type(t), nullable=name not in required)
                        for name, t, _ in fields])
    return pa.table({name: pa.array([r.get(key) for r in rows], schema.field(name).type)
                     for name, _, key in fields}, schema=schema)


def write_date(table: pa.Table, path: Path, day: str) -> int:
    """Replace the table's `day` partition by one Parquet file of `table` (an empty
    table still leaves a readable file with the schema); -> rows written."""
    target = Path(path) / f"date={day}"
    tmp = Path(path) / f".date={day}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    pq.write_table(table, str(tmp / "part-00000.snappy.parquet"), compression="snappy")
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    return len(table)


def write_snapshots(window: pa.Table, obs: dict, as_of: int, settings: Settings, out_dir: Path,
                    rows: dict, time_lag=None, stats: dict | None = None) -> list[dict]:
    """Evaluate the window rows and write offsets, lag and status for as_of's date.

    -> the status table's rows (as dicts, with `date`); rows written per table go
    into `rows`."""
    day = as_of_date(as_of)
    ev = evaluated_rows(window, obs, as_of, settings)
    t0 = time.time()
    add_time_lag(ev, time_lag, as_of, stats)
    if stats is not None and "time_lag" in stats:
        stats["time_lag"]["step_s"] = round(time.time() - t0, 3)
    part = [r for r in ev if r["scope"] == "partition" and r["live"]]
    status = [r for r in ev if r["live"]]
    rows["offsets"] = write_date(_table(part, [(c, c) for c in OFFSETS_COLUMNS]),
                                 out_dir / "offsets", day)
    rows["lag"] = write_date(_table(part, [(c, c) for c in LAG_COLUMNS]), out_dir / "lag", day)
    status_table = _table(status, STATUS_COLUMNS)
    rows["status"] = write_date(status_table, out_dir / "status", day)
    date = datetime.date.fromisoformat(day)
    return [{"date": date, **r} for r in status_table.to_pylist()]
