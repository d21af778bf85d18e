"""Issue 5 acceptance: classic consumer groups with real clients against kcoord.

Every consumer runs in its own process (a Python client through this
module's `__main__`, kafkajs through js/classic_consumer.js), so one can be
SIGKILLed: it then leaves no LeaveGroup behind and its sockets just close.
Each consumer process writes one JSON line per event on stdout, stamped with
CLOCK_MONOTONIC (Python's time.monotonic and Node's process.hrtime read the
same clock, so stamps of different processes compare):

  {"e": "assign" | "revoke" | "lost", "t", "ps": [partition...]}
      from the client's rebalance callbacks (kafka-python: an
      AsyncConsumerRebalanceListener, as kafka-python 3 runs listeners on its
      IO thread; aiokafka: ConsumerRebalanceListener; confluent-kafka: on_assign / on_revoke /
      on_lost; kafkajs: the GROUP_JOIN event's member assignment for assign,
      and the start of a rejoin (ConsumerGroup.joinAndSync) or of leave() for
      revoke: kafkajs's eager protocol gives up every partition there, after
      its fetch loop has stopped)
  {"e": "recs", "t", "r": [[partition, offset]...]}   records handed to the app
  {"e": "commit", "t", "c": {partition: offset}}      after the commit is acked
  {"e": "closed", "t"}                                the client is closed

A consumer commits what it processed after every poll and, for its revoked
partitions, in its revoke callback (kafkajs: its autoCommit after every
batch, and on the rebalance error).  A consumer stops gracefully on "stop" on
its stdin (commit, close: LeaveGroup unless static).

The ledger (Ledger) replays those events and checks:
- every record of the log is consumed;
- no partition is owned by two consumers at once: a consumer's ownership of
  a partition starts at its assign callback and ends at its revoke / lost
  callback, its close, or its SIGKILL (stamped after the process is reaped);
  the intervals of different consumers never overlap;
- a consumer is handed records only of partitions it owns;
- a record is consumed again only beyond the at-least-once window: its
  offset is at or after every commit of its partition acknowledged before
  the second consumer's ownership began (a commit acked before an assign is
  what the new owner's OffsetFetch must see);
- committed offsets (OffsetFetch at the wire) end at the log end.

The scenario per client and assignor (test_three_consumers_kill_and_leave):
three consumers share a 6-partition topic holding 10,000 records; then one is
SIGKILLed and the two others take over its partitions, not before the
session timeout; then one leaves gracefully and the last takes everything
long before a session timeout could have passed.  Records are added after
each step so the new owners really fetch what they took over.  Then a static
member's restart (test_static_member_restart) and a restart of kcoord serve
itself (test_server_restart_mid_run).

Every wait polls for its condition under a generous deadline; nothing sleeps
for a fixed time.  The one timing bound asserted (no takeover before the
killed member's session can have expired) only gets safer under load: see
check_kill_takeover.  That the graceful leave was honoured is read from the
server's own log (no session expiry for the leaver), not from a clock:
see check_leave_honoured.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
JS_DIR = Path(__file__).parent / "js"
PARTITIONS = 6
RECORDS = 10_000
EXTRA = 600               # records added after the kill and after the leave
SESSION_MS = 6000         # the server's group.min.session.timeout.ms
HEARTBEAT_MS = 1000
REBALANCE_MS = 30000      # max.poll.interval.ms: how long a join phase may wait for a member
DEADLINE_S = 90.0         # generous bound for any one wait

INF = float("inf")


def now() -> float:
    return time.monotonic()


# ========================================================================
# Consumer processes (run as `python -m tests.clients.test_classic_groups`)
# ========================================================================
class _Out:
    """JSON lines on stdout, one writer at a time."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def __call__(self, **event) -> None:
        line = json.dumps(event)
        with self.lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()


def _stdin_stop() -> threading.Event:
    """Set when the parent writes "stop" or closes our stdin."""
    stop = threading.Event()

    def read() -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        stop.set()

    threading.Thread(target=read, daemon=True).start()
    return stop


def _run_kafka_python(cfg: dict, emit: _Out, stop: threading.Event) -> None:
    from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition
    from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

    strategies = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
                  "sticky": StickyPartitionAssignor,
                  "cooperative-sticky": CooperativeStickyAssignor}
    topic = cfg["topic"]
    positions: dict[int, int] = {}
    consumer = KafkaConsumer(
        bootstrap_servers=cfg["bootstrap"], group_id=cfg["group"], client_id=cfg["name"],
        group_instance_id=cfg.get("instance_id"), enable_auto_commit=False,
        auto_offset_reset="earliest", session_timeout_ms=cfg["session_ms"],
        heartbeat_interval_ms=cfg["heartbeat_ms"], max_poll_interval_ms=cfg["rebalance_ms"],
        partition_assignment_strategy=[strategies[cfg["assignor"]]],
        fetch_max_wait_ms=100, request_timeout_ms=30000)

    def offsets_of(parts) -> dict:
        return {TopicPartition(topic, p): OffsetAndMetadata(positions[p], "", -1)
                for p in parts if p in positions}

    def committed(offsets) -> None:
        emit(e="commit", t=now(), c={tp.partition: o.offset for tp, o in offsets.items()})

    def commit(parts) -> None:
        if offsets := offsets_of(parts):
            try:
                consumer.commit(offsets)
            except Exception as exc:  # noqa: BLE001 - reported; the ledger checks the effect
                emit(e="commit_failed", t=now(), err=repr(exc))
            else:
                committed(offsets)

    # kafka-python 3 runs listeners on its IO thread, where only the async API may
    # be used: a commit in a revoke callback awaits commit_async's future.
    class Listener(AsyncConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked):
            ps = sorted(tp.partition for tp in revoked)
            if offsets := offsets_of(ps):
                try:
                    await consumer.commit_async(offsets)
                except Exception as exc:  # noqa: BLE001
                    emit(e="commit_failed", t=now(), err=repr(exc))
                else:
                    committed(offsets)
            for p in ps:
                positions.pop(p, None)
            emit(e="revoke", t=now(), ps=ps)

        async def on_partitions_assigned(self, assigned):
            emit(e="assign", t=now(), ps=sorted(tp.partition for tp in assigned))

        async def on_partitions_lost(self, lost):
            ps = sorted(tp.partition for tp in lost)
            for p in ps:
                positions.pop(p, None)
            emit(e="lost", t=now(), ps=ps)

    # the topic's partitions known before the first join: kafka-python 3.0.12
    # loses the second, metadata-started rebalance a join without them leads
    # to when poll()'s timeout ends mid JoinGroup/SyncGroup (examples/orders_app)
    consumer.partitions_for_topic(topic)
    consumer.subscribe(topics=[topic], listener=Listener())
    emit(e="started", t=now())
    while not stop.is_set():
        batch = consumer.poll(timeout_ms=1000)
        recs = [[tp.partition, m.offset] for tp, msgs in batch.items() for m in msgs]
        if recs:
            emit(e="recs", t=now(), r=recs)
            for tp, msgs in batch.items():
                positions[tp.partition] = msgs[-1].offset + 1
            commit([tp.partition for tp in batch])
    commit(list(positions))
    emit(e="revoke", t=now(), ps=sorted(tp.partition for tp in consumer.assignment()))
    consumer.close()
    emit(e="closed", t=now())


