"""The replication simulation's long run (tests/cluster/replication_sim.py).

    python -m bench replication_sim                    # 5,000 schedules, 200 writes each
    python -m bench.replication_sim --schedules 2000 --writes 80 [--seconds 1800]

Runs seeded schedules of kcoord's Replica state machines under crashes,
power cuts, pauses, lost and reordered messages, link cuts, stalled watches,
controller moves and etcd pauses past every lease (each node then comes
back as the same process: `--etcd-pause-rate`, 0.06 as the suite's test), checking the invariants after every step (the CI
suite runs 1,000 short ones).  Then the same harness against deliberately
broken replicas, to show the invariants catch each kind of bug, and in how
many schedules.  Results: bench/results/replication_sim.md and .json.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import table, write_results  # noqa: E402
from kcoord.cluster.replica import Replica  # noqa: E402
from kcoord.log.leader_epoch import UNDEFINED_EPOCH  # noqa: E402
from tests.cluster.replication_sim import InvariantViolation, Simulation  # noqa: E402
from tests.cluster.sim_configs import config_for  # noqa: E402


class NoTruncation(Replica):
    """Skips KIP-101 truncation: fetches from its own log end at once."""
    def on_epoch_answer(self, request, error, epoch, end_offset, now):
        if request is self._inflight and error == 0:
            self._inflight = None
            self._stage = "fetching"
            return []
        return super().on_epoch_answer(request, error, epoch, end_offset, now)


class TruncatesToHighWatermark(Replica):
    """Pre-KIP-101: cuts to its own high watermark instead of asking for epochs."""
    def on_epoch_answer(self, request, error, epoch, end_offset, now):
        return super().on_epoch_answer(request, error, UNDEFINED_EPOCH,
                                       min(self.high_watermark, self.log.log_end_offset), now)


class IgnoresPendingIsr(Replica):
    """Counts only the committed ISR in the high watermark, not a pending expansion."""
    @property
    def maximal_isr(self):
        return frozenset(self.state.isr) if self.state is not None else frozenset()


class CountsUnsyncedEnd(Replica):
    """Counts its own unfsynced log end in the high watermark (Kafka's choice)."""
    def _maybe_increment_hwm(self, out):
        flushed = self.log.flushed
        self.log.flushed = self.log.log_end_offset
        try:
            super()._maybe_increment_hwm(out)
        finally:
            self.log.flushed = flushed


BROKEN = [NoTruncation, TruncatesToHighWatermark, IgnoresPendingIsr, CountsUnsyncedEnd]


# etcd pauses past every lease, per fault step (from their own RNG: the
# other faults of a seed keep their schedule); the suite's test uses 0.06
ETCD_PAUSE_RATE = 0.06


def run_many(seeds, writes: int, replica_class=Replica, deadline: float | None = None,
             etcd_pause_rate: float = 0.0):
    failures, totals, steps, done = [], {}, 0, 0
    for seed in seeds:
        if deadline is not None and time.monotonic() > deadline:
            break
        config = config_for(seed, produce_count=writes)
        config.etcd_pause_rate = etcd_pause_rate
        sim = Simulation(seed, config)
        sim.replica_class = replica_class
        done += 1
        try:
            sim.run()
        except InvariantViolation as exc:
            failures.append(str(exc).splitlines()[0])
            continue
        steps += sim.steps
        for k, v in sim.stats.items():
            totals[k] = totals.get(k, 0) + v
    return done, failures, totals, steps


def run(args) -> None:
    quick = getattr(args, "quick", False)
    schedules = getattr(args, "schedules", None) or (500 if quick else 5000)
    writes = getattr(args, "writes", None) or (60 if quick else 200)
    limit = getattr(args, "seconds", None) or 1800.0
    t0 = time.monotonic()
    pause_rate = getattr(args, "etcd_pause_rate", None)
    pause_rate = ETCD_PAUSE_RATE if pause_rate is None else pause_rate
    done, failures, totals, steps = run_many(range(100000, 100000 + schedules), writes,
                                             deadline=t0 + limit, etcd_pause_rate=pause_rate)
    elapsed = time.monotonic() - t0
    broken_rows, broken_raw = [], {}
    probe = getattr(args, "broken_schedules", None) or (100 if quick else 1000)
    for cls in BROKEN:
        n, fails, _, _ = run_many(range(probe), 40, cls)
        broken_rows.append([cls.__name__, cls.__doc__.strip(), f"{len(fails)} / {n}",
                            fails[0] if fails else "-"])
        broken_raw[cls.__name__] = {"schedules": n, "failing": len(fails),
                                    "first": fails[0] if fails else None}
    sections = [
        "## Correct replicas", "",
        table(["schedules", "writes each", "etcd pause rate", "steps checked", "seconds",
               "schedules/s", "invariant violations"],
              [[done, writes, pause_rate, steps, elapsed, done / elapsed if elapsed else 0.0,
                len(failures)]]),
        "", "Faults injected over all schedules:", "",
        table(sorted(totals), [[totals[k] for k in sorted(totals)]]),
        "", "First violations (goal: none):" if failures else "No violations (goal: none).", "",
        *(f"- {f}" for f in failures[:10]),
        "", "## Broken replicas (the invariants must catch each)", "",
        table(["replica", "bug", "schedules failing", "first violation"], broken_rows), "",
    ]
    raw = {"schedules": done, "writes": writes, "etcd_pause_rate": pause_rate, "steps": steps, "seconds": elapsed,
           "violations": failures, "faults": totals, "broken": broken_raw}
    print(write_results("replication_sim", "Replication simulation: seeded schedules",
                        sections, raw))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--schedules", type=int)
    p.add_argument("--writes", type=int, help="acks=-1 writes per schedule")
    p.add_argument("--broken-schedules", type=int)
    p.add_argument("--seconds", type=float, help="time limit for the correct replicas' run")
    p.add_argument("--etcd-pause-rate", type=float,
                   help=f"etcd pauses past every lease per fault step (default {ETCD_PAUSE_RATE})")
    p.add_argument("--quick", action="store_true")
    run(p.parse_args(argv))


if __name__ == "__main__":
    main()
