import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import assert_all_committed, seed, totals

APP = Path(__file__).resolve().parents[1] / "js" / "orders.js"
# where kafkajs is installed (npm install kafkajs); this repository's test clients by default
NODE_PATH = os.environ.get("KAFKAJS_NODE_PATH", str(
    Path(__file__).resolve().parents[3] / "tests" / "clients" / "js" / "node_modules"))

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not (Path(NODE_PATH) / "kafkajs").is_dir(),
    reason="node and kafkajs are needed")


def run_js(kafka, group, orders, out, count):
    done = subprocess.run(["node", str(APP)], capture_output=True, text=True, timeout=120, env={
        **os.environ, "NODE_PATH": NODE_PATH, "BOOTSTRAP": kafka.bootstrap, "GROUP": group,
        "ORDERS": orders, "TOTALS": out, "COUNT": str(count)})
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip())


def test_every_order_totalled_and_committed(kafka, topics):
    orders, out, group = topics
    seed(kafka.bootstrap, orders, 6)
    assert run_js(kafka, group, orders, out, 6) == 6
    assert totals(kafka, out) == {i: 2.5 for i in range(6)}
    assert_all_committed(kafka, group, orders, 6)


def test_against_an_older_broker(kafka, topics):
    orders, out, group = topics
    seed(kafka.bootstrap, orders, 2)
    kafka.faults.cap_versions({"Fetch": 4, "OffsetCommit": 2})
    assert run_js(kafka, group, orders, out, 2) == 2
    sent = {(r.api, r.version) for r in kafka.requests(client_id="orders-kafkajs")}
    assert {v for a, v in sent if a == "Fetch"} == {4}
    assert {v for a, v in sent if a == "OffsetCommit"} == {2}
