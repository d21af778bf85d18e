"""Consume-transform-produce transactions on a 3-node cluster beside a
single node, in one run (issue 14, transactions in a cluster).

    python -m bench cluster_transactions [--quick]

The loop of bench/transactions.py (confluent-kafka, per transaction 10
records consumed read_committed, produced, and their offset committed with
send_offsets_to_transaction) runs against one single node and a 3-node
cluster, round by round interleaved so both see the same load (the goal
is judged by the median of the per-round ratios); the cluster's topics,
__consumer_offsets and __transaction_state have replication factor 3:
every transaction-log write, marker and
transactional offset commit is then acknowledged at the high watermark
(fsynced on all three nodes), and markers for partitions led by other
nodes travel as WriteTxnMarkers.  Server CPU is summed over all nodes
(etcd not counted).  Then one more round on the cluster with the nodes'
step trace on (the `kcoord.trace` logger at DEBUG, set through the
BROKER_LOGGER config resource), not counted in the figures above: where a
replicated transaction spends its time, per durable step
(bench/step_breakdown.py).  Results: bench/results/cluster_transactions.md/.json.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import median, proc_cpu, table, timed, write_results  # noqa: E402

INCREMENTAL_ALTER_CONFIGS, BROKER_LOGGER = 44, 8
TRACED_TXNS = 100


class _Nodes:
    """What bench.transactions.ctp_run needs of a peer."""

    def __init__(self, name: str, ports: list[int], pids: list[int]) -> None:
        self.name = name
        self.bootstrap = ",".join(f"127.0.0.1:{p}" for p in ports)
        self.pid = pids[0]
        self.pids = pids


def _create(bootstrap: str, names: list[str], replication: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(n, 1, replication) for n in names],
                                   operation_timeout=30).values():
        fut.result(timeout=60)


def _round(peer: _Nodes, replication: int, txns: int, r: int) -> dict:
    from bench.transactions import ctp_run
    tag = f"{peer.name.split()[0]}-r{r}"
    _create(peer.bootstrap, [f"ctp-in-{tag}", f"ctp-out-{tag}"], replication)
    cpu0 = [proc_cpu(p) for p in peer.pids]
    with timed(f"consume-transform-produce on {peer.name}, round {r + 1}"):
        result = ctp_run(peer, txns, tag)
    cpu = sum(proc_cpu(p) - c for p, c in zip(peer.pids, cpu0))
    # the input fill is inside the reading too: CPU per transaction is an upper bound
    result["all_nodes_cpu_ms_per_txn"] = 1000 * cpu / result["transactions"] \
        if result["transactions"] else None
    return result


def _set_trace(cluster, level: str | None) -> None:
    """The `kcoord.trace` logger of every node at `level` (None: back to its default)."""
    from tests.clients.wire import WireClient
    op = 0 if level is not None else 1     # SET, DELETE
    for node_id, node in cluster.nodes.items():
        with WireClient(node.port) as client:
            resp = client.request(INCREMENTAL_ALTER_CONFIGS, 1, {
                "resources": [{"resource_type": BROKER_LOGGER, "resource_name": str(node_id),
                               "configs": [{"name": "kcoord.trace", "config_operation": op,
                                            "value": level}]}],
                "validate_only": False})
        if resp["responses"][0]["error_code"]:
            raise RuntimeError(f"node {node_id}: kcoord.trace not set: {resp}")


def _traced_round(cluster, nodes: _Nodes, txns: int) -> dict:
    """One more round with the step trace on: the breakdown of where it waits."""
    from bench.step_breakdown import breakdown
    from bench.transactions import ctp_run
    _create(nodes.bootstrap, ["ctp-in-trace", "ctp-out-trace"], 3)
    marks = {i: len(n.log_lines) for i, n in cluster.nodes.items()}
    _set_trace(cluster, "DEBUG")
    try:
        with timed("consume-transform-produce on the cluster, step trace on"):
            result = ctp_run(nodes, txns, "trace")
    finally:
        _set_trace(cluster, None)
    return breakdown({i: n.log_lines[marks[i]:] for i, n in cluster.nodes.items()},
                     result["transactions"])


def run(args) -> None:
    from kcoord.cluster.etcd_server import EtcdServer
    from tests.cluster.support import Cluster
    from tests.support import ServerProcess
    from bench.step_breakdown import tables as step_tables
    quick = getattr(args, "quick", False)
    txns, rounds = (50, 1) if quick else (300, 3)
    settings = {"group.initial.rebalance.delay.ms": "0"}
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="kcoord-bench-ctxn-") as tmp:
        single = ServerProcess(Path(tmp) / "single", settings=settings).start()
        etcd = EtcdServer(Path(tmp) / "etcd").start()
        cluster = Cluster(etcd, Path(tmp), nodes=3, settings=settings)
        try:
            cluster.start()
            one = _Nodes("single node", [single.port], [single.proc.pid])
            nodes = _Nodes("3-node cluster (rf 3)", [n.port for n in cluster.nodes.values()],
                           [n.proc.pid for n in cluster.nodes.values()])
            setups = [(one, 1), (nodes, 3)]
            results = {one.name: [], nodes.name: []}
            for r in range(rounds):
                # interleaved, the order flipped each round: the two setups of a
                # round see the same load (on a shared machine the single node's
                # rate moves with it far more than the cluster's)
                for peer, replication in (setups if r % 2 == 0 else setups[::-1]):
                    results[peer.name].append(_round(peer, replication, txns, r))
            trace = _traced_round(cluster, nodes, TRACED_TXNS)
        finally:
            cluster.stop()
            etcd.stop()
            single.kill()
    ratios = [c["txn_s"] / s["txn_s"] for s, c in zip(results["single node"],
                                                       results["3-node cluster (rf 3)"])
              if s["txn_s"]]
    rows = [[name, median([x["txn_s"] for x in runs]),
             median([x["all_nodes_cpu_ms_per_txn"] for x in runs]),
             sum(x["transactions"] for x in runs)] for name, runs in results.items()]
    sections = [
        "## Consume-transform-produce transactions per second, single node vs 3-node cluster",
        "",
        f"One confluent-kafka client, {txns} transactions per round, {rounds} round(s), "
        "median; each transaction consumes 10 records (read_committed), produces them and "
        "commits the consumed offset in the transaction. The cluster's topics, "
        "__consumer_offsets and __transaction_state have replication factor 3, so every "
        "step is acknowledged once fsynced on all three nodes; server CPU summed over the "
        "nodes (etcd not counted), input fill included.",
        "",
        table(["setup", "transactions/s", "server CPU ms/txn (all nodes)", "transactions"],
              rows),
        "",
        "The rounds are interleaved (single node, cluster, then cluster, single node, ...), "
        "so each round's two figures saw the same load; the cluster's rate over the single "
        "node's, per round: " + ", ".join(f"{x:.0%}" for x in ratios)
        + (f" (median {median(ratios):.0%}: the goal's measure)." if ratios else "."),
        "",
        "## Where a replicated transaction waits (3 nodes, rf 3, step trace on)",
        "",
        "Medians in ms over one more round with the nodes' step trace on (not counted "
        "above; tracing costs CPU). A step is timed on the node that answers it, from "
        "the request in to the answer out; its write is appended, fsynced by the leader, "
        "then replicated: the followers' parked fetches are answered, they append and "
        "fsync, and their next fetch reports it, which moves the high watermark.",
        "",
        *step_tables(trace),
        "",
    ]
    write_results("cluster_transactions",
                  "Transactions on a 3-node cluster beside a single node", sections,
                  {"results": results, "txns_per_round": txns, "rounds": rounds,
                   "round_ratios": ratios,
                   "step_breakdown": trace})


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    run(parser.parse_args())
