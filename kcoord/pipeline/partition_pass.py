"""The commits table and the commit windows in one pass over the stage, in pyarrow.

When every stage file holds whole __consumer_offsets partitions (split by
partition, or over the wire), each file alone resolves its transactions (a
commit's marker follows it in the same log partition) and knows the last
commits of its keys.  A Spark task per few files (tasks.py) reads each with pyarrow, writes
its commits rows (Parquet, one file per date) and its last `intervals`
applied events per (group, topic, partition); the driver moves the commits
files into the table.  No rows cross into the JVM: this replaces the Spark
plan of jobs.commit_events / commits_table / window_events / generations (same
rows, tested side by side), which joins, shuffles and aggregates every commit.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .tasks import file_size, spread

# The stage columns the pass reads.
COLUMNS = ["log_partition", "offset", "timestamp", "record_type", "value_version", "tombstone",
           "producer_id", "transactional", "control_type", "group", "topic", "partition",
           "committed_offset", "leader_epoch", "metadata", "commit_timestamp",
           "expire_timestamp", "error", "member_id", "raw_value"]

# what jobs.generations (types 2-8) and share_jobs (10-15) read of the group records
GROUP_COLUMNS = ["group", "record_type", "tombstone", "member_id", "timestamp", "log_partition",
                 "offset", "raw_value", "error"]

# commits table columns (after `date`): (name, stage column)
COMMIT_COLUMNS = [("group", "group"), ("topic", "topic"), ("partition", "partition"),
                  ("committed_offset", "committed_offset"), ("leader_epoch", "leader_epoch"),
                  ("metadata", "metadata"), ("commit_timestamp", "commit_timestamp"),
                  ("expire_timestamp", "expire_timestamp"), ("log_partition", "log_partition"),
                  ("log_offset", "offset"), ("record_timestamp", "timestamp"),
                  ("value_version", "value_version"), ("key_type", "record_type"),
                  ("txn", "txn")]

WINDOW_COLUMNS = ["group", "topic", "partition", "log_partition", "offset", "tombstone",
                  "committed_offset", "leader_epoch", "metadata", "commit_timestamp",
                  "expire_timestamp"]

DAY_MS = 86_400_000

# the tables the pass writes per date
TABLES = ("commits", "group_generations")


def _ints(col, fill: int) -> np.ndarray:
    return pc.fill_null(col, fill).to_numpy(zero_copy_only=False).astype(np.int64)


def txn_outcomes(events: pa.Table, markers: pa.Table) -> pa.Array:
    """`txn` per event: null for a plain commit, else committed / aborted / open from
    the first control record of the same producer after it in its log partition."""
    txn = pc.fill_null(events["transactional"], False).to_numpy(zero_copy_only=False)
    out = np.full(len(events), None, dtype=object)
    if not txn.any():
        return pa.array(out, pa.string())
    rows = np.flatnonzero(txn)
    markers = markers.filter(pc.and_(pc.is_valid(markers["producer_id"]),
                                     pc.is_valid(markers["offset"])))
    n, m = len(rows), len(markers)
    lp = np.concatenate([_ints(events["log_partition"], -1)[rows],
                         _ints(markers["log_partition"], -1)])
    pid = np.concatenate([_ints(events["producer_id"], -1)[rows], _ints(markers["producer_id"], -1)])
    off = np.concatenate([_ints(events["offset"], -1)[rows], _ints(markers["offset"], -1)])
    mtype = np.concatenate([np.full(n, -1), _ints(markers["control_type"], -1)])
    is_marker = np.concatenate([np.zeros(n, bool), np.ones(m, bool)])
    order = np.lexsort((off, pid, lp))
    # the nearest marker at or after each position, in (log partition, producer, offset) order
    pos = np.where(is_marker[order], np.arange(n + m), n + m)
    nearest = np.minimum.accumulate(pos[::-1])[::-1]
    commits = order < n  # sorted positions holding a transactional commit
    i, j = order[commits], nearest[commits]
    k = order[np.minimum(j, n + m - 1)]
    hit = (j < n + m) & (lp[k] == lp[i]) & (pid[k] == pid[i])
    found = np.full(n, -1)
    found[i[hit]] = mtype[k[hit]]
    out[rows] = np.where(found == 1, "committed", np.where(found == 0, "aborted", "open"))
    return pa.array(out, pa.string())


def commit_events(table: pa.Table) -> pa.Table:
    """Offset commit records (values and tombstones) with `txn` (jobs.commit_events)."""
    base = table.filter(pc.and_(pc.is_null(table["error"]), pc.is_in(
        table["record_type"], pa.array([0, 1], table.schema.field("record_type").type))))
    markers = table.filter(pc.is_valid(table["control_type"]))
    return base.append_column("txn", txn_outcomes(base, markers))


def utc_dates(ms) -> pa.Array:
    """The UTC day of each ms timestamp (null stays null), as Spark's to_date."""
    days = np.floor_divide(_ints(ms, 0), DAY_MS).astype(np.int32)
    return pa.array(days, pa.date32(), mask=pc.is_null(ms).to_numpy(zero_copy_only=False))


