"""Compiled (mypyc, native/build.py) against pure Python (KCOORD_PURE_PYTHON=1):
the same kcoord server measured both ways, paired and alternating round by
round (the order flips each round) so that both see the same load from the
rest of the machine, beside the librdkafka mock once per round where it
serves the workload.  Rows: OffsetCommit (commits/s, server CPU per
commit), classic and KIP-848 steady heartbeats (server CPU per heartbeat),
produce acks=1 / acks=all and fetch (MB/s, server CPU s/GB), and replay of
an offsets log at startup (records per CPU-second).  Needs a current build
(`make native`); the ratio per row is compiled / pure of the medians.

    python -m bench compiled [--quick] [--peers kcoord,mock] [--runs ROUNDS] [--rows a,b]

With --rows, the rows not named keep the runs of the last report.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from .common import (RESULTS, loadavg, median, run_loadgen, start_peer, table, timed,
                     write_results)

MODES = ("compiled", "pure")


class _Mode:
    """KCOORD_PURE_PYTHON for the servers started inside (they inherit the env)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode

    def __enter__(self):
        self.saved = os.environ.get("KCOORD_PURE_PYTHON")
        os.environ["KCOORD_PURE_PYTHON"] = "1" if self.mode == "pure" else "0"

    def __exit__(self, *exc) -> None:
        if self.saved is None:
            os.environ.pop("KCOORD_PURE_PYTHON", None)
        else:
            os.environ["KCOORD_PURE_PYTHON"] = self.saved


def _served(name: str, kw: dict, measure) -> dict:
    """Start one server, measure, stop it."""
    try:
        peer = start_peer(name, **kw)
    except Exception as exc:
        return {"error": f"could not start: {exc}"}
    try:
        return measure(peer)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        peer.stop()


def offset_commit(name: str, quick: bool) -> dict:
    from .offset_commit import PARTITIONS, TOPIC, create_topic
    connections, depth, seconds = (20, 8, 6) if quick else (100, 8, 12)

    def measure(peer):
        if name != "mock":
            create_topic(peer.bootstrap)
        r = run_loadgen({"port": peer.port, "pid": peer.pid, "kind": "offset_commit",
                         "topic": TOPIC, "partitions": PARTITIONS, "version": 8,
                         "connections": connections, "depth": depth,
                         "requests": 400_000, "seconds": seconds,
                         "warmup": connections * depth * 3}, timeout=seconds * 3 + 180)
        return {"per_s": r["requests_per_s"], "cpu_us": r["server_cpu_us_per_request"]}
    kw = {"topics": [(TOPIC, PARTITIONS)]} if name == "mock" else {}
    return _served(name, kw, measure)


def classic_heartbeat(name: str, quick: bool) -> dict:
    groups, seconds = (20, 6) if quick else (100, 12)

    def measure(peer, groups):
        r = run_loadgen({"port": peer.port, "pid": peer.pid, "groups": groups,
                         "per_group": 10, "connections": 10, "requests": 1_000_000,
                         "seconds": seconds, "warmup": groups * 200,
                         "session_timeout_ms": 10_000, "setup_seconds": 90,
                         "group_prefix": f"bench-hb-{name}"},
                        timeout=seconds * 3 + 210, module="bench.classic_heartbeat")
        if "error" in r:  # the generator's own account, not a KeyError on its figures
            raise RuntimeError(r["error"])
        return {"per_s": r["requests_per_s"], "cpu_us": r["server_cpu_us_per_request"],
                "members": groups * 10}
    kw = {"settings": {"group.initial.rebalance.delay.ms": "0"}} if name == "kcoord" else {}
    out = _served(name, kw, lambda peer: measure(peer, groups))
    if "error" in out and "setup:" in out["error"] and groups > 10:
        # the mock's setup stalls at 1,000 members (bench/classic_heartbeat.py
        # measures it at 100 then, and says so): the same here
        out = _served(name, kw, lambda peer: measure(peer, 10))
        if "error" not in out:
            out["fallback"] = "1,000 members failed; measured with 100"
    return out


def consumer_heartbeat(name: str, quick: bool) -> dict:
    from .consumer_heartbeat import PARTITIONS, TOPIC, create_topic
    groups, seconds = (20, 6) if quick else (100, 12)

    def measure(peer):
        if name != "mock":
            create_topic(peer.bootstrap)
        r = run_loadgen({"port": peer.port, "pid": peer.pid, "groups": groups,
                         "per_group": 10, "connections": 10, "requests": 400_000,
                         "seconds": seconds, "rounds": 1, "warmup": groups * 200,
                         "setup_seconds": 180, "group_prefix": f"bench-cghb-{name}"},
                        timeout=seconds * 3 + 460, module="bench.consumer_heartbeat")
        return {"per_s": r.get("requests_per_s"), "cpu_us": r["server_cpu_us_per_request"]}
    kw = {"topics": [(TOPIC, PARTITIONS)]} if name == "mock" else {}
    return _served(name, kw, measure)


def produce_fetch(name: str, quick: bool) -> dict:
    from .produce_fetch import PARTITIONS, SIZE, base_spec, client, create_topics
    records = (16 if quick else 64) * 1024 * 1024 // SIZE
    topics = {"1": "bench-pf-acks1", "all": "bench-pf-acksall"}

    def measure(peer):
        if name != "mock":
            create_topics(peer.bootstrap, list(topics.values()))
        spec = base_spec(peer, records, 120)
        out = {}
        for key, acks in (("acks_1", "1"), ("acks_all", "all")):
            out[key] = client({**spec, "phase": "produce", "acks": acks,
                               "topic": topics[acks]}, 360)
        if name != "mock":  # the mock keeps ~5 MB per partition: no read-back
            out["fetch"] = client({**spec, "phase": "fetch", "topic": topics["1"]}, 360)
        return {k: {"mb_s": r.get("mb_per_s"),
                    "cpu_s_per_gb": r["server_cpu_s"] / (r["bytes"] / 1e9) if r.get("bytes")
                    else None} for k, r in out.items()}
    kw = {"topics": [(t, PARTITIONS) for t in topics.values()]} if name == "mock" else {}
    return _served(name, kw, measure)


