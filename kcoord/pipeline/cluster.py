"""A Spark standalone cluster on 127.0.0.1 (master + N workers), for tests and benchmarks.

The pip package has no start-master.sh / start-worker.sh, so the daemons
are started with `$SPARK_HOME/sbin/spark-daemon.sh` as SPARK.md describes.
Ports are picked free on loopback; pid, log and work dirs live in `workdir`.

    with StandaloneCluster(tmp, workers=2) as cluster:
        run with master=cluster.master_url
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def spark_home() -> Path:
    import pyspark
    return Path(pyspark.__file__).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StandaloneCluster:
    def __init__(self, workdir, workers: int = 2, cores: int = 1, memory: str = "2g") -> None:
        self.workdir = Path(workdir)
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.port = free_port()
        self.webui = free_port()
        self.worker_ui = [free_port() for _ in range(workers)]
        self.started: list[tuple[str, int]] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def env(self) -> dict:
        env = dict(os.environ)
        env.update({
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_PID_DIR": str(self.workdir / "pids"),
            "SPARK_LOG_DIR": str(self.workdir / "logs"),
            "SPARK_WORKER_DIR": str(self.workdir / "work"),
            "SPARK_IDENT_STRING": f"kcoord{self.port}",
            "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
        })
        return env

    def _daemon(self, action: str, cls: str, instance: int, *args: str) -> None:
        script = spark_home() / "sbin" / "spark-daemon.sh"
        subprocess.run(["bash", str(script), action, cls, str(instance), *args],
                       env=self.env(), check=action == "start", capture_output=True,
                       timeout=120)

    def start(self, timeout: float = 120.0) -> "StandaloneCluster":
        for sub in ("pids", "logs", "work"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)
        try:
            self._daemon("start", MASTER_CLASS, 1, "--host", "127.0.0.1", "--port",
                         str(self.port), "--webui-port", str(self.webui))
            self.started.append((MASTER_CLASS, 1))
            for i in range(self.workers):
                self._daemon("start", WORKER_CLASS, i + 1, "--host", "127.0.0.1", "--cores",
                             str(self.cores), "--memory", self.memory, "--webui-port",
                             str(self.worker_ui[i]), self.master_url)
                self.started.append((WORKER_CLASS, i + 1))
            self.wait_for_workers(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def status(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.webui}/json/", timeout=5) as r:
            return json.loads(r.read())

    def wait_for_workers(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                last = self.status()
                if last.get("aliveworkers", 0) >= self.workers:
                    return
            except OSError as exc:
                last = exc
            time.sleep(0.5)
        raise RuntimeError(f"standalone cluster not up after {timeout}s: {last}\n{self.logs()}")

    def logs(self, tail: int = 40) -> str:
        out = []
        for f in sorted((self.workdir / "logs").glob("*.out")):
            lines = f.read_text(errors="replace").splitlines()[-tail:]
            out.append(f"--- {f.name}\n" + "\n".join(lines))
        return "\n".join(out)

    def stop(self) -> None:
        for cls, instance in reversed(self.started):
            try:
                self._daemon("stop", cls, instance)
            except Exception:  # keep stopping the others
                pass
        self.started.clear()

    def __enter__(self) -> "StandaloneCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
