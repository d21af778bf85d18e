"""Config APIs in cluster mode (etcd.endpoints set): CreateTopics validates
configs as a single node does; a topic's AlterConfigs goes through etcd's
catalogue, so every node describes and applies the new set; broker and
group changes, which would reach one node only, are refused."""
from __future__ import annotations

from kcoord.protocol.errors import Err
from tests.clients.wire import WireClient, create_topic
from tests.cluster.support import Cluster, wait_until

DESCRIBE, INCREMENTAL = 32, 44


def _alter(wire, rtype, name, key, value, validate_only=False):
    resp = wire.request(INCREMENTAL, 1, {"resources": [{
        "resource_type": rtype, "resource_name": name, "configs": [
            {"name": key, "config_operation": 0, "value": value}]}],
        "validate_only": validate_only})
    return resp["responses"][0]


def _value(port, topic, key):
    with WireClient(port) as wire:
        resp = wire.request(DESCRIBE, 4, {"resources": [{"resource_type": 2,
                                                         "resource_name": topic,
                                                         "configuration_keys": [key]}],
                                          "include_synonyms": False,
                                          "include_documentation": False})
    [result] = resp["results"]
    return result["configs"][0]["value"] if result["error_code"] == 0 else None


def test_configs_in_cluster_mode(etcd, tmp_path):
    cluster = Cluster(etcd, tmp_path, nodes=2).start()
    ports = [node.port for node in cluster.nodes.values()]
    try:
        with WireClient(ports[0]) as wire:
            bad = create_topic(wire, "c-bad", 1, {"no.such.key": "1"})
            assert (bad["error_code"], bad["error_message"]) == (
                Err.INVALID_CONFIG, "Unknown topic config name: no.such.key")
            assert create_topic(wire, "c-ok", 2, {"retention.ms": "60000"})["error_code"] == 0
            wait_until(lambda: all(_value(p, "c-ok", "retention.ms") == "60000" for p in ports),
                       "every node to mirror the new topic")
            assert _alter(wire, 2, "c-ok", "retention.ms", "1000", validate_only=True)[
                "error_code"] == 0
            assert _alter(wire, 2, "c-ok", "retention.ms", "bad")["error_code"] \
                == Err.INVALID_CONFIG
            assert _alter(wire, 2, "c-ok", "retention.ms", "5000")["error_code"] == 0
            # broker and group overrides live per node: refused rather than diverging
            group = _alter(wire, 32, "g", "consumer.session.timeout.ms", "50000")
            assert group["error_code"] == Err.INVALID_REQUEST
            assert "not replicated" in group["error_message"]
        # the node that took the request answers with the new value at once; the other follows
        assert _value(ports[0], "c-ok", "retention.ms") == "5000"
        wait_until(lambda: _value(ports[1], "c-ok", "retention.ms") == "5000",
                   "the other node to apply the altered config")
    finally:
        cluster.stop()
