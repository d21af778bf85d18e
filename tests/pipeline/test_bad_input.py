"""Input the pipeline cannot run on: one clear line on stderr and a non-zero exit,
before Spark starts, never empty tables with exit status 0."""
from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from kcoord.pipeline.cli import standalone
from kcoord.pipeline.generate import generate
from tests.support import ServerProcess


def _run(capsys, *args) -> tuple[int, str]:
    rc = standalone(["pipeline", "run", *args])
    err = capsys.readouterr().err.strip()
    return rc, err


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    return port


def test_missing_data_dir(capsys, tmp_path):
    rc, err = _run(capsys, "--data-dir", str(tmp_path / "nope"), "--out", str(tmp_path / "o"))
    assert rc == 2 and err == f"error: data dir {tmp_path / 'nope'} does not exist"
    assert not (tmp_path / "o").exists()


def test_data_dir_without_offsets_log(capsys, tmp_path):
    rc, err = _run(capsys, "--data-dir", str(tmp_path), "--out", str(tmp_path / "o"))
    assert rc == 2 and "holds no __consumer_offsets log" in err and len(err.splitlines()) == 1


def test_empty_offsets_log(capsys, tmp_path):
    for p in range(3):
        (tmp_path / f"__consumer_offsets-{p}").mkdir()
        (tmp_path / f"__consumer_offsets-{p}" / "00000000000000000000.log").write_bytes(b"")
    rc, err = _run(capsys, "--data-dir", str(tmp_path), "--out", str(tmp_path / "o"))
    assert rc == 2 and "empty __consumer_offsets log" in err and len(err.splitlines()) == 1


def test_data_dir_is_a_file(capsys, tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    rc, err = _run(capsys, "--data-dir", str(f), "--out", str(tmp_path / "o"))
    assert rc == 2 and err == f"error: data dir {f} is not a directory"


def test_nothing_to_read_and_both_sources(capsys, tmp_path):
    rc, err = _run(capsys, "--out", str(tmp_path / "o"))
    assert rc == 2 and "nothing to read" in err
    rc, err = _run(capsys, "--data-dir", str(tmp_path), "--bootstrap-server", "127.0.0.1:1",
                   "--out", str(tmp_path / "o"))
    assert rc == 2 and "not both" in err


def test_unreachable_bootstrap(capsys, tmp_path):
    port = _closed_port()
    rc, err = _run(capsys, "--bootstrap-server", f"127.0.0.1:{port}", "--out", str(tmp_path))
    assert rc == 2 and len(err.splitlines()) == 1
    assert err.startswith(f"error: bootstrap server 127.0.0.1:{port}: cannot connect to "
                          f"127.0.0.1:{port}")
    rc, err = _run(capsys, "--bootstrap-server", "no-port", "--out", str(tmp_path))
    assert rc == 2 and "is not HOST:PORT" in err


def test_security_properties_are_not_ignored(capsys, tmp_path):
    cfg = tmp_path / "client.properties"
    cfg.write_text("# client\nsecurity.protocol=SSL\nsasl.mechanism=SCRAM-SHA-256\n")
    rc, err = _run(capsys, "--bootstrap-server", f"127.0.0.1:{_closed_port()}",
                   "--command-config", str(cfg), "--out", str(tmp_path / "o"))
    assert rc == 2 and "sasl.mechanism is set but security.protocol is SSL" in err
    rc, err = _run(capsys, "--bootstrap-server", f"127.0.0.1:{_closed_port()}",
                   "--client-property", "security.protocol=SASL_GSSAPI",
                   "--out", str(tmp_path / "o"))
    assert rc == 2 and "security.protocol=SASL_GSSAPI is not supported" in err


def test_empty_and_unreadable_topics_on_a_server(capsys, tmp_path):
    with ServerProcess(tmp_path / "data", settings={"offsets.topic.num.partitions": "2"}) as srv:
        rc, err = _run(capsys, "--bootstrap-server", srv.bootstrap, "--out", str(tmp_path / "o"))
        assert rc == 2 and err == (f"error: topic __consumer_offsets on {srv.bootstrap} is "
                                   f"empty: no records to analyse")
        from kcoord.pipeline.preflight import InputError, check_server
        with pytest.raises(InputError, match="topic missing cannot be read from .*"
                                             "UNKNOWN_TOPIC_OR_PARTITION"):
            check_server(srv.bootstrap, {}, topic="missing")
    assert not (tmp_path / "o").exists()


def test_process_exit_status(tmp_path):
    """The real command line: rc != 0 and the one line, no traceback."""
    data = tmp_path / "data"
    generate(data, groups=2, topics=1, partitions=1, commits=20, log_partitions=1)
    out = subprocess.run([sys.executable, "-m", "kcoord.cli", "pipeline", "run", "--data-dir",
                          str(tmp_path / "missing"), "--out", str(tmp_path / "o")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert out.stderr.strip() == f"error: data dir {tmp_path / 'missing'} does not exist"
