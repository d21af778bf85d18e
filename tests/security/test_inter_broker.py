"""The client side of the inter-broker listener, checked at start-up in a
cluster (kcoord/security/inter_broker.py), and the per-listener endpoints a
node registers in etcd (kcoord/cluster/view.py)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from kcoord.cluster.view import ClusterView, Keys, NodeInfo, encode_node
from kcoord.security.inter_broker import inter_broker_properties
from kcoord.security.settings import check

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule required"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule required"


def sasl_cluster(**extra) -> dict:
    values = {"etcd.endpoints": "127.0.0.1:2379",
              "listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
              "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT",
              "inter.broker.listener.name": "INTERNAL",
              "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
              "listener.name.internal.plain.sasl.jaas.config":
                  f'{PLAIN} username="broker" password="s" user_broker="s";'}
    values.update(extra)
    return {k: v for k, v in values.items() if v is not None}


def test_default_mechanism_is_plain_with_the_listener_login():
    lsn, props = inter_broker_properties(sasl_cluster())
    assert lsn.name == "INTERNAL"
    assert props["security.protocol"] == "SASL_PLAINTEXT"
    assert props["sasl.mechanism"] == "PLAIN"
    assert 'username="broker"' in props["sasl.jaas.config"]


def test_scram_uses_the_mechanism_specific_login():
    _, props = inter_broker_properties(sasl_cluster(**{
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
        "listener.name.internal.scram-sha-256.sasl.jaas.config":
            f'{SCRAM} username="broker" password="x";'}))
    assert props["sasl.mechanism"] == "SCRAM-SHA-256"
    assert "ScramLoginModule" in props["sasl.jaas.config"]


@pytest.mark.parametrize("extra, key", [
    ({"listener.name.internal.plain.sasl.jaas.config": None},
     "listener.name.internal.plain.sasl.jaas.config"),
    ({"listener.name.internal.plain.sasl.jaas.config": f'{PLAIN} user_broker="s";'},
     "listener.name.internal.plain.sasl.jaas.config"),
    ({"sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256"},
     "listener.name.internal.scram-sha-256.sasl.jaas.config"),
    ({"sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512"},
     "sasl.mechanism.inter.broker.protocol"),
    ({"sasl.mechanism.inter.broker.protocol": "OAUTHBEARER",
      "sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER"}, "sasl.mechanism.inter.broker.protocol"),
])
def test_missing_client_side_names_the_key(extra, key):
    values = sasl_cluster(**extra)
    with pytest.raises(ValueError) as err:
        check(values, "127.0.0.1", 0)
    assert key in str(err.value) and "\n" not in str(err.value), err.value


def test_single_node_does_not_need_an_inter_broker_login():
    values = sasl_cluster(**{"etcd.endpoints": None,
                             "listener.name.internal.plain.sasl.jaas.config":
                                 f'{PLAIN} user_broker="s";'})
    check(values, "127.0.0.1", 0)


def test_serve_refuses_to_start_with_one_line(tmp_path):
    args = [sys.executable, "-m", "kcoord.cli", "serve", "--listen", "127.0.0.1:0",
            "--data-dir", str(tmp_path / "d")]
    for k, v in sasl_cluster(**{"listener.name.internal.plain.sasl.jaas.config":
                                f'{PLAIN} user_broker="s";'}).items():
        args += ["--set", f"{k}={v}"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "listener.name.internal.plain.sasl.jaas.config" in lines[0]


def test_registration_carries_every_listener_endpoint():
    keys = Keys("/k")
    view = ClusterView(keys)
    info = NodeInfo(3, "h", 1, False, (("PLAINTEXT", "h", 1), ("INTERNAL", "i", 2)))
    view.apply(keys.node(3), encode_node(info), 5)
    got = view.nodes[3]
    assert got.endpoint("INTERNAL") == ("i", 2)
    assert got.endpoint("PLAINTEXT") == ("h", 1)
    assert got.endpoint("SASL_SSL") is None          # no such listener: left out
    old = ClusterView(keys)                          # a registration without endpoints
    old.apply(keys.node(3), b'{"host": "h", "port": 1}', 5)
    assert old.nodes[3].endpoint("INTERNAL") == ("h", 1)
