"""The long run of tests/server/test_crash_safety.py: SIGKILL `kcoord serve`
while wire-level committers commit, many kills per seed, several seeds.
The suite runs a bounded 8 kills of one seed; this is where the kill points
add up.  Each run is the test itself (every round's assertions), with
KCOORD_CRASH_ROUNDS and KCOORD_CRASH_SEED set.

    python -m bench crash_safety [--quick] [--cycles KILLS] [--runs SEEDS] [--seed FIRST]
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time

TEST = "tests/server/test_crash_safety.py"
SUMMARY = re.compile(r"crash safety: (\d+) kills, (\d+) acked partition commits, (\d+) compactions")


def _one(seed: int, kills: int) -> dict:
    from .common import ROOT
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KCOORD_CRASH_SEED": str(seed),
           "KCOORD_CRASH_ROUNDS": str(kills)}
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                          "-o", "timeout=0", TEST], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=kills * 60 + 300)
    took = time.perf_counter() - t0
    m = SUMMARY.search(out.stdout)
    return {"seed": seed, "kills": kills, "passed": out.returncode == 0, "seconds": took,
            "acked": int(m.group(2)) if m else None,
            "compactions": int(m.group(3)) if m else None,
            "tail": "" if out.returncode == 0 else out.stdout[-3000:]}


def run(args) -> dict:
    from .common import table, write_results
    kills = args.cycles or (5 if args.quick else 40)
    seeds = args.runs or (1 if args.quick else 3)
    first = args.seed if args.seed is not None else 20240611
    runs = [_one(first + i, kills) for i in range(seeds)]
    raw = {"runs": runs}
    rows = [[str(r["seed"]), r["kills"], "yes" if r["passed"] else "NO", r["acked"],
             r["compactions"], r["seconds"]] for r in runs]
    sections = [
        f"{seeds} seed(s) x {kills} SIGKILLs of `kcoord serve` under 4 committing connections "
        "(8 requests in flight each); after every restart each key's committed offset is the "
        "last acknowledged one or one sent after it, every shard loads, the log is clean:", "",
        table(["seed", "kills", "passed", "acked partition commits", "compactions", "wall s"],
              rows), "",
        "The suite runs the same test with 8 kills of seed 20240611.",
    ]
    for r in runs:
        if not r["passed"]:
            sections += ["", f"seed {r['seed']} failed:", "```", r["tail"], "```"]
    write_results("crash_safety", "Crash safety: SIGKILL while committing (long run)",
                  sections, raw)
    return raw
