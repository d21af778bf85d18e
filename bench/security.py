"""What security costs (issue 13): one kcoord with a PLAINTEXT and a
SASL_SSL (SCRAM-SHA-512, TLS 1.3) listener, measured side by side in one
run, the two taking turns round after round:

1. produce MB/s: confluent-kafka (librdkafka) producing 1 KiB records,
   acks=1, to one topic (goal: SASL_SSL >= 60% of PLAINTEXT);
2. OffsetCommit server CPU per commit: pipelined commits of 10 partitions
   on 10 authenticated connections (goal: SASL_SSL <= 1.3x PLAINTEXT);
3. authentications per second: new connections one after another
   (connect, TLS handshake, ApiVersions, SaslHandshake, SCRAM-SHA-512),
   and server CPU per authentication; a PLAINTEXT connect + ApiVersions
   beside it.

    python -m bench security [--quick]
"""
from __future__ import annotations

import socket
import ssl
import struct
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .common import CpuMeter, median, table, timed, write_results

TOPIC = "bench-security"
COMMIT_TOPIC = "bench-security-commits"
USER, PASSWORD = "bench", "bench-secret"
GOAL_PRODUCE = 0.60
GOAL_COMMIT_CPU = 1.3
_SIZE = struct.Struct(">i")


def _pki(tmp: Path):
    from tests.security.certs import make_pki
    return make_pki(tmp / "pki")


def _server(pki, tmp: Path, acls: bool = False):
    from tests.support import ServerProcess
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
    }
    if acls:  # the authorizer on; PLAINTEXT (ANONYMOUS) is the super user that sets up
        settings.update({"authorizer.class.name":
                         "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                         "super.users": "User:ANONYMOUS"})
    proc = ServerProcess(tmp / ("data-acl" if acls else "data"), settings, extra_args=[
        "--add-scram", f"SCRAM-SHA-512=[name={USER},password={PASSWORD}]"])
    proc.start(timeout=300)
    return proc


def _client_conf(variant: str, pki) -> dict:
    if variant == "PLAINTEXT":
        return {}
    return {"security.protocol": "sasl_ssl", "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": USER, "sasl.password": PASSWORD,
            "ssl.ca.location": str(pki.ca_file)}


# ------------------------------------------------------------------ produce
def produce_mb_s(bootstrap: str, conf: dict, mb: int, pid: int, topic: str = TOPIC) -> dict:
    from confluent_kafka import Producer
    value = b"x" * 1024
    n = mb * 1024
    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5,
                  "batch.size": 1_000_000, "queue.buffering.max.messages": 200_000, **conf})
    p.produce(topic, b"warm")
    p.flush(60)
    cpu = CpuMeter(pid)
    client_cpu0 = time.process_time()  # this process: librdkafka's threads included
    t0 = time.monotonic()
    deadline = t0 + 300
    sent = 0
    while sent < n and time.monotonic() < deadline:
        try:
            p.produce(topic, value)
            sent += 1
        except BufferError:
            p.poll(0.01)
    left = p.flush(120)
    wall = time.monotonic() - t0
    server_cpu, _ = cpu.stop()
    return {"records": sent - left, "seconds": wall, "mb_s": (sent - left) / 1024 / wall,
            "server_cpu_s": server_cpu, "client_cpu_s": time.process_time() - client_cpu0}


# ------------------------------------------------------------ wire helpers
def _frame(key: int, version: int, corr: int, body: dict) -> bytes:
    from kcoord.protocol.api import APIS, request_codec
    from kcoord.protocol.headers import encode_request_header
    flexible = APIS[key].request.is_flexible(version)
    payload = encode_request_header(key, version, corr, "bench", flexible) + \
        bytes(request_codec(key, version)[0](body))
    return _SIZE.pack(len(payload)) + payload


def _decode(key: int, version: int, frame: bytes) -> dict:
    from kcoord.protocol.api import APIS, response_codec
    from kcoord.protocol.headers import decode_response_header
    flexible = APIS[key].request.is_flexible(version) and key != 18
    _, pos = decode_response_header(frame, flexible)
    return response_codec(key, version)[1](frame, pos)[0]


