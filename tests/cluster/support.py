"""A real cluster on loopback for tests: one etcd member and N `kcoord
serve` processes (tests/support.py's ServerProcess), each with its own
node.id, port and data dir."""
from __future__ import annotations

import time
from pathlib import Path

from kcoord.coordinator.partitioner import partition_for
from tests.clients.wire import WireClient, metadata
from tests.support import ServerProcess

FIND_COORDINATOR = 10
OFFSETS = "__consumer_offsets"


class Cluster:
    def __init__(self, etcd, root: Path, nodes: int = 3, ttl_ms: int = 2000,
                 settings: dict | None = None) -> None:
        self.etcd = etcd
        self.nodes: dict[int, ServerProcess] = {}
        for node_id in range(1, nodes + 1):
            self.nodes[node_id] = ServerProcess(root / f"node-{node_id}", settings={
                "node.id": str(node_id), "etcd.endpoints": etcd.endpoint,
                "etcd.lease.ttl.ms": str(ttl_ms), "group.initial.rebalance.delay.ms": "0",
                **(settings or {})})

    def start(self) -> "Cluster":
        for node in self.nodes.values():
            node.start()
        ids = sorted(self.nodes)
        for node_id in ids:  # every node sees every other before the test begins
            wait_until(lambda: sorted(b["node_id"] for b in self.metadata(node_id)["brokers"])
                       == ids and self.metadata(node_id)["controller_id"] in ids,
                       f"node {node_id} to see the whole cluster")
        return self

    def stop(self) -> None:
        for node in self.nodes.values():
            node.kill()

    def running(self) -> list[int]:
        return [i for i, n in self.nodes.items() if n.proc and n.proc.poll() is None]

    def metadata(self, node_id: int, topics=None) -> dict:
        with WireClient(self.nodes[node_id].port) as c:
            return metadata(c, topics, allow_auto_create=False)

    def find_coordinators(self, node_id: int, groups: list[str]) -> dict[str, dict]:
        with WireClient(self.nodes[node_id].port) as c:
            r = c.request(FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": groups})
        return {e["key"]: e for e in r["coordinators"]}


def wait_until(predicate, what: str, timeout: float = 60.0, interval: float = 0.1):
    """Poll predicate (bounded); its last truthy value, or AssertionError naming `what`."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except (OSError, ConnectionError) as exc:  # a node restarting: ask again
            last_exc = exc
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what} ({last_exc})")


def offsets_leaders(meta: dict) -> dict[int, dict]:
    [topic] = [t for t in meta["topics"] if t["name"] == OFFSETS]
    return {p["partition_index"]: p for p in topic["partitions"]}


def shard_of(group: str, partitions: int = 50) -> int:
    return partition_for(group, partitions)
