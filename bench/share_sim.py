"""The share-partition simulation's long run (tests/share/share_sim.py).

    python -m bench share_sim              # 20,000 schedules, 150 steps each
    python -m bench share_sim --quick      # 2,000

Runs seeded schedules of one share partition (several members, random
ACCEPT/RELEASE/REJECT/GAP, lock expiries, members leaving and vanishing,
late and failed writes, persister outages, crashes and reloads, then a
drain and a restart) and checks the invariants after every step (the CI
suite runs 500).  Then the same schedules against deliberately broken share
partitions, to show the invariants catch each kind of bug, and in how many
schedules.  Results: bench/results/share_sim.md and .json.
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
from tests.share.share_sim import BROKEN, Violation, run_seed  # noqa: E402


def run_many(seeds, steps: int, cls=None, deadline: float | None = None):
    done, failures = 0, []
    for seed in seeds:
        if deadline is not None and time.monotonic() > deadline:
            break
        try:
            run_seed(seed, cls, steps) if cls is not None else run_seed(seed, steps=steps)
        except Violation as exc:
            failures.append(str(exc))
        done += 1
    return done, failures


def run(args) -> None:
    quick = getattr(args, "quick", False)
    schedules = getattr(args, "schedules", None) or (2000 if quick else 20000)
    steps = getattr(args, "steps", None) or 150
    limit = getattr(args, "seconds", None) or 1800.0
    t0 = time.monotonic()
    done, failures = run_many(range(1_000_000, 1_000_000 + schedules), steps,
                              deadline=t0 + limit)
    elapsed = time.monotonic() - t0
    probe = getattr(args, "broken_schedules", None) or (100 if quick else 300)
    broken_rows, broken_raw = [], {}
    for name, cls in sorted(BROKEN.items()):
        n, fails = run_many(range(probe), steps, cls)
        broken_rows.append([name, cls.__doc__.strip(), f"{len(fails)} / {n}",
                            fails[0] if fails else "-"])
        broken_raw[name] = {"schedules": n, "failing": len(fails),
                            "first": fails[0] if fails else None}
    sections = [
        "## Correct share partition", "",
        table(["schedules", "steps each", "seconds", "schedules/s", "invariant violations"],
              [[done, steps, elapsed, done / elapsed if elapsed else 0.0, len(failures)]]),
        "", "First violations (goal: none):" if failures else "No violations (goal: none).", "",
        *(f"- {f}" for f in failures[:10]),
        "", "## Broken share partitions (the invariants must catch each)", "",
        table(["variant", "bug", "schedules failing", "first violation"], broken_rows), "",
    ]
    raw = {"schedules": done, "steps": steps, "seconds": elapsed, "violations": failures,
           "broken": broken_raw}
    print(write_results("share_sim", "Share-partition simulation: seeded schedules",
                        sections, raw))


if __name__ == "__main__":
    run(argparse.Namespace(quick="--quick" in sys.argv))