def _run_aiokafka(cfg: dict, emit: _Out, stop: threading.Event) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.abc import ConsumerRebalanceListener
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    strategies = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}
    topic = cfg["topic"]
    positions: dict[int, int] = {}

    async def main() -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=cfg["bootstrap"], group_id=cfg["group"], client_id=cfg["name"],
            group_instance_id=cfg.get("instance_id"), enable_auto_commit=False,
            auto_offset_reset="earliest", session_timeout_ms=cfg["session_ms"],
            heartbeat_interval_ms=cfg["heartbeat_ms"], max_poll_interval_ms=cfg["rebalance_ms"],
            rebalance_timeout_ms=cfg["rebalance_ms"],
            partition_assignment_strategy=(strategies[cfg["assignor"]],),
            fetch_max_wait_ms=100, request_timeout_ms=30000)

        async def commit(parts) -> None:
            offsets = {TopicPartition(topic, p): positions[p] for p in parts if p in positions}
            if not offsets:
                return
            try:
                await consumer.commit(offsets)
            except Exception as exc:  # noqa: BLE001
                emit(e="commit_failed", t=now(), err=repr(exc))
            else:
                emit(e="commit", t=now(), c={tp.partition: o for tp, o in offsets.items()})

        class Listener(ConsumerRebalanceListener):
            async def on_partitions_revoked(self, revoked):
                ps = sorted(tp.partition for tp in revoked)
                await commit(ps)
                for p in ps:
                    positions.pop(p, None)
                emit(e="revoke", t=now(), ps=ps)

            async def on_partitions_assigned(self, assigned):
                emit(e="assign", t=now(), ps=sorted(tp.partition for tp in assigned))

        await consumer.start()
        consumer.subscribe(topics=[topic], listener=Listener())
        emit(e="started", t=now())
        try:
            while not stop.is_set():
                batch = await consumer.getmany(timeout_ms=500, max_records=500)
                recs = [[tp.partition, m.offset] for tp, msgs in batch.items() for m in msgs]
                if recs:
                    emit(e="recs", t=now(), r=recs)
                    for tp, msgs in batch.items():
                        positions[tp.partition] = msgs[-1].offset + 1
                    await commit([tp.partition for tp in batch])
            await commit(list(positions))
            emit(e="revoke", t=now(), ps=sorted(tp.partition for tp in consumer.assignment()))
        finally:
            await consumer.stop()
        emit(e="closed", t=now())

    asyncio.run(main())


def _run_confluent(cfg: dict, emit: _Out, stop: threading.Event) -> None:
    from confluent_kafka import Consumer, TopicPartition

    topic = cfg["topic"]
    positions: dict[int, int] = {}
    conf = {"bootstrap.servers": cfg["bootstrap"], "group.id": cfg["group"],
            "client.id": cfg["name"], "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": cfg["session_ms"],
            "heartbeat.interval.ms": cfg["heartbeat_ms"],
            "max.poll.interval.ms": cfg["rebalance_ms"],
            "partition.assignment.strategy": cfg["assignor"], "fetch.wait.max.ms": 100}
    if cfg.get("instance_id"):
        conf["group.instance.id"] = cfg["instance_id"]
    # the group state machine's own log, on stderr: shown when a member hangs
    conf["debug"] = os.environ.get("KCOORD_TEST_RDKAFKA_DEBUG", "cgrp")
    consumer = Consumer(conf)

    def commit(parts) -> None:
        offsets = [TopicPartition(topic, p, positions[p]) for p in parts if p in positions]
        if not offsets:
            return
        try:
            consumer.commit(offsets=offsets, asynchronous=False)
        except Exception as exc:  # noqa: BLE001
            emit(e="commit_failed", t=now(), err=repr(exc))
        else:
            emit(e="commit", t=now(), c={tp.partition: tp.offset for tp in offsets})

    def on_assign(c, partitions):
        emit(e="assign", t=now(), ps=sorted(tp.partition for tp in partitions))

    closing = threading.Event()

    def on_revoke(c, partitions):
        ps = sorted(tp.partition for tp in partitions)
        if not closing.is_set():
            # Not inside close(): every position was committed just before it,
            # and librdkafka 2.16 can hang in close() when a synchronous commit
            # made from this callback races its LeaveGroup (the commit then
            # fails with UNKNOWN_MEMBER_ID, as it would against Kafka).
            commit(ps)
        for p in ps:
            positions.pop(p, None)
        emit(e="revoke", t=now(), ps=ps)

    def on_lost(c, partitions):
        ps = sorted(tp.partition for tp in partitions)
        for p in ps:
            positions.pop(p, None)
        emit(e="lost", t=now(), ps=ps)

    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    emit(e="started", t=now())
    while not stop.is_set():
        msgs = consumer.consume(num_messages=500, timeout=0.5)
        recs, touched = [], set()
        for m in msgs:
            if m.error():
                emit(e="error", t=now(), err=str(m.error()))
                continue
            recs.append([m.partition(), m.offset()])
            positions[m.partition()] = m.offset() + 1
            touched.add(m.partition())
        if recs:
            emit(e="recs", t=now(), r=recs)
            commit(sorted(touched))
    commit(list(positions))
    if cfg.get("instance_id"):
        # a static member's close sends no LeaveGroup and calls no revoke callback
        emit(e="revoke", t=now(), ps=sorted(tp.partition for tp in consumer.assignment()))
    closing.set()
    consumer.close()  # dynamic: on_revoke, then LeaveGroup
    emit(e="closed", t=now())