def commit_rows(events: pa.Table) -> pa.Table:
    """The commits table's rows with their `date` (UTC day of the commit timestamp)."""
    rows = events.filter(pc.invert(pc.fill_null(events["tombstone"], False)))
    return pa.table([utc_dates(rows["commit_timestamp"])] + [rows[src] for _, src in COMMIT_COLUMNS],
                    names=["date"] + [n for n, _ in COMMIT_COLUMNS])


def generation_table(groups: pa.Table, topic_names: dict) -> pa.Table:
    """Generation rows (jobs.generations) of the group records of whole log partitions,
    with their `date`."""
    from .generations import GENERATION_FIELDS, decoded_records, generation_rows
    from .schema import _arrow_type
    schema = pa.schema([pa.field(n, _arrow_type(t)) for n, t in GENERATION_FIELDS])
    types = groups["record_type"]
    recs = groups.filter(pc.fill_null(pc.less_equal(types, 8), False)).sort_by(
        [("group", "ascending"), ("log_partition", "ascending"), ("offset", "ascending")])
    cols = ["group", "record_type", "tombstone", "member_id", "timestamp", "log_partition",
            "offset", "raw_value"]
    rows = list(generation_rows(decoded_records(recs.select(cols).to_pylist(),
                                                dict(topic_names))))
    table = pa.Table.from_pylist(rows, schema=schema)
    return table.add_column(0, "date", utc_dates(table["timestamp"]))


def last_events(events: pa.Table, intervals: int) -> pa.Table:
    """The last `intervals` applied events (commits and tombstones) per key, in log order."""
    txn = events["txn"]
    applied = events.filter(pc.or_(pc.is_null(txn), pc.fill_null(pc.equal(txn, "committed"), False)))
    if len(applied) == 0:
        return applied.select(WINDOW_COLUMNS)
    codes = [_ints(pc.dictionary_encode(applied[c]).combine_chunks().indices, -1)
             for c in ("group", "topic")]
    part = _ints(applied["partition"], -(1 << 31))
    key_order = (-_ints(applied["log_partition"], -1), -_ints(applied["offset"], -1), part,
                 codes[1], codes[0])
    order = np.lexsort(key_order)  # by key, newest first
    g, t, p = codes[0][order], codes[1][order], part[order]
    start = np.ones(len(order), bool)
    start[1:] = (g[1:] != g[:-1]) | (t[1:] != t[:-1]) | (p[1:] != p[:-1])
    idx = np.arange(len(order))
    rank = idx - np.maximum.accumulate(np.where(start, idx, 0))
    return applied.take(pa.array(order[rank < intervals])).select(WINDOW_COLUMNS)


def day_name(day) -> str:
    """A date partition's directory value, as Spark names it."""
    return "__HIVE_DEFAULT_PARTITION__" if day is None else day.isoformat()


