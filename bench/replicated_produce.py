"""acks=all produce on a 3-node cluster with replication factor 3 beside a
single node, in one run (the data path of kcoord's replication).

    python -m bench replicated_produce
    python -m bench.replicated_produce --records 20000 --seconds 60

A confluent-kafka producer (acks=all, 1 KiB records, 3 partitions) writes
the same load to each setup: records/s, total server CPU per GB summed over
every node (etcd not counted), and the delivery latency (p50, p99) seen by
the producer.  In the cluster each write is fsynced on the leader, fetched,
fsynced by both followers and only then acknowledged.
Goals (issue 12, for OffsetCommit; here on produce): CPU per byte <= 2.5x
the single node's, p99 <= 2x the single node's + 5 ms.
Results: bench/results/replicated_produce.md and .json.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import proc_cpu, table, write_results  # noqa: E402

SIZE = 1024
PARTITIONS = 3
TOPIC = "bench-replicated"


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def create_topic(bootstrap: str, replication: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(TOPIC, PARTITIONS, replication,
                     config={"min.insync.replicas": str(min(2, replication))})
    for fut in admin.create_topics([topic], operation_timeout=30).values():
        fut.result(timeout=60)


def produce(bootstrap: str, pids: list[int], records: int, seconds: float) -> dict:
    from confluent_kafka import Producer
    payload = os.urandom(SIZE)
    latencies: list[float] = []
    errors: list[str] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2,
                  "enable.idempotence": False, "queue.buffering.max.messages": 1_000_000,
                  "log_level": 3})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:      # every partition led and known
        md = p.list_topics(TOPIC, timeout=10)
        t = md.topics.get(TOPIC)
        if t is not None and len(t.partitions) == PARTITIONS and all(
                q.leader >= 0 for q in t.partitions.values()):
            break
        time.sleep(0.2)
    cpu0 = sum(proc_cpu(pid) for pid in pids)
    t0 = time.monotonic()
    stop = t0 + seconds
    sent = 0
    for i in range(records):
        started = time.monotonic()

        def delivered(err, msg, started=started):
            if err is None:
                latencies.append(time.monotonic() - started)
            elif len(errors) < 5:
                errors.append(str(err))
        while True:
            try:
                p.produce(TOPIC, payload, partition=i % PARTITIONS, on_delivery=delivered)
                break
            except BufferError:
                p.poll(0.01)
        sent += 1
        if i % 200 == 0:
            p.poll(0)
            if time.monotonic() > stop:
                break
    p.flush(120)
    wall = time.monotonic() - t0
    cpu = sum(proc_cpu(pid) for pid in pids) - cpu0
    acked = len(latencies)
    return {"sent": sent, "acked": acked, "errors": errors, "wall_s": wall,
            "records_per_s": acked / wall, "mb_per_s": acked * SIZE / wall / 1e6,
            "server_cpu_s": cpu, "cpu_s_per_gb": cpu / (acked * SIZE / 1e9) if acked else None,
            "p50_ms": percentile(latencies, 0.5) * 1000, "p99_ms": percentile(latencies, 0.99) * 1000}


def run_single(records: int, seconds: float) -> dict:
    from tests.support import ServerProcess
    with tempfile.TemporaryDirectory(prefix="kcoord-bench-") as tmp:
        node = ServerProcess(Path(tmp) / "single")
        node.start(timeout=300)
        try:
            create_topic(node.bootstrap, 1)
            return produce(node.bootstrap, [node.proc.pid], records, seconds)
        finally:
            node.stop()


def run_cluster(records: int, seconds: float) -> dict:
    from kcoord.cluster.etcd_server import EtcdServer
    from tests.cluster.support import Cluster
    with tempfile.TemporaryDirectory(prefix="kcoord-bench-") as tmp:
        etcd = EtcdServer(Path(tmp) / "etcd").start()
        cluster = Cluster(etcd, Path(tmp), nodes=3, settings={"replica.fetch.wait.max.ms": "500"})
        try:
            cluster.start()
            bootstrap = ",".join(n.bootstrap for n in cluster.nodes.values())
            create_topic(bootstrap, 3)
            pids = [n.proc.pid for n in cluster.nodes.values()]
            return produce(bootstrap, pids, records, seconds)
        finally:
            for n in cluster.nodes.values():
                n.stop()
            etcd.stop()


def run(args) -> None:
    quick = getattr(args, "quick", False)
    records = getattr(args, "records", None)
    records = records if isinstance(records, int) else (3000 if quick else 30000)
    seconds = getattr(args, "seconds", None) or (30 if quick else 90)
    single = run_single(records, seconds)
    cluster = run_cluster(records, seconds)
    rows = []
    for name, r in (("single node, RF 1", single), ("3 nodes, RF 3", cluster)):
        rows.append([name, r["acked"], r["records_per_s"], r["mb_per_s"], r["cpu_s_per_gb"],
                     r["p50_ms"], r["p99_ms"], ", ".join(r["errors"]) or "-"])
    ratio_cpu = cluster["cpu_s_per_gb"] / single["cpu_s_per_gb"]
    p99_goal = 2 * single["p99_ms"] + 5
    sections = [
        "## acks=all, 1 KiB records, 3 partitions, min.insync.replicas 2 (1 on the single node)", "",
        table(["setup", "acknowledged", "records/s", "MB/s", "server CPU s/GB (all nodes)",
               "p50 ms", "p99 ms", "errors"], rows), "",
        f"- CPU per byte: cluster / single = {ratio_cpu:.2f}x (goal <= 2.5x: "
        f"{'met' if ratio_cpu <= 2.5 else 'MISSED'})",
        f"- p99: {cluster['p99_ms']:.1f} ms vs goal <= 2 x {single['p99_ms']:.1f} + 5 = "
        f"{p99_goal:.1f} ms ({'met' if cluster['p99_ms'] <= p99_goal else 'MISSED'})",
        "- The producer runs on the same 2 shared cores as every node; etcd's CPU is not counted.",
    ]
    raw = {"single": single, "cluster": cluster, "records": records,
           "cpu_ratio": ratio_cpu, "p99_goal_ms": p99_goal}
    print(write_results("replicated_produce",
                        "Replicated produce: 3 nodes (RF 3) beside one node", sections, raw))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int)
    p.add_argument("--seconds", type=float)
    p.add_argument("--quick", action="store_true")
    run(p.parse_args(argv))


if __name__ == "__main__":
    main()
