"""Share groups on a 3-node cluster (replication factor 3) beside one node,
and chaos cycles with share consumers, in one run.

    python -m bench share_cluster [--quick] [--records N] [--cycles N]

Throughput: the share_groups benchmark's steps (bench/share_groups.py: the
share partitions warmed up, a backlog of `records` records of 100 bytes on 3
partitions, 3 confluent-kafka ShareConsumers joining and reading it) on one
node (RF 1) and on 3 nodes + etcd (RF 3, min.insync.replicas 2; the
__share_group_state topic RF 3, min ISR 2 as Kafka's defaults): records/s
and server CPU per record summed over every node (etcd not counted).

Chaos: on a fresh 3-node cluster a ShareConsumer (implicit acknowledgement)
reads a 3-partition RF 3 topic for `--cycles` cycles (20; 2 with --quick;
tests/cluster/test_share_state_cluster.py is the bounded version in the
suite).  Each cycle produces `PER_CYCLE` numbered records at RATE records/s
(idempotent, acks=all); once half are sent and a quarter acknowledged, the
leader of one partition (in turn) is SIGKILLed with records in flight; the
node is restarted and the next cycle waits until nothing is under-replicated.
Figures: records whose acknowledgement the broker confirmed before a kill
and delivered again after it (goal 0); records never delivered (goal 0);
records delivered more than once (allowed: acquisitions on the killed
leader are lost with it, as in Kafka); kill -> next confirmed
acknowledgement on the killed leader's partition (p50, max).
Results: bench/results/share_cluster.{md,json}.
"""
from __future__ import annotations

import signal
import tempfile
import threading
import time
from pathlib import Path

from .common import table, write_results
from .share_groups import create_topic, share_run

CHAOS_TOPIC = "chaos-share"
PER_CYCLE = 400
RATE = 200.0            # records/s produced during a cycle: the kill lands mid-flow
CATCH_UP_S = 120.0
# heartbeats and locks short, so a member and its records follow a failover quickly
SETTINGS = {"group.share.min.heartbeat.interval.ms": "200",
            "group.share.heartbeat.interval.ms": "200",
            "group.share.min.record.lock.duration.ms": "1000",
            "group.share.record.lock.duration.ms": "5000"}


class _Nodes:
    """share_groups' view of a server: a bootstrap and the pids whose CPU counts."""

    def __init__(self, bootstrap: str, pids: list[int]) -> None:
        self.bootstrap = bootstrap
        self.pid = pids


def _cluster(root: Path):
    from kcoord.cluster.etcd_server import EtcdServer
    from tests.cluster.support import Cluster
    etcd = EtcdServer(root / "etcd").start()
    cluster = Cluster(etcd, root, nodes=3, settings=SETTINGS)
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        etcd.stop()
        raise
    return etcd, cluster


def _bootstrap(cluster, only_running: bool = False) -> str:
    ids = cluster.running() if only_running else list(cluster.nodes)
    return ",".join(cluster.nodes[i].bootstrap for i in ids)


def throughput(records: int) -> dict:
    from tests.support import ServerProcess
    out = {}
    with tempfile.TemporaryDirectory(prefix="kcoord-bench-") as tmp:
        node = ServerProcess(Path(tmp) / "single", SETTINGS)
        node.start(timeout=300)
        try:
            create_topic(node.bootstrap)
            out["single node, RF 1"] = share_run(_Nodes(node.bootstrap, [node.proc.pid]), records)
        finally:
            node.stop()
    with tempfile.TemporaryDirectory(prefix="kcoord-bench-") as tmp:
        etcd, cluster = _cluster(Path(tmp))
        try:
            bootstrap = _bootstrap(cluster)
            create_topic(bootstrap, 3)
            out["3 nodes, RF 3"] = share_run(
                _Nodes(bootstrap, [n.proc.pid for n in cluster.nodes.values()]), records)
        finally:
            cluster.stop()
            etcd.stop()
    return out


