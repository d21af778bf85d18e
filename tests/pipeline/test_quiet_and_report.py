"""The pipeline's console and report: Spark's WARN lines and progress bars
off unless --verbose, its UI off by default; in the report no "most lag"
partition when there is no lag, "complete" named and explained as Burrow's
window fill, no chart drawn from a single point."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kcoord.pipeline.report import lag_section, status_table

SESSION = """
import sys
from kcoord.pipeline.session import build_session
# the test JVM's start-up options only (tests/pipeline/conftest.py FAST_START): not the UI
# or progress settings this checks
s = build_session("local[1]", "quiet-test", 1, verbose={verbose}, conf={{
    "spark.driver.memory": "1g",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}})
print("UI", s.sparkContext.uiWebUrl, s.conf.get("spark.ui.showConsoleProgress"), flush=True)
s.range(10).count()
s.stop()
"""


def test_spark_quiet_unless_verbose(tmp_path):
    pytest.importorskip("pyspark")
    env = {k: v for k, v in os.environ.items() if k != "SPARK_CONF_DIR"}
    env["TMPDIR"] = str(tmp_path)
    out = subprocess.run([sys.executable, "-c", SESSION.format(verbose=False)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "UI None false" in out.stdout  # no web UI, no progress bars
    # Spark's start-up WARN lines (native-hadoop library, ...) are not shown
    assert " WARN " not in out.stderr, out.stderr[-3000:]


def _group(name, status, lag, complete=1.0):
    return {"scope": "group", "group": name, "status": status, "current_lag": lag,
            "partitions": 2, "complete": complete, "max_lag_topic": "t", "max_lag_partition": 1}


def test_report_most_lag_window_fill_and_single_points():
    rows = [_group("idle", "OK", 0), _group("behind", "WARN", 7, 0.5)]
    table = status_table(rows)
    assert "window fill</th>" in table and "<th>complete</th>" not in table
    assert "Window fill is Burrow's <code>complete</code>" in table
    behind = table[table.index("<td>behind</td>"):]
    idle = table[table.index("<td>idle</td>"):]
    assert "t/1</td>" in behind.split("</tr>")[0]
    assert "t/1" not in idle.split("</tr>")[0]  # no lag: no "most lag" partition
    section = lag_section({"idle": [(1000, 0.0)], "behind": [(1000, 2.0), (2000, 7.0)]},
                          rows, (0, 3000), False)
    assert section.count("<svg") == 1  # behind only
    assert "One observation only (no chart)" in section and "<b>idle</b>" in section
