"""Start a real `kcoord serve` process on loopback for tests and benchmarks.

Each server gets its own ephemeral port (--listen 127.0.0.1:0; the port is
read from its log line) and its own data dir, so tests never collide.
"""
from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

_LISTENING = re.compile(r"kcoord listening on ([\d.]+):(\d+)")
# one line per listener, logged before the line above
_LISTENER = re.compile(r"kcoord listener (\S+) \((\S+)\) on ([\d.]+):(\d+)")


class ServerProcess:
    def __init__(self, data_dir: Path, settings: dict[str, str] | None = None,
                 port: int = 0, extra_args: list[str] | None = None,
                 launcher: list[str] | None = None, host: str = "127.0.0.1") -> None:
        self.data_dir = Path(data_dir)
        self.host = host  # a loopback address (127.0.0.x)
        self.launcher = list(launcher or [])  # a command the server runs under (valgrind)
        self.settings = dict(settings or {})
        self.requested_port = port
        self.port: int | None = None
        self.ports: dict[str, int] = {}  # listener name -> bound port
        self.extra_args = list(extra_args or [])
        self.proc: subprocess.Popen | None = None
        self.log_lines: list[str] = []
        self._ready = threading.Event()

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 60.0) -> "ServerProcess":
        cmd = [*self.launcher, sys.executable, "-m", "kcoord.cli", "serve",
               "--listen", f"{self.host}:{self.port or self.requested_port}",
               "--data-dir", str(self.data_dir)]
        for key, value in self.settings.items():
            cmd += ["--set", f"{key}={value}"]
        cmd += self.extra_args
        self._ready.clear()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        threading.Thread(target=self._pump, args=(self.proc,), daemon=True).start()
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.05):
            if self.proc.poll() is not None:
                raise RuntimeError("kcoord serve exited early:\n" + self.log_text())
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("kcoord serve did not start:\n" + self.log_text())
        return self

    def _pump(self, proc: subprocess.Popen) -> None:
        for line in proc.stderr:
            self.log_lines.append(line.rstrip("\n"))
            lm = _LISTENER.search(line)
            if lm:
                self.ports[lm.group(1)] = int(lm.group(4))
            m = _LISTENING.search(line)
            if m:
                self.port = int(m.group(2))
                self._ready.set()

    def log_text(self) -> str:
        return "\n".join(self.log_lines[-200:])

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def restart(self) -> "ServerProcess":
        """Stop and start again on the same port and data dir."""
        self.stop()
        return self.start()

    def __enter__(self) -> "ServerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def load_script(path: Path, name: str):
    """A script outside the kcoord package (lint/, native/) loaded as a module."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
