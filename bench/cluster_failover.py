"""Control-plane failover on a real 3-node cluster (one etcd member, three
`kcoord serve` processes on 127.0.0.1, etcd.lease.ttl.ms 2000).

    python -m bench cluster_failover [--quick]

Each cycle starts a fresh 3-node cluster (own etcd prefix and data dirs),
lets the offsets topic be placed, and either SIGKILLs one node or stops it
gracefully (SIGTERM: controlled shutdown); the controller is the victim
every third cycle.  Measured from the
signal, by polling Metadata on a surviving node every 10 ms:
- kill -> leaders moved: every __consumer_offsets partition the victim led
  has another leader (lease expiry + the controller's compare-and-set
  election + the watch bringing it to the survivor);
- kill -> new controller (when the controller was killed);
- graceful stop -> leaders moved, and -> process exited.
This is the control plane's part of "kill -> next acknowledged commit"; the
coordinator's load and the clients' rediscovery come on top of it.
Results: bench/results/cluster_failover.{md,json}.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import free_port, table, wait_port, write_results

TTL_MS = 2000
POLL_S = 0.01
DEADLINE_S = 30.0


def _metadata(port: int) -> dict:
    from kcoord.cluster.cli import _request
    return _request("127.0.0.1", port, 3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                               "include_topic_authorized_operations": False})


def _offsets(meta: dict) -> dict[int, dict]:
    for t in meta["topics"]:
        if t["name"] == "__consumer_offsets":
            return {p["partition_index"]: p for p in t["partitions"]}
    return {}


class Node:
    def __init__(self, node_id: int, root: Path, etcd: str, prefix: str) -> None:
        self.node_id, self.port = node_id, free_port()
        self.cmd = [sys.executable, "-m", "kcoord.cli", "serve", "--listen",
                    f"127.0.0.1:{self.port}", "--data-dir", str(root / f"node-{node_id}"),
                    "--set", f"node.id={node_id}", "--set", f"etcd.endpoints={etcd}",
                    "--set", f"etcd.prefix={prefix}",
                    "--set", f"etcd.lease.ttl.ms={TTL_MS}", "--log-level", "WARNING"]
        self.log = open(root / f"node-{node_id}.log", "ab")
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT)
        wait_port(self.port, 60)


def _until(predicate, what: str) -> float:
    """Poll (bounded); the monotonic time predicate first held."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        try:
            if predicate():
                return time.monotonic()
        except OSError:
            pass
        time.sleep(POLL_S)
    raise TimeoutError(f"timed out waiting for {what}")


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def _cycle(cycle: int, nodes: dict[int, Node]):
    """Start the cluster, place the offsets topic, take one node down (kill
    on even cycles, graceful stop on odd ones; the controller every third
    cycle) and time how soon its leaderships have moved."""
    from kcoord.cluster.cli import _request
    for n in nodes.values():
        n.start()
    any_port = nodes[1].port
    _until(lambda: all(len(_metadata(n.port)["brokers"]) == 3 for n in nodes.values()),
           "3 nodes registered")
    _until(lambda: _request("127.0.0.1", any_port, 10, 3, {"key": "g", "key_type": 0})
           ["error_code"] == 0, "offsets topic placed")
    _until(lambda: len(_offsets(_metadata(any_port))) == 50 and all(
        p["leader_id"] > 0 for p in _offsets(_metadata(any_port)).values()), "all placed")
    controller = _metadata(any_port)["controller_id"]
    others = [i for i in nodes if i != controller]
    victim = controller if cycle % 3 == 0 else others[cycle % 2]
    survivor = next(n for i, n in nodes.items() if i != victim)
    _until(lambda: _metadata(survivor.port)["controller_id"] == controller, "survivor view")
    led = {i for i, p in _offsets(_metadata(survivor.port)).items() if p["leader_id"] == victim}
    gracefully = cycle % 2 == 1

    def moved() -> bool:
        parts = _offsets(_metadata(survivor.port))
        return all(parts[i]["leader_id"] not in (victim, -1) for i in led)
    proc = nodes[victim].proc
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM if gracefully else signal.SIGKILL)
    t_moved = _until(moved, "leaders moved")
    extra = 0.0
    if gracefully:
        proc.wait(DEADLINE_S)
        extra = (time.monotonic() - t0) * 1000
    elif victim == controller:
        t_c = _until(lambda: _metadata(survivor.port)["controller_id"] not in (victim, -1),
                     "new controller")
        extra = (t_c - t0) * 1000
    return ("graceful" if gracefully else "kill", (t_moved - t0) * 1000, extra, victim,
            victim == controller, len(led))


def run(args) -> None:
    from kcoord.cluster.etcd_server import EtcdServer
    cycles = 6 if args.quick else 30
    root = Path(tempfile.mkdtemp(prefix="kcoord-bench-cluster-"))
    etcd = EtcdServer(root / "etcd").start()
    kills, kill_controller, graceful, graceful_exit = [], [], [], []
    try:
        for cycle in range(cycles):
            # a fresh cluster each cycle (own data dirs and etcd prefix): until
            # replication lands a node that left an ISR never rejoins it, so a
            # reused cluster would run out of in-sync replicas after a few kills
            cycle_root = root / f"cycle-{cycle}"
            cycle_root.mkdir()
            nodes = {i: Node(i, cycle_root, etcd.endpoint, f"/bench-{cycle}") for i in (1, 2, 3)}
            try:
                result = _cycle(cycle, nodes)
            finally:
                for n in nodes.values():
                    if n.proc is not None and n.proc.poll() is None:
                        n.proc.kill()
                        n.proc.wait(10)
            kind, moved_ms, extra_ms, victim, was_controller, count = result
            if kind == "graceful":
                graceful.append(moved_ms)
                graceful_exit.append(extra_ms)
            else:
                kills.append(moved_ms)
                if was_controller:
                    kill_controller.append(extra_ms)
            print(f"cycle {cycle + 1}/{cycles}: node {victim}{' (controller)' * was_controller} "
                  f"{'stopped' if kind == 'graceful' else 'killed'}, {count} leaderships moved "
                  f"in {moved_ms:.0f} ms", flush=True)
    finally:
        etcd.stop()

    def row(label, values):
        return [label, len(values), f"{_pct(values, 0.5):.0f}", f"{_pct(values, 0.99):.0f}",
                f"{max(values):.0f}" if values else "-"]
    rows = [row("SIGKILL -> its leaderships moved", kills),
            row("SIGKILL of the controller -> new controller", kill_controller),
            row("SIGTERM (controlled shutdown) -> leaderships moved", graceful),
            row("SIGTERM -> process exited", graceful_exit)]
    sections = [
        f"3 nodes + 1 etcd member on 127.0.0.1, etcd.lease.ttl.ms={TTL_MS}, {cycles} cycles "
        "(kill and graceful stop alternate; the controller is the victim every third cycle). "
        "Metadata polled every 10 ms on a surviving node.", "",
        table(["event", "n", "p50 ms", "p99 ms", "max ms"], rows), "",
        "A killed node's leaderships move once etcd expires its lease (TTL "
        f"{TTL_MS} ms); a graceful stop moves them before the node leaves. Replication and "
        "the coordinator's load on the new leader are not in these figures."]
    write_results("cluster_failover", "Cluster control-plane failover", sections,
                  {"ttl_ms": TTL_MS, "cycles": cycles, "kill_ms": kills,
                   "kill_controller_ms": kill_controller, "graceful_moved_ms": graceful,
                   "graceful_exit_ms": graceful_exit})
