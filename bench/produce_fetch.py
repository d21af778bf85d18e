"""Produce and Fetch throughput (issue 3): 1 KiB records, confluent-kafka
producer with acks=1 and acks=all, then a confluent-kafka consumer with
manual assignment reading the acks=1 data back; MB/s and server CPU seconds
per GB, kcoord vs Tansu (and the librdkafka mock) in one run.
Goal: kcoord ahead of Tansu on both.

Server CPU per GB mostly measures how much fresh memory a server touches on
this VM (a first touch of a guest page is slow): the mock keeps ~5 MB per
partition, kcoord its whole log in the page cache.  So with the mock in the
run a second kcoord, RECYCLED, keeps about as little (small segments,
retention.bytes, a retention check every second: deleted segments give
their pages back for the next writes) and runs the produce phases too: the
same work as the mock's (as far as a log on disk can: it still rolls and
fsyncs segments, which the mock does not).  Freed pages help only if they are
written again within seconds: this VM reports free memory to its host
(free_page_reporting), after which touching it again is a fresh first touch."""
from __future__ import annotations

import os
from pathlib import Path

from .common import median, run_loadgen, start_all, stop_all, table, timed, write_results

SIZE = 1024
PARTITIONS = 3
RECYCLED = "kcoord-recycled"
# 32 MiB, checked every second: with 4 MiB segments checked every 100 ms the
# rolls cost more than the recycling saves (each roll fsyncs the sealed
# segment on the loop: paired runs at load 13-15, 1.32 vs 0.80 s/GB; at 32 MiB
# 0.82 vs 0.75)
RECYCLED_SEGMENT = 32 << 20
RECYCLED_CHECK_MS = 1000
RECYCLED_SETTINGS = {"log.segment.bytes": RECYCLED_SEGMENT,
                     "log.retention.bytes": RECYCLED_SEGMENT,
                     "log.retention.check.interval.ms": RECYCLED_CHECK_MS}
# what each server keeps of the data produced (the table's "keeps" column)
KEEPS = {
    "kcoord": "its whole log, on disk (page cache)",
    RECYCLED: f"the newest {RECYCLED_SEGMENT >> 20}-{2 * RECYCLED_SEGMENT >> 20} MiB per "
              f"partition on disk ({RECYCLED_SEGMENT >> 20} MiB segments, retention.bytes "
              f"{RECYCLED_SEGMENT >> 20} MiB, checked every {RECYCLED_CHECK_MS} ms)",
    "tansu": "everything, in memory (memory:// engine)",
    "mock": "the newest ~5 MB per partition, in memory",
}
DEFAULT_ROUNDS = 5


def client(spec: dict, timeout: float) -> dict:
    """bench/pf_client.py in its own process; its JSON result."""
    return run_loadgen(spec, timeout, module="bench.pf_client")


def create_topics(bootstrap: str, names: list[str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in names],
                                   operation_timeout=30).values():
        fut.result(timeout=60)


PHASES = [("produce_acks_1", "produce acks=1"), ("produce_acks_all", "produce acks=all"),
          ("fetch", "fetch (acks=1 data)")]


def run(args) -> dict:
    mb = args.mb or (16 if args.quick else 256)
    records = mb * 1024 * 1024 // SIZE
    seconds = args.seconds or (60 if args.quick else 180)
    reps = getattr(args, "rounds", None) or (1 if args.quick else DEFAULT_ROUNDS)
    names = list(args.peers)
    if "kcoord" in names and "mock" in names and RECYCLED not in names:
        names.insert(names.index("kcoord") + 1, RECYCLED)
    topics = {rep: {"1": f"bench-pf-acks1-r{rep}", "all": f"bench-pf-acksall-r{rep}"}
              for rep in range(reps)}
    warm = "bench-pf-warmup"
    every = [warm] + [t for ts in topics.values() for t in ts.values()]
    peers, errors = start_all(names, {"mock": {"topics": [(t, PARTITIONS) for t in every]},
                                      RECYCLED: {"settings": RECYCLED_SETTINGS}})
    runs: dict[str, dict[str, list]] = {n: {k: [] for k, _ in PHASES} for n in peers}
    try:
        for name, peer in list(peers.items()):
            try:
                if name != "mock":
                    create_topics(peer.bootstrap, every)
                # warm-up (not reported): the first produce of a server
                client({**base_spec(peer, records, seconds), "phase": "produce", "acks": "1",
                        "topic": warm, "records": min(records, 4096)}, seconds + 240)
            except Exception as exc:
                errors[name] = f"{type(exc).__name__}: {exc}"
                del runs[name]
        # servers take turns phase by phase, round after round, so that each
        # sees the same spread of load from the rest of the machine
        for rep in range(reps):
            for key, label in PHASES:
                for name in runs:
                    peer = peers[name]
                    with timed(f"produce_fetch round {rep + 1}/{reps} {label} against {name}"):
                        spec = base_spec(peer, records, seconds)
                        if key == "fetch":
                            if name == RECYCLED:
                                result = {"error": "not run: keeps only the newest segments "
                                                   "(like the mock)"}
                            elif name == "mock":
                                # rd_kafka_mock keeps about 5 MB (100,000 messages) per
                                # partition and deletes older segments: no full read-back
                                result = {"error": "not run: the librdkafka mock keeps only ~5 MB "
                                                   "per partition and drops older data"}
                            else:
                                result = client({**spec, "phase": "fetch",
                                                 "topic": topics[rep]["1"]}, seconds + 240)
                        else:
                            acks = "1" if key == "produce_acks_1" else "all"
                            result = client({**spec, "phase": "produce", "acks": acks,
                                             "topic": topics[rep][acks]}, seconds + 240)
                        runs[name][key].append(result)
        kept = {name: data_dir_bytes(peers[name]) for name in runs}
    finally:
        stop_all(peers)
    results: dict = {name: {"error": why} for name, why in errors.items()}
    for name, phases in runs.items():
        results[name] = {key: summarize(rs) for key, rs in phases.items()}
        results[name]["cpu_note"] = peers[name].cpu_note
        results[name]["keeps"] = KEEPS.get(name, "?")
        if kept.get(name) is not None:
            results[name]["data_dir_bytes_at_end"] = kept[name]
    return report(results, mb, records, reps)


