"""The pipelining load generator, run in its own process:

    python -m bench.loadgen '<json spec>'   ->   one JSON result line on stdout

The same generator drives every server.  Requests are encoded once with
kcoord.protocol.api.request_codec and kcoord.protocol.headers.
encode_request_header; each connection keeps `depth` requests in flight
(it writes a window of frames, and for every response it reads, writes one
more), so the server sees many frames per read.  Every run is bounded by a
request count and a time limit.

The generator reads the server's CPU time (utime+stime from
/proc/<pid>/stat) right before and right after the measured phase, so the
figure covers exactly the measured requests.  It checks every response's
correlation id (answers must come in order) and decodes a sample of them
for error codes.

Spec keys: host, port, pid (whose CPU to measure), kind ("apiversions" or
"offset_commit"), connections, depth, requests, seconds, warmup (requests),
and for offset_commit: topic, partitions, version (highest to use).
"""
from __future__ import annotations

import asyncio
import json
import os
import socket
import struct
import sys
import time
from collections import deque

from kcoord.protocol.api import is_flexible, request_codec, response_codec
from kcoord.protocol.headers import decode_response_header, encode_request_header

_SIZE = struct.Struct(">i")
_CORR = struct.Struct(">i")
API_VERSIONS, OFFSET_COMMIT = 18, 8
SAMPLE_EVERY = 997  # decode one response in this many (and the first of each connection)