def _until(predicate, timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return True
        except (OSError, ConnectionError):
            pass                      # a node restarting: ask again
        time.sleep(interval)
    return False


def _partitions(cluster, node_id: int) -> list[dict]:
    [t] = cluster.metadata(node_id, [CHAOS_TOPIC])["topics"]
    return t["partitions"]


def _in_sync(cluster, node_id: int) -> bool:
    topics = cluster.metadata(node_id, [CHAOS_TOPIC, "__share_group_state"])["topics"]
    return all(len(p["isr_nodes"]) == 3 and p["leader_id"] >= 0
               for t in topics for p in t["partitions"])


class _Steady(threading.Thread):
    """Produces `values` (acks=all, idempotent: no duplicate a retry could
    pass for a redelivery) at RATE records/s, across the cycle's kill."""

    def __init__(self, bootstrap: str, values: list[bytes]) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.values = bootstrap, values
        self.sent = 0
        self.unsent = 0

    def run(self) -> None:
        from confluent_kafka import Producer
        p = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True,
                      "linger.ms": 5, "message.timeout.ms": 120000, "log_level": 0})
        for i, value in enumerate(self.values):
            p.produce(CHAOS_TOPIC, value, partition=i % 3)
            p.poll(0)
            self.sent = i + 1
            time.sleep(1.0 / RATE)
        self.unsent = p.flush(120)


