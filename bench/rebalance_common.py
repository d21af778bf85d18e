"""What the two rebalance benchmarks (classic_rebalance, consumer_rebalance)
share: worker processes hosting confluent-kafka consumers on command, the
orchestrator's event pump, and the worker side itself.

A worker is `python -m bench.<module> worker SPEC`: it reads JSON commands on
stdin (prepare/start/subscribe/close/exit) and prints one JSON event per
line on stdout, timestamped with CLOCK_MONOTONIC (shared by all processes).
"""
from __future__ import annotations

import json
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from typing import Callable

from .common import PY, ROOT, loadavg, timed

CALLBACKS = ("assign", "revoke", "lost")


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(topic, partitions, 1)],
                                   operation_timeout=30).values():
        fut.result(timeout=60)


def stats(values: list[float]) -> dict:
    if not values:
        return {}
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values)}


def measure_sizes(peer, topic: tuple[str, int] | None, sizes: list[int], trials: int,
                  measure: Callable) -> dict:
    """Run `measure(peer, size, trials, workers)` for each group size against a
    started peer, after creating `topic` (name, partitions) unless it is None
    (the mock gets its topics at start); then stop the peer.  An error is
    kept per size."""
    out: dict = {"sizes": {}, "cpu_note": peer.cpu_note}
    try:
        if topic is not None:
            create_topic(peer.bootstrap, *topic)
        for size in sizes:
            with timed(f"  {peer.name}: group of {size}"):
                load_before = loadavg()
                try:
                    out["sizes"][str(size)] = measure(peer, size, trials, min(5, size))
                    out["sizes"][str(size)]["loadavg"] = [load_before, loadavg()]
                except Exception as exc:
                    out["sizes"][str(size)] = {"error": f"{type(exc).__name__}: {exc}"}
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        peer.stop()
    return out


def start_group(group: "EventPump", workers: list["Worker"], count: int, settle_s: float,
                timeout_s: float, out: dict) -> set[int] | None:
    """Start consumers 0..count-1 spread over the workers and wait until the
    group is stable (group.wait_stable); out gets setup_s, or an error and
    None is returned."""
    t_setup = time.monotonic()
    members = set(range(count))
    for k in sorted(members):
        workers[k % len(workers)].send(op="start", id=k)
    if group.wait_stable(members, 0.0, timeout_s) is None:
        out["error"] = (f"the first {count} consumers were not stable after "
                        f"{timeout_s}s; errors: {group.errors[:3]}")
        return None
    out["setup_s"] = time.monotonic() - t_setup - settle_s
    return members


def join_one(group: "EventPump", worker: "Worker", k: int, members: set[int],
             before_s: float, timeout_s: float) -> tuple[float, float | None]:
    """Consumer k is created, given `before_s` to bootstrap, then subscribes;
    returns t0 (its subscribe) and the time the group with it was stable
    (None on timeout)."""
    worker.send(op="prepare", id=k)
    group.wait_mark("prepared", k, 30)
    group.pump(before_s)
    worker.send(op="subscribe", id=k)
    t0 = group.wait_mark("subscribe", k, 30)
    return t0, group.wait_stable(members | {k}, t0, timeout_s)


def leave_one(group: "EventPump", worker: "Worker", k: int, members: set[int],
              timeout_s: float) -> float | None:
    """Consumer k closes; ms from its close() until `members` are stable
    again (None on timeout)."""
    worker.send(op="close", id=k)
    t_leave = group.wait_mark("closing", k, 30)
    left = group.wait_stable(members, t_leave, timeout_s)
    return (left - t_leave) * 1000 if left is not None else None


class Worker:
    """A worker process hosting consumers; its events go to a shared queue."""

    def __init__(self, module: str, spec: dict, events: queue.Queue) -> None:
        self.proc = subprocess.Popen([PY, "-m", module, "worker", json.dumps(spec)], cwd=ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     bufsize=1)
        threading.Thread(target=self._pump, args=(events,), daemon=True).start()

    def _pump(self, events: queue.Queue) -> None:
        for line in self.proc.stdout:
            if line.startswith("{"):
                events.put(json.loads(line))

    def send(self, **cmd) -> None:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        try:
            self.send(op="exit")
            self.proc.stdin.close()
            self.proc.wait(60)
        except Exception:
            self.proc.kill()
            self.proc.wait(10)