def _tls_context(pki) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca_file))
    return ctx


def _blocking_session(port: int, variant: str, pki) -> socket.socket:
    """A connected (and for SASL_SSL, TLS + SCRAM-SHA-512 authenticated) socket."""
    from kcoord.security.client import sasl_login
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if variant != "PLAINTEXT":
        sock = _tls_context(pki).wrap_socket(sock, server_hostname="localhost")
    corr = [0]

    def send(key, version, body):
        corr[0] += 1
        sock.sendall(_frame(key, version, corr[0], body))
        size, = _SIZE.unpack(_recv(sock, 4))
        return _decode(key, version, _recv(sock, size))

    send(18, 3, {"client_software_name": "bench", "client_software_version": "1"})
    if variant != "PLAINTEXT":
        sasl_login(send, {"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": USER,
                          "sasl.password": PASSWORD})
    return sock


def _recv(sock, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise EOFError("closed")
        out += chunk
    return bytes(out)


# ------------------------------------------------------------- OffsetCommit
def commit_cpu(port: int, variant: str, pki, pid: int, commits: int, connections: int,
               depth: int, seconds: float) -> dict:
    socks = [_blocking_session(port, variant, pki) for _ in range(connections)]
    partitions = 10
    per_conn = commits // connections

    def body(conn: int, i: int) -> dict:
        return {"group_id": f"bench-sec-{variant}-{conn}", "generation_id_or_member_epoch": -1,
                "member_id": "", "group_instance_id": None,
                "topics": [{"name": COMMIT_TOPIC, "partitions": [
                    {"partition_index": p, "committed_offset": i * 10 + p,
                     "committed_leader_epoch": -1, "committed_metadata": ""}
                    for p in range(partitions)]}]}

    def _drive_blocking(conn: int, sock, deadline: float) -> int:
        done = 0
        sent = 0
        corr = 100
        while done < per_conn and time.monotonic() < deadline:
            batch = []
            while sent - done < depth and sent < per_conn:
                corr += 1
                batch.append(_frame(8, 8, corr, body(conn, sent)))
                sent += 1
            sock.sendall(b"".join(batch))
            for _ in batch:
                size, = _SIZE.unpack(_recv(sock, 4))
                _recv(sock, size)
                done += 1
        return done

    cpu = CpuMeter(pid)
    deadline = time.monotonic() + seconds
    # one blocking client thread per connection: each keeps `depth` commits in flight
    with ThreadPoolExecutor(len(socks)) as pool:
        total = sum(pool.map(lambda a: _drive_blocking(*a, deadline), enumerate(socks)))
    server_cpu, wall = cpu.stop()
    for s in socks:
        s.close()
    return {"commits": total, "seconds": wall, "commits_s": total / wall,
            "cpu_us_per_commit": server_cpu / max(total, 1) * 1e6}


# ------------------------------------------------------------ authentications
def auth_rate(port: int, variant: str, pki, pid: int, count: int, seconds: float) -> dict:
    cpu = CpuMeter(pid)
    t0 = time.monotonic()
    done = 0
    while done < count and time.monotonic() - t0 < seconds:
        _blocking_session(port, variant, pki).close()
        done += 1
    server_cpu, wall = cpu.stop()
    return {"connections": done, "per_s": done / wall,
            "server_cpu_ms_per_conn": server_cpu / max(done, 1) * 1e3}


# ------------------------------------------------------------------- run
def run(args) -> dict:
    quick = args.quick
    rounds = 1 if quick else 7
    mb = 32 if quick else 1024
    commits = 10_000 if quick else 40_000
    auths = 100 if quick else 300
    variants = ("PLAINTEXT", "SASL_SSL")
    raw: dict = {v: {"produce": [], "commit": [], "auth": []} for v in variants}
    # the data dir on tmpfs: writing GBs to the shared disk makes the produce
    # wall time a measure of the kernel's dirty-page throttling, not of TLS
    shm = "/dev/shm" if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(prefix="kcoord-bench-sec-", dir=shm) as tmp:
        tmp = Path(tmp)
        pki = _pki(tmp)
        server = _server(pki, tmp)
        pid = server.proc.pid
        acl_server = _server(pki, tmp, acls=True)
        raw["SASL_SSL+ACLs"] = {"commit": []}
        try:
            from confluent_kafka.admin import AdminClient, NewTopic
            for srv in (server, acl_server):
                admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{srv.ports['PLAINTEXT']}"})
                for fut in admin.create_topics([NewTopic(COMMIT_TOPIC, 10, 1)],
                                               operation_timeout=30).values():
                    fut.result(timeout=60)
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{server.ports['PLAINTEXT']}"})
            _grant_commit_acls(acl_server.ports["PLAINTEXT"])
            for rep in range(rounds):
                order = variants if rep % 2 == 0 else variants[::-1]
                for v in order:
                    port = server.ports[v]
                    # a fresh topic per round, deleted after it: GBs do not pile up on tmpfs
                    topic = f"{TOPIC}-{v.lower()}-{rep}"
                    _topic(admin, topic, create=True)
                    with timed(f"security round {rep + 1}/{rounds} {v}: produce {mb} MiB"):
                        raw[v]["produce"].append(produce_mb_s(
                            f"127.0.0.1:{port}", _client_conf(v, pki), mb, pid, topic))
                    _topic(admin, topic, create=False)
                    with timed(f"security round {rep + 1}/{rounds} {v}: {commits} commits"):
                        raw[v]["commit"].append(commit_cpu(port, v, pki, pid, commits, 10, 8,
                                                           60.0))
                    with timed(f"security round {rep + 1}/{rounds} {v}: {auths} connections"):
                        raw[v]["auth"].append(auth_rate(port, v, pki, pid, auths, 60.0))
                with timed(f"security round {rep + 1}/{rounds} SASL_SSL+ACLs: {commits} commits"):
                    raw["SASL_SSL+ACLs"]["commit"].append(commit_cpu(
                        acl_server.ports["SASL_SSL"], "SASL_SSL", pki, acl_server.proc.pid,
                        commits, 10, 8, 60.0))
        finally:
            server.stop()
            acl_server.stop()
    return report(raw, rounds, mb, commits, auths)


def _topic(admin, name: str, create: bool) -> None:
    from confluent_kafka.admin import NewTopic
    futures = (admin.create_topics([NewTopic(name, 1, 1)], operation_timeout=30) if create
               else admin.delete_topics([name], operation_timeout=30))
    for fut in futures.values():
        fut.result(timeout=60)


def _grant_commit_acls(port: int) -> None:
    """The bench user may READ its groups (PREFIXED) and the commit topic."""
    sock = _blocking_session(port, "PLAINTEXT", None)
    try:
        acls = [(3, "bench-sec-", 4), (2, COMMIT_TOPIC, 3)]  # (type, name, pattern)
        sock.sendall(_frame(30, 3, 1, {"creations": [
            {"resource_type": rt, "resource_name": name, "resource_pattern_type": pt,
             "principal": f"User:{USER}", "host": "*", "operation": 3, "permission_type": 3}
            for rt, name, pt in acls]}))
        size, = _SIZE.unpack(_recv(sock, 4))
        resp = _decode(30, 3, _recv(sock, size))
        assert all(r["error_code"] == 0 for r in resp["results"]), resp
    finally:
        sock.close()


def report(raw: dict, rounds: int, mb: int, commits: int, auths: int) -> dict:
    acl_commit = raw.pop("SASL_SSL+ACLs")["commit"]

    def med(v, kind, key):
        return median([r[key] for r in raw[v][kind]])
    p_mb = {v: med(v, "produce", "mb_s") for v in raw}
    p_cpu = {v: median([r["server_cpu_s"] / (r["records"] / 1024) * 100 for r in raw[v]["produce"]])
             for v in raw}
    c_cpu = {v: median([r["client_cpu_s"] / (r["records"] / 1024) * 100
                        for r in raw[v]["produce"]]) for v in raw}
    c_us = {v: med(v, "commit", "cpu_us_per_commit") for v in raw}
    c_rate = {v: med(v, "commit", "commits_s") for v in raw}
    a_rate = {v: med(v, "auth", "per_s") for v in raw}
    a_cpu = {v: med(v, "auth", "server_cpu_ms_per_conn") for v in raw}
    produce_ratio = p_mb["SASL_SSL"] / p_mb["PLAINTEXT"]
    # each round's SASL_SSL beside the PLAINTEXT measured next to it: load that
    # drifts over the run moves both halves of a pair together
    pair_ratios = [s["mb_s"] / p["mb_s"] for p, s in zip(raw["PLAINTEXT"]["produce"],
                                                         raw["SASL_SSL"]["produce"])]
    pair_ratio = median(pair_ratios)
    p_range = {v: (min(r["mb_s"] for r in raw[v]["produce"]),
                   max(r["mb_s"] for r in raw[v]["produce"])) for v in raw}
    p_secs = {v: med(v, "produce", "seconds") for v in raw}
    commit_ratio = c_us["SASL_SSL"] / c_us["PLAINTEXT"]
    acl_us = median([r["cpu_us_per_commit"] for r in acl_commit])
    rows = [
        ["produce MB/s (1 KiB records, acks=1)", p_mb["PLAINTEXT"], p_mb["SASL_SSL"],
         f"{produce_ratio:.2f}x", f">= {GOAL_PRODUCE:.2f}x",
         "met" if produce_ratio >= GOAL_PRODUCE else "NOT met"],
        ["produce MB/s, round by round: median of the per-round ratios", "", "",
         f"{pair_ratio:.2f}x ({min(pair_ratios):.2f}-{max(pair_ratios):.2f})",
         f">= {GOAL_PRODUCE:.2f}x", "met" if pair_ratio >= GOAL_PRODUCE else "NOT met"],
        ["produce MB/s, slowest-fastest round",
         "%.0f-%.0f" % p_range["PLAINTEXT"], "%.0f-%.0f" % p_range["SASL_SSL"], "", "", ""],
        ["produce: seconds per round (median)", p_secs["PLAINTEXT"], p_secs["SASL_SSL"],
         "", "", ""],
        ["produce: server CPU s per 100 MiB", p_cpu["PLAINTEXT"], p_cpu["SASL_SSL"],
         f"{p_cpu['SASL_SSL'] / p_cpu['PLAINTEXT']:.2f}x", "", ""],
        ["produce: client CPU s per 100 MiB (confluent-kafka, same 2 cores)",
         c_cpu["PLAINTEXT"], c_cpu["SASL_SSL"],
         f"{c_cpu['SASL_SSL'] / c_cpu['PLAINTEXT']:.2f}x", "", ""],
        ["OffsetCommit server CPU us/commit (10 partitions)", c_us["PLAINTEXT"],
         c_us["SASL_SSL"], f"{commit_ratio:.2f}x", f"<= {GOAL_COMMIT_CPU:.1f}x",
         "met" if commit_ratio <= GOAL_COMMIT_CPU else "NOT met"],
        ["OffsetCommit server CPU us/commit, SASL_SSL with the authorizer and ACLs",
         c_us["PLAINTEXT"], acl_us, f"{acl_us / c_us['PLAINTEXT']:.2f}x", "", ""],
        ["OffsetCommit commits/s", c_rate["PLAINTEXT"], c_rate["SASL_SSL"],
         f"{c_rate['SASL_SSL'] / c_rate['PLAINTEXT']:.2f}x", "", ""],
        ["new connections/s (SASL_SSL: TLS + SCRAM-SHA-512)", a_rate["PLAINTEXT"],
         a_rate["SASL_SSL"], "", "", ""],
        ["server CPU ms per new connection", a_cpu["PLAINTEXT"], a_cpu["SASL_SSL"], "", "", ""],
    ]
    sections = [
        "One kcoord with a PLAINTEXT and a SASL_SSL listener (SCRAM-SHA-512 over TLS 1.3, "
        "PEM key store made with trustme), the two measured in turns, "
        f"{rounds} round(s), medians. Produce: confluent-kafka, {mb} MiB of 1 KiB records "
        "per round to a fresh one-partition topic (deleted after the round); the goal is "
        "judged on the ratio of the medians, the per-round ratios beside it. "
        f"OffsetCommit: {commits:,} commits of 10 partitions on 10 connections, "
        "8 in flight each (blocking client threads); the ACL row is a second server with "
        "the StandardAuthorizer on and the bench user allowed READ on its groups (PREFIXED) "
        "and the topic, so every commit is authorized. Connections: "
        f"{auths} new connections one after another (connect, TLS, ApiVersions, "
        "SaslHandshake, SCRAM exchange; PLAINTEXT: connect and ApiVersions).",
        "",
        table(["measure", "PLAINTEXT", "SASL_SSL", "ratio", "goal", ""], rows),
        "",
        "The server's data dir is on tmpfs (/dev/shm): on the shared disk the produce wall "
        "time was set by the kernel's dirty-page throttling (the same variant measured "
        "24 and 51 MB/s in two rounds), not by TLS. Produce MB/s is one client's "
        "wall-clock throughput on a loaded 2-core machine; server CPU per 100 MiB is the "
        "row beside it; the raw rounds are in security.json.",
        "",
        "Server CPU is the kcoord process's utime+stime over the measured phase "
        "(/proc/<pid>/stat); client CPU is the bench process's CPU time over the same "
        "phase (librdkafka's threads: encryption, batching). TLS runs over memory BIOs "
        "(kcoord/security/tls_transport.py): each read decrypts every readable record "
        "into one buffer handed to the connection, which joins a frame split across "
        "reads once; the SASL gate costs one attribute test per frame once authenticated.",
        "",
        "Where SASL_SSL's extra server CPU goes: librdkafka writes a produce request as "
        "many TLS records (here about half of them under 512 bytes, a quarter near "
        "1 KiB, the rest 16 KiB), and OpenSSL 3.0's SSL_read returns one record per "
        "call at about 1-2 us each however small (measured in-process: 1.1-1.9 us for a "
        "61-byte record, 8-9 us for 16 KiB), so the per-record cost inside OpenSSL, not "
        "Python, is most of the difference; the read loop does nothing per record but "
        "call the C-level read into the one buffer.",
    ]
    raw["SASL_SSL+ACLs"] = {"commit": acl_commit}
    summary = [
        ["security: produce MB/s SASL_SSL (SCRAM-SHA-512) vs PLAINTEXT",
         f"{p_mb['SASL_SSL']:.1f} vs {p_mb['PLAINTEXT']:.1f} ({produce_ratio:.2f}x)",
         f">= {GOAL_PRODUCE:.2f}x", "met" if produce_ratio >= GOAL_PRODUCE else "MISSED"],
        ["security: OffsetCommit server CPU/commit SASL_SSL vs PLAINTEXT",
         f"{c_us['SASL_SSL']:.1f} vs {c_us['PLAINTEXT']:.1f} us ({commit_ratio:.2f}x); "
         f"with ACLs {acl_us:.1f} us",
         f"<= {GOAL_COMMIT_CPU:.1f}x", "met" if commit_ratio <= GOAL_COMMIT_CPU else "MISSED"],
        ["security: new SASL_SSL connections/s (TLS + SCRAM-SHA-512)",
         f"{a_rate['SASL_SSL']:.0f}/s, {a_cpu['SASL_SSL']:.2f} ms server CPU each", "-", "-"],
    ]
    out = {"rounds": rounds, "raw": raw, "produce_ratio": produce_ratio,
           "produce_pair_ratios": pair_ratios,
           "commit_cpu_ratio": commit_ratio, "summary": summary}
    write_results("security", "Security: SASL_SSL (SCRAM-SHA-512) beside PLAINTEXT",
                  sections, out)
    return out
