"""The same job on a standalone cluster (master + two workers on 127.0.0.1) gives identical output."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from .conftest import FAST_START, read_table

TABLES = ["commits", "offsets", "group_generations", "lag", "status"]


@pytest.fixture
def cluster(tmp_path):
    pytest.importorskip("pyspark")
    from kcoord.pipeline.cluster import StandaloneCluster
    c = StandaloneCluster(tmp_path / "cluster", workers=2, cores=1, memory="1g")
    c.start()
    try:
        yield c
    finally:
        c.stop()  # even when the test fails


def test_standalone_cluster_gives_identical_output(cluster, batch_run, tmp_path):
    data, local_out, local_summary, _ = batch_run
    status = cluster.status()
    assert status["aliveworkers"] == 2
    out = tmp_path / "out"
    conf = {**FAST_START, "spark.ui.showConsoleProgress": "false",
            "spark.executor.memory": "768m", "spark.driver.memory": "1g"}
    confs = [arg for k, v in conf.items() for arg in ("--conf", f"{k}={v}")]
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.run(
        [sys.executable, "-m", "kcoord.cli", "pipeline", "run", "--data-dir", str(data),
         "--out", str(out), "--master", cluster.master_url, "--shuffle-partitions", "2",
         "--no-report", *confs],
        env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-5000:] + cluster.logs()
    summary = json.loads((out / "summary.json").read_text())
    for key in ("as_of", "records", "records_by_type", "bad_input", "table_rows", "statuses"):
        assert summary[key] == local_summary[key], key
    for table in TABLES:
        assert sorted(map(str, read_table(out / table))) == \
            sorted(map(str, read_table(local_out / table))), table
    # the work ran on the cluster's executors, not in the driver
    apps = cluster.status()["completedapps"] + cluster.status()["activeapps"]
    assert any(a["name"] == "kcoord-pipeline-run" for a in apps)
