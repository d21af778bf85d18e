"""Pipelined ApiVersions (issue 2): server CPU microseconds per request on
loopback, the same load generator against every server in one run.
Goal: at most 3 us of kcoord CPU per request."""
from __future__ import annotations

from .common import run_loadgen, start_peer, table, timed, write_results

GOAL_US = 3.0


def run(args) -> dict:
    requests = args.requests or (20_000 if args.quick else 200_000)
    connections = args.connections or 4
    depth = args.depth or 100
    seconds = args.seconds or (20 if args.quick else 60)
    results = {}
    for name in args.peers:
        with timed(f"apiversions against {name}"):
            try:
                peer = start_peer(name)
            except Exception as exc:
                results[name] = {"error": f"could not start: {exc}"}
                continue
            try:
                spec = {"port": peer.port, "pid": peer.pid, "kind": "apiversions",
                        "connections": connections, "depth": depth, "requests": requests,
                        "seconds": seconds, "warmup": min(requests // 10, 20_000), "version": 3}
                results[name] = run_loadgen(spec, timeout=seconds * 2 + 120)
                results[name]["cpu_note"] = peer.cpu_note
            finally:
                peer.stop()
    return report(results, requests, connections, depth, seconds)


def report(results: dict, requests: int, connections: int, depth: int, seconds: float) -> dict:
    rows = []
    for name, r in results.items():
        if "error" in r:
            rows.append([name, "-", "-", "-", "-", "-", "-", r["error"]])
            continue
        problems = []
        if r["errors"]:
            problems.append(f"error codes {r['errors']}")
        if r["out_of_order"]:
            problems.append(f"{r['out_of_order']} out of order")
        if r["undecodable"]:
            problems.append(f"{r['undecodable']} undecodable")
        rows.append([name, f"v{r['version']}", r["requests"], r["server_cpu_us_per_request"],
                     r["requests_per_s"], r["latency_ms"]["p99"], r["generator_cpu_s"] / r["requests"] * 1e6,
                     "; ".join(problems + [r.get("cpu_note") or ""]).strip("; ") or "ok"])
    k = results.get("kcoord", {})
    kus = k.get("server_cpu_us_per_request")
    verdict = ("met" if kus is not None and kus <= GOAL_US else "MISSED") if kus is not None else "not measured"
    sections = [
        f"Pipelined ApiVersions: {connections} connections x {depth} requests in flight, "
        f"{requests:,} measured requests per server (after a warm-up), bounded by {seconds:.0f} s. "
        "One load generator process (bench/loadgen.py) for every server; server CPU is utime+stime "
        "of the server process from /proc before/after the measured phase. Requests/s is bounded "
        "by the Python load generator sharing the 2 cores, not by the servers.",
        "",
        table(["server", "version", "requests", "server CPU us/request", "requests/s",
               "p99 latency ms", "generator CPU us/request", "notes"], rows),
        "",
        f"Goal (issue 2): kcoord <= {GOAL_US} us of server CPU per request: **{verdict}**"
        + (f" ({kus:.2f} us)." if kus is not None else "."),
    ]
    raw = {"results": results, "goal_us": GOAL_US, "verdict": verdict}
    md = write_results("apiversions", "Pipelined ApiVersions: server CPU per request", sections, raw)
    print(md.read_text())
    return raw