def group_records(table: pa.Table) -> pa.Table:
    types = table["record_type"]
    keep = pc.and_(pc.is_null(table["error"]), pc.greater_equal(types, 2))
    return table.filter(pc.fill_null(keep, False)).select(GROUP_COLUMNS)


def write_dates(rows: pa.Table, table_dir: str, name: str, dictionary=True) -> dict:
    """rows (with `date`) -> one file `name` per date under table_dir/date=D; -> {D: rows}.
    dictionary: Parquet dictionary encoding (True, or the columns to encode)."""
    import pyarrow.parquet as pq
    written: dict = {}
    days = pc.unique(rows["date"]).to_pylist()
    for day in days:
        part = rows if len(days) == 1 else rows.filter(
            pc.is_null(rows["date"]) if day is None
            else pc.fill_null(pc.equal(rows["date"], day), False))
        target = Path(table_dir) / f"date={day_name(day)}"
        target.mkdir(parents=True, exist_ok=True)
        pq.write_table(part.drop_columns(["date"]), str(target / name), use_dictionary=dictionary)
        written[day_name(day)] = len(part)
    return written


def run_file(path: str, index: int, work_dir: str, intervals: int,
             topic_names: dict | None = None) -> dict:
    """One stage file -> its commits and generations files (by date), its window file
    and its group records file, under work_dir; -> {table: {date: rows}}."""
    import pyarrow.parquet as pq
    table = pq.read_table(path, columns=COLUMNS)
    name = f"part-{index:05d}.parquet"
    groups = group_records(table)
    pq.write_table(groups, os.path.join(work_dir, "groups", name), compression="none")
    events = commit_events(table)
    commits = commit_rows(events)
    # dictionaries pay for the strings (few groups and topics), not for offsets and
    # timestamps (nearly all distinct): half the write's CPU, and smaller files
    strings = [f.name for f in commits.schema if pa.types.is_string(f.type)]
    written = {"commits": write_dates(commits, os.path.join(work_dir, "commits"), name, strings),
               "group_generations": write_dates(generation_table(groups, topic_names or {}),
                                                os.path.join(work_dir, "group_generations"),
                                                name)}
    pq.write_table(last_events(events, intervals), os.path.join(work_dir, "window", name),
                   compression="none")
    return written


def run(spark, stage_dir: Path, work_dir: Path, intervals: int,
        topic_names: dict | None = None) -> dict:
    """Run the pass over every stage file.  -> {table: {date: rows}} for TABLES.  Under
    work_dir: commits/date=D and group_generations/date=D (for the caller to place),
    window/ and groups/ (Parquet)."""
    files = sorted(str(p) for p in Path(stage_dir).glob("*.parquet"))
    for d in TABLES + ("window", "groups"):
        shutil.rmtree(work_dir / d, ignore_errors=True)
        (work_dir / d).mkdir(parents=True)
    work = str(work_dir)
    names = dict(topic_names or {})

    def task(_, chunks):
        for chunk in chunks:
            for index, path in chunk:
                yield run_file(path, index, work, intervals, names)

    by_date: dict = {t: {} for t in TABLES}
    if files:
        # a few tasks per core, each passing several files in turn (tasks.py)
        chunks = spread(files, spark.sparkContext.defaultParallelism, file_size)
        for written in spark.sparkContext.parallelize(chunks, len(chunks)) \
                .mapPartitionsWithIndex(task).collect():
            for t, days in written.items():
                for day, n in days.items():
                    by_date[t][day] = by_date[t].get(day, 0) + n
    return by_date


def place_dates(src: Path, table_dir: Path) -> None:
    """Replace table_dir's date partitions with those under src (other dates stay)."""
    table_dir.mkdir(parents=True, exist_ok=True)
    for part in sorted(src.glob("date=*")):
        target = table_dir / part.name
        shutil.rmtree(target, ignore_errors=True)
        shutil.move(str(part), str(target))
