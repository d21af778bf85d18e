"""Where a request's server instructions go, stage by stage: the callgrind
runs of `bench instructions` (N and 2N requests, compiled build), kept and
read with callgrind_annotate --inclusive, each stage's instructions at 2N
minus those at N, divided by N.

    python -m bench instr_split [--quick] [--requests N] [--rows offset_commit,...]

The stages are compiled functions that never call one another, so they add
up; what is left of the total is the interpreted rest (the network layer's
Python when it is not compiled, handlers, the runtime, the event loop, GC).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from .common import loadavg, table, timed, write_results
from .compiled import _Mode
from .instructions import ROWS, _instructions

# stage -> the compiled functions (callgrind names) whose inclusive cost it is
STAGES = {
    "decode the request": [r"codec___Codec___decode", r"commit_request___decode_flat"],
    "core handler": [r"shard___offset_commit_CoordinatorShard_obj_____call__",
                     r"shard___plain_commit_CoordinatorShard_obj_____call__",
                     r"consumer_group_manager___steady_heartbeat_ConsumerGroupManager_obj_____call__",
                     r"classic_group_manager___heartbeat_ClassicGroupManager_obj_____call__"],
    "replay the records": [r"shard___replay_emitted_CoordinatorShard_obj_____call__"],
    "encode the records into a batch": [r"coordinator_batch___build_records_batch"],
    "walk the appended batch (commit runs)": [r"commit_runs___take_commit_runs"],
    "encode the response": [r"codec___Codec___encode"],
    "fsync threads": [r"^\S*pthread_create\.c:start_thread"],
}
# inside the rest: shown apart, not added (they hold stages above)
PARTS = {
    "  of all: a socket read's callback (framing, dispatch, handler)":
        r"uvloop_4loop___uv_stream_(buffered_)?on_read",
    "  of all: call_soon callbacks (group commit rounds, answers released)":
        r"uvloop_4loop_cb_idle_callback",
    "  of all: KafkaConnection.buffer_updated (compiled)": r"network___KafkaConnection___buffer_updated",
    "  of all: KafkaConnection.handle_frame (compiled)": r"network___KafkaConnection___handle_frame",
}
_LINE = re.compile(r"\s*([\d,]+) \([^)]*\)\s+(\S+?):(\S+)(?: \[(.*)\])?$")


def inclusive(path: Path) -> dict[str, int]:
    """function -> inclusive instructions (the line that names its object;
    cycle members ('2) and inlined pieces skipped)."""
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100",
                          "--auto=no", str(path)], capture_output=True, text=True,
                         check=True).stdout
    costs: dict[str, int] = {}
    for line in out.splitlines():
        m = _LINE.match(line)
        if not m or m.group(4) is None or m.group(3).endswith("'2"):
            continue
        name = f"{m.group(2)}:{m.group(3)}"
        costs[name] = max(costs.get(name, 0), int(m.group(1).replace(",", "")))
    return costs


def _cost(costs: dict[str, int], pattern: str) -> int:
    return max((v for k, v in costs.items() if re.search(pattern, k)), default=0)


def split(row: str, n: int) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="kcoord-split-"))
    os.environ["PYTHONHASHSEED"] = "0"
    try:
        with _Mode("compiled"), timed(f"instr_split {row} N={n} and 2N"):
            totals = [_instructions(row, k, keep=tmp / f"{k}.out") for k in (n, 2 * n)]
        one, two = inclusive(tmp / f"{n}.out"), inclusive(tmp / f"{2 * n}.out")
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def per_request(patterns) -> float:
        return sum(_cost(two, p) - _cost(one, p) for p in patterns) / n
    total = (totals[1] - totals[0]) / n
    stages = {name: per_request(patterns) for name, patterns in STAGES.items()}
    stages["the rest (network layer, handlers, runtime, event loop, GC)"] = \
        total - sum(stages.values())
    parts = {name: per_request([p]) for name, p in PARTS.items()}
    return {"n": n, "total": total, "stages": stages, "parts": parts}


def run(args) -> dict:
    if not shutil.which("valgrind"):
        return {"error": "valgrind is not installed"}
    rows = [r for r in (args.rows or ",".join(ROWS)).split(",") if r in ROWS]
    n = args.requests or (500 if args.quick else 1000)
    load = [loadavg()]
    results = {row: split(row, n) for row in rows}
    load.append(loadavg())
    for r in results.values():
        r["load"] = load
    try:  # the rows not run this time stay as their last run left them
        results = {**json.loads((Path(__file__).parent / "results" / "instr_split.json")
                                .read_text())["results"], **results}
    except (FileNotFoundError, ValueError, KeyError):
        pass
    sections = []
    for row, r in results.items():
        if "error" in r:
            sections.append(f"### {row}\n\n{r['error']}")
            continue
        body = [[name, f"{v:,.0f}", f"{100 * v / r['total']:.0f}%"]
                for name, v in [*r["stages"].items(), *r["parts"].items()] if v >= 1]
        body.append(["all (server instructions per request)", f"{r['total']:,.0f}", "100%"])
        sections.append(f"### {row} (N = {r['n']}, load {r['load']})\n\n"
                        + table(["stage", "instructions/request", "share"], body))
    lines = ["`python -m bench instr_split [--rows ...]`: the compiled build under "
             "callgrind, (I(2N) - I(N)) / N per stage, inclusive; the layouts of "
             "`bench instructions`. Indented rows are parts of the whole that hold "
             "stages, not added.", "", *sections]
    report = {"results": results}
    write_results("instr_split", "Server instructions per request, split by stage (callgrind)",
                  ["\n\n".join(lines)], report)
    return report
