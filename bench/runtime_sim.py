"""The coordinator runtime simulation's long run (tests/server/runtime_sim.py).

    python -m bench runtime_sim                     # 2,000 schedules, 150 steps each
    python -m bench.runtime_sim --schedules 5000 --steps 200 [--seconds 1800]

Runs seeded schedules of the real CoordinatorRuntime (virtual clock,
scripted durability) under classic, KIP-848 and offsets traffic with shard
unloads and loads, failed and late writes, and checks the invariants after
every step (the CI suite runs 200).  Then the same harness against
deliberately broken shard runtimes, to show the invariants catch each kind
of bug, and in how many schedules.  Results: bench/results/runtime_sim.md
and .json.
"""
from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import table, write_results  # noqa: E402
from kcoord.server import coordinator_runtime  # noqa: E402
from kcoord.server.coordinator_runtime import ACTIVE, ShardRuntime  # noqa: E402
from tests.server.runtime_sim import run_seed  # noqa: E402


class ReadsAhead(ShardRuntime):
    """Answers a read at once, ahead of the writes in flight (shows state not yet durable)."""
    def read(self, op, error):
        if self.state is not ACTIVE:
            return error(self.state_error())
        return op(self.core, self.clock.ms())


class ForgetsParked(ShardRuntime):
    """Unload drops its parked JoinGroup/SyncGroup requests without answering them."""
    def _drop(self, code):
        self.parked = {}
        super()._drop(code)


class ForgetsTimerHandles(ShardRuntime):
    """Re-arming forgets the timer handles it holds (they stay on the loop)."""
    def arm_timers(self, timers):
        self._timers = {}
        super().arm_timers(timers)


class KeepsTimers(ShardRuntime):
    """Unload leaves the shard's timers armed."""
    def cancel_all_timers(self):
        pass


class ReplaysNothing(ShardRuntime):
    """Loading does not replay the log (acknowledged commits vanish)."""
    async def replay_log(self):
        self.replayed_end = self.plog.log_end_offset


BROKEN = [ReadsAhead, ForgetsParked, ForgetsTimerHandles, KeepsTimers, ReplaysNothing]


def run_many(seeds, steps: int, shard_class=ShardRuntime, deadline: float | None = None):
    failures, totals, done = [], {}, 0
    base = Path(tempfile.mkdtemp(prefix="kcoord-runtime-sim-"))
    try:
        for seed in seeds:
            if deadline is not None and time.monotonic() > deadline:
                break
            done += 1
            try:
                sim = run_seed(seed, base / f"s{seed}", steps, shard_class)
            except Exception as exc:  # an invariant, or the broken runtime raising
                failures.append(str(exc).splitlines()[0][:300] if str(exc) else repr(exc))
                continue
            finally:
                shutil.rmtree(base / f"s{seed}", ignore_errors=True)
            for k, v in sim.counts.items():
                totals[k] = totals.get(k, 0) + v
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return done, failures, totals


def run(args) -> None:
    logging.disable(logging.CRITICAL)  # the runtime logs every simulated failure
    quick = getattr(args, "quick", False)
    schedules = getattr(args, "schedules", None) or (300 if quick else 2000)
    steps = getattr(args, "steps", None) or 150
    limit = getattr(args, "seconds", None) or 1800.0
    t0 = time.monotonic()
    done, failures, totals = run_many(range(100000, 100000 + schedules), steps,
                                      deadline=t0 + limit)
    elapsed = time.monotonic() - t0
    broken_rows, broken_raw = [], {}
    probe = getattr(args, "broken_schedules", None) or (100 if quick else 300)
    for cls in BROKEN:
        n, fails, _ = run_many(range(probe), 120, cls)
        broken_rows.append([cls.__name__, cls.__doc__.strip(), f"{len(fails)} / {n}",
                            fails[0] if fails else "-"])
        broken_raw[cls.__name__] = {"schedules": n, "failing": len(fails),
                                    "first": fails[0] if fails else None}
    steps_rows = sorted(k for k in totals if k.startswith("step:"))
    answers = sorted(k for k in totals if ":" in k and not k.startswith(("step:", "unload-")))
    unload = sorted(k for k in totals if k.startswith("unload-answers:"))
    sections = [
        "## Correct runtime", "",
        table(["schedules", "steps each", "seconds", "schedules/s", "invariant violations"],
              [[done, steps, elapsed, done / elapsed if elapsed else 0.0, len(failures)]]),
        "", "Steps taken over all schedules:", "",
        table([k[5:] for k in steps_rows], [[totals[k] for k in steps_rows]]),
        "", "Answers (API: error):", "",
        table(["answer", "count"], [[k, totals[k]] for k in answers]),
        "", "Requests waiting when their shard was unloaded (each then answered NOT_COORDINATOR):",
        "", table([k.split(":", 1)[1] for k in unload], [[totals[k] for k in unload]]),
        "", "First violations (goal: none):" if failures else "No violations (goal: none).", "",
        *(f"- {f}" for f in failures[:10]),
        "", "## Broken shard runtimes (the invariants must catch each)", "",
        table(["runtime", "bug", "schedules failing", "first violation"], broken_rows), "",
    ]
    raw = {"schedules": done, "steps": steps, "seconds": elapsed, "violations": failures,
           "counts": totals, "broken": broken_raw}
    print(write_results("runtime_sim", "Coordinator runtime simulation: seeded schedules",
                        sections, raw))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--schedules", type=int)
    p.add_argument("--steps", type=int, help="steps per schedule")
    p.add_argument("--broken-schedules", type=int)
    p.add_argument("--seconds", type=float, help="time limit for the correct runtime's run")
    p.add_argument("--quick", action="store_true")
    run(p.parse_args(argv))


if __name__ == "__main__":
    main()
