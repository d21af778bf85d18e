"""`kcoord serve --config FILE --set key=value`: Kafka-named settings take effect.

Values come from the defaults, then the properties file, then each --set in
order.  Bad values stop the command with a non-zero exit and a message (no
traceback) before it listens.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kcoord.protocol.errors import Err
from kcoord.protocol.records import build_batch
from tests.clients.wire import WireClient, create_topic, metadata, produce, wait_for_log
from tests.support import ServerProcess


class CliServer(ServerProcess):
    """ServerProcess with extra command-line arguments (--config, several --set)."""

    def __init__(self, data_dir: Path, args: list[str]) -> None:
        super().__init__(data_dir)
        self.args = list(args)

    def start(self, timeout: float = 60.0) -> "CliServer":
        cmd = [sys.executable, "-m", "kcoord.cli", "serve",
               "--listen", f"127.0.0.1:{self.port or 0}", "--data-dir", str(self.data_dir),
               *self.args]
        self._ready.clear()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        threading.Thread(target=self._pump, args=(self.proc,), daemon=True).start()
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.05):
            if self.proc.poll() is not None:
                raise RuntimeError("kcoord serve exited early:\n" + self.log_text())
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("kcoord serve did not start:\n" + self.log_text())
        return self


@pytest.fixture
def cli(tmp_path):
    started = []

    def _start(*args: str) -> CliServer:
        proc = CliServer(tmp_path / f"data{len(started)}", list(args))
        started.append(proc)
        return proc.start()

    yield _start
    for proc in started:
        proc.stop()


def write_properties(tmp_path: Path, text: str) -> str:
    path = tmp_path / "server.properties"
    path.write_text(text)
    return str(path)


def auto_created_partitions(server, topic: str) -> int:
    with WireClient(server.port) as c:
        [t] = metadata(c, [topic])["topics"]
        assert t["error_code"] == 0, t
        return len(t["partitions"])


# ------------------------------------------------------------ taking effect
def test_config_file_num_partitions(cli, tmp_path):
    props = write_properties(tmp_path, """
# a Kafka-style properties file
! with both comment styles
num.partitions=3

