"""KIP-848 steady-state heartbeats (issue 6): 1,000 members joined with real
ConsumerGroupHeartbeat requests, reconciled to STABLE, then heartbeating
from a pipelined load generator; server CPU microseconds per heartbeat.
The same generator against kcoord and the librdkafka mock (the only peer
with KIP-848; Tansu has no ConsumerGroupHeartbeat) in one run.
Goal: at most 15 us of kcoord CPU per heartbeat.

    python -m bench consumer_heartbeat [--quick] [--peers kcoord,mock]
    python -m bench.consumer_heartbeat '<json spec>'    # the load generator alone

The load generator (this module run as a script, its own process):
1. setup: the members share `setup_connections` connections (20; each
   member's requests one at a time, many members' requests in flight on
   a connection: the librdkafka mock answers a thousand connections very
   slowly, some requests not within a minute); every member joins with
   ConsumerGroupHeartbeat (v1, or the server's highest; epoch 0, a member id
   of its own as a v1 client does, the subscribed topic, a rebalance
   timeout, empty owned partitions), then heartbeats every 200 ms with its
   current epoch, acknowledging its assignment by sending it back as its
   owned TopicPartitions, and rejoins when fenced (the join sends the topic
   name and an empty regex, as librdkafka does); a member is settled when
   its last heartbeat (sent with its whole assignment as owned partitions)
   was answered without error, at the epoch it sent, with no new
   assignment; a group is STABLE when all its members are settled at one
   epoch and their assignments cover the topic exactly once;
2. measure: `connections` new connections carry
   steady heartbeats (group, member id and current epoch; every other field
   null or -1, as KIP-848 says for a heartbeat that changes nothing), each
   connection with all of its members' heartbeats in flight (bench/loadgen.py's
   pipelining connection: one more request written for every answer read),
   a warm-up, then the measured phase bounded by a request count and a time
   limit, with the server's utime+stime read from /proc/<pid>/stat right
   before and after; answers are checked for order and a sample is decoded
   for error codes;
3. verify: one more steady heartbeat per member (on its setup connection,
   kept open throughout: the librdkafka mock forgets a member's assignment
   when the connection it last heartbeated on closes): the same epoch and
   no new assignment means every member stayed STABLE through the
   measurement.
"""
from __future__ import annotations

import asyncio
import base64
import statistics
import struct
import time
import uuid
from collections import deque

from .common import run_loadgen, start_peer, table, timed, write_results

GOAL_US = 15.0
HEARTBEAT = 68
TOPIC = "bench-consumer-heartbeat"
PARTITIONS = 100
FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID = 110, 25
NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE = 16, 14, 15


# ================================================================ orchestration
def create_topic(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)],
                                   operation_timeout=30).values():
        fut.result(timeout=60)


def layouts(quick: bool) -> list[tuple[int, int]]:
    """(groups, members per group): 1,000 members in 100 groups of 10 and in 10 of 100."""
    return [(20, 10)] if quick else [(100, 10), (10, 100)]


def run(args) -> dict:
    connections = args.connections or 10
    seconds = args.seconds or (10 if args.quick else 20)
    requests = args.requests or (100_000 if args.quick else 400_000)
    rounds = 1 if args.quick else 3
    peers = [p for p in args.peers if p != "tansu"]
    results: dict = {"tansu": {"error": "no KIP-848: Tansu does not serve "
                               "ConsumerGroupHeartbeat (see /work/shared/PEERS.md)"}} \
        if "tansu" in args.peers else {}
    for name in peers:
        for groups, per_group in layouts(args.quick):
            label = f"{name} {groups}x{per_group}"
            with timed(f"consumer_heartbeat against {label}"):
                kw = {"topics": [(TOPIC, PARTITIONS)]} if name == "mock" else {}
                try:
                    peer = start_peer(name, **kw)
                except Exception as exc:
                    results[label] = {"error": f"could not start: {exc}"}
                    continue
                try:
                    if name != "mock":
                        create_topic(peer.bootstrap)
                    spec = {"port": peer.port, "pid": peer.pid, "groups": groups,
                            "per_group": per_group, "connections": connections,
                            "requests": requests, "seconds": seconds, "rounds": rounds,
                            "warmup": groups * per_group * 20, "setup_seconds": 180,
                            "group_prefix": f"bench-cghb-{name}"}
                    r = loadgen(spec, timeout=(seconds + 60) * rounds + 400)
                    r["server"] = name
                    r["cpu_note"] = peer.cpu_note
                    results[label] = r
                    if "error" not in r:
                        print(f"[bench]   {label}: {r['server_cpu_us_per_request']:.2f} us/heartbeat "
                              f"(rounds {[round(x, 2) for x in r['rounds_us']]}), "
                              f"{r['requests_per_s']:,.0f}/s", flush=True)
                    else:
                        print(f"[bench]   {label}: {r['error']}", flush=True)
                except Exception as exc:
                    results[label] = {"error": f"{type(exc).__name__}: {exc}"}
                finally:
                    peer.stop()
    return report(results, connections, seconds, requests, rounds)


