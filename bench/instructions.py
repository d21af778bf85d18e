"""Instructions per request of the kcoord server, compiled and pure: a
figure the load of a shared machine does not move.  The server runs under
valgrind's callgrind; the same load generator as the CPU rows sends a
fixed number of requests N, then (another server) 2N; the difference of
the two instruction totals divided by N is one request's instructions,
start-up, set-up, warm-up and shutdown cancelling out.

    python -m bench instructions [--quick] [--requests N] [--rows offset_commit,...]
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from .common import RESULTS, KcoordServer, loadavg, run_loadgen, table, timed, write_results
from .compiled import _Mode

ROWS = ("offset_commit", "classic_heartbeat", "consumer_heartbeat")
_TOTALS = re.compile(r"^(?:totals|summary): (\d+)", re.M)


def _spec(row: str, peer: KcoordServer, requests: int) -> tuple[dict, str]:
    """The load generator's spec and module for a row, at `requests`."""
    base = {"port": peer.port, "pid": peer.pid, "requests": requests, "seconds": 3600}
    if row == "offset_commit":
        from .offset_commit import PARTITIONS, TOPIC
        return {**base, "kind": "offset_commit", "topic": TOPIC, "partitions": PARTITIONS,
                "version": 8, "connections": 4, "depth": 8, "warmup": 200}, "bench.loadgen"
    if row == "classic_heartbeat":
        return {**base, "groups": 2, "per_group": 5, "connections": 2, "warmup": 200,
                "session_timeout_ms": 600_000, "setup_seconds": 900,
                "group_prefix": "bench-ir-hb"}, "bench.classic_heartbeat"
    return {**base, "groups": 2, "per_group": 5, "connections": 2, "rounds": 1,
            "warmup": 200, "setup_seconds": 900,
            "group_prefix": "bench-ir-cghb"}, "bench.consumer_heartbeat"


def _instructions(row: str, requests: int, keep: Path | None = None) -> int:
    """The server's instruction total for one run of `requests` requests
    (its callgrind output copied to `keep` when given)."""
    tmp = Path(tempfile.mkdtemp(prefix="kcoord-ir-"))
    out = tmp / "callgrind.out"
    peer = KcoordServer({"group.initial.rebalance.delay.ms": "0"}, tmp / "data",
                        launcher=["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                                  f"--log-file={tmp / 'valgrind.log'}"])
    try:
        peer.start()
        if row == "offset_commit":
            from .offset_commit import create_topic
            create_topic(peer.bootstrap)
        elif row == "consumer_heartbeat":
            from .consumer_heartbeat import create_topic as create
            create(peer.bootstrap)
        spec, module = _spec(row, peer, requests)
        r = run_loadgen(spec, timeout=3600, module=module)
        if "error" in r:
            raise RuntimeError(r["error"])
        if r.get("requests", requests) != requests:
            raise RuntimeError(f"{r.get('requests')} of {requests} requests answered")
        peer.proc.stop(timeout=600)  # callgrind writes its totals at exit
        found = _TOTALS.findall(out.read_text())
        if not found:
            raise RuntimeError("no callgrind totals")
        if keep is not None:
            shutil.copyfile(out, keep)
        return int(found[-1])
    finally:
        peer.proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def measure(row: str, mode: str, n: int) -> dict:
    os.environ["PYTHONHASHSEED"] = "0"  # the two runs of a pair hash alike
    with _Mode(mode), timed(f"instructions {row} {mode} N={n} and 2N"):
        try:
            one, two = _instructions(row, n), _instructions(row, 2 * n)
        except Exception as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}
    result = {"n": n, "ir_n": one, "ir_2n": two, "ir_per_request": (two - one) / n}
    print(f"[bench]   {row} {mode}: {result}", flush=True)
    return result


def run(args) -> dict:
    if not shutil.which("valgrind"):
        return {"error": "valgrind is not installed"}
    rows = [r for r in (args.rows or ",".join(ROWS)).split(",") if r in ROWS]
    modes = ("compiled", "pure")
    n = args.requests or (500 if args.quick else 2000)
    load = [loadavg()]
    results: dict = {row: {mode: measure(row, mode, n) for mode in modes} for row in rows}
    load.append(loadavg())
    for row in results.values():
        row["n"], row["load"] = n, load
    # the rows not run this time stay as their last run left them
    try:
        results = {**json.loads((RESULTS / "instructions.json").read_text())["results"],
                   **results}
    except (FileNotFoundError, ValueError, KeyError):
        pass
    lines = ["`python -m bench instructions [--rows ...]`: N and the load of each row's run "
             "are in the table (instruction counts do not depend on the load).", "",
             "(I(2N) - I(N)) / N of `kcoord serve` under valgrind --tool=callgrind; "
             "the same load generators as the CPU rows, small layouts "
             "(offset_commit: 4 connections x 8 deep, 10 partitions; heartbeats: 2 groups "
             "x 5 members).", ""]
    body = []
    for row, by_mode in results.items():
        cells = [f"{row} (N = {by_mode.get('n', n)}, load {by_mode.get('load', '?')})"]
        for mode in modes:
            r = by_mode[mode]
            cells.append(f"{r['ir_per_request']:,.0f}" if "error" not in r else r["error"][:60])
        c, p = by_mode.get("compiled", {}), by_mode.get("pure", {})
        ratio = (c["ir_per_request"] / p["ir_per_request"]
                 if "ir_per_request" in c and "ir_per_request" in p else None)
        cells.append(f"{ratio:.2f}" if ratio else "-")
        body.append(cells)
    lines.append(table(["row", *[f"{m} instr/request" for m in modes], "compiled/pure"], body))
    report = {"n": n, "load": load, "results": results}
    write_results("instructions", "Server instructions per request (callgrind, N and 2N requests)",
                  ["\n".join(lines)], report)
    return report