def _consumer_main(client: str, cfg: dict) -> None:
    emit, stop = _Out(), _stdin_stop()
    runner = {"kafka-python": _run_kafka_python, "aiokafka": _run_aiokafka,
              "confluent-kafka": _run_confluent}[client]
    try:
        runner(cfg, emit, stop)
    except BaseException as exc:
        emit(e="error", t=now(), err=repr(exc))
        raise


# ========================================================================
# The parent side: processes, the ledger, the checks
# ========================================================================
def wait_for(condition, what: str, timeout: float = DEADLINE_S, interval: float = 0.05,
             detail=lambda: ""):
    deadline = now() + timeout
    while True:
        value = condition()
        if value:
            return value
        if now() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{detail()}")
        time.sleep(interval)


class Ledger:
    """Every consumer process's events, in arrival order per process."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: dict[str, list[dict]] = defaultdict(list)
        self.owned: dict[str, set[int]] = defaultdict(set)
        self.consumed: dict[tuple[int, int], int] = defaultdict(int)
        self.committed: dict[int, int] = {}     # partition -> highest acked commit
        self.errors: list[str] = []
        self.commit_failures: list[tuple[float, str, str]] = []  # (time, consumer, error)
        self.client_restarts: list[tuple[float, str, str]] = []  # (time, consumer, error)

    def record(self, who: str, event: dict) -> None:
        with self.lock:
            self.events[who].append(event)
            kind = event["e"]
            if kind == "assign":
                self.owned[who].update(event["ps"])
            elif kind in ("revoke", "lost"):
                self.owned[who].difference_update(event["ps"])
            elif kind in ("closed", "killed", "exited"):
                self.owned[who].clear()
            elif kind == "recs":
                for p, o in event["r"]:
                    self.consumed[(p, o)] += 1
            elif kind == "commit":
                for p, o in event["c"].items():
                    p = int(p)
                    self.committed[p] = max(self.committed.get(p, 0), int(o))
            elif kind == "commit_failed":
                self.commit_failures.append((event["t"], who, event["err"]))
            elif kind == "client_restart":
                self.client_restarts.append((event["t"], who, event["err"]))
            elif kind == "error":
                self.errors.append(f"{who}: {event}")

    # ----------------------------------------------------------- snapshots
    def owned_by(self, names) -> dict[str, set[int]]:
        with self.lock:
            return {n: set(self.owned[n]) for n in names}

    def count(self, who: str, *kinds: str) -> int:
        with self.lock:
            return sum(1 for e in self.events[who] if e["e"] in kinds)

    def all_consumed(self, ends: dict[int, int]) -> bool:
        with self.lock:
            return all((p, o) in self.consumed for p, end in ends.items() for o in range(end))

    def commits_at(self, ends: dict[int, int]) -> bool:
        with self.lock:
            return all(self.committed.get(p, 0) == end for p, end in ends.items())

    def summary(self) -> str:
        with self.lock:
            lines = [f"owned: {dict(self.owned)}",
                     f"consumed: {len(self.consumed)} distinct, committed: {self.committed}"]
            for who, events in self.events.items():
                tail = [e for e in events if e["e"] != "recs"][-12:]
                lines.append(f"{who}: {len(events)} events; last non-record events: {tail}")
            return "\n".join(lines)

    # -------------------------------------------------------------- replay
    def _walks(self):
        """(consumer, walk) per consumer; a walk yields each of its events with
        the partitions it owned just before that event (partition -> since),
        then applies the event: assign opens, revoke and lost close those
        partitions, closed / killed / exited close them all.  The dict is the
        same object throughout, so after the walk it holds what stayed open."""
        with self.lock:
            streams = {who: list(events) for who, events in self.events.items()}

        def walk(events, open_):
            for ev in events:
                yield ev, open_
                kind = ev["e"]
                if kind == "assign":
                    for p in ev["ps"]:
                        open_.setdefault(p, ev["t"])
                elif kind in ("revoke", "lost"):
                    for p in ev["ps"]:
                        open_.pop(p, None)
                elif kind in ("closed", "killed", "exited"):
                    open_.clear()
        return [(who, walk(events, {})) for who, events in streams.items()]

    def intervals(self) -> list[tuple[int, str, float, float]]:
        """(partition, consumer, start, end) of every ownership, end=inf if still open."""
        out = []
        for who, walk in self._walks():
            open_: dict[int, float] = {}
            for ev, open_ in walk:
                kind = ev["e"]
                if kind in ("revoke", "lost"):
                    out.extend((p, who, open_[p], ev["t"]) for p in ev["ps"] if p in open_)
                elif kind in ("closed", "killed", "exited"):
                    out.extend((p, who, start, ev["t"]) for p, start in open_.items())
            out.extend((p, who, start, INF) for p, start in open_.items())
        return out

    def check_no_partition_owned_twice(self) -> None:
        by_partition = defaultdict(list)
        for p, who, start, end in self.intervals():
            by_partition[p].append((start, end, who))
        problems = []
        for p, spans in sorted(by_partition.items()):
            spans.sort()
            for i, (s1, e1, w1) in enumerate(spans):
                for s2, e2, w2 in spans[i + 1:]:
                    if w1 != w2 and s2 < e1 and s1 < e2:
                        problems.append(f"partition {p}: {w1} owns it [{s1:.3f}, {e1:.3f}] and "
                                        f"{w2} [{s2:.3f}, {e2:.3f}] "
                                        f"(overlap {min(e1, e2) - s2:.3f}s)")
        assert not problems, "partitions owned by two consumers at once:\n" + "\n".join(problems)

    def consumptions(self) -> list[tuple[float, str, int, int, float]]:
        """(time, consumer, partition, offset, start of the ownership it fell in).
        Asserts every record was handed to a consumer that owned its partition."""
        out, problems = [], []
        for who, walk in self._walks():
            for ev, open_ in walk:
                if ev["e"] == "recs":
                    for p, o in ev["r"]:
                        if p not in open_:
                            problems.append(f"{who} got record {p}:{o} at {ev['t']:.3f} "
                                            f"without owning partition {p}")
                        out.append((ev["t"], who, p, o, open_.get(p, ev["t"])))
        assert not problems, "\n".join(problems[:20])
        return out

    def commit_history(self) -> dict[int, list[tuple[float, int]]]:
        hist = defaultdict(list)
        with self.lock:
            for events in self.events.values():
                for ev in events:
                    if ev["e"] == "commit":
                        for p, o in ev["c"].items():
                            hist[int(p)].append((ev["t"], int(o)))
        for h in hist.values():
            h.sort()
        return hist

    def check_redeliveries(self) -> int:
        """A record consumed again must be at or after every commit of its
        partition acked before the ownership it was consumed again in began.
        Returns how many records were consumed more than once."""
        commits = self.commit_history()

        def committed_before(p: int, t: float) -> int:
            return max((o for tc, o in commits.get(p, ()) if tc < t), default=0)

        seen: dict[tuple[int, int], list] = defaultdict(list)
        for c in sorted(self.consumptions()):
            seen[(c[2], c[3])].append(c)
        problems, again = [], 0
        for (p, o), cs in seen.items():
            if len(cs) < 2:
                continue
            again += 1
            for t, who, _, _, start in cs[1:]:
                bound = committed_before(p, start)
                if o < bound:
                    problems.append(f"record {p}:{o} consumed again by {who} at {t:.3f}, though "
                                    f"offset {bound} was committed before its ownership began "
                                    f"at {start:.3f} (first consumed by {cs[0][1]} "
                                    f"at {cs[0][0]:.3f})")
        assert not problems, (f"{len(problems)} records consumed twice inside the "
                              f"committed range:\n"
                              + "\n".join(problems[:20]))
        return again

    def timeline(self, since: float = 0.0) -> str:
        """Every event but records and commits, in time order (for failure reports)."""
        with self.lock:
            evs = [(ev["t"], who, ev) for who, events in self.events.items() for ev in events
                   if ev["e"] not in ("recs", "commit")]
        return "\n".join(f"{t - since:8.3f} {who:>4} {ev['e']} {ev.get('ps', ev.get('err', ''))}"
                         for t, who, ev in sorted(evs, key=lambda x: x[0]))

    def moves(self, who: str, since: float, until: float = INF) -> list[tuple[str, list[int]]]:
        """Non-empty assign / revoke / lost callbacks of `who` between two times."""
        with self.lock:
            return [(ev["e"], ev["ps"]) for ev in self.events[who]
                    if ev["e"] in ("assign", "revoke", "lost") and ev["ps"]
                    and since < ev["t"] <= until]

    def first_assign(self, who: str) -> float:
        with self.lock:
            return min(ev["t"] for ev in self.events[who] if ev["e"] == "assign" and ev["ps"])

    def takeover_time(self, names, since: float) -> float:
        """The first time after `since` at which `names` together own every partition."""
        evs = []
        with self.lock:
            for who in names:
                evs += [(ev["t"], who, ev) for ev in self.events[who]]
        evs.sort(key=lambda x: x[0])
        owned = defaultdict(set)
        for t, who, ev in evs:
            if ev["e"] == "assign":
                owned[who].update(ev["ps"])
            elif ev["e"] in ("revoke", "lost"):
                owned[who].difference_update(ev["ps"])
            elif ev["e"] in ("closed", "killed", "exited"):
                owned[who].clear()
            if t > since and set().union(*owned.values()) == set(range(PARTITIONS)):
                return t
        raise AssertionError(f"{names} never owned every partition after {since:.3f}")


class Member:
    """One consumer process; its events go to the ledger."""

    def __init__(self, ledger: Ledger, client: str, name: str, cfg: dict, log_dir: Path) -> None:
        self.ledger, self.client, self.name, self.cfg = ledger, client, name, cfg
        self.log_path = log_dir / f"{name}.stderr"
        self.proc: subprocess.Popen | None = None
        self.reader: threading.Thread | None = None
        self.started = threading.Event()

    @property
    def client_id(self) -> str:
        return self.cfg.get("client_id", self.name)

    def start(self) -> "Member":
        cfg = {**self.cfg, "name": self.client_id}   # the client.id the client sends
        if self.client == "kafkajs":
            cmd = ["node", str(JS_DIR / "classic_consumer.js"), json.dumps(cfg)]
        else:
            cmd = [sys.executable, "-m", "tests.clients.test_classic_groups", self.client,
                   json.dumps(cfg)]
        self._stderr = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._stderr, text=True, bufsize=1,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1",
                                          "KAFKAJS_NO_PARTITIONER_WARNING": "1"})
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        return self

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("e") == "started":
                self.started.set()
            self.ledger.record(self.name, event)
        rc = self.proc.wait()
        if rc not in (0, -signal.SIGKILL):
            self.ledger.record(self.name, {"e": "error", "t": now(),
                                           "err": f"exit status {rc}: {self.stderr_tail()}"})

    def stderr_tail(self, n: int = 3000) -> str:
        try:
            return self.log_path.read_text()[-n:]
        except OSError:
            return ""

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = DEADLINE_S) -> None:
        """Graceful: commit and close (LeaveGroup for a dynamic member)."""
        if not self.alive:
            return
        try:
            self.proc.stdin.write("stop\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.name} did not close within {timeout}s:\n"
                                 + self.stderr_tail(20000))
        self.reader.join(10)
        assert self.proc.returncode == 0, f"{self.name} exited {self.proc.returncode}:\n" \
                                          + self.stderr_tail()
        self._stderr.close()

    def kill(self) -> float:
        """SIGKILL: no LeaveGroup, no commit, the sockets just close."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        t = now()  # after the process is gone: its ownership ended before this
        self.reader.join(10)
        self.ledger.record(self.name, {"e": "killed", "t": t})
        self._stderr.close()
        return t


