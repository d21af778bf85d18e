"""One kcoord node for tests: in this process on its own thread and event
loop (`ThreadNode`), or a `kcoord serve` subprocess (`ProcessNode`).  Both
keep their port across restarts, so clients reconnect to the same bootstrap."""
from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

LOG_LINES = 500  # log lines kept per node for a failing test's report


class _ThreadLog(logging.Handler):
    """The kcoord log lines emitted on one thread (its node's loop)."""

    def __init__(self, lines: collections.deque) -> None:
        super().__init__(logging.DEBUG)
        self.lines = lines
        self.thread: int | None = None
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread == self.thread:
            try:
                self.lines.append(self.format(record))
            except Exception:
                pass


def _settings(config: dict) -> list[str]:
    return [f"{k}={'true' if v is True else 'false' if v is False else v}"
            for k, v in config.items()]


class ThreadNode:
    """A Server (kcoord.server.app) on its own thread and event loop."""

    in_process = True

    def __init__(self, node_id: int, data_dir: Path, config: dict, clock=None,
                 tap=None) -> None:
        self.node_id = node_id
        self.data_dir = Path(data_dir)
        self.config = dict(config)
        self.clock = clock          # kcoord.server.clock object, or None (wall)
        self.tap = tap              # callable(dispatcher): installs the test tap
        self.port = 0
        self.server = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self.lines: collections.deque = collections.deque(maxlen=LOG_LINES)
        self._log = _ThreadLog(self.lines)
        self._stop: asyncio.Event | None = None
        self._crash = False
        self.running = False

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    # ------------------------------------------------------------ lifecycle
    def start(self, timeout: float = 60.0, wait_loaded: bool = True) -> None:
        if self.running:
            return
        ready: concurrent.futures.Future = concurrent.futures.Future()
        self._crash = False
        self.thread = threading.Thread(target=self._main, args=(ready, wait_loaded),
                                       name=f"kcoord-node-{self.node_id}", daemon=True)
        kcoord_log = logging.getLogger("kcoord")
        if kcoord_log.level == logging.NOTSET:  # INFO lines for the report's log tail
            kcoord_log.setLevel(logging.INFO)
        kcoord_log.addHandler(self._log)
        self.thread.start()
        self._log.thread = self.thread.ident
        try:
            ready.result(timeout)
        except BaseException:
            self.thread.join(5)
            kcoord_log.removeHandler(self._log)
            raise
        self.running = True

    def _main(self, ready: concurrent.futures.Future, wait_loaded: bool) -> None:
        try:
            import uvloop
            loop = uvloop.new_event_loop()
        except ImportError:  # optional, as for kcoord serve
            loop = asyncio.new_event_loop()
        self.loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._serve(ready, wait_loaded))
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
        finally:
            try:
                _cancel_all(loop)
            finally:
                asyncio.set_event_loop(None)
                loop.close()

    async def _serve(self, ready: concurrent.futures.Future, wait_loaded: bool) -> None:
        from ..server.app import Server
        from ..server.config import build_config
        config = build_config(f"127.0.0.1:{self.port}", str(self.data_dir), None,
                              _settings(self.config))
        server = Server(config, self.clock)
        self.server = server
        if self.tap is not None:
            self.tap(server.dispatcher)
        self._stop = asyncio.Event()
        await server.start()
        self.port = server.config.port
        if wait_loaded and server.cluster is None:
            await server.coordinator.wait_loaded()
            await server.txn.wait_loaded()
        ready.set_result(None)
        await self._stop.wait()
        if self._crash:
            await _crash(server)
        else:
            await server.stop()

    def stop(self, timeout: float = 30.0) -> None:
        """A clean shutdown (SIGTERM's)."""
        self._end(False, timeout)

    def kill(self, timeout: float = 30.0) -> None:
        """A crash: listeners and connections dropped, no flush, no clean-shutdown marker."""
        self._end(True, timeout)

    def _end(self, crash: bool, timeout: float) -> None:
        if not self.running:
            return
        self._crash = crash
        self.loop.call_soon_threadsafe(self._stop.set)
        self.thread.join(timeout)
        logging.getLogger("kcoord").removeHandler(self._log)
        self.running = False
        self.server = None

    def restart(self) -> None:
        self.stop()
        self.start()

    # ------------------------------------------------------------ on the loop
    def call(self, fn, *args, timeout: float = 30.0):
        """fn(*args) on the node's loop thread (awaited if it is a coroutine)."""
        if not self.running:
            raise RuntimeError(f"node {self.node_id} is not running")
        if threading.get_ident() == self.thread.ident:
            return fn(*args)
        done: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            try:
                value = fn(*args)
            except BaseException as exc:
                done.set_exception(exc)
                return
            if asyncio.iscoroutine(value):
                task = asyncio.ensure_future(value)
                task.add_done_callback(
                    lambda t: done.set_exception(t.exception()) if t.exception()
                    else done.set_result(t.result()))
            else:
                done.set_result(value)
        self.loop.call_soon_threadsafe(run)
        return done.result(timeout)

    def log_tail(self, n: int = 100) -> list[str]:
        return list(self.lines)[-n:]


