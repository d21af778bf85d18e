"""Crash safety of committed offsets: SIGKILL `kcoord serve` while it commits.

Wire-level committers (one thread and one connection each, several requests
in flight) commit strictly increasing offsets per (group, topic, partition).
A commit counts as acknowledged only when its response arrives with error 0.
At a seeded random moment the server is killed with SIGKILL, then started
again on the same port and data dir.  After every restart:

* the server starts and every shard loads (ListGroups answers without
  COORDINATOR_LOAD_IN_PROGRESS, the log shows no undecodable records);
* for every key, OffsetFetch returns the last acknowledged offset or an offset
  sent after it (a commit sent but not acknowledged may or may not be there:
  the server may have written it before it died).  Since one connection's
  requests are applied in order, nothing older than the last ack is allowed,
  nor any value never sent.

SIGKILL leaves the page cache intact, so this checks that an ack never
precedes the write of its records (and that torn tails are recovered), not
that fsync reaches the disk.

KCOORD_CRASH_SEED=<int> replays one schedule; KCOORD_CRASH_ROUNDS changes the
number of kills (default 8, the suite's bounded run; `python -m bench crash_safety`
runs the long one: 40 kills per seed, several seeds).
"""
from __future__ import annotations

import os
import random
import re
import socket
import struct
import threading
import time
from collections import defaultdict

from kcoord.coordinator.partitioner import partition_for
from kcoord.protocol.api import is_flexible, request_codec, response_codec
from kcoord.protocol.headers import (decode_response_header, encode_request_header,
                                     response_header_version)
from tests.support import ServerProcess

OFFSET_COMMIT, OFFSET_FETCH, LIST_GROUPS, CREATE_TOPICS = 8, 9, 16, 19
LOAD_IN_PROGRESS = 14

SEED = int(os.environ.get("KCOORD_CRASH_SEED", "20240611"))
ROUNDS = int(os.environ.get("KCOORD_CRASH_ROUNDS", "8"))
THREADS = 4
GROUPS_PER_THREAD = 2
TOPIC, PARTITIONS = "crash", 4
WINDOW = 8  # requests in flight per connection


