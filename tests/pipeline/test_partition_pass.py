"""The one-pass commits and windows (partition_pass) against the Spark plan they replace."""
from __future__ import annotations

import pyarrow as pa

from .conftest import WORKLOAD


def _sorted(rows, names):
    return sorted(tuple(r[n] for n in names) for r in rows)


def test_one_pass_gives_the_spark_plans_commits_and_windows(spark, workload, tmp_path,
                                                            monkeypatch):
    from kcoord.pipeline import jobs, partition_pass, tasks
    data, _ = workload
    stage = tmp_path / "stage"
    # one task per core: each task decodes and passes several log partitions in turn
    monkeypatch.setattr(tasks, "TASKS_PER_CORE", 1)
    records, _ = jobs.stage_records(spark, data, stage / "records")
    # still one stage file per log partition (a file alone resolves its transactions)
    assert len(list((stage / "records").glob("*.parquet"))) == WORKLOAD["log_partitions"] > 2
    from kcoord.pipeline.logend import topic_id_names
    topic_names = topic_id_names(data)
    by_date = partition_pass.run(spark, stage / "records", stage, 3, topic_names)
    for table in partition_pass.TABLES:
        partition_pass.place_dates(stage / table, tmp_path / table)

    events = jobs.commit_events(records)
    spark_commits = jobs.commits_table(events).collect()
    one_pass = spark.read.parquet(str(tmp_path / "commits")).collect()
    names = [n for n, _ in partition_pass.COMMIT_COLUMNS] + ["date"]
    assert len(spark_commits) > 1000 and {r["txn"] for r in spark_commits} == {
        None, "committed", "aborted", "open"}
    assert _sorted(one_pass, names) == _sorted(spark_commits, names)
    assert sum(by_date["commits"].values()) == len(spark_commits)

    # a key's window may come from several files: evaluate keeps the last 3 in log order
    window = spark.read.parquet(str(stage / "window")).collect()
    keep: dict = {}
    for r in sorted(window, key=lambda r: (r["offset"], r["log_partition"])):
        keep.setdefault((r["group"], r["topic"], r["partition"]), []).append(r)
    trimmed = [r for rows in keep.values() for r in rows[-3:]]
    assert _sorted(trimmed, jobs.EVENT_COLUMNS) == _sorted(
        jobs.window_events(events, 3).collect(), jobs.EVENT_COLUMNS)

    # the group records the generations and share-group steps read instead of the stage
    from pyspark.sql import functions as F
    cols = [c for c in partition_pass.GROUP_COLUMNS if c != "raw_value"]
    groups = spark.read.parquet(str(stage / "groups")).select(*cols).collect()
    wanted = records.filter(F.col("error").isNull() & (F.col("record_type") >= 2)) \
        .select(*cols).collect()
    assert len(wanted) > 20 and _sorted(groups, cols) == _sorted(wanted, cols)

    # generations replayed per file vs jobs.generations: same rows, same Parquet schema
    import pyarrow.parquet as pq
    gens = jobs.generations(records, 2, topic_names).select(
        "date", *[n for n, _ in jobs.GENERATION_FIELDS])
    assert jobs._write(gens, tmp_path / "old_gens", "2026-11-28") == sum(
        by_date["group_generations"].values())
    old, new = (pq.read_table(str(tmp_path / d)) for d in ("old_gens", "group_generations"))
    assert len(old) > 5 and {"classic", "consumer"} <= set(old["group_type"].to_pylist())
    assert any(m["assignment"] for r in old.to_pylist() for m in r["members"])
    assert sorted(map(str, new.to_pylist())) == sorted(map(str, old.to_pylist()))
    assert new.schema.remove_metadata() == old.schema.remove_metadata(), (
        str(new.schema), str(old.schema))

    # the report's lag buckets: pyarrow over the commits table vs Spark over the events
    from kcoord.pipeline.report import arrow_buckets, spark_buckets
    chosen = sorted({r["group"] for r in spark_commits if r["txn"]})[:3] + sorted(
        {r["group"] for r in spark_commits})[:2] + ["no-such-group"]
    stamps = [r["commit_timestamp"] for r in spark_commits]
    lo, width = min(stamps), (max(stamps) - min(stamps)) // 40 + 1
    def read(gs):
        return pq.read_table(str(tmp_path / "commits"), filters=[("group", "in", gs)])
    want = sorted(spark_buckets(events)(chosen, lo, width))
    assert len({r[0] for r in want}) >= 3 and len({r[3] for r in want}) > 20
    assert sorted(arrow_buckets(read)(chosen, lo, width)) == want


def test_transaction_outcome_is_the_next_marker_of_its_producer_in_its_log_partition():
    from kcoord.pipeline.partition_pass import txn_outcomes
    # (log partition, offset, producer, transactional)
    commits = [(0, 1, 7, True), (0, 2, 8, True), (0, 3, None, False), (1, 1, 7, True),
               (0, 6, 7, True), (0, 9, 8, True), (1, 5, 9, True)]
    # (log partition, offset, producer, control type): 1 commit, 0 abort
    markers = [(0, 4, 7, 1), (0, 5, 8, 0), (1, 3, 8, 1), (0, 7, 7, 0), (1, 2, 7, 0),
               (0, 8, 9, 1)]
    events = pa.table({"log_partition": pa.array([c[0] for c in commits], pa.int32()),
                       "offset": [c[1] for c in commits],
                       "producer_id": pa.array([c[2] for c in commits], pa.int64()),
                       "transactional": [c[3] for c in commits]})
    marks = pa.table({"log_partition": pa.array([m[0] for m in markers], pa.int32()),
                      "offset": [m[1] for m in markers], "producer_id": [m[2] for m in markers],
                      "control_type": pa.array([m[3] for m in markers], pa.int16())})
    assert txn_outcomes(events, marks).to_pylist() == [
        "committed", "aborted", None, "aborted", "aborted", "open", "open"]