class EventPump:
    """The orchestrator's view of one group's events.  Subclasses keep what
    the rebalance callbacks say in `on_callback`; other events are marks
    (prepared, subscribe, closing, ...) or errors."""

    def __init__(self, events: queue.Queue) -> None:
        self.events = events
        self.marks: dict[tuple[str, int], float] = {}  # (event, member) -> time
        self.errors: list[str] = []

    def on_callback(self, kind: str, k: int, t: float, parts: list[int]) -> None:
        raise NotImplementedError

    def pump(self, timeout: float) -> bool:
        """Take the events that arrive within timeout; True if a callback did."""
        got = False
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                ev = self.events.get(timeout=left) if left > 0 else self.events.get_nowait()
            except queue.Empty:
                return got
            kind, k = ev["ev"], ev.get("id")
            if kind in CALLBACKS:
                got = True
                self.on_callback(kind, k, ev["t"], ev["parts"])
            elif kind == "error":
                self.errors.append(f"consumer {k}: {ev['error']}")
            else:
                self.marks[(kind, k)] = ev["t"]

    def wait_mark(self, kind: str, k: int, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while (kind, k) not in self.marks:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {kind} event from consumer {k} in {timeout:.0f}s")
            self.pump(0.1)
        return self.marks[(kind, k)]


def run_worker(spec: dict, config: Callable[[str, str], dict],
               callbacks: tuple[str, ...]) -> None:
    """The worker process: consumers on command (stdin), events out (stdout).
    `callbacks` names the rebalance callbacks to report (on_<name>)."""
    from confluent_kafka import Consumer

    lock = threading.Lock()

    def emit(**ev) -> None:
        line = json.dumps(ev)
        with lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    class Member:
        def __init__(self, k: int) -> None:
            self.k = k
            self.stop = threading.Event()
            self.go = threading.Event()
            self.thread = threading.Thread(target=self.main, daemon=True)

        def callback(self, kind: str):
            def cb(consumer, partitions) -> None:
                emit(ev=kind, id=self.k, t=time.monotonic(),
                     parts=sorted(p.partition for p in partitions))
            return cb

        def main(self) -> None:
            try:
                consumer = Consumer(config(spec["bootstrap"], spec["group"]))
            except Exception as exc:
                emit(ev="error", id=self.k, error=repr(exc))
                return
            emit(ev="prepared", id=self.k, t=time.monotonic())
            try:
                while not self.go.wait(0.1):
                    if self.stop.is_set():
                        return
                emit(ev="subscribe", id=self.k, t=time.monotonic())
                consumer.subscribe([spec["topic"]],
                                   **{f"on_{c}": self.callback(c) for c in callbacks})
                deadline = time.monotonic() + 3600  # bounded: an hour at most
                while not self.stop.is_set() and time.monotonic() < deadline:
                    msg = consumer.poll(0.2)
                    if msg is not None and msg.error() and not msg.error().retriable():
                        emit(ev="error", id=self.k, error=str(msg.error()))
            except Exception as exc:
                emit(ev="error", id=self.k, error=repr(exc))
            finally:
                emit(ev="closing", id=self.k, t=time.monotonic())
                consumer.close()
                emit(ev="closed", id=self.k, t=time.monotonic())

    members: dict[int, Member] = {}
    for line in sys.stdin:
        cmd = json.loads(line)
        op, k = cmd["op"], cmd.get("id")
        if op in ("prepare", "start"):
            m = members[k] = Member(k)
            m.thread.start()
            if op == "start":
                m.go.set()
        elif op == "subscribe":
            members[k].go.set()
        elif op == "close":
            members[k].stop.set()
        elif op == "exit":
            break
    for m in members.values():
        m.stop.set()
    for m in members.values():
        m.thread.join(30)
    sys.stdout.flush()
    os._exit(0)
