"""Paired before/after runs of the 3-node transactions loop, one cluster per
source tree, all up at once and measured in interleaved rounds (issue 26).

    python -m bench.cluster_pairs [--txns 150] [--rounds 8] NAME=TREE NAME=TREE ...

Each TREE is a checkout of kcoord (a `git worktree add --detach`, with its
compiled modules built or copied in: `make native`); its nodes run with
PYTHONPATH=TREE.  A single node of the first tree runs beside them as the
reference.  Round r runs `--txns` consume-transform-produce transactions
(bench/transactions.py's loop) on every setup in turn, the order reversed
every other round, so all setups of a round see the same load: on this
shared 2-core machine the load moves a rate by 2x within minutes, far more
than most changes do, so only paired rounds can tell a change from the
load.  Per round and setup: transactions/s, server CPU ms per transaction
(all nodes, all threads) and context switches per transaction; then the
medians.  Prints JSON lines; writes nothing.

Run every comparison twice, with the trees named in both orders, and
average.  Each tree keeps one cluster for all rounds, and the cluster
started first read faster in both orders of each of four pair runs (rf3's
notes, 2026-11-29: compiled vs interpreted replication path, 5 ms vs
0.5 ms GIL switch interval).  A single run cannot tell a change from the
start order.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import proc_cpu  # noqa: E402


def switches(pid: int) -> int:
    """Context switches (voluntary and not) of every thread of `pid`."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            text = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        except OSError:
            continue    # the thread ended meanwhile
        for field in ("\nvoluntary_ctxt_switches:", "\nnonvoluntary_ctxt_switches:"):
            total += int(text.split(field)[1].split()[0])
    return total


def load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def _start(trees: list[tuple[str, str]], root: Path, stops: list) -> list:
    """-> [(name, peer, replication factor)]; what to stop goes into `stops`
    (the caller's: stopped last first, whatever happens)."""
    from bench.cluster_transactions import _Nodes
    from kcoord.cluster.etcd_server import EtcdServer
    from tests.cluster.support import Cluster
    from tests.support import ServerProcess
    settings = {"group.initial.rebalance.delay.ms": "0"}
    saved = os.environ.get("PYTHONPATH")
    setups = []
    try:
        for i, (name, tree) in enumerate(trees):
            os.environ["PYTHONPATH"] = tree     # the nodes started now run this tree
            if i == 0:
                single = ServerProcess(root / "single", settings=settings).start()
                stops.append(single.kill)
                setups.append(("single", _Nodes("single", [single.port],
                                                [single.proc.pid]), 1))
            etcd = EtcdServer(root / f"etcd-{name}").start()
            stops.append(etcd.stop)
            cluster = Cluster(etcd, root / name, nodes=3, settings=settings)
            stops.append(cluster.stop)      # stopped before its etcd
            cluster.start()
            setups.append((name, _Nodes(name, [n.port for n in cluster.nodes.values()],
                                        [n.proc.pid for n in cluster.nodes.values()]), 3))
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    return setups


def main(argv: list[str] | None = None) -> None:
    from bench.cluster_transactions import _create
    from bench.transactions import ctp_run
    p = argparse.ArgumentParser(prog="python -m bench.cluster_pairs")
    p.add_argument("trees", nargs="+", metavar="NAME=TREE")
    p.add_argument("--txns", type=int, default=150)
    p.add_argument("--rounds", type=int, default=8)
    args = p.parse_args(argv)
    trees = [tuple(t.split("=", 1)) for t in args.trees]
    if any(len(t) != 2 for t in trees):
        p.error("each tree as NAME=PATH")
    rows: dict[str, list] = {}
    with tempfile.TemporaryDirectory(prefix="kcoord-pairs-") as tmp:
        stops: list = []
        try:
            setups = _start(trees, Path(tmp), stops)
            for name, peer, rf in setups:
                _create(peer.bootstrap, ["ctp-in-w", "ctp-out-w"], rf)
                ctp_run(peer, 30, "w")      # warm-up: coordinators loaded, producer id
            for r in range(args.rounds):
                for name, peer, rf in (setups if r % 2 == 0 else setups[::-1]):
                    _create(peer.bootstrap, [f"ctp-in-r{r}", f"ctp-out-r{r}"], rf)
                    s0, c0, l0 = (sum(switches(x) for x in peer.pids),
                                  sum(proc_cpu(x) for x in peer.pids), load())
                    out = ctp_run(peer, args.txns, f"r{r}")
                    n = out["transactions"] or 1
                    row = {"setup": name, "round": r, "txn_s": round(out["txn_s"], 1),
                           "cpu_ms": round(1000 * (sum(proc_cpu(x) for x in peer.pids) - c0)
                                           / n, 2),
                           "ctx": round((sum(switches(x) for x in peer.pids) - s0) / n, 1),
                           "load": round((l0 + load()) / 2, 1)}
                    rows.setdefault(name, []).append(row)
                    print(json.dumps(row), flush=True)
        finally:
            for stop in stops[::-1]:
                stop()
    for name, runs in rows.items():
        print(json.dumps({"setup": name, "median_txn_s": statistics.median(
            x["txn_s"] for x in runs), "median_cpu_ms": statistics.median(
            x["cpu_ms"] for x in runs), "median_ctx": statistics.median(
            x["ctx"] for x in runs)}), flush=True)


if __name__ == "__main__":
    main()