def decode_assignment(data: bytes) -> dict[str, list[int]]:
    """The topic partitions of a ConsumerProtocolAssignment (any version: they come
    first, after the int16 version; user data and later fields are ignored)."""
    import struct
    pos = 2
    (n,) = struct.unpack_from(">i", data, pos)
    pos += 4
    out = {}
    for _ in range(max(n, 0)):
        (size,) = struct.unpack_from(">h", data, pos)
        topic = data[pos + 2:pos + 2 + size].decode()
        pos += 2 + size
        (count,) = struct.unpack_from(">i", data, pos)
        out[topic] = list(struct.unpack_from(f">{count}i", data, pos + 4))
        pos += 4 + 4 * count
    return out


class Scenario:
    """A topic, a ledger and consumer processes of one client against one server."""

    def __init__(self, server, tmp_path: Path, client: str, assignor: str, group: str,
                 session_ms: int = SESSION_MS) -> None:
        self.server, self.tmp_path = server, tmp_path
        self.client, self.assignor, self.group = client, assignor, group
        self.topic = f"t-{group}"
        self.session_ms = session_ms
        self.cooperative = assignor == "cooperative-sticky"
        self.ledger = Ledger()
        self.members: list[Member] = []
        self.produced = 0
        self.started = now()

    # ------------------------------------------------------------ setup
    def create_topic(self) -> None:
        from tests.clients.wire import WireClient, create_topic
        with WireClient(self.server.port) as c:
            result = create_topic(c, self.topic, PARTITIONS)
            assert result["error_code"] == 0, result

    def produce(self, count: int, chunk: int | None = None) -> None:
        """`count` more records, spread evenly; acks=all; flushed every `chunk`."""
        from confluent_kafka import Producer
        producer = Producer({
            "bootstrap.servers": self.server.bootstrap, "acks": "all", "linger.ms": 5,
            "message.send.max.retries": 1000, "retry.backoff.ms": 100,
            "message.timeout.ms": int(DEADLINE_S * 1000), "log_level": 0})
        errors = []
        start = self.produced
        for i in range(start, start + count):
            producer.produce(self.topic, key=str(i).encode(), value=f"value-{i}".encode(),
                             partition=i % PARTITIONS,
                             on_delivery=lambda err, msg: err and errors.append(err))
            if chunk and (i + 1 - start) % chunk == 0:
                assert producer.flush(DEADLINE_S) == 0, "records still undelivered"
                self.produced = i + 1
            elif i % 1000 == 0:
                producer.poll(0)
        assert producer.flush(DEADLINE_S) == 0, "records still undelivered"
        assert not errors, errors[:5]
        self.produced = start + count

    def add(self, name: str | None = None, instance_id: str | None = None,
            client_id: str | None = None, wait_started: bool = True) -> Member:
        cfg = {"bootstrap": self.server.bootstrap, "group": self.group, "topic": self.topic,
               "assignor": self.assignor, "session_ms": self.session_ms,
               "heartbeat_ms": HEARTBEAT_MS, "rebalance_ms": REBALANCE_MS}
        if instance_id:
            cfg["instance_id"] = instance_id
        if client_id:
            cfg["client_id"] = client_id
        m = Member(self.ledger, self.client, name or f"c{len(self.members)}", cfg, self.tmp_path)
        self.members.append(m.start())
        if wait_started:
            wait_for(lambda: m.started.is_set() or not m.alive, f"{m.name} to start")
            assert m.alive, f"{m.name} exited:\n{m.stderr_tail()}"
        return m

    # ------------------------------------------------------------ state
    def log_ends(self) -> dict[int, int]:
        from tests.clients.wire import WireClient, list_offset
        with WireClient(self.server.port) as c:
            return {p: list_offset(c, self.topic, p)["offset"] for p in range(PARTITIONS)}

    def committed(self) -> dict[int, int]:
        """OffsetFetch v7 at the wire."""
        from tests.clients.wire import WireClient
        with WireClient(self.server.port) as c:
            resp = c.request(9, 7, {"group_id": self.group, "require_stable": False, "topics": [
                {"name": self.topic, "partition_indexes": list(range(PARTITIONS))}]})
        assert resp["error_code"] == 0, resp
        [t] = resp["topics"]
        return {p["partition_index"]: p["committed_offset"] for p in t["partitions"]}

    def describe(self) -> dict:
        from tests.clients.wire import WireClient
        with WireClient(self.server.port) as c:
            resp = c.request(15, 5, {"groups": [self.group],
                                     "include_authorized_operations": False})
        [g] = resp["groups"]
        return g

    def check_described(self, members: list[Member]) -> None:
        """DescribeGroups: Stable, exactly these consumers (by client id), and the
        member assignments the server relays are the partitions each one owns."""
        group = self.describe()
        assert group["group_state"] == "Stable", group
        assert group["protocol_type"] == "consumer", group
        by_client = {m["client_id"]: m for m in group["members"]}
        assert sorted(by_client) == sorted(m.client_id for m in members), (
            [(m["client_id"], m["group_instance_id"], m["member_id"]) for m in group["members"]])
        owned = self.ledger.owned_by([m.name for m in members])
        for m in members:
            topics = decode_assignment(by_client[m.client_id]["member_assignment"])
            assert set(topics.get(self.topic, [])) == owned[m.name], (m.name, topics, owned)

    def balanced(self, members: list[Member]) -> bool:
        """The given live consumers own every partition, disjointly and evenly."""
        owned = self.ledger.owned_by([m.name for m in members])
        sizes = [len(s) for s in owned.values()]
        union = set().union(*owned.values())
        return (all(m.alive for m in members) and union == set(range(PARTITIONS))
                and sum(sizes) == PARTITIONS and max(sizes) - min(sizes) <= 1)

    def settle(self, members: list[Member], what: str, exact: bool = True) -> dict[int, int]:
        """Wait until `members` share every partition, every record is consumed and
        the commits are at the log end; returns the log ends.  (`exact=False`: a
        produce retried across a server restart may have stored a record twice.)"""
        ends = self.log_ends()
        if exact:
            assert sum(ends.values()) == self.produced, (ends, self.produced)
        else:
            assert sum(ends.values()) >= self.produced, (ends, self.produced)

        def detail() -> str:
            return self.ledger.summary() + "\n" + self.ledger.timeline(self.started)

        wait_for(lambda: self.balanced(members), f"{what}: the consumers to share the partitions",
                 detail=detail)
        wait_for(lambda: self.ledger.all_consumed(ends), f"{what}: every record consumed",
                 detail=detail)
        wait_for(lambda: self.ledger.commits_at(ends), f"{what}: commits at the log end",
                 detail=detail)
        assert self.committed() == {p: end if end else -1 for p, end in ends.items()}, \
            f"{what}: OffsetFetch"
        assert self.balanced(members), f"{what}: rebalanced again\n{detail()}"
        return ends

    def check(self, commits_may_fail_after: float = INF) -> int:
        """The invariants over the whole run; returns the number of records consumed twice.

        A commit may fail only after `commits_may_fail_after` (a server restart),
        or, for a cooperative consumer, with REBALANCE_IN_PROGRESS: it keeps
        consuming while the group rebalances, and Kafka answers 27 to a commit
        of the new generation while the group is CompletingRebalance (the
        client then commits again after its next poll).  An eager consumer
        commits only in Stable or, from its revoke callback, in
        PreparingRebalance, which must never fail.  A client may restart its
        consumer after a retriable error (kafkajs's crash-and-restart) only
        after the server restart, when its broker is gone for a while."""
        assert self.ledger.errors == [], "\n".join(self.ledger.errors[:10])
        early = [r for r in self.ledger.client_restarts if r[0] < commits_may_fail_after]
        assert early == [], f"consumers restarted by their client with no server restart: {early}"

        def allowed(failure) -> bool:
            t, _, err = failure
            rebalancing = "REBALANCE_IN_PROGRESS" in err or "RebalanceInProgress" in err
            return t >= commits_may_fail_after or (self.cooperative and rebalancing)

        failed = [f for f in self.ledger.commit_failures if not allowed(f)]
        assert failed == [], f"commits failed: {failed[:10]}"
        self.ledger.check_no_partition_owned_twice()
        return self.ledger.check_redeliveries()

    def shutdown(self) -> None:
        for m in self.members:
            if m.alive:
                try:
                    m.stop(30)
                except AssertionError:
                    pass


