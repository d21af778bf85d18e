"""One local[2] SparkSession for the whole test run, and shared generated logs.

Spark needs its environment before the JVM starts: loopback only, and
executors running this interpreter (the venv, where kcoord is installed).
"""
from __future__ import annotations

import json
import os
import sys

import pytest

os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

# The generated workload every Spark test reads: every special group kind,
# every record version, transactions and KIP-848 records, some compressed
# batches, small segments (several per partition), and bad input.
WORKLOAD = dict(groups=20, topics=3, partitions=4, commits=4000, log_partitions=4, seed=11,
                partitions_per_group=3, segment_bytes=16 << 10, corrupt=True)


# Test data is tiny: the time goes into JVM warm-up and query compilation, so
# skip the optimizing JIT tier, whole-stage codegen and adaptive re-planning.
FAST_START = {
    "spark.ui.enabled": "false",
    "spark.driver.memory": "2g",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.codegen.wholeStage": "false",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
}


@pytest.fixture(scope="session")
def spark():
    pytest.importorskip("pyspark")
    from kcoord.pipeline.session import build_session
    session = build_session("local[2]", "kcoord-tests", shuffle_partitions=2, progress=False,
                            conf=FAST_START)
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def workload(tmp_path_factory):
    from kcoord.pipeline.generate import generate
    data = tmp_path_factory.mktemp("workload") / "data"
    manifest = generate(data, **WORKLOAD)
    return data, manifest


@pytest.fixture(scope="session")
def batch_run(spark, workload, tmp_path_factory):
    """The batch pipeline over the workload, once: (data dir, out dir, summary, manifest)."""
    from kcoord.pipeline.jobs import run_pipeline
    data, manifest = workload
    out = tmp_path_factory.mktemp("run") / "out"
    summary = run_pipeline(spark, data, out, log=lambda *_: None)
    return data, out, summary, manifest


def read_table(path) -> list[dict]:
    import pyarrow.parquet as pq
    rows = pq.read_table(str(path)).to_pylist()
    for r in rows:
        r["date"] = str(r["date"])
    return rows


def manifest_of(data) -> dict:
    return json.loads((data / "kcoord-generate.json").read_text())