class Wire:
    def __init__(self, port: int, timeout: float = 20.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.corr = 0
        self.pending: dict[int, tuple[int, int]] = {}
        self.buf = bytearray()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def send(self, key: int, version: int, body: dict) -> int:
        self.corr += 1
        flexible = is_flexible(key, version)
        encode, _ = request_codec(key, version)
        frame = encode_request_header(key, version, self.corr, "crash-test", flexible) + bytes(encode(body))
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        self.pending[self.corr] = (key, version)
        return self.corr

    def recv(self) -> tuple[int, dict]:
        while True:
            if len(self.buf) >= 4:
                (n,) = struct.unpack_from(">i", self.buf)
                if len(self.buf) >= 4 + n:
                    frame = bytes(self.buf[4:4 + n])
                    del self.buf[:4 + n]
                    break
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
        (corr,) = struct.unpack_from(">i", frame)
        key, version = self.pending.pop(corr)
        flexible = response_header_version(key, is_flexible(key, version)) == 1
        _, pos = decode_response_header(frame, flexible)
        return corr, response_codec(key, version)[1](frame, pos)[0]

    def call(self, key: int, version: int, body: dict) -> dict:
        corr = self.send(key, version, body)
        got, msg = self.recv()
        assert got == corr
        return msg


def crash_groups() -> list[str]:
    """Groups spread over distinct __consumer_offsets partitions."""
    out, shards, i = [], set(), 0
    while len(out) < THREADS * GROUPS_PER_THREAD:
        gid = f"crash-group-{i}"
        if partition_for(gid, 50) not in shards:
            shards.add(partition_for(gid, 50))
            out.append(gid)
        i += 1
    return out


class Ledger:
    """What was sent and acknowledged per (group, partition) since the last check."""

    def __init__(self, keys) -> None:
        self.baseline = {k: -1 for k in keys}  # verified durable value
        self.next_offset = {k: 0 for k in keys}
        self.sent: dict[tuple, list[int]] = defaultdict(list)
        self.acked: dict[tuple, int] = {}
        self.errors: list[str] = []
        self.total_acked = 0

    def allowed(self, key) -> set[int]:
        last = self.acked.get(key)
        if last is None:
            return {self.baseline[key], *self.sent[key]}
        return {last, *(o for o in self.sent[key] if o > last)}

    def reset(self, fetched: dict) -> None:
        self.baseline = dict(fetched)
        self.sent.clear()
        self.acked.clear()


def committer(port: int, groups: list[str], ledger: Ledger, rng: random.Random,
              stop: threading.Event, lock: threading.Lock) -> None:
    try:
        w = Wire(port)
    except OSError:
        return
    inflight: dict[int, list[tuple]] = {}
    try:
        while not stop.is_set():
            while len(inflight) < WINDOW:
                group = rng.choice(groups)
                parts = sorted(rng.sample(range(PARTITIONS), rng.randint(1, PARTITIONS)))
                keys, partitions = [], []
                with lock:
                    for p in parts:
                        key = (group, p)
                        offset = ledger.next_offset[key]
                        ledger.next_offset[key] = offset + 1 + rng.randint(0, 3)
                        # recorded as sent before it is on the wire
                        ledger.sent[key].append(offset)
                        keys.append((key, offset))
                        partitions.append({"partition_index": p, "committed_offset": offset,
                                           "committed_leader_epoch": -1,
                                           "committed_metadata": f"o{offset}"})
                version = rng.choice((2, 5, 8, 9))
                corr = w.send(OFFSET_COMMIT, version, {
                    "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
                    "retention_time_ms": -1,
                    "topics": [{"name": TOPIC, "partitions": partitions}]})
                inflight[corr] = keys
            corr, resp = w.recv()
            by_partition = {key[1]: (key, offset) for key, offset in inflight.pop(corr)}
            with lock:
                for t in resp["topics"]:
                    for p in t["partitions"]:
                        key, offset = by_partition.pop(p["partition_index"])
                        if p["error_code"] == 0:
                            ledger.acked[key] = max(offset, ledger.acked.get(key, -1))
                            ledger.total_acked += 1
                        else:
                            ledger.errors.append(f"{key} offset {offset}: error {p['error_code']}")
    except (OSError, ConnectionError):
        pass  # the server was killed
    finally:
        w.close()


def wait_loaded(port: int, deadline_s: float = 60.0) -> Wire:
    deadline = time.monotonic() + deadline_s
    w = Wire(port)
    while True:
        resp = w.call(LIST_GROUPS, 4, {})
        if resp["error_code"] == 0:
            return w
        assert resp["error_code"] == LOAD_IN_PROGRESS, resp
        assert time.monotonic() < deadline, "shards never finished loading"
        time.sleep(0.02)


def fetch_all(w: Wire, groups: list[str]) -> dict[tuple, int]:
    resp = w.call(OFFSET_FETCH, 8, {"groups": [
        {"group_id": g, "topics": [{"name": TOPIC, "partition_indexes": list(range(PARTITIONS))}]}
        for g in groups], "require_stable": False})
    out = {}
    for g in resp["groups"]:
        assert g["error_code"] == 0, g
        for t in g["topics"]:
            for p in t["partitions"]:
                assert p["error_code"] == 0, p
                out[(g["group_id"], p["partition_index"])] = p["committed_offset"]
                if p["committed_offset"] >= 0:
                    assert p["metadata"] == f"o{p['committed_offset']}", p
    return out


BAD_LOG = re.compile(r"undecodable|Traceback|CRITICAL|ERROR", re.I)


def test_sigkill_while_committing_loses_no_acknowledged_commit(tmp_path):
    rng = random.Random(SEED)
    groups = crash_groups()
    keys = [(g, p) for g in groups for p in range(PARTITIONS)]
    ledger = Ledger(keys)
    # small segments and a frequent cleanup tick: segments roll and get compacted
    # while commits arrive, so some kills land in the middle of a compaction
    srv = ServerProcess(tmp_path / "data", settings={
        "group.coordinator.append.linger.ms": "2",
        "offsets.topic.segment.bytes": str(64 * 1024),
        "offsets.retention.check.interval.ms": "50",
    })
    srv.start()
    w = Wire(srv.port)
    resp = w.call(CREATE_TOPICS, 5, {"topics": [{"name": TOPIC, "num_partitions": PARTITIONS,
                                                 "replication_factor": 1}], "timeout_ms": 5000})
    assert resp["topics"][0]["error_code"] == 0, resp
    w.close()
    started = time.monotonic()
    history = []
    try:
        for round_no in range(ROUNDS):
            # a few rounds kill almost at once (often while shards still load)
            delay = rng.choice((rng.uniform(0.0, 0.03), rng.uniform(0.05, 0.5), rng.uniform(0.05, 0.5)))
            stop = threading.Event()
            lock = threading.Lock()
            threads = [threading.Thread(
                target=committer, daemon=True,
                args=(srv.port, groups[i::THREADS], ledger, random.Random(rng.random()), stop, lock))
                for i in range(THREADS)]
            log_mark = len(srv.log_lines)
            for t in threads:
                t.start()
            time.sleep(delay)
            srv.kill()  # SIGKILL
            stop.set()
            for t in threads:
                t.join(20)
                assert not t.is_alive(), "a committer hung after the kill"
            acked_before = ledger.total_acked

            srv.start()
            w = wait_loaded(srv.port)
            fetched = fetch_all(w, groups)
            listed = {g["group_id"] for g in w.call(LIST_GROUPS, 4, {})["groups"]}
            w.close()
            context = f"seed {SEED} round {round_no} delay {delay:.3f}s"
            assert not ledger.errors, f"{context}: commits failed: {ledger.errors[:5]}"
            for key in keys:
                allowed = ledger.allowed(key)
                assert fetched[key] in allowed, (
                    f"{context}: {key} fetched {fetched[key]}, last ack "
                    f"{ledger.acked.get(key)}, baseline {ledger.baseline[key]}, "
                    f"allowed {sorted(allowed)[:10]}...")
            for group in groups:
                if any(fetched[(group, p)] >= 0 for p in range(PARTITIONS)):
                    assert group in listed, f"{context}: {group} has offsets but is not listed"
            bad = [line for line in srv.log_lines[log_mark:] if BAD_LOG.search(line)]
            assert not bad, f"{context}: server log:\n" + "\n".join(bad[:20])
            history.append((round(delay, 3), ledger.total_acked, sum(len(v) for v in ledger.sent.values())))
            ledger.reset(fetched)
        assert ledger.total_acked > ROUNDS * 10, f"too few commits were acknowledged: {history}"
    finally:
        srv.stop()
    took = time.monotonic() - started
    compactions = sum("compacted" in line for line in srv.log_lines)
    print(f"crash safety: {ROUNDS} kills, {ledger.total_acked} acked partition commits, "
          f"{compactions} compactions, {took:.1f}s; per round (delay, acked so far, sent): {history}")

    # After a clean stop every batch of every __consumer_offsets partition is
    # whole, passes its CRC, and decodes as coordinator records.
    from kcoord.log import PartitionLog
    from kcoord.protocol.records import decode_batch, iter_batches
    from kcoord.protocol.record_codec import decode_record
    records = 0
    for part_dir in sorted((tmp_path / "data").glob("__consumer_offsets-*")):
        plog = PartitionLog(part_dir)
        try:
            offset = plog.log_start_offset
            while offset < plog.log_end_offset:
                chunk = plog.read(offset, 1 << 20, min_one=True)
                assert chunk, f"{part_dir}: nothing readable at {offset}"
                for pos, header in iter_batches(chunk):
                    _, recs = decode_batch(chunk, pos, verify_crc=True)
                    for rec in recs:
                        decode_record(rec.key, rec.value)
                        records += 1
                    offset = header.base_offset + header.last_offset_delta + 1
        finally:
            plog.close()
    assert records > 0