@pytest.fixture
def scenario_factory(module_server, tmp_path):
    """Scenarios on the module's server (each has its own group and topic), or
    on the test's own `server` when the test restarts it."""
    made: list[Scenario] = []

    def make(client: str, assignor: str, group: str, server=None, **kw) -> Scenario:
        if client == "kafkajs":
            if shutil.which("node") is None:
                pytest.skip("node is not installed")
            assert (JS_DIR / "node_modules" / "kafkajs").is_dir(), "run `make js` first"
        s = Scenario(server or module_server, tmp_path, client, assignor, group, **kw)
        made.append(s)
        return s

    yield make
    for s in made:
        for m in s.members:
            if m.alive:
                m.proc.kill()
                m.proc.wait(10)


def report(request, scenario=None, **values) -> None:
    """Measured values (and the scenario's rebalance timeline), shown with -rP."""
    if scenario is not None:
        print(scenario.ledger.timeline(scenario.started))
    for k, v in values.items():
        request.node.user_properties.append((k, v))
    print(" ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}"
                   for k, v in values.items()))


# ========================================================================
# The tests
# ========================================================================
pytestmark = [pytest.mark.clients, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

# Assignors run in the client; every eager one takes the server the same way
# (JoinGroup, the leader's SyncGroup relayed), so each client runs one eager
# assignor (kafka-python also sticky, whose user data the server relays) and
# its cooperative one; roundrobin stays covered by kafkajs here and by
# aiokafka in STATIC_CASES.
CASES = [("kafka-python", "range"), ("kafka-python", "sticky"),
         ("kafka-python", "cooperative-sticky"), ("aiokafka", "range"),
         ("confluent-kafka", "range"), ("confluent-kafka", "cooperative-sticky"),
         ("kafkajs", "roundRobin")]


def check_kill_takeover(delay: float, session_s: float) -> None:
    """The survivors take the killed member's partitions only once its session
    expired: the session ends one session timeout after its last heartbeat
    (or commit), which was at most about one heartbeat interval before the
    kill; allow one more interval for scheduling.  (A takeover at once would
    mean the server noticed something other than the session timeout.)"""
    lower = session_s - 2 * HEARTBEAT_MS / 1000
    assert delay >= lower, f"takeover {delay:.2f}s after the kill, before the session expired"
    assert delay <= session_s + 30, f"takeover {delay:.2f}s after the kill"


def session_expiries(server, group: str) -> int:
    """The server's "removed: its session expired" lines for the group."""
    marker = f"group {group} ("
    return sum(1 for line in list(server.log_lines)
               if marker in line and "its session expired" in line)


def check_leave_honoured(expiries_after_kill: int, expiries_after_leave: int) -> None:
    """After a LeaveGroup the rebalance starts at once and the last member takes
    everything without the leaver's session expiring; an ignored leave would
    show as one more session expiry before the takeover."""
    assert expiries_after_kill >= 1, "the killed member's session never expired"
    assert expiries_after_leave == expiries_after_kill, (
        f"the leaver was removed by session expiry ({expiries_after_leave - expiries_after_kill}"
        " more), not by its LeaveGroup")


@pytest.mark.parametrize("client,assignor", CASES, ids=[f"{c}-{a}" for c, a in CASES])
def test_three_consumers_kill_and_leave(scenario_factory, request, client, assignor):
    s = scenario_factory(client, assignor, f"g-{client}-{assignor}".lower())
    session_s = s.session_ms / 1000
    started = now()
    s.create_topic()
    s.produce(RECORDS)
    a, b, c = (s.add(wait_started=False) for _ in range(3))
    for m in (a, b, c):
        wait_for(lambda: m.started.is_set() or not m.alive, f"{m.name} to start")
    try:
        s.settle([a, b, c], "three consumers")
        settled_s = now() - started
        s.check_described([a, b, c])
        duplicates_before_kill = s.ledger.check_redeliveries()

        # one consumer dies without leaving; the others take over after its session
        owned_by_a = s.ledger.owned_by([a.name])[a.name]
        killed_at = a.kill()
        s.produce(EXTRA)
        s.settle([b, c], "after the kill")
        s.check_described([b, c])
        kill_delay = s.ledger.takeover_time([b.name, c.name], killed_at) - killed_at
        check_kill_takeover(kill_delay, session_s)
        expiries_after_kill = session_expiries(s.server, s.group)

        # cooperative (KIP-429): the survivors only gain partitions, never give any up
        if assignor == "cooperative-sticky":
            for m in (b, c):
                assert [k for k, _ in s.ledger.moves(m.name, killed_at)] == ["assign"], \
                    s.ledger.moves(m.name, killed_at)

        # one leaves gracefully: the last one gets everything at once
        left_at = now()
        b.stop()
        s.produce(EXTRA)
        s.settle([c], "after the leave")
        s.check_described([c])
        leave_delay = s.ledger.takeover_time([c.name], left_at) - left_at
        expiries_after_leave = session_expiries(s.server, s.group)

        if assignor == "cooperative-sticky":
            assert [k for k, _ in s.ledger.moves(c.name, left_at)] == ["assign"], \
                s.ledger.moves(c.name, left_at)

        c.stop()
        assert s.committed() == s.log_ends()
        assert s.describe()["group_state"] == "Empty"
    finally:
        s.shutdown()
    duplicates = s.check()
    check_leave_honoured(expiries_after_kill, expiries_after_leave)
    report(request, s, records=s.produced, consumed_again=duplicates,
           consumed_again_before_kill=duplicates_before_kill, killed_owned=len(owned_by_a),
           commits_failed=len(s.ledger.commit_failures),
           kill_takeover_s=kill_delay, leave_takeover_s=leave_delay, first_settle_s=settled_s,
           run_s=now() - started)



# ------------------------------------------------------------- static members
STATIC_SESSION_MS = 20000   # a restart takes a few seconds on a loaded machine
STATIC_CASES = [("kafka-python", "range"), ("kafka-python", "cooperative-sticky"),
                ("aiokafka", "roundrobin"), ("confluent-kafka", "range")]


@pytest.mark.parametrize("client,assignor", STATIC_CASES, ids=[f"{c}-{a}" for c, a in STATIC_CASES])
def test_static_member_restart(scenario_factory, request, client, assignor):
    """Three static members (group.instance.id); the leader, then a follower, is
    closed (a static member sends no LeaveGroup) and started again within its
    session timeout: it gets its partitions back under a new member id, and the
    two others see no revoke and no assign.  (kafkajs has no static membership.)"""
    s = scenario_factory(client, assignor, f"static-{client}-{assignor}".lower(),
                         session_ms=STATIC_SESSION_MS)
    s.create_topic()
    s.produce(RECORDS)
    a = s.add("a", instance_id="a")   # alone first: a is the leader
    wait_for(lambda: s.balanced([a]), "the first member to own every partition",
             detail=s.ledger.summary)
    b, c = s.add("b", instance_id="b"), s.add("c", instance_id="c")
    live = [a, b, c]
    restarts = []
    try:
        s.settle(live, "three static members")
        for old in (a, b):            # the leader, then a follower
            others = [m for m in live if m is not old]
            theirs = s.ledger.owned_by([m.name for m in others])
            mine = s.ledger.owned_by([old.name])[old.name]
            before = {m["group_instance_id"]: m["member_id"] for m in s.describe()["members"]}
            assert sorted(before) == ["a", "b", "c"], before
            closed_at = now()
            old.stop()
            # the same application again: same instance id and client id, a new process
            new = s.add(f"{old.name}2", instance_id=old.cfg["instance_id"],
                        client_id=old.client_id)
            live = others + [new]
            s.produce(EXTRA)
            s.settle(live, f"{old.name} restarted")
            s.check_described(live)
            back = s.ledger.first_assign(new.name) - closed_at
            restarts.append(back)
            assert back < STATIC_SESSION_MS / 1000, f"restart took {back:.2f}s"
            assert s.ledger.owned_by([new.name])[new.name] == mine
            for m in others:    # no rebalance of the others
                moved = s.ledger.moves(m.name, closed_at)
                assert moved == [], f"{m.name} rebalanced: {moved}"
            assert s.ledger.owned_by([m.name for m in others]) == theirs
            group = s.describe()
            after = {m["group_instance_id"]: m["member_id"] for m in group["members"]}
            assert group["group_state"] == "Stable", group
            assert sorted(after) == ["a", "b", "c"], after
            iid = old.cfg["instance_id"]
            assert after[iid] != before[iid], "the restarted instance kept its member id"
            assert {k: v for k, v in after.items() if k != iid} == \
                {k: v for k, v in before.items() if k != iid}
    finally:
        s.shutdown()
    duplicates = s.check()
    report(request, s, records=s.produced, consumed_again=duplicates,
           commits_failed=len(s.ledger.commit_failures), leader_restart_s=restarts[0], follower_restart_s=restarts[1])


# ------------------------------------------------------------- server restart
# The server is stopped with SIGTERM for some clients and SIGKILL for others
# (an acked commit must already be on disk); the same port and data dir.
RESTART_CASES = [("kafka-python", "cooperative-sticky", "sigterm"),
                 ("aiokafka", "range", "sigkill"),
                 ("confluent-kafka", "range", "sigkill"),
                 ("kafkajs", "roundRobin", "sigterm")]


@pytest.mark.parametrize("client,assignor,how", RESTART_CASES,
                         ids=[f"{c}-{a}-{h}" for c, a, h in RESTART_CASES])
def test_server_restart_mid_run(scenario_factory, server, request, client, assignor, how):
    """Three consumers read while a producer writes 10,000 records in chunks;
    kcoord serve is restarted after about a third of them.  The group comes
    back (same members, Stable), the consumers carry on, every record is
    consumed, and no record below a commit acknowledged before the restart is
    consumed again (records after the last commit may repeat)."""
    s = scenario_factory(client, assignor, f"restart-{client}-{assignor}".lower(), server=server)
    s.create_topic()
    members = [s.add() for _ in range(3)]
    s.settle(members, "three consumers on an empty topic")
    members_before = sorted(m["member_id"] for m in s.describe()["members"])

    failure: list[BaseException] = []

    def produce() -> None:
        try:
            s.produce(RECORDS, chunk=250)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
            failure.append(exc)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    try:
        wait_for(lambda: len(s.ledger.consumed) >= RECORDS // 3 or failure,
                 "a third of the records to be consumed", detail=s.ledger.summary)
        restart_at = now()
        if how == "sigkill":
            server.kill()
        else:
            server.stop()
        server.start()
        back_at = now()
        producer.join(DEADLINE_S)
        assert not producer.is_alive() and not failure, failure
        s.settle(members, "after the restart", exact=False)
        s.check_described(members)   # members and assignments came back from the log
        group = s.describe()
        members_after = sorted(m["member_id"] for m in group["members"])
        for m in members:
            m.stop()
        assert s.committed() == s.log_ends()
    finally:
        s.shutdown()

    duplicates = s.check(commits_may_fail_after=restart_at)
    # the restart itself: nothing committed before it is read again after it
    committed_before = {p: max((o for t, o in h if t < restart_at), default=0)
                        for p, h in s.ledger.commit_history().items()}
    again = [(who, p, o) for t, who, p, o, _ in s.ledger.consumptions()
             if t > restart_at and o < committed_before.get(p, 0)]
    assert again == [], (f"{len(again)} records committed before the restart consumed "
                         f"again: {again[:10]}")
    report(request, s, records=sum(s.log_ends().values()), consumed_again=duplicates,
           consumed_before_restart=sum(1 for t, *_ in s.ledger.consumptions() if t < restart_at),
           downtime_s=back_at - restart_at, commits_failed=len(s.ledger.commit_failures),
           same_members=members_before == members_after)


# ------------------------------------------------------------- the checker itself
def test_ledger_finds_violations():
    """The checks above fail on the faults they are for (no client involved)."""
    def ledger(*events):
        led = Ledger()
        for who, ev in events:
            led.record(who, ev)
        return led

    # overlapping ownership
    led = ledger(("x", {"e": "assign", "t": 1.0, "ps": [0]}),
                 ("y", {"e": "assign", "t": 2.0, "ps": [0]}),
                 ("x", {"e": "revoke", "t": 3.0, "ps": [0]}))
    with pytest.raises(AssertionError, match="owned by two consumers"):
        led.check_no_partition_owned_twice()
    # a kill ends ownership; a later assign elsewhere is fine
    led = ledger(("x", {"e": "assign", "t": 1.0, "ps": [0]}), ("x", {"e": "killed", "t": 2.0}),
                 ("y", {"e": "assign", "t": 2.5, "ps": [0]}))
    led.check_no_partition_owned_twice()
    # a record of a partition the consumer does not own
    led = ledger(("x", {"e": "assign", "t": 1.0, "ps": [0]}),
                 ("x", {"e": "recs", "t": 1.5, "r": [[1, 0]]}))
    with pytest.raises(AssertionError, match="without owning"):
        led.consumptions()
    # consumed again below a commit acked before the new ownership began
    led = ledger(("x", {"e": "assign", "t": 1.0, "ps": [0]}),
                 ("x", {"e": "recs", "t": 1.1, "r": [[0, 0], [0, 1]]}),
                 ("x", {"e": "commit", "t": 1.2, "c": {"0": 2}}),
                 ("x", {"e": "revoke", "t": 1.3, "ps": [0]}),
                 ("y", {"e": "assign", "t": 1.4, "ps": [0]}),
                 ("y", {"e": "recs", "t": 1.5, "r": [[0, 1]]}))
    with pytest.raises(AssertionError, match="inside the committed range"):
        led.check_redeliveries()
    # ... but after the last commit it is the at-least-once window
    led = ledger(("x", {"e": "assign", "t": 1.0, "ps": [0]}),
                 ("x", {"e": "recs", "t": 1.1, "r": [[0, 0], [0, 1]]}),
                 ("x", {"e": "commit", "t": 1.2, "c": {"0": 1}}),
                 ("x", {"e": "killed", "t": 1.3}),
                 ("y", {"e": "assign", "t": 1.4, "ps": [0]}),
                 ("y", {"e": "recs", "t": 1.5, "r": [[0, 1]]}))
    assert led.check_redeliveries() == 1


if __name__ == "__main__":
    _consumer_main(sys.argv[1], json.loads(sys.argv[2]))
