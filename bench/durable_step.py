"""One durable step on this disk: append a small batch to a partition log,
then flush it, three ways, in alternating blocks.

    python -m bench durable_step [--quick]

- preallocate: the log as `kcoord serve` runs it (log.preallocate: zeros
  kept ahead of the active segment, kcoord/log/preallocate.py), so the
  flush's fdatasync writes the data alone;
- fdatasync: no zeros ahead, the segment grows with each append, so each
  fdatasync also writes the inode's new size;
- fsync: as segments flushed before preallocation (an fsync of a growing
  file: the data, then the inode with its size and times).

Per step: wall time (median, p90), the process's CPU (the zero filler's
thread included) and the block device's write and flush requests from
/proc/diskstats (other processes' I/O on the same disk counts too: say the
load).  A transaction makes about six such steps in a row
(transactions.md); an acks=all Produce makes one.
"""
from __future__ import annotations

import os
import resource
import shutil
import tempfile
import time

from kcoord.log import LogConfig, PartitionLog
from kcoord.protocol.records import build_batch

from .common import median, table, timed, write_results

MODES = ("preallocate", "fdatasync", "fsync")
RECORD_BYTES = 300   # about a transaction step's batch (a few hundred bytes)


def _device(path: str) -> str | None:
    """The /proc/diskstats name of the block device holding `path` (its
    whole disk if it sits on a partition)."""
    st = os.stat(path)
    try:
        real = os.path.realpath(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    except OSError:
        return None
    name = os.path.basename(real)
    if os.path.exists(os.path.join(real, "partition")):
        name = os.path.basename(os.path.dirname(real))
    return name


def _disk(device: str | None) -> tuple[int, int]:
    """(write requests, flush requests) completed so far by `device`."""
    if device is None:
        return 0, 0
    with open("/proc/diskstats") as fh:
        for line in fh:
            fields = line.split()
            if fields[2] == device:
                return int(fields[7]), int(fields[18]) if len(fields) > 18 else 0
    return 0, 0


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run(args) -> None:
    per_block, blocks = (100, 2) if args.quick else (300, 6)
    root = tempfile.mkdtemp(prefix="kcoord-durable-step-")
    device = _device(root)
    batch = build_batch([(b"k", os.urandom(RECORD_BYTES), [], 1000)])
    logs = {m: PartitionLog(os.path.join(root, f"{m}-0"),
                            LogConfig(preallocate=(m == "preallocate"))) for m in MODES}

    def flush_of(mode: str, log: PartitionLog):
        if mode == "fsync":
            return lambda: os.fsync(log.active._fd)  # what Segment.flush did before
        return log.flush

    flushes = {m: flush_of(m, log) for m, log in logs.items()}
    stats: dict = {m: {"wall": [], "cpu": 0.0, "writes": 0, "flush_requests": 0, "steps": 0}
                   for m in MODES}
    try:
        for log in logs.values():       # the first flush starts the zone; let it fill
            for _ in range(3):
                log.append(batch)
                log.flush()
        deadline = time.monotonic() + 10
        while any(z is not None and (z.queued or not z.fills)
                  for z in [logs["preallocate"].active._zone]) and time.monotonic() < deadline:
            time.sleep(0.01)
        with timed(f"{blocks} blocks of {per_block} steps per mode, alternating"):
            for b in range(blocks):
                for mode in (MODES if b % 2 == 0 else MODES[::-1]):
                    log, flush, st = logs[mode], flushes[mode], stats[mode]
                    d0, c0 = _disk(device), _cpu()
                    for _ in range(per_block):
                        t = time.perf_counter()
                        log.append(batch)
                        flush()
                        st["wall"].append(time.perf_counter() - t)
                    c1, d1 = _cpu(), _disk(device)
                    st["cpu"] += c1 - c0
                    st["writes"] += d1[0] - d0[0]
                    st["flush_requests"] += d1[1] - d0[1]
                    st["steps"] += per_block
    finally:
        for log in logs.values():
            log.close()
        shutil.rmtree(root, ignore_errors=True)
    rows, raw = [], {}
    for mode in MODES:
        st = stats[mode]
        n = st["steps"]
        wall = sorted(st["wall"])
        raw[mode] = {"steps": n, "median_us": median(wall) * 1e6,
                     "p90_us": wall[n * 9 // 10] * 1e6, "cpu_us": st["cpu"] / n * 1e6,
                     "writes": st["writes"] / n, "flush_requests": st["flush_requests"] / n}
        r = raw[mode]
        rows.append([mode, r["median_us"], r["p90_us"], r["cpu_us"], r["writes"],
                     r["flush_requests"]])
    sections = [
        "## One durable step: append a batch, flush it",
        "",
        f"A {len(batch)}-byte batch appended to a partition log, then flushed; {blocks} "
        f"blocks of {per_block} steps per mode, the modes alternating; data dir on "
        f"`{device}`. preallocate: zeros kept ahead of the active segment (the server's "
        "default), so fdatasync writes the data alone; fdatasync: the file grows with "
        "each append; fsync: the flush before preallocation. Disk requests per step "
        "count every process's I/O on the device.",
        "",
        table(["mode", "median us", "p90 us", "CPU us/step", "disk writes/step",
               "disk flushes/step"], rows),
        "",
    ]
    write_results("durable_step", "One durable step: append and flush, three ways", sections,
                  {"modes": raw, "per_block": per_block, "blocks": blocks, "device": device,
                   "batch_bytes": len(batch)})
