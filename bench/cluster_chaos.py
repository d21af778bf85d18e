"""Chaos run on a real 3-node cluster (one etcd member, three `kcoord serve`
processes on 127.0.0.1, etcd.lease.ttl.ms 2000) under a committing and
producing load, then a rolling restart.

    python -m bench cluster_chaos [--quick]

Load (threads in this process, blocking sockets, kcoord's own codec):
- committers: one per group (8 groups), each commits offsets 1, 2, 3, ... of
  one partition through OffsetCommit to its coordinator (FindCoordinator,
  rediscovered on any error) and records every acknowledged offset;
- a producer: acks=all records with a sequence number, round robin over the
  partitions of a topic with replication factor 3 (min.insync.replicas 2),
  each sent to the leader Metadata names; every acknowledged (partition,
  offset, sequence) is recorded.
Cycles (100; 5 with --quick; --cycles N): a node in turn is SIGKILLed (every fourth
cycle: stopped gracefully), restarted, and the next cycle waits until no
partition of either topic is under-replicated (bounded).  Then every node is restarted
gracefully in turn (a rolling restart).

Figures: lost acknowledged commits (each time a committer moves to another
coordinator it first reads its committed offset there: below its highest
acknowledged one is a loss; and at the end, OffsetFetch below the highest
acknowledged offset; goal 0); time from a kill to the next
acknowledged commit of each group the victim coordinated (p50, max; goal
<= TTL + 1 s); acks=all records lost (an acknowledged sequence missing at
its offset at the end; goal 0); longest pause of any group's commits during
the rolling restart (goal < 1 s).
Results: bench/results/cluster_chaos.{md,json}.
"""
from __future__ import annotations

import signal
import socket
import struct
import tempfile
import threading
import time
from pathlib import Path

from .cluster_failover import Node, _metadata, _pct, _until
from .common import table, write_results

TTL_MS = 2000
GROUPS = [f"chaos-group-{i}" for i in range(8)]
TOPIC = "chaos"
PARTITIONS = 3
CATCH_UP_S = 60.0
ACK_WAIT_S = 10.0  # an affected group with no commit this long after the kill is a miss