async def _crash(server) -> None:
    """What a power cut leaves: nothing flushed, no marker, the etcd lease left
    to expire; the data dir unlocked (the next start in this process takes it)."""
    current = asyncio.current_task()
    for task in asyncio.all_tasks():
        if task is not current:
            task.cancel()
    for listening in server._servers:
        listening.close()
    for conn in list(server.connections):
        if conn.transport is not None:
            conn.closed = True
            conn.transport.abort()
    if server._retention is not None:
        server._retention.cancel()
    coordinator = server.coordinator
    if coordinator._cleanup is not None:
        coordinator._cleanup.cancel()
    for shard in coordinator.shards:
        shard.cancel_all_timers()
    server.txn.stop()
    catalogue = server.catalogue
    for plog in list(catalogue.all_logs()):
        for seg in plog._segments:
            seg.close()
        plog._closed = True
    catalogue._closed = True
    server.dir_lock.release()
    plane = getattr(server.cluster, "plane", None)
    if plane is not None:  # the connection to etcd dies with the process; the lease stays
        try:
            await plane.session.close(revoke=False)
        except Exception:
            pass


def _cancel_all(loop) -> None:
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for t in tasks:
        t.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))


class ProcessNode:
    """A KafkaServer in a subprocess (kcoord/testing/child.py), driven over
    its stdin/stdout; a crash is a SIGKILL."""

    in_process = False

    def __init__(self, node_id: int, data_dir: Path, config: dict,
                 virtual_time: bool = False) -> None:
        self.node_id = node_id
        self.data_dir = Path(data_dir)  # the child's KafkaServer data dir (node-0 below it)
        self.config = dict(config)
        self.virtual_time = virtual_time
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self.lines: collections.deque = collections.deque(maxlen=LOG_LINES)
        self._lock = threading.Lock()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 60.0,
              wait_loaded: bool = True) -> None:  # noqa: ARG002 (the in-process node's keyword)
        import json
        from .child import read_frame
        if self.running:
            return
        spec = json.dumps({"config": self.config, "data_dir": str(self.data_dir),
                           "port": self.port, "virtual_time": self.virtual_time})
        self.proc = subprocess.Popen([sys.executable, "-m", "kcoord.testing.child", spec],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        threading.Thread(target=self._pump, args=(self.proc,), daemon=True).start()
        ready: concurrent.futures.Future = concurrent.futures.Future()
        threading.Thread(target=lambda: ready.set_result(read_frame(self.proc.stdout)),
                         daemon=True).start()
        try:
            answer = ready.result(timeout)
        except concurrent.futures.TimeoutError:
            self.kill()
            raise RuntimeError("kcoord did not start:\n" + "\n".join(self.lines)) from None
        if answer is None:
            self.proc.wait(10)
            raise RuntimeError("kcoord exited early:\n" + "\n".join(self.lines))
        self.port = answer[1]

    def _pump(self, proc: subprocess.Popen) -> None:
        for line in proc.stderr:
            self.lines.append(line.decode(errors="replace").rstrip("\n"))

    def rpc(self, method: str, *args, **kwargs):
        """One call into the child's server (kcoord/testing/child.py's _Calls)."""
        from .child import read_frame, write_frame
        if not self.running:
            raise RuntimeError(f"node {self.node_id} is not running")
        with self._lock:
            write_frame(self.proc.stdin, (method, args, kwargs))
            answer = read_frame(self.proc.stdout)
        if answer is None:
            raise RuntimeError("the kcoord subprocess exited")
        ok, value = answer
        if not ok:
            raise value
        return value

    def stop(self, timeout: float = 30.0) -> None:
        if self.running:
            try:
                self.proc.stdin.close()  # the child stops cleanly on EOF
                self.proc.wait(timeout)
            except (OSError, subprocess.TimeoutExpired):
                self.kill()
        self._close_pipes()

    def kill(self, timeout: float = 30.0) -> None:
        if self.running:
            self.proc.kill()
            self.proc.wait(timeout)
        self._close_pipes()

    def _close_pipes(self) -> None:
        if self.proc is not None:
            for pipe in (self.proc.stdin, self.proc.stdout):
                try:
                    pipe.close()
                except OSError:
                    pass

    def restart(self) -> None:
        self.stop()
        self.start()

    def log_tail(self, n: int = 100) -> list[str]:
        return list(self.lines)[-n:]
