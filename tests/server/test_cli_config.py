"""`kcoord serve --config FILE --set key=value`: Kafka-named settings take effect.

Values come from the defaults, then the properties file, then each --set in
order.  Bad values stop the command with a non-zero exit and a message (no
traceback) before it listens.
"""
from __future__ import annotations

import json
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


@pytest.fixture(scope="module")
def set_server(tmp_path_factory):
    """One server for the read-only --set checks: each reads only its own key's effect
    (num.partitions set twice, node.id and advertised.listeners, message.max.bytes,
    an unknown key)."""
    server = CliServer(tmp_path_factory.mktemp("set") / "data", [
        "--set", "num.partitions=2", "--set", "node.id=7",
        "--set", "advertised.listeners=PLAINTEXT://kcoord.example:19093",
        "--set", "message.max.bytes=2000", "--set", "some.future.setting=1",
        "--set", "num.partitions=4"])
    server.start()
    yield server
    server.stop()


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


def test_last_set_wins(set_server):
    assert auto_created_partitions(set_server, "auto-made-last-set") == 4


def test_default_num_partitions_is_one(cli):
    server = cli()
    assert auto_created_partitions(server, "auto-made") == 1


def test_auto_create_off_from_config_file(cli, tmp_path):
    server = cli("--config", write_properties(tmp_path, "auto.create.topics.enable=false\n"))
    with WireClient(server.port) as c:
        [t] = metadata(c, ["missing"])["topics"]
        assert t["error_code"] == Err.UNKNOWN_TOPIC_OR_PARTITION


def test_node_id_and_advertised_listener(set_server):
    with WireClient(set_server.port) as c:
        response = metadata(c, ["auto-made-node-id"])
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


def test_message_max_bytes_from_set(set_server):
    with WireClient(set_server.port) as c:
        assert create_topic(c, "limited", 1)["error_code"] == 0
        big = build_batch([(b"k", bytes(3000), [], None)], base_timestamp=0)
        assert produce(c, "limited", 0, big)["error_code"] == Err.MESSAGE_TOO_LARGE


def test_unknown_key_is_kept_and_logged(set_server):
    wait_for_log(set_server, "some.future.setting")
    with WireClient(set_server.port) as c:
        assert c.api_versions()["error_code"] == 0


# --------------------------------------------------------------- bad values
# Every refused start-up below runs in ONE child interpreter (a `kcoord serve`
# process start costs about as much as the check itself): the child calls the
# command's entry point once per case with that case's stderr and exit status
# kept apart, and stops the batch if a case ever gets as far as listening.
BATCH = r"""
import io, json, os, sys, traceback
from kcoord.cli import main

cases, results, current = json.load(sys.stdin), {}, [None]

class PerCaseStderr(io.TextIOBase):
    def write(self, text):
        results[current[0]]["stderr"] += text
        if "listening on" in text:  # a bad value was accepted: report it, stop here
            results[current[0]]["started"] = True
            sys.__stdout__.write(json.dumps(results))
            sys.__stdout__.flush()
            os._exit(0)
        return len(text)

sys.stderr = PerCaseStderr()
for case, args in cases:
    current[0] = case
    results[case] = {"stderr": "", "returncode": None, "started": False}
    try:
        code = main(["serve", *args])
    except SystemExit as exc:  # argparse
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
        code = 1
    results[case]["returncode"] = code
sys.__stdout__.write(json.dumps(results))
"""


def run_failing_batch(cases: dict[str, list[str]], data_root: Path) -> dict:
    """{case: [args]} -> {case: {returncode, stderr, started}}, each case on its own data dir."""
    jobs = [(case, ["--listen", "127.0.0.1:0", "--data-dir", str(data_root / f"data-{n}"), *args])
            for n, (case, args) in enumerate(sorted(cases.items()))]
    proc = subprocess.run([sys.executable, "-c", BATCH], input=json.dumps(jobs),
                          capture_output=True, text=True, timeout=60 + 10 * len(jobs))
    assert proc.returncode == 0, proc.stderr[-5000:]
    return json.loads(proc.stdout)


BAD_SET = {
    "not-an-int": (["--set", "num.partitions=abc"], "abc"),
    "not-a-bool": (["--set", "auto.create.topics.enable=maybe"], "maybe"),
    "no-equals": (["--set", "num.partitions"], "num.partitions"),
    "float-for-int": (["--set", "socket.request.max.bytes=1.5"], "1.5"),
}
BAD_FILE = ["bad-line", "bad-value", "missing-file"]
NAMED_KEY = [("num.partitions", "abc"), ("auto.create.topics.enable", "maybe"),
             ("log.segment.bytes", "1e9")]
OUT_OF_RANGE = [("num.partitions", "0"), ("socket.request.max.bytes", "-5"),
                ("log.segment.bytes", "0")]
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