class Conn:
    """One blocking connection to a node; any failure closes it."""

    def __init__(self, port: int, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def request(self, api_key: int, version: int, body: dict) -> dict:
        from kcoord.protocol.api import APIS, request_codec, response_codec
        from kcoord.protocol.headers import decode_response_header, encode_request_header
        flexible = APIS[api_key].request.is_flexible(version)
        payload = encode_request_header(api_key, version, 1, "chaos", flexible) \
            + bytes(request_codec(api_key, version)[0](body))
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", self._exact(4))[0]
        frame = self._exact(size)
        _, pos = decode_response_header(frame, flexible)
        return response_codec(api_key, version)[1](frame, pos)[0]

    def _exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed")
            out += chunk
        return bytes(out)

    def close(self) -> None:
        self.sock.close()


class Load:
    def __init__(self, ports: dict[int, int]) -> None:
        self.ports = ports  # node id -> port
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.commits: dict[str, list[tuple[float, int]]] = {g: [] for g in GROUPS}
        self.coordinator: dict[str, int] = {}
        self.produced: list[tuple[int, int, int]] = []  # (partition, offset, sequence)
        self.errors = 0
        # (group, highest acknowledged, what the next coordinator had): a
        # commit lost by a failover, seen when the committer moves over
        self.losses: list[tuple[str, int, int]] = []

    def _any(self) -> Conn:
        for port in self.ports.values():
            try:
                return Conn(port)
            except OSError:
                continue
        raise ConnectionError("no node answers")

    def committer(self, group: str) -> None:
        offset = 1
        conn = None
        while not self.stop.is_set():
            try:
                if conn is None:
                    c = self._any()
                    try:
                        r = c.request(10, 3, {"key": group, "key_type": 0})
                    finally:
                        c.close()
                    if r["error_code"] != 0:
                        time.sleep(0.05)
                        continue
                    conn = Conn(r["port"])
                    self.coordinator[group] = r["node_id"]
                    if offset > 1:  # moved over: the new coordinator must have every ack
                        f = conn.request(9, 7, {"group_id": group, "topics": [
                            {"name": TOPIC, "partition_indexes": [0]}], "require_stable": False})
                        parts = [p for t in f["topics"] for p in t["partitions"]]
                        if f.get("error_code") or not parts or parts[0]["error_code"]:
                            conn.close()
                            conn = None
                            time.sleep(0.05)
                            continue
                        if parts[0]["committed_offset"] < offset - 1:
                            with self.lock:
                                self.losses.append((group, offset - 1,
                                                    parts[0]["committed_offset"]))
                r = conn.request(8, 8, {
                    "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                    "group_instance_id": None, "topics": [{"name": TOPIC, "partitions": [{
                        "partition_index": 0, "committed_offset": offset,
                        "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
                code = r["topics"][0]["partitions"][0]["error_code"]
                if code == 0:
                    with self.lock:
                        self.commits[group].append((time.monotonic(), offset))
                    offset += 1
                    time.sleep(0.01)
                else:
                    self.errors += 1
                    conn.close()
                    conn = None
                    time.sleep(0.02)
            except (OSError, ConnectionError, struct.error, KeyError, IndexError):
                self.errors += 1
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(0.05)

    def producer(self) -> None:
        from kcoord.protocol.records import build_batch
        seq = 0
        leaders: dict[int, int] = {}
        conns: dict[int, Conn] = {}
        while not self.stop.is_set():
            p = seq % PARTITIONS
            try:
                if p not in leaders:
                    c = self._any()
                    try:
                        meta = c.request(3, 12, {"topics": [{"name": TOPIC, "topic_id": bytes(16)}],
                                                 "allow_auto_topic_creation": False,
                                                 "include_topic_authorized_operations": False})
                    finally:
                        c.close()
                    for part in meta["topics"][0]["partitions"]:
                        if part["leader_id"] > 0:
                            leaders[part["partition_index"]] = part["leader_id"]
                    if p not in leaders:
                        time.sleep(0.05)
                        continue
                node = leaders[p]
                if node not in conns:
                    conns[node] = Conn(self.ports[node], timeout=35)
                batch = build_batch([(None, str(seq).encode(), [], None)])
                r = conns[node].request(0, 9, {
                    "transactional_id": None, "acks": -1, "timeout_ms": 30000,
                    "topic_data": [{"name": TOPIC, "partition_data": [
                        {"index": p, "records": batch}]}]})
                part = r["responses"][0]["partition_responses"][0]
                if part["error_code"] == 0:
                    with self.lock:
                        self.produced.append((p, part["base_offset"], seq))
                    seq += 1
                else:
                    self.errors += 1
                    leaders.pop(p, None)
                    time.sleep(0.02)
            except (OSError, ConnectionError, struct.error, KeyError, IndexError):
                self.errors += 1
                leaders.clear()
                for c in conns.values():
                    c.close()
                conns.clear()
                time.sleep(0.05)


def _under_replicated(port: int, topics=(TOPIC, "__consumer_offsets")) -> int:
    """Partitions of `topics` with an ISR short of their replicas (or no
    leader): the data topic and the offsets topic the commits go to.  A
    restart is over, as for an operator's rolling restart, when this is 0
    (Kafka's UnderReplicatedPartitions)."""
    meta = _metadata(port)
    return sum(len(p["isr_nodes"]) < len(p["replica_nodes"]) or p["leader_id"] < 0
               for t in meta["topics"] if t["name"] in topics for p in t["partitions"])


def _next_ack_after(load: Load, group: str, t0: float) -> float | None:
    with load.lock:
        for t, _ in load.commits[group]:
            if t > t0:
                return t
    return None


def _longest_gap(load: Load, start: float, end: float) -> tuple[float, float]:
    """(longest time between two acknowledged commits of one group, when it began)."""
    worst, at = 0.0, start
    with load.lock:
        for group, acks in load.commits.items():
            times = [start] + [t for t, _ in acks if start <= t <= end] + [end]
            for a, b in zip(times, times[1:]):
                if b - a > worst:
                    worst, at = b - a, a
    return worst, at


def _final_checks(load: Load, nodes: dict) -> tuple[int, int, int]:
    """(groups whose committed offset is below their highest ack, acked
    records missing, records checked)."""
    lost_commits = 0
    port = next(n.port for n in nodes.values())
    for group in GROUPS:
        acked = max((o for _, o in load.commits[group]), default=0)
        if not acked:
            continue
        def committed():
            c = Conn(port)
            try:
                r = c.request(10, 3, {"key": group, "key_type": 0})
            finally:
                c.close()
            if r["error_code"]:
                return None
            c = Conn(r["port"])
            try:
                f = c.request(9, 7, {"group_id": group, "topics": [
                    {"name": TOPIC, "partition_indexes": [0]}], "require_stable": False})
            finally:
                c.close()
            part = f["topics"][0]["partitions"][0]
            return part["committed_offset"] if part["error_code"] == 0 else None
        value = None
        deadline = time.monotonic() + 30
        while value is None and time.monotonic() < deadline:
            try:
                value = committed()
            except OSError:
                value = None
            if value is None:
                time.sleep(0.1)
        if value is None or value < acked:
            lost_commits += 1
            print(f"  {group}: committed {value}, highest acknowledged {acked}", flush=True)
    from kcoord.protocol.records import decode_batch, iter_batches
    meta = _metadata(port)
    leaders = {p["partition_index"]: p["leader_id"] for t in meta["topics"] if t["name"] == TOPIC
               for p in t["partitions"]}
    present: dict[tuple[int, int], bytes] = {}
    for p, leader in leaders.items():
        c = Conn(nodes[leader].port, timeout=30)
        offset = 0
        try:
            while True:
                r = c.request(1, 12, {
                    "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 8 << 20,
                    "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                    "topics": [{"topic": TOPIC, "topic_id": bytes(16), "partitions": [{
                        "partition": p, "fetch_offset": offset, "partition_max_bytes": 8 << 20,
                        "log_start_offset": -1}]}],
                    "forgotten_topics_data": [], "rack_id": ""})
                part = r["responses"][0]["partitions"][0]
                data = part["records"] or b""
                got = False
                for pos, header in iter_batches(data):
                    _, records = decode_batch(data, pos)
                    for rec in records:
                        present[(p, rec.offset)] = rec.value
                        offset = rec.offset + 1
                        got = True
                if not got or offset >= part["high_watermark"]:
                    break
        finally:
            c.close()
    lost_records = sum(present.get((p, o)) != str(seq).encode() for p, o, seq in load.produced)
    return lost_commits, lost_records, len(load.produced)


