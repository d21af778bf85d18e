"""The driver-side snapshot tables (snapshot_tables) against the Spark plan the stream runs."""
from __future__ import annotations

import pyarrow.parquet as pq

from .conftest import read_table


def _rows(path):
    return sorted(map(str, read_table(path)))


def test_driver_snapshots_equal_the_spark_plans(spark, workload, tmp_path):
    from kcoord.pipeline import jobs, snapshot_tables
    from kcoord.pipeline.timelag import dir_lookup
    data, _ = workload
    records, counts = jobs.stage_records(spark, data, tmp_path / "stage")
    obs = jobs.data_dir_log_ends(data)
    as_of = jobs.data_time([r["max_commit"] for r in counts if r["max_commit"] is not None], obs)
    settings = jobs.Settings()
    window = jobs.window_events(jobs.commit_events(records), settings.intervals)

    old_rows: dict = {}
    bc = spark.sparkContext.broadcast(obs)
    ev = jobs.write_snapshots(window, bc, as_of, settings, 2, tmp_path / "old", rows=old_rows,
                              time_lag=dir_lookup(data))
    old_status = [r.asDict() for r in jobs.status_view(ev).collect()]
    ev.unpersist()
    new_rows: dict = {}
    stats: dict = {}
    new_status = snapshot_tables.write_snapshots(window.toArrow(), obs, as_of, settings,
                                                 tmp_path / "new", new_rows,
                                                 time_lag=dir_lookup(data), stats=stats)

    assert new_rows == old_rows and old_rows["lag"] > 50
    assert stats["time_lag"]["found"] > 10  # lagging partitions whose time lag is known
    assert len({r["status"] for r in new_status}) >= 4
    assert sorted(map(str, new_status)) == sorted(map(str, old_status))
    for table in ("offsets", "lag", "status"):
        assert _rows(tmp_path / "new" / table) == _rows(tmp_path / "old" / table), table
        schemas = [pq.read_table(str(tmp_path / side / table)).schema.remove_metadata()
                   for side in ("old", "new")]
        assert schemas[0] == schemas[1], (table, str(schemas[0]), str(schemas[1]))


def test_share_rows_written_in_the_driver_equal_sparks(spark, tmp_path):
    from pyspark.sql import functions as F

    from kcoord.pipeline import jobs
    from kcoord.pipeline.schema import ddl
    from kcoord.pipeline.share_jobs import SHARE_GROUP_FIELDS
    from kcoord.pipeline.snapshot_tables import rows_table, write_date
    rows = [dict({n: None for n, _ in SHARE_GROUP_FIELDS}, group="g", topic="t", partition=p,
                 start_offset=5, lag=p, lag_growing=bool(p), problems=["LAG_GROWING"] * p,
                 group_in_offsets=True, last_write_ms=1_700_000_000_000) for p in range(3)]
    df = spark.createDataFrame([tuple(r[n] for n, _ in SHARE_GROUP_FIELDS) for r in rows],
                               schema=ddl(SHARE_GROUP_FIELDS))
    assert jobs._write(df.withColumn("date", F.lit("2026-11-28").cast("date")),
                       tmp_path / "old", "2026-11-28") == 3
    assert write_date(rows_table(rows, SHARE_GROUP_FIELDS), tmp_path / "new", "2026-11-28") == 3
    assert _rows(tmp_path / "new") == _rows(tmp_path / "old")
    schemas = [pq.read_table(str(tmp_path / side)).schema.remove_metadata()
               for side in ("old", "new")]
    assert schemas[0] == schemas[1], (str(schemas[0]), str(schemas[1]))
