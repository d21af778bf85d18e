"""Lease churn of a run: the nodes' etcd lease expiries, and those of nodes
that no fault touched (nothing cut, slowed, paused or killed them, nor etcd).
Each such expiry fences a healthy node (its leaderships move, it leaves the
ISRs): it is the machine's or etcd's stall, not the fault model's."""
from __future__ import annotations

from datetime import datetime
from pathlib import Path

EXPIRED = "expired: registering again"
# after a fault ends a lease may still run out: up to a TTL later, plus the refresh period
GRACE_S = 4.0
_ONE_NODE = {"isolate-node", "majority-minority", "node-etcd", "one-way-to-etcd", "loss",
             "slow", "pause-group-leader", "pause-txn-coordinator", "kill-power-cut"}


def touched(fault: dict, nodes) -> set[int]:
    """The nodes whose lease a fault may take (the fault's JSON form)."""
    kind, node = fault["kind"], fault["detail"].get("node")
    if kind in _ONE_NODE:
        return {node}
    if kind == "minority-keeps-etcd":  # the two others lose etcd
        return set(nodes) - {node}
    if kind in ("etcd-kill", "etcd-pause"):
        return set(nodes)
    return set()


def true_time(stamped: float, node: int, jumps) -> float:
    """A node's log stamp as true wall time: during a clock jump of that node
    its log is stamped `offset_s` off (up to 120 s: it fell outside every
    fault window and was counted as an untouched node's expiry)."""
    for start, end, who, offset in jumps:
        if who == node and start <= stamped - offset <= end:
            return stamped - offset
    return stamped


def lease_churn(root: Path, nodes, faults: list[dict], wall_of, healed: float) -> dict:
    """`faults` in JSON form (monotonic start/end), `wall_of` maps a monotonic
    time to wall-clock time (the nodes' logs), `healed` the last heal (monotonic)."""
    windows = [(wall_of(f["start"]) - 1.0, wall_of(f["end"] if f["end"] is not None else healed)
                + GRACE_S, touched(f, nodes)) for f in faults]
    jumps = [(wall_of(f["start"]), wall_of(f["end"] if f["end"] is not None else healed),
              f["detail"]["node"], f["detail"]["offset_s"])
             for f in faults if f["kind"] == "clock-jump"]
    total, untouched, after_heal = 0, [], 0
    for node in nodes:
        try:
            lines = (root / f"node-{node}.log").read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            if EXPIRED not in line:
                continue
            try:
                at = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            except ValueError:
                continue
            at = true_time(at, node, jumps)
            total += 1
            if any(start <= at <= end and node in who for start, end, who in windows):
                continue
            untouched.append(round(at - wall_of(healed), 1))
            after_heal += at > wall_of(healed)
    return {"lease_expiries": total, "untouched_node_expiries": len(untouched),
            "untouched_after_heal": after_heal,
            # seconds from the last heal (negative: during the faults)
            "untouched_at_s": sorted(untouched)}