def _cycle(cluster, log, index: int, values: list[bytes]) -> dict:
    """One kill of partition (index % 3)'s leader while records flow; its figures."""
    half = len(values) // 2
    steady = _Steady(_bootstrap(cluster), values)
    steady.start()
    _until(lambda: steady.sent >= half
           and len(log.confirmed_values() & set(values)) >= half // 2, 120, 0.01)
    part = index % 3
    with log.lock:
        before = {v: len(log.received[v]) for v in
                  {log.where[k] for k in log.confirmed if k in log.where}}
        confirmed_before = sum(1 for k in log.confirmed if k[0] == part)
    asker = cluster.running()[0]
    victim = next(p["leader_id"] for p in _partitions(cluster, asker)
                  if p["partition_index"] == part)
    killed = time.monotonic()
    cluster.nodes[victim].proc.send_signal(signal.SIGKILL)
    cluster.nodes[victim].proc.wait(10)
    # failover time: to the next confirmed acknowledgement on the killed leader's partition
    _until(lambda: sum(1 for k in list(log.confirmed) if k[0] == part) > confirmed_before,
           120, 0.02)
    resumed = time.monotonic() - killed
    cluster.nodes[victim].start()
    synced = _until(lambda: _in_sync(cluster, cluster.running()[0]), CATCH_UP_S, 0.5)
    steady.join(180)
    _until(lambda: log.answered_values() >= set(values), 120)
    with log.lock:
        again = sorted(v.decode() for v, n in before.items() if len(log.received[v]) != n)
        never = sorted(v.decode() for v in values if not log.received.get(v))
        twice = sum(1 for v in values if len(log.received.get(v, ())) > 1)
        confirmed = {log.where[k] for k in log.confirmed if k in log.where}
        unknown = {log.where[k] for k in log.unknown if k in log.where} - confirmed
    return {"victim": victim, "confirmed_redelivered": again, "never_delivered": never,
            "delivered_more_than_once": twice, "ack_outcome_unknown": len(unknown & set(values)),
            "unanswered": len(set(values) - confirmed - unknown),
            "kill_to_next_ack_s": resumed, "back_in_sync": synced, "unsent": steady.unsent}


def chaos(cycles: int) -> dict:
    from confluent_kafka.admin import AdminClient, NewTopic
    from tests.clients.share_workers import Deliveries, ShareWorker
    from tests.clients.test_share_consumers import flowing
    runs = []
    with tempfile.TemporaryDirectory(prefix="kcoord-bench-") as tmp:
        etcd, cluster = _cluster(Path(tmp))
        worker = None
        try:
            bootstrap = _bootstrap(cluster)
            admin = AdminClient({"bootstrap.servers": bootstrap})
            for f in admin.create_topics([NewTopic(CHAOS_TOPIC, 3, 3, config={
                    "min.insync.replicas": "2"})]).values():
                f.result(60)
            log = Deliveries()
            worker = ShareWorker("chaos", bootstrap, "chaos-share-group", CHAOS_TOPIC, log)
            worker.start()
            flowing(bootstrap, CHAOS_TOPIC, 3, log)
            for c in range(cycles):
                values = [b"c%03d-%05d" % (c, i) for i in range(PER_CYCLE)]
                runs.append(_cycle(cluster, log, c, values))
                print(f"cycle {c}: {runs[-1]}", flush=True)
            errors = list(log.errors[:5])
        finally:
            if worker is not None:
                worker.stop.set()
                worker.join(60)
            cluster.stop()
            etcd.stop()
    return {"cycles": runs, "commit_errors": errors}


def _pct(values: list[float], q: float) -> float | None:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else None


def run(args) -> dict:
    quick = getattr(args, "quick", False)
    records = getattr(args, "records", None)
    records = int(str(records).split(",")[0]) if records else (5_000 if quick else 100_000)
    cycles = getattr(args, "cycles", None) or (2 if quick else 20)
    speed = throughput(records)
    chaotic = chaos(cycles)
    runs = chaotic["cycles"]
    again = sum(len(r["confirmed_redelivered"]) for r in runs)
    never = sum(len(r["never_delivered"]) for r in runs)
    resumed = [r["kill_to_next_ack_s"] for r in runs]
    single, clustered = speed.get("single node, RF 1", {}), speed.get("3 nodes, RF 3", {})
    rows = [[name, r.get("records"), r.get("records_per_s"), r.get("cpu_us_per_record"),
             r.get("span_s"), "yes" if r.get("complete") else "NO"] for name, r in speed.items()]
    chaos_rows = [[i, r["victim"], len(r["confirmed_redelivered"]), len(r["never_delivered"]),
                   r["delivered_more_than_once"], r["ack_outcome_unknown"], r["unanswered"],
                   r["kill_to_next_ack_s"],
                   "yes" if r["back_in_sync"] else "NO"] for i, r in enumerate(runs)]
    cpu_ratio = (clustered["cpu_us_per_record"] / single["cpu_us_per_record"]
                 if clustered.get("cpu_us_per_record") and single.get("cpu_us_per_record")
                 else None)
    sections = [
        f"## Consumption: {records:,} records of 100 bytes, 3 partitions, 3 ShareConsumers", "",
        "confluent-kafka ShareConsumers in the bench process; records/s from the first to the "
        "last record read; CPU: every node's utime+stime over the phase (members joining "
        "included), etcd not counted.", "",
        table(["setup", "records read", "records/s", "server CPU us/record (all nodes)",
               "first-to-last s", "all read"], rows), "",
        "- CPU per record: 3 nodes / one node = "
        + (f"{cpu_ratio:.2f}x" if cpu_ratio else "-"), "",
        f"## Chaos: {len(runs)} cycles of {PER_CYCLE} records produced at {RATE:.0f}/s, the "
        "leader of one partition SIGKILLed mid-flow and restarted", "",
        table(["cycle", "killed node", "confirmed then redelivered", "never delivered",
               "delivered > once", "ack answered an error", "ack unanswered at end",
               "kill -> next ack on it s", "back in sync"],
              chaos_rows), "",
        f"- acknowledged records redelivered after a failover: {again} (goal 0: "
        f"{'met' if again == 0 else 'MISSED'})",
        f"- records never delivered: {never} (goal 0: {'met' if never == 0 else 'MISSED'})",
        f"- kill -> next confirmed acknowledgement on that partition: p50 "
        f"{_pct(resumed, 0.5) or 0:.1f} s, max {max(resumed, default=0):.1f} s",
        "- (a time near 0: a confirmation already on its way when the leader was killed, "
        "delivered to the consumer's callback just after)",
        f"- acknowledgement commit errors seen by the consumer: {chaotic['commit_errors'] or '-'}",
        "- An acknowledgement in flight to a killed leader answers an error (its outcome "
        "unknown to the consumer): 'ack answered an error' counts such records never "
        "confirmed; they may be Acknowledged on the server (not delivered again) or "
        "delivered again, both allowed.",
        "- Everything (3 nodes, etcd, the clients) shares the same 2 cores with other "
        "sessions' test runs.", ""]
    raw = {"records": records, "throughput": speed, "cpu_ratio": cpu_ratio,
           "chaos": chaotic, "confirmed_redelivered": again, "never_delivered": never,
           "kill_to_next_ack_p50_s": _pct(resumed, 0.5),
           "kill_to_next_ack_max_s": max(resumed, default=None)}
    print(write_results("share_cluster", "Share groups on 3 nodes (RF 3) beside one node; "
                        "chaos with share consumers", sections, raw))
    return raw