def replay(data_dir: Path) -> dict:
    from .load import NO_SNAPSHOTS, measure
    m = measure(data_dir, timeout=600, settings=NO_SNAPSHOTS)
    return {"records_per_cpu_s": m.get("records_per_cpu_s"), "error": m.get("error")}


ROWS = ["offset_commit", "classic_heartbeat", "consumer_heartbeat", "produce_fetch", "replay"]


def run(args) -> dict:
    from kcoord import native_build
    if native_build.state != "compiled":
        raise SystemExit(f"no current compiled build ({native_build.state}): `make native`")
    quick = args.quick
    rounds = args.runs or (1 if quick else 3)
    with_mock = "mock" in args.peers
    chosen = [r for r in (args.rows or ",".join(ROWS)).split(",") if r in ROWS]
    runs: dict[str, dict[str, list]] = {row: {m: [] for m in (*MODES, "mock")} for row in ROWS}
    try:  # the rows not run this time keep the last report's runs
        runs.update({row: r for row, r in json.loads(
            (RESULTS / "compiled.json").read_text())["runs"].items() if row not in chosen})
    except (FileNotFoundError, ValueError, KeyError):
        pass
    loads: list[str] = []
    data_root = Path(tempfile.mkdtemp(prefix="kcoord-bench-compiled-"))
    try:
        from .load import generate
        replay_records = 200_000 if quick else 2_000_000
        if "replay" in chosen:
            with timed(f"compiled: a log of {replay_records:,} offset commits"):
                generate(data_root / "replay", replay_records, 200)
        for rnd in range(rounds):
            order = MODES if rnd % 2 == 0 else MODES[::-1]
            loads.append(loadavg())
            for row in chosen:
                for mode in order:
                    with timed(f"compiled round {rnd + 1}/{rounds} {row} {mode}"), _Mode(mode):
                        if row == "replay":
                            r = replay(data_root / "replay")
                        else:
                            r = globals()[row]("kcoord", quick)
                    runs[row][mode].append(r)
                if with_mock and row != "replay":
                    with timed(f"compiled round {rnd + 1}/{rounds} {row} mock"):
                        runs[row]["mock"].append(globals()[row]("mock", quick))
            loads.append(loadavg())
    finally:
        shutil.rmtree(data_root, ignore_errors=True)
    return report(runs, rounds, loads, quick, chosen)


def _figures(rs: list[dict], key: str, sub: str | None = None) -> list[float]:
    out = []
    for r in rs:
        v = r.get(sub, {}) if sub else r
        if isinstance(v, dict) and v.get(key) is not None and not r.get("error"):
            out.append(v[key])
    return out


MEASURES = [  # (row, sub-result, key, label)
    ("offset_commit", None, "per_s", "OffsetCommit commits/s"),
    ("offset_commit", None, "cpu_us", "OffsetCommit server CPU us/commit"),
    ("classic_heartbeat", None, "cpu_us", "classic heartbeat server CPU us"),
    ("consumer_heartbeat", None, "cpu_us", "KIP-848 heartbeat server CPU us"),
    ("produce_fetch", "acks_1", "mb_s", "produce acks=1 MB/s"),
    ("produce_fetch", "acks_all", "mb_s", "produce acks=all MB/s"),
    ("produce_fetch", "acks_all", "cpu_s_per_gb", "produce acks=all server CPU s/GB"),
    ("produce_fetch", "fetch", "mb_s", "fetch MB/s"),
    ("produce_fetch", "fetch", "cpu_s_per_gb", "fetch server CPU s/GB"),
    ("replay", None, "records_per_cpu_s", "replay records/CPU-s"),
]


def report(runs: dict, rounds: int, loads: list[str], quick: bool,
           chosen: list[str] = ROWS) -> dict:
    rows, raw = [], {}
    for row, sub, key, label in MEASURES:
        med = {m: median(_figures(runs[row][m], key, sub)) for m in (*MODES, "mock")}
        ratio = med["compiled"] / med["pure"] if med["compiled"] and med["pure"] else None
        each = {m: [round(v, 2) for v in _figures(runs[row][m], key, sub)] for m in MODES}
        rows.append([label, med["compiled"], med["pure"], ratio, med["mock"],
                     f"{each['compiled']} / {each['pure']}"])
        raw[label] = {"median": med, "compiled_over_pure": ratio, "runs": each}
    sections = [
        "# kcoord compiled (mypyc) vs pure Python, paired in one run",
        __doc__.split("\n\n")[0].replace("\n", " "),
        f"{rounds} round(s){' (--quick sizes)' if quick else ''}; each row's compiled and "
        "pure servers run one after the other within a round, the order flipping each round. "
        f"Load averages (1, 5, 15 min) at each round's start and end: {'; '.join(loads)}."
        + ("" if chosen == ROWS else f" Rows run this time: {', '.join(chosen)}; the others "
           "are the previous report's runs."),
        table(["measure", "compiled (median)", "pure (median)", "compiled / pure",
               "librdkafka mock", "each run: compiled / pure"], rows),
    ]
    write_results("compiled", "compiled vs pure", sections,
                  {"measures": raw, "loadavg": loads, "runs": runs})
    return raw