def bad_config_file(root: Path, case: str) -> tuple[str, str]:
    """(path, the text the message must show) for one bad --config case."""
    if case == "missing-file":
        return str(root / "nope.properties"), "nope.properties"
    text, shown = {"bad-line": ("num.partitions=2\nthis line has no separator\n",
                                "this line has no separator"),
                   "bad-value": ("num.partitions=two\n", "two")}[case]
    path = root / f"{case}.properties"
    path.write_text(text)
    return str(path), shown


@pytest.fixture(scope="module")
def refused(tmp_path_factory):
    """Every bad-value case of this module, run in one batch: {case id: result}."""
    root = tmp_path_factory.mktemp("refused")
    cases = {f"set:{c}": args for c, (args, _) in BAD_SET.items()}
    cases.update({f"file:{c}": ["--config", bad_config_file(root, c)[0]] for c in BAD_FILE})
    cases.update({f"named:{k}": ["--set", "cluster.id=x", "--set", f"{k}={v}", "--set", "node.id=0"]
                  for k, v in NAMED_KEY})
    cases.update({f"range:{k}": ["--set", f"{k}={v}"] for k, v in OUT_OF_RANGE})
    cases.update({f"group:{key}": [a for pair in pairs for a in ("--set", pair)]
                  for pairs, key in INCONSISTENT})
    return root, run_failing_batch(cases, root)


def refused_case(refused, case: str) -> dict:
    result = refused[1].get(case)
    assert result is not None, f"{case} did not run: an earlier case started the server"
    assert not result["started"], f"kcoord serve started with {case}:\n{result['stderr']}"
    return result


@pytest.mark.parametrize("case", sorted(BAD_SET))
def test_bad_set_value_exits_with_message(refused, case):
    _, shown = BAD_SET[case]
    result = refused_case(refused, f"set:{case}")
    assert result["returncode"] != 0
    assert "Traceback" not in result["stderr"], result["stderr"]
    assert shown in result["stderr"], result["stderr"]


@pytest.mark.parametrize("case", BAD_FILE)
def test_bad_config_file_exits_with_message(refused, case):
    _, shown = bad_config_file(refused[0], case)
    result = refused_case(refused, f"file:{case}")
    assert result["returncode"] != 0
    assert "Traceback" not in result["stderr"], result["stderr"]
    assert shown in result["stderr"], result["stderr"]


@pytest.mark.parametrize("key,value", NAMED_KEY)
def test_bad_value_message_names_the_key(refused, key, value):
    """With several --set options, the message must say which one is wrong."""
    result = refused_case(refused, f"named:{key}")
    assert result["returncode"] != 0
    assert key in result["stderr"] and value in result["stderr"], result["stderr"]


@pytest.mark.parametrize("key,value", OUT_OF_RANGE)
def test_out_of_range_value_is_refused(refused, key, value):
    """Kafka refuses these at startup (num.partitions and socket.request.max.bytes
    at least 1, log.segment.bytes at least 14); a server that starts with them
    cannot create topics or read any request."""
    result = refused_case(refused, f"range:{key}")
    assert result["returncode"] != 0
    assert "Traceback" not in result["stderr"], result["stderr"]
    assert key in result["stderr"] and value in result["stderr"], result["stderr"]


@pytest.mark.parametrize("pairs,key", INCONSISTENT, ids=[k for _, k in INCONSISTENT])
def test_inconsistent_group_configs_are_refused(refused, pairs, key):
    result = refused_case(refused, f"group:{key}")
    assert result["returncode"] != 0
    assert "Traceback" not in result["stderr"], result["stderr"]
    assert key in result["stderr"], result["stderr"]


def test_one_refused_start_in_its_own_process(tmp_path):
    """The batch above calls the entry point; this checks the real process agrees:
    `kcoord serve` with a bad value exits non-zero with one line on stderr, not listening."""
    proc = subprocess.run([sys.executable, "-m", "kcoord.cli", "serve", "--listen", "127.0.0.1:0",
                           "--data-dir", str(tmp_path / "data"), "--set", "num.partitions=abc"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()], proc.stderr
    assert "num.partitions" in proc.stderr and "abc" in proc.stderr
    assert "listening on" not in proc.stderr and "Traceback" not in proc.stderr


def test_consistent_group_configs_start(tmp_path):
    """Values inside every bound start the server (the check is not over-strict)."""
    from kcoord.server.config import build_config
    cfg = build_config("127.0.0.1:0", str(tmp_path), None, [
        "group.consumer.session.timeout.ms=50000", "group.consumer.heartbeat.interval.ms=6000",
        "group.consumer.assignors=range", "group.coordinator.rebalance.protocols=classic"])
    assert cfg["group.consumer.assignors"] == ["range"]
