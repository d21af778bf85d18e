"""Paired turns: two servers, each driven by its own load generator in
turn-taking mode (bench/loadgen.py's take_turns), measured one short phase
at a time in the order A B, B A, A B, ... so that both see the same drift of
the machine's speed (other processes, the host of this virtual machine).
The figure is the median of the per-pair changes, with a bootstrap 95 %
interval that says whether it can decide a threshold.

Pinning (pin_cpus): the servers on one CPU, the generators on the other, so
the scheduler's placement is the same in every turn.
"""
from __future__ import annotations

import json
import os
import queue
import random
import subprocess
import tempfile
import threading

from .common import PY, ROOT, median

SERVER_CPU, GENERATOR_CPU = 0, 1


def pin_cpus() -> bool:
    """Pinning needs two CPUs; RUNTIME_COMPARE_PIN=0 turns it off."""
    return os.environ.get("RUNTIME_COMPARE_PIN", "1") != "0" and len(os.sched_getaffinity(0)) >= 2


def pin(pid: int, cpu: int) -> None:
    """Every thread of `pid` onto `cpu` (threads started later inherit it)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), {cpu})
        except (ProcessLookupError, OSError):
            pass  # the thread ended meanwhile


class TurnTaker:
    """A load generator process in turn-taking mode: ready(), then turn()
    as often as wanted, then finish() for its final result."""

    def __init__(self, spec: dict, module: str, pinned: bool) -> None:
        self.err = tempfile.TemporaryFile(mode="w+")
        preexec = (lambda: os.sched_setaffinity(0, {GENERATOR_CPU})) if pinned else None
        self.proc = subprocess.Popen([PY, "-m", module, json.dumps({**spec, "turns": True})],
                                     cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.err, text=True, preexec_fn=preexec)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.lines.put(json.loads(line))
        self.lines.put(None)  # the generator exited

    def _next(self, timeout: float) -> dict:
        try:
            msg = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise RuntimeError(f"load generator silent for {timeout:.0f}s") from None
        if msg is None:
            self.err.seek(0)
            raise RuntimeError(f"load generator exited: {self.err.read()[-1500:]}")
        if "error" in msg:
            raise RuntimeError(f"load generator: {msg['error']}")
        return msg

    def ready(self, timeout: float) -> None:
        if not self._next(timeout).get("ready"):
            raise RuntimeError("load generator answered before it was ready")

    def turn(self, timeout: float) -> dict:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return self._next(timeout)

    def finish(self, timeout: float) -> dict:
        try:
            self.proc.stdin.write("stop\n")
            self.proc.stdin.close()
            return self._next(timeout)
        finally:
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.err.close()


def us_per_request(turn: dict) -> float | None:
    return turn["cpu_ns"] / turn["requests"] / 1e3 if turn.get("requests") else None


WARMUP_PAIRS = 2  # discarded: a fresh server's first seconds still settle (caches, GC of setup)


def alternate(takers: dict[str, TurnTaker], pairs: int, timeout: float) -> dict[str, list[dict]]:
    """`pairs` turns of each of the two takers, A B then B A, ..., after
    WARMUP_PAIRS discarded ones."""
    a, b = list(takers)
    out: dict[str, list[dict]] = {a: [], b: []}
    for i in range(WARMUP_PAIRS + pairs):
        for name in ((a, b) if i % 2 == 0 else (b, a)):
            turn = takers[name].turn(timeout)
            if i >= WARMUP_PAIRS:
                out[name].append(turn)
    return out


def paired_changes(before: list, after: list) -> list[float]:
    """after/before - 1 in percent, pair by pair (None where either is missing)."""
    return [(a - b) / b * 100 for b, a in zip(before, after) if a is not None and b]


def bootstrap_interval(values: list[float], resamples: int = 4000,
                       seed: int = 22) -> tuple[float, float] | None:
    """95 % bootstrap interval of the median of `values` (percentile method)."""
    if len(values) < 4:
        return None
    rng = random.Random(seed)
    meds = sorted(median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return meds[int(0.025 * resamples)], meds[int(0.975 * resamples) - 1]
