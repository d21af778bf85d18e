"""Run kcoord's benchmarks side by side with the peer servers.

    python -m bench                      # everything, default sizes
    python -m bench codec apiversions    # some of them
    python -m bench --quick              # every benchmark at small sizes
    python -m bench offset_commit --seconds 5 --connections 20
    python -m bench load --records 1000000

Each benchmark writes bench/results/<name>.md and <name>.json.  Every load
loop is bounded by a request count and a time limit; servers listen on
127.0.0.1 only.
"""
from __future__ import annotations

import argparse
import importlib
import sys
import time
import traceback
from pathlib import Path

from .common import ROOT, begin  # noqa: F401  (ROOT: puts the repo on sys.path)

ALL = ["codec", "apiversions", "produce_fetch", "offset_commit", "load"]


def extra_benchmarks() -> list[str]:
    """Other bench/ modules with a run(args): runnable by name, not part of 'all'."""
    here = Path(__file__).parent
    return sorted(p.stem for p in here.glob("*.py")
                  if p.stem not in ALL and not p.stem.startswith("_")
                  and "\ndef run(args" in p.read_text())


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    extra = extra_benchmarks()
    p.add_argument("benchmarks", nargs="*", metavar="BENCHMARK",
                   help="which benchmarks to run: " + ", ".join(ALL) + " (default: these five)"
                   + (f"; also by name: {', '.join(extra)}" if extra else ""))
    p.add_argument("--quick", action="store_true", help="small sizes everywhere (a smoke run)")
    p.add_argument("--peers", default="kcoord,tansu,mock",
                   help="servers to measure, comma-separated (kcoord,tansu,mock)")
    g = p.add_argument_group("apiversions / offset_commit")
    g.add_argument("--requests", type=int, help="requests per server (apiversions default 200000)")
    g.add_argument("--connections", type=int, help="connections (apiversions 4, offset_commit 100)")
    g.add_argument("--depth", type=int, help="requests in flight per connection")
    g.add_argument("--seconds", type=float, help="time limit per measured run")
    g = p.add_argument_group("instructions")
    g.add_argument("--rows", help="its rows, comma-separated (default: all)")
    g = p.add_argument_group("produce_fetch")
    g.add_argument("--mb", type=int, help="MiB of 1 KiB records produced per run (default 256)")
    g.add_argument("--rounds", type=int,
                   help="rounds in which the servers take turns (default 5, 1 with --quick)")
    g = p.add_argument_group("load")
    g.add_argument("--records", type=str,
                   help="comma-separated record counts to replay (default 1000000,10000000)")
    g.add_argument("--keep-data", action="store_true",
                   help="keep the generated load data dirs in /tmp for reuse (faults: each "
                        "run's logs and history)")
    g = p.add_argument_group("cluster_chaos")
    g.add_argument("--cycles", type=int, help="kill/stop cycles (default 100, 5 with --quick)")
    g = p.add_argument_group("faults")
    g.add_argument("--seed", type=int, help="the first run's seed (default: from the clock)")
    g.add_argument("--minutes", type=float, help="minutes of faults per run (default 5)")
    g.add_argument("--mix", choices=["partitions", "process", "clock", "etcd", "all"],
                   help="which faults (default all)")
    g.add_argument("--runs", type=int, help="runs, one after the other (seeds N, N+1, ...)")
    g.add_argument("--ttl-ms", type=int, help="the nodes' etcd.lease.ttl.ms (default 2000)")
    args = p.parse_args(argv)
    unknown = [b for b in args.benchmarks if b not in ALL + extra]
    if unknown:
        p.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from "
                f"{', '.join(ALL + extra)}")
    args.peers = [x.strip() for x in args.peers.split(",") if x.strip()]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    names = [n for n in (args.benchmarks or ALL) if n]
    failed = []
    from .summary import changed_since, figures, json_stamps, write
    before = json_stamps()  # what changes is what the README rows are rewritten for
    try:
        shown = figures()
    except Exception:  # a JSON the summary cannot read: every row of what runs is rewritten
        traceback.print_exc()
        shown = None
    for name in names:
        t0 = time.monotonic()
        print(f"==== {name} ====", flush=True)
        try:
            begin()
            importlib.import_module(f"bench.{name}").run(args)
        except Exception:
            traceback.print_exc()
            failed.append(name)
        print(f"==== {name}: {time.monotonic() - t0:.0f}s ====", flush=True)
    try:
        write(changed_since(before), shown)
    except Exception:
        traceback.print_exc()
    if failed:
        print("failed:", ", ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
