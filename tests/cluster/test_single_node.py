"""Without etcd.endpoints a node is today's single node: no etcd client is
even imported, and a bad endpoint list is a one-line error naming the key."""
import subprocess
import sys

import pytest

from kcoord.cluster.etcd_session import parse_endpoints


def test_single_node_imports_no_etcd(tmp_path):
    code = ("import sys; from kcoord.server.app import Server; "
            "from kcoord.server.config import build_config; "
            f"s = Server(build_config('127.0.0.1:0', {str(tmp_path)!r}, None, [])); "
            "assert s.cluster is None; "
            "print(sorted(m for m in sys.modules if m.startswith(('aetcd', 'grpc', 'kcoord.cluster'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_endpoints_parse_and_bad_ones_name_the_key():
    assert parse_endpoints("127.0.0.1:2379, http://10.0.0.2:2380/") == [
        ("127.0.0.1", 2379), ("10.0.0.2", 2380)]
    assert parse_endpoints(["h:1"]) == [("h", 1)]
    with pytest.raises(ValueError, match="etcd.endpoints"):
        parse_endpoints("no-port")
    with pytest.raises(ValueError, match="etcd.endpoints"):
        parse_endpoints("")


def test_a_data_dir_of_another_cluster_is_one_line_and_exit_2(etcd, tmp_path):
    """Kafka's InconsistentClusterIdException: a node whose data dir was
    formatted for another cluster refuses to start, without a traceback (the
    cluster's id in etcd comes from cluster.id here, as the first node sets it)."""
    data = tmp_path / "node"
    data.mkdir()
    (data / "meta.properties").write_text("cluster.id=AAAAAAAAAAAAAAAAAAAAAA\nnode.id=1\nversion=1\n")
    out = subprocess.run([sys.executable, "-m", "kcoord.cli", "serve", "--listen", "127.0.0.1:0",
                          "--data-dir", str(data), "--set", f"etcd.endpoints={etcd.endpoint}",
                          "--set", "node.id=1", "--set", "cluster.id=BBBBBBBBBBBBBBBBBBBBBB"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("kcoord: error:")]
    assert errors == [f"kcoord: error: Invalid cluster.id in: {data / 'meta.properties'}. "
                      "Expected BBBBBBBBBBBBBBBBBBBBBB, but read AAAAAAAAAAAAAAAAAAAAAA"], out.stderr