cluster.id: from-the-file
""")
    server = cli("--config", props)
    assert auto_created_partitions(server, "auto-made") == 3
    with WireClient(server.port) as c:
        assert metadata(c, None)["cluster_id"] == "from-the-file"
        # CreateTopics with num_partitions -1 takes the default too
        body = {"topics": [{"name": "defaulted", "num_partitions": -1, "replication_factor": -1,
                            "assignments": [], "configs": []}],
                "timeout_ms": 30000, "validate_only": False}
        [t] = c.request(19, 7, body)["topics"]
        assert t["error_code"] == 0 and t["num_partitions"] == 3, t


def test_set_overrides_config_file(cli, tmp_path):
    props = write_properties(tmp_path, "num.partitions=3\ncluster.id=from-the-file\n")
    server = cli("--config", props, "--set", "num.partitions=5", "--set", "cluster.id=from-set")
    assert auto_created_partitions(server, "auto-made") == 5
    with WireClient(server.port) as c:
        assert metadata(c, None)["cluster_id"] == "from-set"


def test_last_set_wins(cli):
    server = cli("--set", "num.partitions=2", "--set", "num.partitions=4")
    assert auto_created_partitions(server, "auto-made") == 4


def test_default_num_partitions_is_one(cli):
    server = cli()
    assert auto_created_partitions(server, "auto-made") == 1


def test_auto_create_off_from_config_file(cli, tmp_path):
    server = cli("--config", write_properties(tmp_path, "auto.create.topics.enable=false\n"))
    with WireClient(server.port) as c:
        [t] = metadata(c, ["missing"])["topics"]
        assert t["error_code"] == Err.UNKNOWN_TOPIC_OR_PARTITION


def test_node_id_and_advertised_listener(cli):
    server = cli("--set", "node.id=7", "--set",
                 "advertised.listeners=PLAINTEXT://kcoord.example:19093")
    with WireClient(server.port) as c:
        response = metadata(c, ["auto-made"])
        assert [(b["node_id"], b["host"], b["port"]) for b in response["brokers"]] == \
            [(7, "kcoord.example", 19093)]
        assert response["controller_id"] == 7
        [t] = response["topics"]
        assert {p["leader_id"] for p in t["partitions"]} == {7}


def test_log_segment_bytes_from_config_file(cli, tmp_path):
    server = cli("--config", write_properties(tmp_path, "log.segment.bytes=4096\n"))
    with WireClient(server.port) as c:
        assert create_topic(c, "rolled", 1)["error_code"] == 0
        for n in range(12):
            data = build_batch([(b"k", bytes([n]) * 1000, [], None)], base_timestamp=0)
            assert produce(c, "rolled", 0, data)["error_code"] == 0
    segments = sorted((server.data_dir / "rolled-0").glob("*.log"))
    assert len(segments) >= 3, segments


def test_message_max_bytes_from_set(cli):
    server = cli("--set", "message.max.bytes=2000")
    with WireClient(server.port) as c:
        assert create_topic(c, "limited", 1)["error_code"] == 0
        big = build_batch([(b"k", bytes(3000), [], None)], base_timestamp=0)
        assert produce(c, "limited", 0, big)["error_code"] == Err.MESSAGE_TOO_LARGE


def test_unknown_key_is_kept_and_logged(cli):
    server = cli("--set", "some.future.setting=1")
    wait_for_log(server, "some.future.setting")
    with WireClient(server.port) as c:
        assert c.api_versions()["error_code"] == 0


# --------------------------------------------------------------- bad values
def run_failing(tmp_path: Path, *args: str, timeout: float = 30.0) -> subprocess.CompletedProcess:
    """Run `kcoord serve` expecting it to exit on its own; fail if it starts listening."""
    cmd = [sys.executable, "-m", "kcoord.cli", "serve", "--listen", "127.0.0.1:0",
           "--data-dir", str(tmp_path / "data"), *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []

    def pump():
        for line in proc.stderr:
            lines.append(line)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout
    try:
        while proc.poll() is None:
            if any("listening on" in line for line in lines):
                raise AssertionError(f"kcoord serve {' '.join(args)} started:\n{''.join(lines)}")
            if time.monotonic() > deadline:
                raise AssertionError(f"kcoord serve {' '.join(args)} neither exited nor listened")
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        reader.join(10)
    return subprocess.CompletedProcess(cmd, proc.returncode, proc.stdout.read(), "".join(lines))


BAD_SET = {
    "not-an-int": (["--set", "num.partitions=abc"], "abc"),
    "not-a-bool": (["--set", "auto.create.topics.enable=maybe"], "maybe"),
    "no-equals": (["--set", "num.partitions"], "num.partitions"),
    "float-for-int": (["--set", "socket.request.max.bytes=1.5"], "1.5"),
}


@pytest.mark.parametrize("case", sorted(BAD_SET))
def test_bad_set_value_exits_with_message(tmp_path, case):
    args, shown = BAD_SET[case]
    result = run_failing(tmp_path, *args)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    assert shown in result.stderr, result.stderr


@pytest.mark.parametrize("case", ["bad-line", "bad-value", "missing-file"])
def test_bad_config_file_exits_with_message(tmp_path, case):
    if case == "missing-file":
        path, shown = str(tmp_path / "nope.properties"), "nope.properties"
    elif case == "bad-line":
        path, shown = write_properties(tmp_path, "num.partitions=2\nthis line has no separator\n"), \
            "this line has no separator"
    else:
        path, shown = write_properties(tmp_path, "num.partitions=two\n"), "two"
    result = run_failing(tmp_path, "--config", path)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    assert shown in result.stderr, result.stderr


@pytest.mark.parametrize("key,value", [("num.partitions", "abc"),
                                       ("auto.create.topics.enable", "maybe"),
                                       ("log.segment.bytes", "1e9")])
def test_bad_value_message_names_the_key(tmp_path, key, value):
    """With several --set options, the message must say which one is wrong."""
    result = run_failing(tmp_path, "--set", "cluster.id=x", "--set", f"{key}={value}",
                         "--set", "node.id=0")
    assert result.returncode != 0
    assert key in result.stderr and value in result.stderr, result.stderr


@pytest.mark.parametrize("key,value", [("num.partitions", "0"),
                                       ("socket.request.max.bytes", "-5"),
                                       ("log.segment.bytes", "0")])
def test_out_of_range_value_is_refused(tmp_path, key, value):
    """Kafka refuses these at startup (num.partitions and socket.request.max.bytes
    at least 1, log.segment.bytes at least 14); a server that starts with them
    cannot create topics or read any request."""
    result = run_failing(tmp_path, "--set", f"{key}={value}")
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    assert key in result.stderr, result.stderr


# Relations Kafka's GroupCoordinatorConfig checks at start-up; the message names the key.
INCONSISTENT = [
    (["group.consumer.heartbeat.interval.ms=45000"], "group.consumer.heartbeat.interval.ms"),
    (["group.consumer.session.timeout.ms=70000"], "group.consumer.session.timeout.ms"),
    (["group.consumer.min.session.timeout.ms=50000", "group.consumer.max.session.timeout.ms=46000",
      "group.consumer.session.timeout.ms=48000"], "group.consumer.max.session.timeout.ms"),
    (["group.min.session.timeout.ms=9000", "group.max.session.timeout.ms=8000"],
     "group.max.session.timeout.ms"),
    (["group.consumer.assignors=uniform,sticky"], "group.consumer.assignors"),
    (["group.coordinator.rebalance.protocols=consumer"], "group.coordinator.rebalance.protocols"),
    (["group.consumer.max.size=0"], "group.consumer.max.size"),
]


@pytest.mark.parametrize("pairs,key", INCONSISTENT, ids=[k for _, k in INCONSISTENT])
def test_inconsistent_group_configs_are_refused(tmp_path, pairs, key):
    args = [a for pair in pairs for a in ("--set", pair)]
    result = run_failing(tmp_path, *args)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    assert key in result.stderr, result.stderr


def test_consistent_group_configs_start(tmp_path):
    """Values inside every bound start the server (the check is not over-strict)."""
    from kcoord.server.config import build_config
    cfg = build_config("127.0.0.1:0", str(tmp_path), None, [
        "group.consumer.session.timeout.ms=50000", "group.consumer.heartbeat.interval.ms=6000",
        "group.consumer.assignors=range", "group.coordinator.rebalance.protocols=classic"])
    assert cfg["group.consumer.assignors"] == ["range"]
