"""The nemesis: faults on a FaultCluster in a Lab, chosen by a seeded
random generator (printed, so a run replays) and every one healed.

A fault is a kind and a target resolved when it starts (the node that then
leads the register's first group, the transaction coordinator, ...).  The
combined nemesis starts a random subset of one or two faults, holds them
for a few seconds, heals them all and leaves a recovery window, as
Jepsen's combined nemesis does."""
from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from .lab import Cut, partition
from .wire import find_coordinator

NODES = ("n1", "n2", "n3")
# the partition kinds the issue names, each injected once by a quick run
PARTITIONS = ["isolate-node", "majority-minority", "minority-keeps-etcd", "node-etcd",
              "leader-followers", "client-coordinator", "one-way-leader-out",
              "one-way-to-etcd"]
NETWORK = ["loss", "slow"]
PROCESS = ["pause-group-leader", "pause-txn-coordinator", "kill-power-cut"]
CLOCK = ["clock-jump"]
ETCD = ["etcd-kill", "etcd-pause"]
MIXES = {
    "partitions": PARTITIONS + NETWORK,
    "process": PROCESS,
    "clock": CLOCK + ["pause-group-leader"],
    "etcd": ETCD + ["node-etcd"],
    "all": PARTITIONS + NETWORK + PROCESS + CLOCK + ETCD,
}
# faults that take a node down or freeze it: at most one at a time
EXCLUSIVE = set(PROCESS) | set(ETCD)


@dataclass
class Fault:
    kind: str
    detail: dict = field(default_factory=dict)
    start: float = 0.0
    end: float | None = None

    def to_json(self) -> dict:
        return {"kind": self.kind, "detail": self.detail, "start": round(self.start, 3),
                "end": None if self.end is None else round(self.end, 3)}


