"""Pipelined ApiVersions (issue 2): server CPU microseconds per request on
loopback, the same load generator against every server in one run.
Goal: at most 3 us of kcoord CPU per request."""
from __future__ import annotations

from .common import run_loadgen, start_all, stop_all, table, timed, write_results

GOAL_US = 3.0


def run(args) -> dict:
    requests = args.requests or (20_000 if args.quick else 200_000)
    connections = args.connections or 4
    depth = args.depth or 100
    seconds = args.seconds or (20 if args.quick else 60)
    reps = 1 if args.quick else 3
    peers, errors = start_all(args.peers)
    runs: dict[str, list] = {name: [] for name in peers}
    try:
        # servers take turns, round after round, so that each sees the same
        # spread of load from the rest of the machine
        for rep in range(reps):
            for name, peer in peers.items():
                with timed(f"apiversions round {rep + 1}/{reps} against {name}"):
                    spec = {"port": peer.port, "pid": peer.pid, "kind": "apiversions",
                            "connections": connections, "depth": depth, "requests": requests,
                            "seconds": seconds, "warmup": min(requests // 10, 20_000),
                            "version": 3}
                    runs[name].append(run_loadgen(spec, timeout=seconds * 2 + 120))
    finally:
        stop_all(peers)
    results = {name: {"error": why} for name, why in errors.items()}
    for name, rs in runs.items():
        results[name] = summarize(rs, peers[name].cpu_note)
    return report(results, requests, connections, depth, seconds, reps)


def summarize(rs: list[dict], cpu_note: str) -> dict:
    """The median run's figures (by server CPU per request), and every run."""
    good = [r for r in rs if "error" not in r]
    if not good:
        return {"error": rs[0].get("error", "no run") if rs else "no run", "runs": rs}
    good.sort(key=lambda r: r["server_cpu_us_per_request"])
    out = dict(good[(len(good) - 1) // 2])
    out["cpu_note"] = cpu_note
    out["runs"] = rs
    out["cpu_us_all"] = [round(r["server_cpu_us_per_request"], 2) for r in good]
    for key in ("errors", "out_of_order", "undecodable"):
        if key == "errors":
            merged: dict = {}
            for r in good:
                for code, n in r["errors"].items():
                    merged[code] = merged.get(code, 0) + n
            out["errors"] = merged
        else:
            out[key] = sum(r[key] for r in good)
    return out


def report(results: dict, requests: int, connections: int, depth: int, seconds: float,
           reps: int = 1) -> dict:
    rows = []
    for name, r in results.items():
        if "error" in r:
            rows.append([name, "-", "-", "-", "-", "-", "-", "-", r["error"]])
            continue
        problems = []
        if r["errors"]:
            problems.append(f"error codes {r['errors']}")
        if r["out_of_order"]:
            problems.append(f"{r['out_of_order']} out of order")
        if r["undecodable"]:
            problems.append(f"{r['undecodable']} undecodable")
        rows.append([name, f"v{r['version']}", r["requests"], r["server_cpu_us_per_request"],
                     ", ".join(f"{x:.1f}" for x in r.get("cpu_us_all", [])),
                     r["requests_per_s"], r["latency_ms"]["p99"], r["generator_cpu_s"] / r["requests"] * 1e6,
                     "; ".join(problems + [r.get("cpu_note") or ""]).strip("; ") or "ok"])
    k = results.get("kcoord", {})
    kus = k.get("server_cpu_us_per_request")
    verdict = ("met" if kus is not None and kus <= GOAL_US else "MISSED") if kus is not None else "not measured"
    sections = [
        f"Pipelined ApiVersions: {connections} connections x {depth} requests in flight, "
        f"{requests:,} measured requests per run (after a warm-up), bounded by {seconds:.0f} s; "
        f"{reps} rounds in which the servers take turns, the median run (by CPU per request) "
        "shown with every run's CPU per request. "
        "One load generator process (bench/loadgen.py) for every server; server CPU is utime+stime "
        "of the server process from /proc before/after the measured phase. Requests/s is bounded "
        "by the Python load generator sharing the 2 cores, not by the servers.",
        "",
        table(["server", "version", "requests", "server CPU us/request", "all runs us",
               "requests/s",
               "p99 latency ms", "generator CPU us/request", "notes"], rows),
        "",
        f"Goal (issue 2): kcoord <= {GOAL_US} us of server CPU per request: **{verdict}**"
        + (f" ({kus:.2f} us)." if kus is not None else "."),
    ]
    raw = {"results": results, "goal_us": GOAL_US, "verdict": verdict}
    md = write_results("apiversions", "Pipelined ApiVersions: server CPU per request", sections, raw)
    print(md.read_text())
    return raw