def loadgen(spec: dict, timeout: float) -> dict:
    return run_loadgen(spec, timeout, module="bench.consumer_heartbeat")


def report(results: dict, connections: int, seconds: float, requests: int, rounds: int) -> dict:
    rows = []
    verdict_us = None
    clean = True
    for label, r in results.items():
        if "error" in r:
            rows.append([label] + ["-"] * 9 + [r["error"]])
            if label.startswith("kcoord"):
                clean = False
            continue
        problems = []
        if r["errors"]:
            problems.append(f"error codes in sampled answers: {r['errors']} of {r['checked']}")
        if r["out_of_order"]:
            problems.append(f"{r['out_of_order']} answers out of order")
        if r["undecodable"]:
            problems.append(f"{r['undecodable']} undecodable")
        if r["verify"]["not_steady"]:
            problems.append(f"{r['verify']['not_steady']} members not steady after the "
                            f"measurement: {r['verify']['examples']}")
        if r["server"] == "kcoord":
            us = r["server_cpu_us_per_request"]
            verdict_us = us if verdict_us is None else max(verdict_us, us)
            clean = clean and not problems
        rows.append([label, f"v{r['version']}", r["requests"],
                     r["server_cpu_us_per_request"],
                     " / ".join(f"{x:.1f}" for x in r["rounds_us"]),
                     r["server_user_s"] / r["requests"] * 1e6,
                     r["requests_per_s"], r["latency_ms"]["p50"], r["latency_ms"]["p99"],
                     r["setup_s"],
                     "; ".join(problems + [r.get("cpu_note") or ""]).strip("; ") or "ok"])
    verdict = "not measured" if verdict_us is None else (
        "met" if verdict_us <= GOAL_US and clean else "MISSED")
    sections = [
        "1,000 KIP-848 members (100 groups of 10, and 10 groups of 100) subscribed to one "
        f"{PARTITIONS}-partition topic, joined with real ConsumerGroupHeartbeat requests (v1, or "
        "the server's highest; epoch 0, own member id, rebalance timeout, empty owned "
        "partitions) and reconciled to STABLE by acknowledging every assignment (the next "
        "heartbeat carries the assignment as owned TopicPartitions) until every member's last "
        "acknowledging heartbeat came back at the same epoch with no new assignment and each "
        "group's assignments covered the topic exactly once. Then steady heartbeats (group, "
        "member id, current epoch; every other field null or -1, KIP-848's heartbeat that "
        f"changes nothing) from one pipelining load generator process: {connections} "
        "connections, each with its members' heartbeats all in flight (a member's next "
        f"heartbeat is written when its answer arrives); {rounds} measured round(s) of up to "
        f"{requests:,} heartbeats or {seconds:.0f} s each after a warm-up. Server CPU = "
        "utime+stime of the server process from /proc/<pid>/stat over the measured rounds "
        "(the figure is the total over all rounds; the rounds are shown to give the spread). "
        "After the measurement every member sends one more steady heartbeat on its setup "
        "connection (20 connections shared by the members during the setup), which must "
        "come back at the same epoch with no new assignment. Latency "
        "is from the write of a heartbeat to the read of its answer (queueing behind the "
        "others in flight on its connection included). Setup = time for every group to reach "
        "STABLE.",
        "",
        table(["server, groups x members", "heartbeat", "heartbeats", "server CPU us/heartbeat",
               "per round us", "of which user us", "heartbeats/s", "p50 ms", "p99 ms",
               "setup s", "notes"], rows),
        "",
        f"Goal (issue 6): kcoord <= {GOAL_US:.0f} us of server CPU per steady-state heartbeat "
        f"with 1,000 members: **{verdict}**"
        + (f" (worst layout {verdict_us:.1f} us)." if verdict_us is not None else ".")
        + ("" if clean or verdict_us is None else " kcoord answered with errors, see notes."),
        "",
        "Heartbeats/s is bounded by the Python load generator sharing the 2 cores with the "
        "server; the server CPU per heartbeat is the comparable figure. kcoord runs with its "
        "defaults (group.consumer.session.timeout.ms 45000, uniform assignor, records fsynced "
        "per group commit; a steady heartbeat writes no record); the librdkafka mock runs with its defaults "
        "(session timeout 30 s, heartbeat interval 3 s), hosted by bench/mock_helper.py, and "
        "its CPU is that process's (mostly system time: it writes every answer with a "
        "system call of its own, where kcoord writes all the answers of a read at once).",
    ]
    raw = {"results": results, "goal_us": GOAL_US, "verdict": verdict, "members": 1000,
           "partitions": PARTITIONS}
    md = write_results("consumer_heartbeat",
                       "KIP-848 consumer group heartbeats: server CPU per steady heartbeat",
                       sections, raw)
    print(md.read_text())
    return raw


