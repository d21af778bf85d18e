"""OffsetCommit on a 3-node cluster with replication factor 3 beside a
single node, in one run.

    python -m bench cluster_offset_commit
    python -m bench.cluster_offset_commit --connections 60 --seconds 15

The same load generator as bench/offset_commit.py (pipelined connections,
each committing 10 partitions for its own simple group) runs against one
single node, then against the node of a 3-node cluster that coordinates
the most shards, with every group chosen so that this node coordinates it:
each commit is then fsynced on the coordinator, fetched and fsynced by the
two followers of its __consumer_offsets partition, and answered once the
high watermark passes it.  Server CPU is summed over all nodes (etcd not
counted).
Goals (issue 12): CPU per commit <= 2.5x the single node's; p99 <= 2x the
single node's + 5 ms.  Results: bench/results/cluster_offset_commit.md/.json.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import proc_cpu, run_loadgen, table, write_results  # noqa: E402

TOPIC = "bench-commits"
PARTITIONS = 10


def create_topic(bootstrap: str, replication: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(TOPIC, PARTITIONS, replication)],
                                   operation_timeout=30).values():
        fut.result(timeout=60)


def measure(port: int, pids: list[int], groups: list[str] | None, connections: int,
            depth: int, requests: int, seconds: float) -> dict:
    spec = {"port": port, "kind": "offset_commit", "topic": TOPIC, "partitions": PARTITIONS,
            "version": 8, "connections": connections, "depth": depth, "requests": requests,
            "seconds": seconds, "warmup": connections * depth * 3}
    if groups:
        spec["groups"] = groups
    cpu0 = [proc_cpu(p) for p in pids]
    result = run_loadgen(spec, timeout=seconds * 3 + 180)
    cpu = sum(proc_cpu(p) - c for p, c in zip(pids, cpu0))
    result["all_nodes_cpu_s"] = cpu
    done = result.get("requests") or 0
    # the warm-up ran between the two readings too: count its commits
    total = done + (result.get("warmup_requests") or 0)
    result["all_nodes_cpu_us_per_commit"] = cpu / total * 1e6 if total else None
    return result


def coordinated_groups(cluster, node_ids) -> tuple[int, list[str]]:
    """The node that leads the most __consumer_offsets partitions, and group
    ids (many) whose shard it leads."""
    from kcoord.coordinator.partitioner import partition_for
    from tests.cluster.support import offsets_leaders, wait_until
    cluster.find_coordinators(node_ids[0], ["bench-probe"])   # creates the offsets topic
    meta = wait_until(lambda: (m := cluster.metadata(node_ids[0], ["__consumer_offsets"]))
                      and m["topics"][0]["error_code"] == 0 and len(offsets_leaders(m)) == 50
                      and all(len(p["isr_nodes"]) == 3 for p in offsets_leaders(m).values())
                      and m, "the offsets topic with three in-sync replicas")
    leaders = {p: row["leader_id"] for p, row in offsets_leaders(meta).items()}
    counts: dict[int, int] = {}
    for leader in leaders.values():
        counts[leader] = counts.get(leader, 0) + 1
    node = max(counts, key=counts.get)
    groups = [g for g in (f"bench-group-{i}" for i in range(20000))
              if leaders[partition_for(g, 50)] == node]
    return node, groups


def run(args) -> None:
    quick = getattr(args, "quick", False)
    connections = getattr(args, "connections", None) or (20 if quick else 60)
    depth = getattr(args, "depth", None) or 8
    seconds = getattr(args, "seconds", None) or (8 if quick else 15)
    requests = getattr(args, "requests", None) or (20_000 if quick else 300_000)
    from kcoord.cluster.etcd_server import EtcdServer
    from tests.cluster.support import Cluster, wait_until
    from tests.support import ServerProcess
    results = {}
    with tempfile.TemporaryDirectory(prefix="kcoord-bench-") as tmp:
        single = ServerProcess(Path(tmp) / "single")
        single.start(timeout=300)
        try:
            create_topic(single.bootstrap, 1)
            results["single"] = measure(single.port, [single.proc.pid], None, connections,
                                        depth, requests, seconds)
        finally:
            single.stop()
        etcd = EtcdServer(Path(tmp) / "etcd").start()
        cluster = Cluster(etcd, Path(tmp), nodes=3)
        try:
            cluster.start()
            ids = sorted(cluster.nodes)
            create_topic(",".join(n.bootstrap for n in cluster.nodes.values()), 3)
            node, groups = coordinated_groups(cluster, ids)
            groups = groups[:connections]
            # every shard of those groups loaded before measuring
            wait_until(lambda: all(a["error_code"] == 0 and a["node_id"] == node for a in
                                   cluster.find_coordinators(node, groups).values()),
                       "the groups' coordinators")
            pids = [n.proc.pid for n in cluster.nodes.values()]
            results["cluster"] = measure(cluster.nodes[node].port, pids, groups, connections,
                                         depth, requests, seconds)
            results["cluster"]["coordinator"] = node
        finally:
            for n in cluster.nodes.values():
                n.stop()
            etcd.stop()
    rows = []
    for name, label in (("single", "single node"), ("cluster", "3 nodes, RF 3")):
        r = results[name]
        if "error" in r:
            rows.append([label, r["error"], None, None, None, None])
            continue
        rows.append([label, r["requests_per_s"], r["all_nodes_cpu_us_per_commit"],
                     r["latency_ms"]["p50"], r["latency_ms"]["p99"],
                     r.get("error_codes") or r.get("errors") or "-"])
    s, c = results["single"], results["cluster"]
    ok = "error" not in s and "error" not in c
    lines = []
    if ok:
        ratio = c["all_nodes_cpu_us_per_commit"] / s["all_nodes_cpu_us_per_commit"]
        p99_goal = 2 * s["latency_ms"]["p99"] + 5
        lines = [f"- CPU per commit over all nodes: cluster / single = {ratio:.2f}x "
                 f"(goal <= 2.5x: {'met' if ratio <= 2.5 else 'MISSED'})",
                 f"- p99: {c['latency_ms']['p99']:.1f} ms vs goal <= 2 x "
                 f"{s['latency_ms']['p99']:.1f} + 5 = {p99_goal:.1f} ms "
                 f"({'met' if c['latency_ms']['p99'] <= p99_goal else 'MISSED'})"]
        results["cpu_ratio"], results["p99_goal_ms"] = ratio, p99_goal
    sections = [
        f"## OffsetCommit v8, 10 partitions, {connections} connections x {depth} in flight", "",
        table(["setup", "commits/s", "server CPU us/commit (all nodes)", "p50 ms", "p99 ms",
               "errors"], rows), "", *lines,
        "- The cluster's load goes to one coordinator (the node leading the most shards), "
        "with groups it coordinates; its two followers per partition fetch and fsync every "
        "commit. Everything shares the machine's 2 cores with the load generator.",
    ]
    print(write_results("cluster_offset_commit",
                        "OffsetCommit: 3 nodes (RF 3) beside one node", sections, results))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--connections", type=int)
    p.add_argument("--depth", type=int)
    p.add_argument("--seconds", type=float)
    p.add_argument("--requests", type=int)
    p.add_argument("--quick", action="store_true")
    run(p.parse_args(argv))


if __name__ == "__main__":
    main()