def proc_times(pid: int) -> tuple[float, float]:
    """(utime, stime) of a process in seconds, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as fh:
        text = fh.read()
    fields = text[text.rindex(")") + 2:].split()
    tck = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tck, int(fields[12]) / tck


def task_counters(pid: int) -> dict[str, int]:
    """Of every live thread of `pid`: CPU time in ns and times scheduled in
    (/proc/<pid>/task/*/schedstat: exact, where /proc/<pid>/stat counts 10 ms
    ticks); and the process's read and write syscalls (/proc/<pid>/io)."""
    cpu = slices = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                fields = fh.read().split()
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread ended between the listing and the read
        cpu, slices = cpu + int(fields[0]), slices + int(fields[2])
    with open(f"/proc/{pid}/io") as fh:
        io = dict(line.split(": ") for line in fh.read().splitlines())
    return {"cpu_ns": cpu, "slices": slices, "syscalls": int(io["syscr"]) + int(io["syscw"])}


async def take_turns(spec: dict, phase) -> int:
    """Turn-taking mode (spec "turns"; bench/turns.py drives it): after the
    warm-up, print {"ready"} and run one measured phase of spec["seconds"] per
    "go" line on stdin, printing one JSON line each, until any other line.
    Two servers measured turn by turn see the same drift of the machine."""
    if not spec.get("turns"):
        return 0
    pid, loop, turns = spec["pid"], asyncio.get_running_loop(), 0
    print(json.dumps({"ready": True}), flush=True)
    while (await loop.run_in_executor(None, sys.stdin.readline)).strip() == "go":
        c0, (u0, s0), t0 = task_counters(pid), proc_times(pid), time.monotonic()
        run = await phase(10**9, spec["seconds"], False)
        c1, (u1, s1), wall = task_counters(pid), proc_times(pid), time.monotonic() - t0
        turns += 1
        print(json.dumps({"turn": turns, "requests": run.done, "wall_s": wall,
                          "user_s": u1 - u0, "system_s": s1 - s0,
                          **{k: c1[k] - c0[k] for k in c0}}), flush=True)
    return turns


def measure_hook(spec: dict, when: str) -> None:
    """Run the spec's hooks[when] command ("before"/"after" the measured
    phase; bench/instr_compare.py counts a server's instructions in between)."""
    cmd = spec.get("hooks", {}).get(when)
    if cmd:
        import subprocess
        subprocess.run(cmd, check=True, timeout=600, capture_output=True)


def frame(key: int, version: int, corr: int, msg: dict) -> bytes:
    header = encode_request_header(key, version, corr, "kcoord-bench", is_flexible(key, version))
    body = request_codec(key, version)[0](msg)
    return _SIZE.pack(len(header) + len(body)) + header + bytes(body)


def read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("server closed the connection")
            out += chunk
        return out
    size, = _SIZE.unpack(exactly(4))
    return exactly(size)


def api_versions(host: str, port: int) -> dict[int, tuple[int, int]]:
    """The server's ApiVersions v0 answer: {api key: (min, max)}."""
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(frame(API_VERSIONS, 0, 1, {}))
        data = read_frame(sock)
    _, pos = decode_response_header(data, False)
    resp, _ = response_codec(API_VERSIONS, 0)[1](data, pos)
    return {k["api_key"]: (k["min_version"], k["max_version"]) for k in resp["api_keys"]}


# ---------------------------------------------------------------- workloads
class Workload:
    key: int
    version: int

    def request(self, conn: int, slot: int) -> dict:
        raise NotImplementedError

    def errors(self, resp: dict) -> list[int]:
        raise NotImplementedError


class ApiVersionsLoad(Workload):
    key = API_VERSIONS

    def __init__(self, spec: dict, versions: dict) -> None:
        self.version = min(spec.get("version", 3), versions[API_VERSIONS][1])

    def request(self, conn: int, slot: int) -> dict:
        return {"client_software_name": "kcoord-bench", "client_software_version": "1.0"}

    def errors(self, resp: dict) -> list[int]:
        return [resp["error_code"]]


class OffsetCommitLoad(Workload):
    key = OFFSET_COMMIT

    def __init__(self, spec: dict, versions: dict) -> None:
        if OFFSET_COMMIT not in versions:
            raise RuntimeError("the server does not advertise OffsetCommit")
        lo, hi = versions[OFFSET_COMMIT]
        self.version = max(lo, min(spec.get("version", 8), hi))
        self.topic = spec["topic"]
        self.partitions = spec.get("partitions", 10)
        self.groups = spec.get("groups")  # group id per connection (default bench-group-N)

    def request(self, conn: int, slot: int) -> dict:
        # a simple group per connection (generation -1, no member): what
        # a consumer with manual assignment commits
        group = self.groups[conn] if self.groups else f"bench-group-{conn}"
        return {"group_id": group, "generation_id_or_member_epoch": -1,
                "member_id": "", "group_instance_id": None, "retention_time_ms": -1,
                "topics": [{"name": self.topic, "partitions": [
                    {"partition_index": p, "committed_offset": 1000 * slot + p,
                     "committed_leader_epoch": -1, "commit_timestamp": -1,
                     "committed_metadata": ""} for p in range(self.partitions)]}]}

    def errors(self, resp: dict) -> list[int]:
        return [p["error_code"] for t in resp["topics"] for p in t["partitions"]]


# --------------------------------------------------------------- connections
class Run:
    """Shared budget and counters of one phase."""

    def __init__(self, requests: int, seconds: float, record: bool) -> None:
        self.left = requests
        self.deadline = time.monotonic() + seconds
        self.record = record
        self.latencies: list[int] = []
        self.done = 0
        self.in_flight = 0
        self.finished = asyncio.get_running_loop().create_future()

    def take(self, n: int) -> int:
        if time.monotonic() >= self.deadline:
            self.left = 0
        n = min(n, self.left)
        self.left -= n
        self.in_flight += n
        return n

    def answered(self, n: int) -> None:
        self.done += n
        self.in_flight -= n
        if self.left == 0 and self.in_flight == 0 and not self.finished.done():
            self.finished.set_result(None)


class Conn(asyncio.Protocol):
    def __init__(self, index: int, frames: list[bytes], depth: int, stats: dict,
                 workload: Workload) -> None:
        self.index = index
        self.frames = frames
        self.depth = depth
        self.stats = stats
        self.workload = workload
        self.buf = bytearray()
        self.sent: deque = deque()  # (slot, send time ns)
        self.next_slot = 0
        self.run: Run | None = None
        self.transport = None
        self.lost = asyncio.get_running_loop().create_future()
        self.seen = 0

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc) -> None:
        if not self.lost.done():
            self.lost.set_result(exc)
        if self.run and not self.run.finished.done():
            self.run.finished.set_exception(ConnectionError(f"connection {self.index} lost: {exc}"))

    def start(self, run: Run) -> None:
        self.run = run
        self.send(self.depth)

    def send(self, n: int) -> None:
        n = self.run.take(n)
        if not n:
            return
        now = time.perf_counter_ns()
        out = []
        slot = self.next_slot
        frames, depth, sent = self.frames, self.depth, self.sent
        for _ in range(n):
            out.append(frames[slot])
            sent.append((slot, now))
            slot = (slot + 1) % depth
        self.next_slot = slot
        self.transport.write(b"".join(out))

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        pos, end = 0, len(buf)
        got = 0
        now = time.perf_counter_ns()
        lat = self.run.latencies if self.run.record else None
        sent = self.sent
        while end - pos >= 4:
            size, = _SIZE.unpack_from(buf, pos)
            if end - pos - 4 < size:
                break
            corr, = _CORR.unpack_from(buf, pos + 4)
            slot, t0 = sent.popleft()
            if corr != slot:
                self.stats["out_of_order"] += 1
            if lat is not None:
                lat.append(now - t0)
            self.seen += 1
            if self.seen == 1 or self.seen % SAMPLE_EVERY == 0:
                self.check(bytes(buf[pos + 4:pos + 4 + size]))
            pos += 4 + size
            got += 1
        if pos:
            del buf[:pos]
        if got:
            self.run.answered(got)
            self.send(got)

    def check(self, data: bytes) -> None:
        w = self.workload
        flexible = is_flexible(w.key, w.version) and w.key != API_VERSIONS
        try:
            _, pos = decode_response_header(data, flexible)
            resp, _ = response_codec(w.key, w.version)[1](data, pos)
        except Exception as exc:
            self.stats["undecodable"] += 1
            self.stats["last_problem"] = repr(exc)
            return
        self.stats["checked"] += 1
        for code in w.errors(resp):
            if code:
                self.stats["errors"][str(code)] = self.stats["errors"].get(str(code), 0) + 1


class Pipelines:
    """One Conn per frame list, each keeping all its frames in flight, and
    the measuring phases run over all of them together."""

    def __init__(self) -> None:
        self.stats = {"out_of_order": 0, "undecodable": 0, "checked": 0, "errors": {}}
        self.conns: list[Conn] = []

    async def connect(self, host: str, port: int, frame_lists: list[list[bytes]],
                      workload) -> None:
        loop = asyncio.get_running_loop()
        for i, frames in enumerate(frame_lists):
            _, proto = await loop.create_connection(
                lambda i=i, frames=frames: Conn(i, frames, len(frames), self.stats, workload),
                host, port)
            self.conns.append(proto)

    async def phase(self, requests: int, seconds: float, record: bool) -> Run:
        """Up to `requests` answers or `seconds`, whichever comes first."""
        run = Run(requests, seconds, record)
        for c in self.conns:
            c.start(run)
        if run.in_flight == 0:
            run.finished.set_result(None)
        await asyncio.wait_for(run.finished, seconds + 60)
        return run

    def reset_stats(self) -> None:
        self.stats.update({"out_of_order": 0, "undecodable": 0, "checked": 0, "errors": {}})

    def close(self) -> None:
        for c in self.conns:
            c.transport.close()


def percentile(sorted_values: list[int], q: float) -> float:
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, int(q * len(sorted_values)))
    return sorted_values[i] / 1e6  # ns -> ms


async def main(spec: dict) -> dict:
    host, port = spec.get("host", "127.0.0.1"), spec["port"]
    versions = api_versions(host, port)
    kind = spec["kind"]
    workload: Workload = {"apiversions": ApiVersionsLoad,
                          "offset_commit": OffsetCommitLoad}[kind](spec, versions)
    depth, nconn = spec["depth"], spec["connections"]
    pipes = Pipelines()
    await pipes.connect(host, port, [
        [frame(workload.key, workload.version, slot, workload.request(i, slot))
         for slot in range(depth)] for i in range(nconn)], workload)
    phase, stats = pipes.phase, pipes.stats

    warm = await phase(spec.get("warmup", depth * nconn * 3), spec["seconds"], False)
    turns = await take_turns(spec, phase)
    pid = spec.get("pid")
    nan = (float("nan"), float("nan"))
    measure_hook(spec, "before")
    u0, s0 = proc_times(pid) if pid else nan
    me0 = time.process_time()
    t0 = time.monotonic()
    run = await phase(spec["requests"], spec["seconds"], True)
    wall = time.monotonic() - t0
    u1, s1 = proc_times(pid) if pid else nan
    measure_hook(spec, "after")
    me1 = time.process_time()
    cpu0, cpu1 = u0 + s0, u1 + s1
    pipes.close()
    lat = sorted(run.latencies)
    return {
        "kind": kind, "api_key": workload.key, "version": workload.version,
        "connections": nconn, "depth": depth, "warmup_requests": warm.done,
        "requests": run.done, "wall_s": wall, "requests_per_s": run.done / wall,
        "server_cpu_s": cpu1 - cpu0, "server_user_s": u1 - u0, "server_system_s": s1 - s0,
        "server_cpu_us_per_request": (cpu1 - cpu0) / run.done * 1e6 if run.done else None,
        "server_cpu_utilisation": (cpu1 - cpu0) / wall,
        "generator_cpu_s": me1 - me0,
        "latency_ms": {"p50": percentile(lat, 0.50), "p99": percentile(lat, 0.99),
                       "max": lat[-1] / 1e6 if lat else None},
        "stopped_by": "time limit" if run.done < spec["requests"] else "request count",
        "turns": turns, **stats,
    }


def generator_main(generator) -> None:
    """A load generator process: `generator(spec)` on uvloop when installed,
    spec from argv[1]; prints one JSON line, the result or the error (reported,
    not raised: the caller writes it into the table)."""
    spec = json.loads(sys.argv[1])
    try:
        try:
            import uvloop
            result = uvloop.run(generator(spec))
        except ImportError:
            result = asyncio.run(generator(spec))
    except Exception as exc:
        result = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(result, default=str))


if __name__ == "__main__":
    generator_main(main)
