"""Building the SparkSession the pipeline runs in."""
from __future__ import annotations

import os
import sys


def prepare_environment() -> None:
    """Environment Spark reads when its JVM and Python workers start.

    Everything binds to loopback, and executors (local or on a standalone
    cluster) run this interpreter, so they import the same kcoord.
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # the streaming source runner imports the source module by name
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.environ.get("PYTHONPATH", "")
    if root not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = root + (os.pathsep + path if path else "")


def build_session(master: str | None = None, app: str = "kcoord-pipeline",
                  shuffle_partitions: int | None = None, conf: dict | None = None,
                  progress: bool = True):
    prepare_environment()
    from pyspark.sql import SparkSession

    from .source import register

    master = master or "local[*]"
    builder = SparkSession.builder.master(master).appName(app)
    settings = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.sources.partitionOverwriteMode": "dynamic",
        "spark.sql.shuffle.partitions": str(shuffle_partitions or 8),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.ui.showConsoleProgress": "true" if progress else "false",
        "spark.driver.memory": "4g",
        "spark.python.worker.reuse": "true",
        # tables partitioned by date: keep a writer per date open instead of sorting rows
        "spark.sql.maxConcurrentOutputFileWriters": "16",
        # the top-k aggregate keeps one small buffer per key: stay hash-based
        "spark.sql.objectHashAggregate.sortBased.fallbackThreshold": "1000000",
    }
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark
