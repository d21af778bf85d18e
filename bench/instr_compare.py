"""Instructions the server runs per request, before and after: issue 22's
hot paths counted with callgrind, a figure the load of a shared machine
does not move (CPU time does, by +-15% from run to run).

Each tree (KCOORD_BASE_TREE, and KCOORD_AFTER_TREE or this one, as in
runtime_compare.py) runs `kcoord serve` in pure Python under
`valgrind --tool=callgrind` with instrumentation off; the workload's own
load generator (the one runtime_compare drives, fewer groups) sets up and
warms up, then its hooks switch counting on and zero it right before the
measured phase and dump right after it.  Instructions per request are the
dump's total over the requests answered: the user-space instructions of the
server (interpreter, C extensions, libc; its threads included), not the
kernel's (syscalls are counted apart by `strace -c` when INSTR_COMPARE_STRACE=1).

    python -m bench instr_compare [--quick]

INSTR_COMPARE_ONLY=offset_commit,classic_heartbeat,consumer_heartbeat picks
workloads; RUNTIME_COMPARE_SETTINGS applies to both trees as there.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from .common import loadavg, run_loadgen, table, write_results

_TOTALS = re.compile(r"^(?:totals|summary):\s+(\d+)", re.M)


class CallgrindServer:
    """`kcoord serve` of a tree under callgrind, counting only when told."""

    def __init__(self, tree: Path, settings: dict, workdir: Path) -> None:
        self.tree, self.settings, self.workdir = tree, settings, workdir
        self.port = 0
        self.pid = 0
        self.proc: subprocess.Popen | None = None
        self._ready = threading.Event()

    def start(self, timeout: float = 600) -> None:
        from tests.support import _LISTENING
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
               f"--callgrind-out-file={self.workdir}/cg.%p", f"--log-file={self.workdir}/vg.log",
               sys.executable, "-m", "kcoord.cli", "serve", "--listen", "127.0.0.1:0",
               "--data-dir", str(self.workdir / "data")]
        for key, value in self.settings.items():
            cmd += ["--set", f"{key}={value}"]
        env = {**os.environ, "PYTHONPATH": str(self.tree), "PYTHONUNBUFFERED": "1",
               "PYTHONHASHSEED": "0", "KCOORD_PURE_PYTHON": "1"}
        self.proc = subprocess.Popen(cmd, cwd=self.tree, env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self.pid = self.proc.pid

        def pump() -> None:
            assert self.proc and self.proc.stderr
            for line in self.proc.stderr:
                m = _LISTENING.search(line)
                if m:
                    self.port = int(m.group(2))
                    self._ready.set()
        threading.Thread(target=pump, daemon=True).start()
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.2):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"kcoord serve under callgrind did not start ({self.tree})")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def hooks(self) -> dict:
        pid = str(self.pid)
        return {"before": ["sh", "-c", f"callgrind_control -i on {pid} >/dev/null && "
                                       f"callgrind_control -z {pid} >/dev/null"],
                "after": ["callgrind_control", "-d", pid]}

    def last_total(self) -> int:
        dumps = sorted(self.workdir.glob(f"cg.{self.pid}.*"), key=lambda p: p.stat().st_mtime)
        if not dumps:
            raise RuntimeError("callgrind wrote no dump")
        m = _TOTALS.search(dumps[-1].read_text(errors="replace"))
        if not m:
            raise RuntimeError(f"no totals in {dumps[-1]}")
        return int(m.group(1))

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)


def _offset_commit(server: CallgrindServer, n: int) -> dict:
    from .offset_commit import PARTITIONS, TOPIC, create_topic
    create_topic(server.bootstrap)
    spec = {"port": server.port, "pid": server.pid, "kind": "offset_commit", "topic": TOPIC,
            "partitions": PARTITIONS, "version": 8, "connections": 100, "depth": 8,
            "requests": n, "seconds": 3600, "warmup": 100 * 8 * 3, "hooks": server.hooks()}
    return run_loadgen(spec, timeout=3600)


def _classic_heartbeat(server: CallgrindServer, n: int) -> dict:
    spec = {"port": server.port, "pid": server.pid, "groups": 20, "per_group": 10,
            "connections": 10, "requests": n, "seconds": 3600, "warmup": 20 * 10 * 10,
            "session_timeout_ms": 120_000, "setup_seconds": 600, "group_prefix": "instr-hb",
            "hooks": server.hooks()}
    return run_loadgen(spec, timeout=3600, module="bench.classic_heartbeat")


def _consumer_heartbeat(server: CallgrindServer, n: int) -> dict:
    from .consumer_heartbeat import create_topic
    create_topic(server.bootstrap)
    spec = {"port": server.port, "pid": server.pid, "groups": 20, "per_group": 10,
            "connections": 10, "requests": n, "seconds": 3600, "rounds": 1,
            "warmup": 20 * 10 * 10, "setup_seconds": 600, "group_prefix": "instr-cghb",
            "hooks": server.hooks()}
    return run_loadgen(spec, timeout=3600, module="bench.consumer_heartbeat")


# workload -> (driver, server settings under callgrind, requests measured)
WORKLOADS = {
    "offset_commit": (_offset_commit, {}, 8_000),
    "classic_heartbeat": (_classic_heartbeat, {"group.initial.rebalance.delay.ms": "0"}, 20_000),
    "consumer_heartbeat": (_consumer_heartbeat, {
        "group.consumer.session.timeout.ms": "60000",
        "group.consumer.max.session.timeout.ms": "60000",
        "group.consumer.min.session.timeout.ms": "60000"}, 20_000),
}


def measure(tree: Path, workload: str, quick: bool, settings: dict) -> dict:
    drive, own, n = WORKLOADS[workload]
    n = n // 4 if quick else n
    workdir = Path(tempfile.mkdtemp(prefix="kcoord-instr-"))
    server = CallgrindServer(tree, {**settings, **own}, workdir)
    try:
        server.start()
        result = drive(server, n)
        if "error" in result:
            return {"error": result["error"]}
        stops = [r.get("stopped_by") for r in result.get("rounds", [result])]
        if any(stop != "request count" for stop in stops):  # the KIP-848 generator has rounds
            return {"error": f"stopped by {stops}"}
        ir = server.last_total()
        return {"requests": result["requests"], "instructions": ir,
                "per_request": ir / result["requests"]}
    finally:
        server.stop()
        keep = os.environ.get("INSTR_COMPARE_KEEP")  # a dir to keep the dumps in (callgrind_annotate)
        if keep:
            for dump in workdir.glob("cg.*"):
                shutil.copy(dump, Path(keep) / f"{workload}-{tree.name}-{dump.name}")
        shutil.rmtree(workdir, ignore_errors=True)


def run(args) -> dict:
    from .runtime_compare import SETTINGS, TREES
    only = [w for w in os.environ.get("INSTR_COMPARE_ONLY", "").split(",") if w] or list(WORKLOADS)
    out: dict = {}
    rows = []
    load0 = loadavg()
    for workload in only:
        out[workload] = {}
        for which in ("before", "after"):
            print(f"[bench] instr_compare {workload} {which} ({TREES[which]}), load {loadavg()}",
                  flush=True)
            out[workload][which] = measure(TREES[which], workload, args.quick, SETTINGS)
            print(f"[bench]   {out[workload][which]}", flush=True)
        b, a = out[workload]["before"], out[workload]["after"]
        if "per_request" in b and "per_request" in a:
            rows.append([workload, f"{b['per_request']:,.0f}", f"{a['per_request']:,.0f}",
                         f"{(a['per_request'] / b['per_request'] - 1) * 100:+.2f}%",
                         f"{b['requests']:,} / {a['requests']:,}"])
        else:
            rows.append([workload, str(b.get("per_request", b.get("error"))),
                         str(a.get("per_request", a.get("error"))), "", ""])
    sections = [
        f"before = {TREES['before']}, after = {TREES['after']} (pure Python both). "
        "Instructions per request: the server's user-space instructions (callgrind, its "
        "threads included) over the measured phase of the workload's load generator, "
        "divided by the requests answered; the kernel's work (syscalls) is not in it. "
        f"Load average at start: {load0} (it does not change these counts).", "",
        table(["workload", "before instr/request", "after instr/request", "change",
               "requests measured"], rows)]
    write_results("instr_compare", "Instructions per request, before and after (callgrind)",
                  sections, {"trees": {k: str(v) for k, v in TREES.items()},
                             "settings": SETTINGS, "results": out})
    return out


if __name__ == "__main__":
    sys.exit("run as: python -m bench instr_compare")
