"""Config APIs in cluster mode (etcd.endpoints set): CreateTopics validates
configs as a single node does; a topic's AlterConfigs goes through etcd's
catalogue and broker and group overrides through etcd's configs keys, so
every node describes and applies them (the group's coordinator too)."""
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
            assert _alter(wire, 4, "", "log.retention.bytes", "123456789")["error_code"] == 0
        # the node that took the request answers with the new value at once; the other follows
        assert _value(ports[0], "c-ok", "retention.ms") == "5000"
        wait_until(lambda: _value(ports[1], "c-ok", "retention.ms") == "5000",
                   "the other node to apply the altered config")
        for port in ports:  # the cluster-wide broker default reaches every node's topics
            wait_until(lambda: _value(port, "c-ok", "retention.bytes") == "123456789",
                       "every node to apply the broker default")
        # the group's coordinator, whichever node it is, answers with the group's interval
        coordinator = wait_until(
            lambda: (c := cluster.find_coordinators(1, ["g-c"])["g-c"])["error_code"] == 0 and c,
            "the group's coordinator")
        other = next(n.port for i, n in cluster.nodes.items() if i != coordinator["node_id"])
        with WireClient(other) as wire:  # set where the group is not coordinated
            assert _alter(wire, 32, "g-c", "consumer.heartbeat.interval.ms", "6000")[
                "error_code"] == 0
        with WireClient(coordinator["port"]) as wire:
            def joined():
                resp = wire.request(68, 1, {
                    "group_id": "g-c", "member_id": "m-1", "member_epoch": 0,
                    "instance_id": None, "rack_id": None, "rebalance_timeout_ms": 30000,
                    "subscribed_topic_names": ["c-ok"], "subscribed_topic_regex": None,
                    "server_assignor": None, "topic_partitions": []})
                return resp["error_code"] == 0 and resp["heartbeat_interval_ms"] == 6000
            # the override set on the other node reaches the coordinator through etcd
            wait_until(joined, "the coordinator to answer with the group's interval")
    finally:
        cluster.stop()