# ============================================================= load generator
_SIZE = struct.Struct(">i")


def new_member_id() -> str:
    """A v1 client's own member id (Kafka's Uuid.toString: URL-safe base64, 22 chars)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def steady(group: str, member_id: str, epoch: int) -> dict:
    """A heartbeat that changes nothing: every optional field null (-1 for the timeout)."""
    return {"group_id": group, "member_id": member_id, "member_epoch": epoch,
            "instance_id": None, "rack_id": None, "rebalance_timeout_ms": -1,
            "subscribed_topic_names": None, "subscribed_topic_regex": None,
            "server_assignor": None, "topic_partitions": None}


class Client(asyncio.Protocol):
    """One connection shared by many members (setup and verification): each
    call writes its request at once and gets its answer from the in-order
    stream of responses.  (The librdkafka mock answers a thousand
    connections of one member each very slowly, some not within a minute,
    so members share setup_connections connections.)"""

    def __init__(self, version: int) -> None:
        self.version = version
        self.corr = 0
        self.waiting: deque = deque()  # (correlation id, future)
        self.buf = bytearray()
        self.transport = None
        self.error: Exception | None = None

    @classmethod
    async def open(cls, host: str, port: int, version: int) -> "Client":
        loop = asyncio.get_running_loop()
        _, proto = await asyncio.wait_for(
            loop.create_connection(lambda: cls(version), host, port), 30)
        return proto

    def connection_made(self, transport) -> None:
        self.transport = transport

    def connection_lost(self, exc) -> None:
        self.error = ConnectionError(f"connection lost: {exc}")
        while self.waiting:
            _, fut = self.waiting.popleft()
            if not fut.done():
                fut.set_exception(self.error)

    def data_received(self, data: bytes) -> None:
        from kcoord.protocol.api import response_codec
        from kcoord.protocol.headers import decode_response_header
        buf = self.buf
        buf += data
        pos = 0
        while len(buf) - pos >= 4:
            size, = _SIZE.unpack_from(buf, pos)
            if len(buf) - pos - 4 < size:
                break
            frame_ = bytes(buf[pos + 4:pos + 4 + size])
            pos += 4 + size
            corr, fut = self.waiting.popleft()
            try:
                got, hpos = decode_response_header(frame_, True)
                if got != corr:
                    raise RuntimeError(f"answer {got} for request {corr}")
                resp, _ = response_codec(HEARTBEAT, self.version)[1](frame_, hpos)
            except Exception as exc:
                if not fut.done():
                    fut.set_exception(exc)
                continue
            if not fut.done():
                fut.set_result(resp)
        del buf[:pos]

    async def call(self, msg: dict) -> dict:
        from .loadgen import frame
        if self.error is not None:
            raise self.error
        self.corr += 1
        fut = asyncio.get_running_loop().create_future()
        self.waiting.append((self.corr, fut))
        self.transport.write(frame(HEARTBEAT, self.version, self.corr, msg))
        return await asyncio.wait_for(asyncio.shield(fut), 60)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class Member:
    def __init__(self, group: str, index: int) -> None:
        self.group, self.index = group, index
        self.member_id = ""
        self.epoch = 0
        self.assigned: list[dict] = []     # topic_partitions as last received
        self.settled = False
        self.client: Client | None = None


def _wire(topic_partitions) -> list[dict]:
    return sorted(({"topic_id": tp["topic_id"], "partitions": sorted(tp["partitions"])}
                   for tp in topic_partitions or () if tp["partitions"]),
                  key=lambda tp: tp["topic_id"])


class Setup:
    def __init__(self, spec: dict, version: int) -> None:
        self.spec = spec
        self.version = version
        self.stop = asyncio.Event()
        self.joins = 0
        self.heartbeats = 0
        self.errors: dict[str, int] = {}

    def count(self, code: int) -> None:
        self.errors[str(code)] = self.errors.get(str(code), 0) + 1

    def join_request(self, m: Member) -> dict:
        return {"group_id": m.group, "member_id": m.member_id, "member_epoch": 0,
                "instance_id": None, "rack_id": None,
                "rebalance_timeout_ms": self.spec.get("rebalance_timeout_ms", 60_000),
                "subscribed_topic_names": [self.spec.get("topic", TOPIC)],
                # an empty regex beside the names, as librdkafka sends (the mock
                # asserts that names and regex are both null or both set)
                "subscribed_topic_regex": "", "server_assignor": None,
                "topic_partitions": []}

    async def member(self, m: Member) -> None:
        spec = self.spec
        joined = False
        acked = None  # the assignment the last heartbeat sent as owned
        deadline = time.monotonic() + spec["setup_seconds"] + 30
        while not self.stop.is_set() and time.monotonic() < deadline:
            if not joined:
                m.member_id = new_member_id() if self.version >= 1 else ""
                m.epoch, m.assigned, m.settled = 0, [], False
                req = self.join_request(m)
                self.joins += 1
                acked = []
            elif m.epoch == 0:
                # joined, but still at epoch 0 (the mock keeps a newcomer there until
                # its partitions are free): a heartbeat at epoch 0 is a join again,
                # with the member's id (as librdkafka does)
                req = self.join_request(m)
                acked = []
                self.heartbeats += 1
            else:
                acked = m.assigned
                req = {**steady(m.group, m.member_id, m.epoch), "topic_partitions": acked}
                self.heartbeats += 1
            sent_epoch = req["member_epoch"]
            r = await m.client.call(req)
            code = r["error_code"]
            if code:
                self.count(code)
                m.settled = False
                if code in (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID):
                    joined = False
                await asyncio.sleep(0.2)
                continue
            if not joined:
                joined = True
                if r["member_id"]:
                    m.member_id = r["member_id"]
            new = r["assignment"]
            if new is not None:
                m.assigned = _wire(new["topic_partitions"])
            m.settled = (sent_epoch == r["member_epoch"] and new is None
                         and acked == m.assigned and sent_epoch > 0)
            m.epoch = r["member_epoch"]
            try:
                await asyncio.wait_for(self.stop.wait(), 0.2 if not m.settled else 0.5)
            except asyncio.TimeoutError:
                pass


def group_stable(members: list[Member]) -> bool:
    if not all(m.settled for m in members):
        return False
    if len({m.epoch for m in members}) != 1:
        return False
    seen = []
    for m in members:
        for tp in m.assigned:
            seen.extend((tp["topic_id"], p) for p in tp["partitions"])
    return len(seen) == len(set(seen)) == PARTITIONS


async def generator(spec: dict) -> dict:
    from kcoord.protocol.errors import Err  # noqa: F401  (codec registry import order)
    from .loadgen import (Pipelines, api_versions, frame, measure_hook, percentile, proc_times,
                          take_turns)

    host, port = spec.get("host", "127.0.0.1"), spec["port"]
    advertised = api_versions(host, port)
    if HEARTBEAT not in advertised:
        raise RuntimeError("the server does not advertise ConsumerGroupHeartbeat (68)")
    lo, hi = advertised[HEARTBEAT]
    version = max(lo, min(spec.get("version", 1), hi))

    # ------------------------------------------------------------- setup
    groups = [f"{spec['group_prefix']}-{g}" for g in range(spec["groups"])]
    per_group = spec["per_group"]
    by_group = {g: [Member(g, i) for i in range(per_group)] for g in groups}
    members = [m for g in groups for m in by_group[g]]
    setup = Setup(spec, version)
    pool = [await Client.open(host, port, version)
            for _ in range(min(spec.get("setup_connections", 20), len(members)))]
    for i, m in enumerate(members):
        m.client = pool[i % len(pool)]
    t0 = time.monotonic()
    tasks = [asyncio.ensure_future(setup.member(m)) for m in members]
    deadline = t0 + spec["setup_seconds"]
    try:
        while not all(group_stable(ms) for ms in by_group.values()):
            failed = [t for t in tasks if t.done() and t.exception()]
            if failed:
                raise RuntimeError(f"setup: a member failed: {failed[0].exception()!r}")
            if time.monotonic() > deadline:
                ready = sum(1 for ms in by_group.values() if group_stable(ms))
                raise RuntimeError(f"setup: only {ready} of {len(groups)} groups stable after "
                                   f"{spec['setup_seconds']} s; errors {setup.errors}")
            await asyncio.sleep(0.1)
    finally:
        setup.stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 60)
    setup_s = time.monotonic() - t0
    if not all(group_stable(ms) for ms in by_group.values()):
        raise RuntimeError("setup: a group left STABLE while the setup stopped")
    epochs = {m.group: m.epoch for m in members}

    # ----------------------------------------------------------- measure
    class Workload:
        key = HEARTBEAT

        @staticmethod
        def errors(resp: dict) -> list[int]:
            return [resp["error_code"]]
    Workload.version = version

    nconn = spec["connections"]
    shares = [members[c::nconn] for c in range(nconn)]
    pipes = Pipelines()
    await pipes.connect(host, port, [
        [frame(HEARTBEAT, version, slot, steady(m.group, m.member_id, m.epoch))
         for slot, m in enumerate(share)] for share in shares], Workload)
    phase, stats = pipes.phase, pipes.stats

    warm = await phase(spec["warmup"], spec["seconds"], False)
    turns = await take_turns(spec, phase)
    pipes.reset_stats()
    pid = spec["pid"]
    if spec.get("signal_pid"):  # profiling: SIGUSR1 tells a profiled server to start
        import os
        import signal
        os.kill(spec["signal_pid"], signal.SIGUSR1)
    rounds = []
    latencies: list[int] = []
    total = {"requests": 0, "wall": 0.0, "user": 0.0, "system": 0.0, "me": 0.0}
    for _ in range(spec.get("rounds", 1)):
        measure_hook(spec, "before")
        u0, s0 = proc_times(pid)
        me0 = time.process_time()
        t1 = time.monotonic()
        run = await phase(spec["requests"], spec["seconds"], True)
        wall = time.monotonic() - t1
        u1, s1 = proc_times(pid)
        measure_hook(spec, "after")
        me1 = time.process_time()
        cpu = (u1 + s1) - (u0 + s0)
        rounds.append({"requests": run.done, "wall_s": wall, "server_cpu_s": cpu,
                       "us": cpu / run.done * 1e6 if run.done else None,
                       "stopped_by": "time limit" if run.done < spec["requests"]
                       else "request count"})
        total["requests"] += run.done
        total["wall"] += wall
        total["user"] += u1 - u0
        total["system"] += s1 - s0
        total["me"] += me1 - me0
        latencies.extend(run.latencies)

    # ------------------------------------------------------------ verify
    # (before the measuring connections close: the mock forgets the
    # assignment of a member whose last connection closes)
    not_steady, examples = 0, []
    for m in members:
        try:
            r = await m.client.call(steady(m.group, m.member_id, epochs[m.group]))
            ok = (r["error_code"] == 0 and r["member_epoch"] == epochs[m.group]
                  and r["assignment"] is None)
        except Exception as exc:
            r, ok = {"exception": repr(exc)}, False
        if not ok:
            not_steady += 1
            if len(examples) < 3:
                examples.append({k: v for k, v in r.items() if k != "assignment"})
    pipes.close()
    for client in pool:
        client.close()

    n = total["requests"]
    cpu = total["user"] + total["system"]
    lat = sorted(latencies)
    return {
        "version": version, "groups": len(groups), "members": len(members),
        "per_group": per_group, "connections": nconn,
        "setup_s": setup_s, "setup_joins": setup.joins, "setup_heartbeats": setup.heartbeats,
        "setup_errors": setup.errors, "epochs": sorted(set(epochs.values())),
        "warmup_requests": warm.done, "requests": n, "wall_s": total["wall"],
        "requests_per_s": n / total["wall"] if total["wall"] else None,
        "server_cpu_s": cpu, "server_user_s": total["user"], "server_system_s": total["system"],
        "server_cpu_us_per_request": cpu / n * 1e6 if n else None,
        "rounds": rounds, "rounds_us": [r["us"] for r in rounds],
        "rounds_median_us": statistics.median(r["us"] for r in rounds) if rounds else None,
        "server_cpu_utilisation": cpu / total["wall"] if total["wall"] else None,
        "generator_cpu_s": total["me"],
        "latency_ms": {"p50": percentile(lat, 0.5), "p99": percentile(lat, 0.99),
                       "max": lat[-1] / 1e6 if lat else None},
        "verify": {"not_steady": not_steady, "examples": examples},
        "turns": turns, **stats,
    }


def main() -> None:
    from .loadgen import generator_main
    generator_main(generator)


if __name__ == "__main__":
    main()