class Nemesis:
    def __init__(self, lab, cluster, seed: int, group: str, txn_id: str | None,
                 log=print) -> None:
        self.lab, self.cluster = lab, cluster
        self.rng = random.Random(seed)
        self.group, self.txn_id = group, txn_id
        self.log = log
        self.active: list[Fault] = []
        self.done: list[Fault] = []
        self._cuts: set[Cut] = set()
        self._down: set[int] = set()

    # ------------------------------------------------------------ targets
    def _addrs(self) -> dict:
        return {i: self.cluster.addr(i) for i in self.cluster.nodes}

    def _coordinator(self, key: str, key_type: int) -> int:
        alive = [i for i in self.cluster.nodes if i not in self._down]
        for node_id in self.rng.sample(alive, len(alive)):
            try:
                code, node = find_coordinator(self.cluster.addr(node_id), key, key_type)
            except (OSError, ConnectionError):
                continue
            if code == 0 and node in self.cluster.nodes:
                return node
        return self.rng.choice(alive)

    def _node(self) -> int:
        return self.rng.choice([i for i in self.cluster.nodes if i not in self._down])

    # ------------------------------------------------------------ start
    def start(self, kind: str) -> Fault:
        f = Fault(kind, start=time.monotonic())
        d = f.detail
        cuts: set[Cut] = set()
        if kind == "isolate-node":
            n = d["node"] = self._node()
            cuts = partition([f"n{n}"], [h for h in self.lab.hosts if h != f"n{n}"])
        elif kind == "majority-minority":
            n = d["node"] = self._node()
            cuts = partition([f"n{n}"], [f"n{i}" for i in self.cluster.nodes if i != n])
            cuts |= partition([f"n{n}"], ["etcd"])
        elif kind == "minority-keeps-etcd":
            # the lone node keeps etcd; the two others lose it and it
            n = d["node"] = self._node()
            rest = [f"n{i}" for i in self.cluster.nodes if i != n]
            cuts = partition([f"n{n}", "etcd"], rest)
        elif kind == "node-etcd":
            n = d["node"] = self._node()
            cuts = partition([f"n{n}"], ["etcd"])
        elif kind == "leader-followers":
            n = d["node"] = self._coordinator(self.group, 0)
            cuts = partition([f"n{n}"], [f"n{i}" for i in self.cluster.nodes if i != n])
        elif kind == "client-coordinator":
            n = d["node"] = self._coordinator(self.group, 0)
            cuts = partition(["cli"], [f"n{n}"])
        elif kind == "one-way-leader-out":
            # the leader hears its followers (their fetches arrive) but cannot answer
            n = d["node"] = self._coordinator(self.group, 0)
            cuts = {Cut(f"n{n}", f"n{i}") for i in self.cluster.nodes if i != n}
        elif kind == "one-way-to-etcd":
            n = d["node"] = self._node()
            cuts = {Cut(f"n{n}", "etcd")}
        elif kind == "loss":
            n = d["node"] = self._node()
            d["percent"] = self.rng.choice([10, 25, 40])
            self.lab.set_loss(f"n{n}", d["percent"])
        elif kind == "slow":
            n = d["node"] = self._node()
            self.lab.set_slow(f"n{n}", True)
        elif kind == "pause-group-leader":
            n = d["node"] = self._coordinator(self.group, 0)
            self.cluster.nodes[n].pause()
        elif kind == "pause-txn-coordinator":
            n = d["node"] = self._coordinator(self.txn_id or self.group, 1 if self.txn_id else 0)
            self.cluster.nodes[n].pause()
        elif kind == "kill-power-cut":
            n = d["node"] = self._coordinator(self.group, 0)
            d["bytes_cut"] = self.cluster.power_cut(n)
            self._down.add(n)
        elif kind == "clock-jump":
            n = d["node"] = self._node()
            d["offset_s"] = self.rng.choice([-30, -5, 5, 30, 120])
            self.cluster.set_clock(n, d["offset_s"])
        elif kind == "etcd-kill":
            self.cluster.etcd.kill()
        elif kind == "etcd-pause":
            self.cluster.etcd.pause()
        else:
            raise ValueError(kind)
        if cuts:
            d["cuts"] = sorted(f"{c.src}->{c.dst}" for c in cuts)
            f.detail["_cuts"] = cuts
            self._cuts |= cuts
            self.lab.set_cuts(self._cuts)
        self.active.append(f)
        self.log(f"nemesis: start {kind} {({k: v for k, v in d.items() if k != '_cuts'})}")
        return f

    # ------------------------------------------------------------ heal
    def heal_all(self) -> None:
        for f in list(self.active):
            self._heal(f)
        self.active.clear()

    def _heal(self, f: Fault) -> None:
        d = f.detail
        cuts = d.pop("_cuts", None)
        if cuts:
            self._cuts -= cuts
            self.lab.set_cuts(self._cuts)
        if f.kind == "loss":
            self.lab.set_loss(f"n{d['node']}", 0)
        elif f.kind == "slow":
            self.lab.set_slow(f"n{d['node']}", False)
        elif f.kind in ("pause-group-leader", "pause-txn-coordinator"):
            self.cluster.nodes[d["node"]].resume()
        elif f.kind == "kill-power-cut":
            self.cluster.restart(d["node"])
            self._down.discard(d["node"])
        elif f.kind == "clock-jump":
            self.cluster.set_clock(d["node"], 0)
        elif f.kind == "etcd-kill":
            # healed once etcd serves again: the time after that is kcoord's
            started = time.monotonic()
            self.cluster.start_etcd()
            f.detail["etcd_ready_s"] = round(time.monotonic() - started, 1)
        elif f.kind == "etcd-pause":
            self.cluster.etcd.resume()
        f.end = time.monotonic()
        self.done.append(f)
        self.log(f"nemesis: healed {f.kind} after {f.end - f.start:.1f} s")

    def heal_everything(self) -> None:
        """The end of a run: whatever is active healed, and the lab clean."""
        self.heal_all()
        self.lab.heal()
        for node_id, node in self.cluster.nodes.items():
            if node.paused:
                node.resume()
            if not node.alive():
                node.start()
            self.cluster.set_clock(node_id, 0)
        if self.cluster.etcd.paused:
            self.cluster.etcd.resume()
        if not self.cluster.etcd.alive():
            self.cluster.etcd.start()

    # ------------------------------------------------------------ schedules
    def pick(self, kinds: list[str]) -> list[str]:
        """One or two kinds, never two exclusive ones."""
        first = self.rng.choice(kinds)
        chosen = [first]
        if self.rng.random() < 0.5:
            second = self.rng.choice(kinds)
            if second != first and not ({first, second} <= EXCLUSIVE):
                chosen.append(second)
        return chosen

    def run(self, kinds: list[str], until: float, stop, fault_s=(3.0, 7.0),
            recover_s=(3.0, 6.0), sequence: list[str] | None = None) -> None:
        """Faults until `until` (monotonic) or `stop` is set; with `sequence`,
        each kind of it in turn (one at a time) instead of random subsets."""
        queue = list(sequence or [])
        while time.monotonic() < until and not stop.is_set():
            if sequence is not None:
                if not queue:
                    break
                batch = [queue.pop(0)]
            else:
                batch = self.pick(kinds)
            for kind in batch:
                try:
                    self.start(kind)
                except Exception as exc:  # a target that cannot be reached: skip it
                    self.log(f"nemesis: {kind} not started: {exc}")
            stop.wait(self.rng.uniform(*fault_s))
            self.heal_all()
            stop.wait(self.rng.uniform(*recover_s))
