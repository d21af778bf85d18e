"""The cluster id of a real single-node server (and unknown config keys): made when the data dir is
first formatted (Kafka's random base64 UUID), the same in Metadata and
DescribeCluster, kept across restarts, and a data dir formatted for another
cluster id refused at start."""
from __future__ import annotations

import base64
import subprocess
import sys

from tests.clients.wire import WireClient, metadata
from tests.support import ServerProcess

DESCRIBE_CLUSTER = 60


def ids(server) -> tuple[str, str]:
    with WireClient(server.port) as c:
        meta = metadata(c, [])["cluster_id"]
        described = c.request(DESCRIBE_CLUSTER, 0, {
            "include_cluster_authorized_operations": False})["cluster_id"]
    return meta, described


def test_generated_once_kept_and_checked(tmp_path):
    server = ServerProcess(tmp_path / "a").start()
    try:
        first, described = ids(server)
        assert first == described and len(first) == 22 and not first.startswith("-")
        assert len(base64.urlsafe_b64decode(first + "==")) == 16
        server.stop()
        server.start()
        assert ids(server) == (first, first)
    finally:
        server.stop()
    other = ServerProcess(tmp_path / "b").start()
    try:
        assert ids(other)[0] != first  # each new data dir gets its own
    finally:
        other.stop()
    out = subprocess.run([sys.executable, "-m", "kcoord.cli", "serve", "--listen",
                          "127.0.0.1:0", "--data-dir", str(tmp_path / "a"), "--set",
                          "cluster.id=AAAAAAAAAAAAAAAAAAAAAA"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert (f"Invalid cluster.id in: {tmp_path / 'a' / 'meta.properties'}. Expected "
            f"AAAAAAAAAAAAAAAAAAAAAA, but read {first}") in out.stderr


def test_unknown_keys_get_a_suggestion_or_the_flag_that_replaces_them(tmp_path):
    server = ServerProcess(tmp_path / "d", settings={"num.partition": "3",
                                                      "log.dirs": "/var/lib/kafka"}).start()
    try:
        text = server.log_text()
        assert ("unknown config key num.partition kept as a string; did you mean "
                "num.partitions?") in text
        assert ("unknown config key log.dirs kept as a string; the --data-dir flag "
                "replaces it") in text
    finally:
        server.stop()
