"""What an operator reads: startup errors as one line naming the key (never a
traceback), and the group lines of a running server: a rebalance start and
end with group, epoch, members and reason; a member removed by session
expiry; nothing for a KIP-848 group that simply empties."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from tests.clients.wire import WireClient, create_topic, wait_for_log
from tests.support import ServerProcess

HEARTBEAT = 68


def _serve(tmp_path, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "kcoord.cli", "serve", "--data-dir", str(tmp_path / "data"),
           *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})


def _one_error_line(proc: subprocess.CompletedProcess, *needles: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, proc.stderr
    assert errors[0].startswith("kcoord: error: "), errors[0]
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]


@pytest.mark.parametrize("args, needles", [
    (["--listen", "127.0.0.1:0", "--log-level", "LOUD"], ["--log-level", "LOUD"]),
    (["--listen", "127.0.0.1:0", "--set", "num.partitions=abc"], ["num.partitions", "'abc'",
                                                                   "not a number"]),
    (["--listen", "127.0.0.1:70000"], ["--listen", "0-65535"]),
    (["--listen", "127.0.0.1:-1"], ["--listen"]),
    (["--listen", "127.0.0.1:0", "--set", "http.listen=127.0.0.1:65536"], ["http.listen"]),
    (["--listen", "127.0.0.1:0", "--set", "http.listen=nonsense"], ["http.listen"]),
])
def test_bad_startup_config_is_one_line(tmp_path, args, needles):
    _one_error_line(_serve(tmp_path, *args), *needles)


@pytest.mark.parametrize("which", ["--listen", "listeners", "http.listen"])
def test_port_in_use_is_one_line(tmp_path, which):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        if which == "--listen":
            args = ["--listen", f"127.0.0.1:{port}"]
        elif which == "listeners":
            args = ["--listen", "127.0.0.1:0", "--set", f"listeners=PLAINTEXT://127.0.0.1:{port}"]
        else:
            args = ["--listen", "127.0.0.1:0", "--set", f"http.listen=127.0.0.1:{port}"]
        # the line names where the address was configured: --listen, or http.listen
        line = _one_error_line(_serve(tmp_path, *args), str(port), "cannot listen")
        assert line.startswith(f"kcoord: error: {which} "), line


def _hb(member_id: str, epoch: int, owned=()) -> dict:
    return {"group_id": "g", "member_id": member_id, "member_epoch": epoch, "instance_id": None,
            "rack_id": None, "rebalance_timeout_ms": 30000 if epoch == 0 else -1,
            "subscribed_topic_names": ["t"] if epoch == 0 else None,
            "subscribed_topic_regex": None, "server_assignor": None,
            "topic_partitions": list(owned) if epoch == 0 or owned else None}


def test_group_lines(tmp_path):
    server = ServerProcess(tmp_path / "data", settings={
        "group.consumer.min.session.timeout.ms": "1000",
        "group.consumer.session.timeout.ms": "1500",
        "group.consumer.min.heartbeat.interval.ms": "100",
        "group.consumer.heartbeat.interval.ms": "500"})
    server.start()
    try:
        with WireClient(server.port) as c:
            create_topic(c, "t", 2)
            resp = c.request(HEARTBEAT, 1, _hb("m1", 0))
            assert resp["error_code"] == 0 and resp["member_epoch"] == 1
            line = wait_for_log(server, "group g (consumer): rebalance started at epoch 1",
                                "1 members", "reason: member m1 joined")
            assert "INFO" in line
            wait_for_log(server, "group g (consumer): rebalance completed at epoch 1",
                         "1 members in ")
            # m1 falls silent: its session expires; the group empties (no rebalance line)
            mark = len(server.log_lines)
            wait_for_log(server, "group g (consumer): member m1 removed: its session expired",
                         since=mark, timeout=30)
            resp = c.request(HEARTBEAT, 1, _hb("m2", 0))
            assert resp["error_code"] == 0 and resp["member_epoch"] == 3
            wait_for_log(server, "rebalance started at epoch 3", "reason: member m2 joined",
                         since=mark)
            # m2 leaves (-1): the group empties again, still without a line; m3's
            # join after it is the marker that the leave was handled and logged
            resp = c.request(HEARTBEAT, 1, _hb("m2", -1))
            assert resp["error_code"] == 0
            resp = c.request(HEARTBEAT, 1, _hb("m3", 0))
            assert resp["error_code"] == 0 and resp["member_epoch"] == 5
            wait_for_log(server, "rebalance started at epoch 5", "reason: member m3 joined",
                         since=mark)
        text = server.log_text()
        assert "would be empty" not in text and "no downgrade" not in text
        assert "epoch 2" not in text and "epoch 4" not in text  # the two times it emptied
        assert text.count("member m1 removed: its session expired") == 1
    finally:
        server.stop()


def test_classic_group_lines(tmp_path):
    """A classic member falls silent: one expiry line, and the rebalance it
    starts is logged with its reason, then completed by the member left."""
    from kcoord.protocol.errors import Err
    from tests.server.test_classic_wire import Conn, form_group

    server = ServerProcess(tmp_path / "data", settings={
        "group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "500"})
    server.start()
    opened = []

    def conns(client_id="wire"):
        c = Conn(server.port, client_id)
        opened.append(c)
        return c
    try:
        cs, ids, generation = form_group(conns, "cg", 2, session=1500)
        wait_for_log(server, "group cg (classic): rebalance completed at generation "
                     f"{generation} with 2 members in ")
        mark = len(server.log_lines)
        keeper, silent = 0, 1
        # the keeper heartbeats (at most 60 s) until the silent one's expiry
        # makes the group rebalance
        deadline = time.monotonic() + 60
        while (code := cs[keeper].heartbeat("cg", ids[keeper], generation)) == 0:
            assert time.monotonic() < deadline, "the silent member never expired"
            time.sleep(0.2)
        assert code == Err.REBALANCE_IN_PROGRESS
        line = wait_for_log(server, f"group cg (classic): member {ids[silent]} removed: "
                            "its session expired", since=mark)
        assert "INFO" in line
        wait_for_log(server, f"group cg (classic): rebalance started at generation {generation}",
                     "with 1 members", f"reason: member {ids[silent]}'s session expired",
                     since=mark)
        # the member left rejoins alone and syncs: the rebalance completes
        reply = cs[keeper].join("cg", ids[keeper], session=1500)
        assert reply["error_code"] == 0
        assert cs[keeper].sync("cg", ids[keeper], reply["generation_id"],
                               assignments={ids[keeper]: b""})["error_code"] == 0
        wait_for_log(server, "group cg (classic): rebalance completed at generation "
                     f"{reply['generation_id']} with 1 members in ", since=mark)
    finally:
        for c in opened:
            c.close()
        server.stop()
