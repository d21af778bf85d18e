"""Instructions per replayed offset-commit record, before and after (issue
22's load-replay row counted with callgrind: the row runtime_compare cannot
resolve to 5%, as each replay is one short whole-process run whose CPU
moves with the machine's speed).

Each tree (KCOORD_BASE_TREE, and KCOORD_AFTER_TREE or this one) runs
`kcoord serve` in pure Python under `valgrind --tool=callgrind` (its load
workers followed) on a log of N and of 2N records with no snapshot; the
counts are dumped once 'all shards loaded' is logged and every worker has
exited.  Start-up costs the same at N and 2N, so (I(2N) - I(N)) / N is the
instructions per replayed record.

    python -m bench instr_replay [--quick]
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import loadavg, table, write_results
from .instr_compare import _TOTALS
from .load import PARTITIONS, generate
from .runtime_compare import AFTER_TREE, BASE_TREE, SNAPSHOT_FILE, _rev


def count(tree: Path, data: Path, work: Path, timeout: float = 1800) -> int:
    """The instructions of one start that replays `data` (server and workers),
    on a copy of it: the run ends in a SIGKILL, which leaves a data dir
    without its clean-shutdown marker, and the next start on it would also
    recover (CRC-check) every segment."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    shutil.copytree(data, work / "data")
    data = work / "data"
    for snapshot in data.rglob(SNAPSHOT_FILE):
        snapshot.unlink()
    cmd = ["valgrind", "--tool=callgrind", "--trace-children=yes",
           f"--callgrind-out-file={work}/cg.%p", f"--log-file={work}/vg.%p.log",
           sys.executable, "-m", "kcoord.cli", "serve", "--listen", "127.0.0.1:0",
           "--data-dir", str(data), "--set", f"offsets.topic.num.partitions={PARTITIONS}"]
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0",
           "KCOORD_PURE_PYTHON": "1"}
    proc = subprocess.Popen(cmd, cwd=tree, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + timeout
        for line in proc.stderr:
            if "all shards loaded" in line:
                break
            if time.monotonic() > deadline:
                raise RuntimeError("no 'all shards loaded' line in time")
        else:
            raise RuntimeError(f"kcoord serve exited ({proc.wait()}) before loading")
        _wait_workers(proc.pid, deadline)
        subprocess.run(["callgrind_control", "--dump", str(proc.pid)], check=True,
                       capture_output=True, timeout=600)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(60)
    return sum(int(m.group(1)) for f in work.glob("cg.*")
               for m in [_TOTALS.search(f.read_text(errors="replace"))] if m)


def _wait_workers(pid: int, deadline: float) -> None:
    """The load's worker processes exit once every shard is loaded."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    while children.exists() and children.read_text().split() and time.monotonic() < deadline:
        time.sleep(0.2)


def run(args) -> dict:
    base, after = BASE_TREE, AFTER_TREE
    if shutil.which("valgrind") is None:
        raise SystemExit("instr_replay: valgrind is not installed")
    n = 100_000 if args.quick else 400_000
    tmp = Path(tempfile.mkdtemp(prefix="kcoord-instr-replay-"))
    out: dict = {"records": n, "load_at_start": loadavg(), "trees": {}}
    try:
        for size in (n, 2 * n):
            generate(tmp / f"data-{size}", size, 200)
        for name, tree in (("before", base), ("after", after)):
            totals = {size: count(tree, tmp / f"data-{size}", tmp / f"cg-{name}-{size}")
                      for size in (n, 2 * n)}
            out["trees"][name] = {"tree": str(tree), "rev": _rev(tree),
                                  "instructions": totals,
                                  "per_record": (totals[2 * n] - totals[n]) / n}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    b, a = out["trees"]["before"]["per_record"], out["trees"]["after"]["per_record"]
    out["change_pct"] = (a - b) / b * 100
    out["load_at_end"] = loadavg()
    md = [f"before = {base} ({out['trees']['before']['rev']}), after = {after} "
          f"({out['trees']['after']['rev']}); logs of {n:,} and {2 * n:,} offset-commit "
          "records (200 commits per key, no snapshot), pure Python under callgrind with the "
          "load workers followed; instructions per record = (I(2N) - I(N)) / N.",
          f"Load average at start {out['load_at_start']}, at end {out['load_at_end']} (the "
          "counts do not depend on it).", "",
          table(["tree", "instructions at N", "at 2N", "per replayed record"],
                [[w, f"{t['instructions'][n]:,}", f"{t['instructions'][2 * n]:,}",
                  f"{t['per_record']:,.0f}"] for w, t in out["trees"].items()]), "",
          f"Change per replayed record: {out['change_pct']:+.2f}%."]
    write_results("instr_replay", "Load replay: instructions per record, before and after", md,
                  out)
    print("\n".join(md), flush=True)
    return out

