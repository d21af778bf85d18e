"""The wire source over secured listeners: one kcoord with PLAINTEXT, SSL,
SASL_PLAINTEXT and SASL_SSL listeners (trustme certificates, SCRAM and PLAIN
users), offsets committed by a real client over SASL_SSL; the pipeline reads
the same rows over every listener, and a wrong password is one clear line."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.security import clients
from tests.security.certs import make_pki
from tests.security.conftest import USERS, scram_args, secured_settings
from tests.support import ServerProcess

TOPIC, GROUP = "paid", "billing"


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    pki = make_pki(tmp_path_factory.mktemp("pki"))
    server = ServerProcess(tmp_path_factory.mktemp("sec") / "data",
                           secured_settings(pki, **{"offsets.topic.num.partitions": "2"}),
                           extra_args=scram_args("alice"))
    server.start()
    try:
        got, committed = clients.kafka_python_roundtrip(
            f"127.0.0.1:{server.ports['SASL_SSL']}", TOPIC, GROUP,
            security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-256",
            sasl_plain_username="alice", sasl_plain_password=USERS["alice"],
            ssl_cafile=str(pki.ca_file), ssl_check_hostname=True)
        assert committed == clients.N
        yield server, pki
    finally:
        server.stop()


def _props(pki, listener: str, password: str = USERS["alice"]) -> dict[str, str]:
    props = {"security.protocol": listener}
    if listener in ("SSL", "SASL_SSL"):
        props.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_file)})
    if listener.startswith("SASL_"):
        mech = "SCRAM-SHA-256" if listener == "SASL_SSL" else "PLAIN"
        user = "alice" if mech.startswith("SCRAM") else "bob"
        module = "scram.ScramLoginModule" if mech.startswith("SCRAM") else "plain.PlainLoginModule"
        props.update({"sasl.mechanism": mech, "sasl.jaas.config":
                      f'org.apache.kafka.common.security.{module} required '
                      f'username="{user}" password="{password if user == "alice" else USERS[user]}";'})
    return props


def _rows(server, listener: str, props: dict) -> list[dict]:
    from kcoord.pipeline.wire_source import WireOffsetsReader
    opts = {"bootstrap": f"127.0.0.1:{server.ports[listener]}",
            **{f"kafka.{k}": v for k, v in props.items()}}
    reader = WireOffsetsReader(opts, ["log_partition", "offset", "record_type", "group",
                                      "topic", "partition", "committed_offset"])
    out = []
    for part in reader.partitions():
        for batch in reader.read(part):
            out.extend(batch.to_pylist())
    return sorted(out, key=lambda r: (r["log_partition"], r["offset"]))


def test_every_listener_reads_the_same_rows(secured):
    server, pki = secured
    plain = _rows(server, "PLAINTEXT", {})
    commits = [r for r in plain if r["group"] == GROUP and r["record_type"] in (0, 1)]
    assert commits and commits[-1]["committed_offset"] == clients.N
    assert commits[-1]["topic"] == TOPIC
    for listener in ("SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        assert _rows(server, listener, _props(pki, listener)) == plain, listener


def test_fresh_interpreter_reads_sasl_ssl_without_server_or_admin_code(secured, tmp_path):
    """What a Spark executor does: import the wire source module and read; the
    secured connection is there without the CLI, and no server, coordinator or
    admin module is loaded for it."""
    server, pki = secured
    code = (
        "import json, sys\n"
        "from kcoord.pipeline.wire_source import WireOffsetsReader\n"
        "r = WireOffsetsReader(json.loads(sys.argv[1]), ['group', 'committed_offset'])\n"
        "rows = [x for p in r.partitions() for b in r.read(p) for x in b.to_pylist()]\n"
        "bad = sorted(m for m in sys.modules if m.startswith(('kcoord.server', "
        "'kcoord.admin', 'kcoord.coordinator', 'kcoord.broker', 'kcoord.cluster')))\n"
        "print(json.dumps({'rows': len(rows), 'commits': [x['committed_offset'] for x in rows "
        "if x['group'] == %r], 'bad': bad}))\n" % GROUP)
    opts = {"bootstrap": f"127.0.0.1:{server.ports['SASL_SSL']}",
            **{f"kafka.{k}": v for k, v in _props(pki, "SASL_SSL").items()}}
    out = subprocess.run([sys.executable, "-c", code, json.dumps(opts)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["bad"] == []
    assert result["rows"] > 0 and clients.N in result["commits"]


def test_wrong_password_is_one_line_and_nonzero_exit(secured, tmp_path):
    server, pki = secured
    from kcoord.pipeline.preflight import check_inputs
    bootstrap = f"127.0.0.1:{server.ports['SASL_SSL']}"
    check_inputs(None, bootstrap, _props(pki, "SASL_SSL"))  # the right password passes
    cfg = tmp_path / "client.properties"
    cfg.write_text("".join(f"{k}={v}\n" for k, v in _props(pki, "SASL_SSL", "wrong").items()))
    out = subprocess.run([sys.executable, "-m", "kcoord.cli", "pipeline", "run",
                          "--bootstrap-server", bootstrap, "--command-config", str(cfg),
                          "--out", str(tmp_path / "o")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(f"error: bootstrap server {bootstrap}: ")
    assert "SASL authentication failed" in lines[0]
    assert not (tmp_path / "o").exists()


def test_tls_settings_that_cannot_work_are_one_line_errors(secured, tmp_path):
    from kcoord.pipeline.wire import WireError
    server, pki = secured
    ssl_addr = f"127.0.0.1:{server.ports['SSL']}"
    # no trust store: the system CAs do not know the test CA
    with pytest.raises(WireError, match=f"cannot connect to {ssl_addr}: .*CERTIFICATE_VERIFY_FAILED"):
        _rows(server, "SSL", {"security.protocol": "SSL"})
    with pytest.raises(WireError, match="ssl.truststore.location: cannot read"):
        _rows(server, "SSL", {"security.protocol": "SSL", "ssl.truststore.type": "PEM",
                              "ssl.truststore.location": str(tmp_path / "missing.pem")})
