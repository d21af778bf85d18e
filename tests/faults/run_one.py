"""One harness run in a process of its own (it moves into the clients'
network namespace):

    python -m tests.faults.run_one --seed N --minutes M --mix MIX [--quick] --out FILE

Writes the run's summary as JSON to FILE; exit 0 when the run completed
(anomalies or not), 2 when namespaces cannot be made here (the reason on
stderr), 1 on a harness failure."""
from __future__ import annotations

import argparse
import faulthandler
import json
import signal
import sys
from pathlib import Path

from .harness import TTL_MS, Unavailable, run
from .nemesis import MIXES


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.faults.run_one")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--minutes", type=float, default=5.0)
    p.add_argument("--mix", choices=sorted(MIXES), default="all")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--workloads", default="register,queue,txn")
    p.add_argument("--root", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--ttl-ms", type=int, default=TTL_MS)
    args = p.parse_args(argv)
    # a SIGTERM unwinds (the lab is torn down and the nodes killed on the way out)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    faulthandler.register(signal.SIGUSR1)  # kill -USR1 <pid>: where every thread is
    try:
        result = run(args.seed, args.minutes, args.mix, args.quick, args.root,
                     tuple(args.workloads.split(",")),
                     log=lambda line: print(line, flush=True), ttl_ms=args.ttl_ms)
    except Unavailable as exc:
        print(f"unavailable: {exc}", file=sys.stderr)
        return 2
    args.out.write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
