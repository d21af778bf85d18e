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
