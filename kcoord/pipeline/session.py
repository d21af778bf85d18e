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


# Spark's log4j2 at ERROR: its startup WARN lines (native-hadoop library,
# loopback address, ...) are noise to a pipeline user; --verbose keeps them
QUIET_LOG4J2 = """rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
"""


def _quiet_logging() -> None:
    """Point Spark at a conf dir holding only a quiet log4j2.properties (when
    the user has no SPARK_CONF_DIR of their own)."""
    if os.environ.get("SPARK_CONF_DIR"):
        return
    import tempfile
    conf_dir = os.path.join(tempfile.gettempdir(), f"kcoord-spark-conf-{os.getuid()}")
    os.makedirs(conf_dir, exist_ok=True)
    path = os.path.join(conf_dir, "log4j2.properties")
    if not os.path.exists(path) or open(path).read() != QUIET_LOG4J2:
        with open(path + ".tmp", "w") as fh:
            fh.write(QUIET_LOG4J2)
        os.replace(path + ".tmp", path)
    os.environ["SPARK_CONF_DIR"] = conf_dir


def build_session(master: str | None = None, app: str = "kcoord-pipeline",
                  shuffle_partitions: int | None = None, conf: dict | None = None,
                  progress: bool = False, verbose: bool = False, ui: bool = False):
    """progress: Spark's console progress bars; verbose: its WARN lines too;
    ui: its web UI (off by default: a port and a thread nobody looks at)."""
    prepare_environment()
    if not verbose:
        _quiet_logging()
    from pyspark.sql import SparkSession

    from .source import register

    master = master or "local[*]"
    builder = SparkSession.builder.master(master).appName(app)
    settings = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.sources.partitionOverwriteMode": "dynamic",
        "spark.sql.shuffle.partitions": str(shuffle_partitions or 8),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.ui.showConsoleProgress": "true" if progress or verbose else "false",
        "spark.ui.enabled": "true" if ui else "false",
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
    if not verbose:
        spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
