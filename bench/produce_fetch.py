"""Produce and Fetch throughput (issue 3): 1 KiB records, confluent-kafka
producer with acks=1 and acks=all, then a confluent-kafka consumer with
manual assignment reading the acks=1 data back; MB/s and server CPU seconds
per GB, kcoord vs Tansu (and the librdkafka mock) in one run.
Goal: kcoord ahead of Tansu on both."""
from __future__ import annotations

import json
import subprocess

from .common import PY, ROOT, start_peer, table, timed, write_results

SIZE = 1024
PARTITIONS = 3


def client(spec: dict, timeout: float) -> dict:
    try:
        out = subprocess.run([PY, "-m", "bench.pf_client", json.dumps(spec)], cwd=ROOT,
                             capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"client did not finish in {timeout:.0f}s"}
    lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
    if not lines:
        return {"error": f"client failed (exit {out.returncode}): {out.stderr[-1500:]}"}
    return json.loads(lines[-1])


def create_topics(bootstrap: str, names: list[str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in names],
                                   operation_timeout=30).values():
        fut.result(timeout=60)


def run(args) -> dict:
    mb = args.mb or (16 if args.quick else 256)
    records = mb * 1024 * 1024 // SIZE
    seconds = args.seconds or (60 if args.quick else 180)
    topics = {"1": "bench-pf-acks1", "all": "bench-pf-acksall"}
    warm = "bench-pf-warmup"
    results: dict = {}
    for name in args.peers:
        with timed(f"produce_fetch against {name}"):
            kw = ({"topics": [(t, PARTITIONS) for t in [*topics.values(), warm]]}
                  if name == "mock" else {})
            try:
                peer = start_peer(name, **kw)
            except Exception as exc:
                results[name] = {"error": f"could not start: {exc}"}
                continue
            r: dict = {"cpu_note": peer.cpu_note}
            try:
                if name != "mock":
                    create_topics(peer.bootstrap, [*topics.values(), warm])
                base = {"bootstrap": peer.bootstrap, "pid": peer.pid, "partitions": PARTITIONS,
                        "records": records, "size": SIZE, "seconds": seconds}
                # warm-up (not reported): the first produce and fetch of a server
                r["warmup"] = client({**base, "phase": "produce", "acks": "1", "topic": warm,
                                      "records": min(records, 4096)}, seconds + 240)
                for acks, topic in topics.items():
                    r[f"produce_acks_{acks}"] = client(
                        {**base, "phase": "produce", "acks": acks, "topic": topic}, seconds + 240)
                if name == "mock":
                    # rd_kafka_mock keeps about 5 MB (100,000 messages) per partition
                    # and deletes older segments, so the data cannot be read back whole
                    r["fetch"] = {"error": "not run: the librdkafka mock keeps only ~5 MB per "
                                           "partition and drops older data"}
                else:
                    r["fetch"] = client({**base, "phase": "fetch", "topic": topics["1"]},
                                        seconds + 240)
            except Exception as exc:
                r["error"] = f"{type(exc).__name__}: {exc}"
            finally:
                peer.stop()
            results[name] = r
    return report(results, mb, records)


def _cell(r: dict | None):
    """(MB/s, CPU s/GB, user s/GB, system s/GB, note) of one phase's result."""
    if not r or "error" in r:
        return None, None, None, None, (r or {}).get("error", "not run")
    note = []
    if r.get("errors"):
        note.append(f"errors: {r['errors'][:2]}")
    if r.get("unacknowledged"):
        note.append(f"{r['unacknowledged']} unacknowledged")
    if "expected" in r and r["records"] != r["expected"]:
        note.append(f"read {r['records']:,} of {r['expected']:,}")
    if r.get("duplicates") or r.get("bad"):
        note.append(f"{r.get('duplicates', 0)} duplicates, {r.get('bad', 0)} bad")
    gb = r["bytes"] / 1e9
    if not gb:
        return r["mb_per_s"], None, None, None, "; ".join(note)
    return (r["mb_per_s"], r["server_cpu_s"] / gb, r["server_user_s"] / gb,
            r["server_system_s"] / gb, "; ".join(note) or "ok")


def report(results: dict, mb: int, records: int) -> dict:
    rows = []
    phases = [("produce_acks_1", "produce acks=1"), ("produce_acks_all", "produce acks=all"),
              ("fetch", "fetch (acks=1 data)")]
    for key, label in phases:
        for name, r in results.items():
            cell = _cell({"error": r["error"]} if "error" in r else r.get(key))
            rows.append([label, name, *cell])
    verdict = []
    k, t = results.get("kcoord", {}), results.get("tansu", {})
    for key, label in phases:
        kr = _cell(k.get(key))[0] if "error" not in k else None
        tr = _cell(t.get(key))[0] if t and "error" not in t else None
        if kr is None or tr is None:
            verdict.append(f"{label}: not comparable")
        else:
            verdict.append(f"{label}: {'met' if kr > tr else 'MISSED'} ({kr:.1f} vs {tr:.1f} MB/s)")
    sections = [
        f"{records:,} records of {SIZE} bytes ({mb} MiB) per produce run, {PARTITIONS} partitions, "
        "no compression, confluent-kafka 2.16.1 (librdkafka) producer with linger.ms=5, "
        "batch.size=1 MB, idempotence off, after a 4 MiB warm-up produce; the consumer (manual "
        "assignment from offset 0) reads the acks=1 topic back and checks every sequence number "
        "arrives once, timed from its first record (connecting and offset lookups excluded). "
        "MB = 10^6 bytes of record values; server CPU = utime+stime of the server process "
        "between the first record and the last acknowledgement (or the last record read). The client runs in its own "
        "process on the same 2 cores. kcoord stores to its segment log on disk (acks=all waits "
        "for a group-committed fsync); Tansu runs with its memory:// storage engine; the "
        "librdkafka mock keeps the newest ~5 MB per partition in memory (its CPU is the helper "
        "process hosting it).",
        "",
        table(["phase", "server", "MB/s", "server CPU s/GB", "of which user s/GB",
               "of which system s/GB", "notes"], rows),
        "",
        "System time is the kernel's share (socket reads and writes, and for kcoord the "
        "page-cache writes of its log and fsync): it varies most between runs on this shared "
        "machine; user time is the server's own code.",
        "",
        "Goal (issue 3): kcoord ahead of Tansu on produce and fetch: " + "; ".join(verdict) + ".",
    ]
    raw = {"results": results, "mb": mb, "records": records, "record_bytes": SIZE}
    md = write_results("produce_fetch", "Produce and Fetch throughput", sections, raw)
    print(md.read_text())
    return raw