# virtio-balloon's VIRTIO_BALLOON_F_REPORTING: the guest hands free memory back
_BALLOON_DEVICE, _REPORTING_BIT = "0x0005", 5


def free_page_reporting(devices: Path = Path("/sys/bus/virtio/devices")) -> bool | None:
    """Does this VM report free pages to its host (virtio-balloon free page
    reporting)?  None when no balloon device is seen (not a VM, or no sysfs)."""
    seen = None
    for dev in sorted(devices.glob("*")):
        try:
            if (dev / "device").read_text().strip() != _BALLOON_DEVICE:
                continue
            bits = (dev / "features").read_text().strip()
        except OSError:
            continue
        seen = len(bits) > _REPORTING_BIT and bits[_REPORTING_BIT] == "1"
    return seen


def free_page_note() -> str:
    """What the memory the servers touch costs here, for the text."""
    reporting = free_page_reporting()
    if reporting is None:
        return "(No virtio balloon seen: free page reporting unknown.)"
    if not reporting:
        return "(This VM's balloon does not report free pages to its host.)"
    return ("This VM's balloon reports free pages to its host (virtio-balloon free page "
            "reporting): memory freed and left idle for a few seconds goes back to the host, "
            "and the next touch of it faults on the host too. Writing 512 MiB into a new file "
            "cost 0.17-0.18 s of system time per GB when the pages of the file deleted just "
            "before were reused, 0.99-1.05 s/GB when that file had been deleted 15 s before "
            "(produce3's notes): a server that keeps what it writes (kcoord's page cache, "
            "Tansu's memory engine) pays up to ~1 s/GB more than one that reuses the same few "
            "MB (the mock), depending on what the machine freed just before, and so does a "
            "kcoord that deletes segments unless their pages are written again within seconds.")


def data_dir_bytes(peer) -> int | None:
    """Bytes of the files in a kcoord peer's data dir (None for the others)."""
    root = getattr(peer, "data_dir", None)
    if root is None:
        return None
    total = 0
    for path, _, files in os.walk(Path(root)):
        for f in files:
            try:
                total += os.stat(os.path.join(path, f)).st_size
            except OSError:
                pass
    return total


def base_spec(peer, records: int, seconds: float) -> dict:
    return {"bootstrap": peer.bootstrap, "pid": peer.pid, "partitions": PARTITIONS,
            "records": records, "size": SIZE, "seconds": seconds}


def summarize(rs: list[dict]) -> dict:
    """Medians over the runs of one phase (MB/s and CPU per byte), and every run."""
    good = [r for r in rs if "error" not in r and r.get("bytes")]
    if not good:
        return {"error": rs[0].get("error", "no run") if rs else "no run", "runs": rs}
    out = dict(good[0])
    for key in ("mb_per_s", "wall_s"):
        out[key] = median([r[key] for r in good])
    for key in ("server_cpu_s", "server_user_s", "server_system_s"):
        out[key + "_per_gb"] = median([r[key] / (r["bytes"] / 1e9) for r in good])
    out["mb_per_s_all"] = [round(r["mb_per_s"], 1) for r in good]
    out["mb_per_s_range"] = [min(r["mb_per_s"] for r in good), max(r["mb_per_s"] for r in good)]
    per_gb = [r["server_cpu_s"] / (r["bytes"] / 1e9) for r in good]
    out["server_cpu_s_per_gb_range"] = [min(per_gb), max(per_gb)]
    out["errors"] = [e for r in good for e in r.get("errors", [])][:5]
    for key in ("unacknowledged", "duplicates", "bad"):
        if key in good[0]:
            out[key] = sum(r.get(key, 0) for r in good)
    if "expected" in good[0]:
        out["records"] = sum(r["records"] for r in good)
        out["expected"] = sum(r["expected"] for r in good)
    out["runs"] = rs
    return out