def run(args) -> None:
    from kcoord.cluster.etcd_server import EtcdServer
    cycles = getattr(args, "cycles", None) or (5 if args.quick else 100)
    root = Path(tempfile.mkdtemp(prefix="kcoord-bench-chaos-"))
    etcd = EtcdServer(root / "etcd").start()
    nodes = {i: Node(i, root, etcd.endpoint, "/chaos") for i in (1, 2, 3)}
    for n in nodes.values():
        n.cmd += ["--set", "min.insync.replicas=2", "--set", "group.initial.rebalance.delay.ms=0", "--log-level", "INFO"]
    load = Load({i: n.port for i, n in nodes.items()})
    kill_to_ack: list[float] = []
    graceful_pause: list[float] = []
    missed: list[str] = []
    rolling_pause = float("nan")
    rolling_where = "-"
    try:
        for n in nodes.values():
            n.start()
        port = nodes[1].port
        _until(lambda: len(_metadata(port)["brokers"]) == 3, "3 nodes registered")
        c = Conn(port, timeout=30)
        try:
            r = c.request(19, 7, {"topics": [{"name": TOPIC, "num_partitions": PARTITIONS,
                                               "replication_factor": 3, "assignments": [],
                                               "configs": []}],
                                  "timeout_ms": 30000, "validate_only": False})
        finally:
            c.close()
        assert r["topics"][0]["error_code"] in (0, 36), r
        threads = [threading.Thread(target=load.committer, args=(g,), daemon=True)
                   for g in GROUPS] + [threading.Thread(target=load.producer, daemon=True)]
        for t in threads:
            t.start()
        _until(lambda: all(load.commits[g] for g in GROUPS), "every group committing")
        for cycle in range(cycles):
            victim = cycle % 3 + 1
            graceful = cycle % 4 == 3
            affected = [g for g in GROUPS if load.coordinator.get(g) == victim]
            proc = nodes[victim].proc
            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM if graceful else signal.SIGKILL)
            deadline = t0 + ACK_WAIT_S
            while time.monotonic() < deadline and not all(
                    _next_ack_after(load, g, t0) for g in affected):
                time.sleep(0.01)
            for g in affected:
                t = _next_ack_after(load, g, t0)
                if t is None:
                    missed.append(f"cycle {cycle}: {g}")
                elif graceful:
                    graceful_pause.append((t - t0) * 1000)
                else:
                    kill_to_ack.append((t - t0) * 1000)
            proc.wait(30)
            nodes[victim].start()
            other = nodes[victim % 3 + 1].port
            try:
                _until(lambda: _under_replicated(other) == 0, "in sync again")
            except TimeoutError:
                missed.append(f"cycle {cycle}: still under-replicated after {CATCH_UP_S}s")
            print(f"cycle {cycle + 1}/{cycles}: node {victim} "
                  f"{'stopped' if graceful else 'killed'}; {len(affected)} groups affected",
                  flush=True)
        # rolling restart: every node stopped gracefully and started again in turn
        start = time.monotonic()
        steps = []  # (time, what): to say which step the longest pause followed
        for node_id in (1, 2, 3):
            steps.append((time.monotonic(), f"node {node_id} stopping"))
            nodes[node_id].proc.send_signal(signal.SIGTERM)
            nodes[node_id].proc.wait(30)
            steps.append((time.monotonic(), f"node {node_id} stopped"))
            nodes[node_id].start()
            steps.append((time.monotonic(), f"node {node_id} started"))
            other = nodes[node_id % 3 + 1].port
            _until(lambda: _under_replicated(other) == 0, "in sync after restart")
            steps.append((time.monotonic(), f"node {node_id} in sync"))
        pause, at = _longest_gap(load, start, time.monotonic())
        rolling_pause = pause * 1000
        step = max((s for s in steps if s[0] <= at), default=(start, "start"))
        rolling_where = f"{(at - step[0]) * 1000:.0f} ms after {step[1]}"
        print(f"rolling restart: longest pause {rolling_pause:.0f} ms, from {rolling_where}",
              flush=True)
        load.stop.set()
        for t in threads:
            t.join(40)
        lost_commits, lost_records, produced = _final_checks(load, nodes)
    finally:
        load.stop.set()
        for n in nodes.values():
            if n.proc is not None and n.proc.poll() is None:
                n.proc.kill()
                n.proc.wait(10)
        etcd.stop()
    commits = sum(len(v) for v in load.commits.values())
    rows = [["acknowledged commits", f"{commits:,}"],
            ["groups with a lost acknowledged commit (goal 0)", lost_commits],
            ["kill -> next acknowledged commit of an affected group, p50 ms",
             f"{_pct(kill_to_ack, 0.5):.0f}" if kill_to_ack else "-"],
            ["kill -> next acknowledged commit, max ms (goal <= 3000)",
             f"{max(kill_to_ack):.0f}" if kill_to_ack else "-"],
            ["graceful stop -> next acknowledged commit, p50 / max ms",
             f"{_pct(graceful_pause, 0.5):.0f} / {max(graceful_pause):.0f}"
             if graceful_pause else "-"],
            ["acks=all records acknowledged", f"{produced:,}"],
            ["acks=all records lost (goal 0)", lost_records],
            ["rolling restart: longest pause of any group, ms (goal < 1000)",
             f"{rolling_pause:.0f} (from {rolling_where})"],
            ["affected groups with no commit within 10 s of the kill", len(missed)],
            ["acknowledged commits missing on the next coordinator (goal 0)", len(load.losses)]]
    sections = [
        f"3 nodes + 1 etcd member on 127.0.0.1, etcd.lease.ttl.ms={TTL_MS}, {cycles} cycles "
        f"(SIGKILL, every fourth a graceful stop), {len(GROUPS)} committing groups, one acks=all "
        f"producer over {PARTITIONS} partitions with replication factor 3 and "
        "min.insync.replicas 2; then a rolling restart.", "",
        table(["figure", "value"], rows), ""]
    if missed:
        sections += ["Misses: " + "; ".join(missed[:20]), ""]
    write_results("cluster_chaos", "Cluster chaos run", sections, {
        "cycles": cycles, "ttl_ms": TTL_MS, "commits": commits, "lost_commits": lost_commits,
        "kill_to_ack_ms": kill_to_ack, "graceful_to_ack_ms": graceful_pause,
        "produced": produced, "lost_records": lost_records, "rolling_pause_ms": rolling_pause,
        "rolling_pause_from": rolling_where,
        "missed": missed, "client_errors": load.errors, "losses": load.losses})
