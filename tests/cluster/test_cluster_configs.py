"""Config APIs on a one-node cluster (etcd.endpoints set): CreateTopics
validates configs as a single node does, and config changes, which would
reach one node only, are refused rather than left to diverge."""
from __future__ import annotations

from kcoord.protocol.errors import Err
from tests.clients.wire import WireClient, create_topic
from tests.cluster.support import Cluster


def test_configs_in_cluster_mode(etcd, tmp_path):
    cluster = Cluster(etcd, tmp_path, nodes=1).start()
    try:
        with WireClient(cluster.nodes[1].port) as wire:
            bad = create_topic(wire, "c-bad", 1, {"no.such.key": "1"})
            assert (bad["error_code"], bad["error_message"]) == (
                Err.INVALID_CONFIG, "Unknown topic config name: no.such.key")
            assert create_topic(wire, "c-ok", 1, {"retention.ms": "60000"})["error_code"] == 0
            for validate_only, code in ((True, Err.NONE), (False, Err.INVALID_REQUEST)):
                resp = wire.request(44, 1, {"resources": [{
                    "resource_type": 2, "resource_name": "c-ok", "configs": [
                        {"name": "retention.ms", "config_operation": 0, "value": "1000"}]}],
                    "validate_only": validate_only})
                assert resp["responses"][0]["error_code"] == code
            assert "not replicated" in resp["responses"][0]["error_message"]
            resp = wire.request(32, 4, {"resources": [{"resource_type": 2,
                                                       "resource_name": "c-ok",
                                                       "configuration_keys": ["retention.ms"]}],
                                        "include_synonyms": False,
                                        "include_documentation": False})
            assert resp["results"][0]["configs"][0]["value"] == "60000"
    finally:
        cluster.stop()