def _spread(r: dict, key: str, digits: int) -> str | None:
    lo_hi = r.get(key)
    return f"{lo_hi[0]:.{digits}f}-{lo_hi[1]:.{digits}f}" if lo_hi else None


def _cell(r: dict | None):
    """(MB/s, its spread, CPU s/GB, its spread, user s/GB, system s/GB, MB/s of
    every run, note) of a phase."""
    if not r or "error" in r:
        return None, None, None, None, None, None, None, (r or {}).get("error", "not run")
    note = []
    if r.get("errors"):
        note.append(f"errors: {r['errors'][:2]}")
    if r.get("unacknowledged"):
        note.append(f"{r['unacknowledged']} unacknowledged")
    if "expected" in r and r["records"] != r["expected"]:
        note.append(f"read {r['records']:,} of {r['expected']:,}")
    if r.get("duplicates") or r.get("bad"):
        note.append(f"{r.get('duplicates', 0)} duplicates, {r.get('bad', 0)} bad")
    return (r["mb_per_s"], _spread(r, "mb_per_s_range", 0), r["server_cpu_s_per_gb"],
            _spread(r, "server_cpu_s_per_gb_range", 2), r["server_user_s_per_gb"],
            r["server_system_s_per_gb"], " / ".join(f"{x:.0f}" for x in r["mb_per_s_all"]),
            "; ".join(note) or "ok")


def report(results: dict, mb: int, records: int, reps: int = 1) -> dict:
    rows = []
    for key, label in PHASES:
        for name, r in results.items():
            cell = _cell({"error": r["error"]} if "error" in r else r.get(key))
            rows.append([label, name, *cell])
    verdict = []
    k, t = results.get("kcoord", {}), results.get("tansu", {})
    for key, label in PHASES:
        kr = _cell(k.get(key))[0] if "error" not in k else None
        tr = _cell(t.get(key))[0] if t and "error" not in t else None
        if kr is None or tr is None:
            verdict.append(f"{label}: not comparable")
        else:
            verdict.append(f"{label}: {'met' if kr > tr else 'MISSED'} ({kr:.1f} vs {tr:.1f} MB/s)")
    sections = [
        f"{records:,} records of {SIZE} bytes ({mb} MiB) per produce run, {PARTITIONS} partitions, "
        f"{reps} rounds in which the servers take turns phase by phase (medians shown, every "
        "run's MB/s beside them), "
        "no compression, confluent-kafka 2.16.1 (librdkafka) producer with linger.ms=5, "
        "batch.size=1 MB, idempotence off, after a 4 MiB warm-up produce; the consumer (manual "
        "assignment from offset 0, fetch.queue.backoff.ms=10: at librdkafka's 1000 ms a server "
        "that fills the consumer's 64 MB queue ahead of its read loop waits out 1 s pauses) "
        "reads the acks=1 topic back and checks every sequence number "
        "arrives once, timed from its first record (connecting and offset lookups excluded). "
        "MB = 10^6 bytes of record values; server CPU = utime+stime of the server process "
        "between the first record and the last acknowledgement (or the last record read). The client runs in its own "
        "process on the same 2 cores. kcoord stores to its segment log on disk (acks=all waits "
        "for a group-committed fsync); Tansu runs with its memory:// storage engine; the "
        "librdkafka mock keeps the newest ~5 MB per partition in memory (its CPU is the helper "
        "process hosting it). On this VM the first touch of a guest page is slow, so server "
        "CPU per GB mostly says how much fresh memory a server touches: "
        f"{RECYCLED} is a second kcoord that keeps about as little as the mock "
        f"({KEEPS[RECYCLED]}), produce phases only: the same work as the mock's. "
        + free_page_note(),
        "",
        table(["phase", "server", "MB/s (median)", "MB/s spread", "server CPU s/GB",
               "CPU s/GB spread", "of which user s/GB", "of which system s/GB", "runs: MB/s",
               "notes"], rows),
        "",
        table(["server", "keeps of what is produced", "data dir at the end"],
              [[name, r.get("keeps", "?"),
                f"{r['data_dir_bytes_at_end'] / 2**20:,.0f} MiB"
                if r.get("data_dir_bytes_at_end") is not None else "-"]
               for name, r in results.items() if "error" not in r]),
        "",
        "System time is the kernel's share (socket reads and writes, and for kcoord the "
        "page-cache writes of its log and fsync): it varies most between runs on this shared "
        "machine; user time is the server's own code.",
        "",
        "Goal (issue 3): kcoord ahead of Tansu on produce and fetch: " + "; ".join(verdict) + ".",
    ]
    raw = {"results": results, "mb": mb, "records": records, "record_bytes": SIZE, "rounds": reps,
           "free_page_reporting": free_page_reporting()}
    md = write_results("produce_fetch", "Produce and Fetch throughput", sections, raw)
    print(md.read_text())
    return raw
