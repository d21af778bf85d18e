"""The produce/fetch client, run in its own process (confluent-kafka):

    python -m bench.pf_client '<json spec>'  ->  one JSON result line on stdout

Spec: bootstrap, pid (server process whose CPU to read), topic, partitions,
records, size (value bytes), acks ("1" or "all"), phase ("produce" or
"fetch"), seconds (time limit).  The server's utime+stime is read from
/proc right before the first record and right after the last one is
acknowledged (produce) or received (fetch).  Each value starts with its
8-byte sequence number; fetch checks that every number arrives once.
"""
from __future__ import annotations

import json
import os
import struct
import sys
import time

from .loadgen import proc_times


class Cpu:
    """Server CPU between start() and stop(): total, user and system seconds."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.u0 = self.s0 = 0.0

    def start(self) -> None:
        self.u0, self.s0 = proc_times(self.pid)

    def stop(self) -> dict:
        u, s = proc_times(self.pid)
        return {"server_cpu_s": (u - self.u0) + (s - self.s0), "server_user_s": u - self.u0,
                "server_system_s": s - self.s0}


def produce(spec: dict) -> dict:
    from confluent_kafka import Producer
    n, size = spec["records"], spec["size"]
    payload = os.urandom(size)
    seq = struct.Struct(">Q")
    errors = []
    acked = [0]

    def on_delivery(err, msg):
        if err is not None:
            if len(errors) < 5:
                errors.append(str(err))
        else:
            acked[0] += 1

    p = Producer({"bootstrap.servers": spec["bootstrap"], "acks": spec["acks"],
                  "linger.ms": 5, "batch.size": 1_000_000, "compression.type": "none",
                  "enable.idempotence": False, "queue.buffering.max.kbytes": 1_048_576,
                  "queue.buffering.max.messages": 1_000_000, "message.max.bytes": 1_000_000,
                  "log_level": 3})
    p.list_topics(spec["topic"], timeout=30)  # connect and learn the leaders first
    parts = spec["partitions"]
    deadline = time.monotonic() + spec["seconds"]
    cpu = Cpu(spec["pid"])
    cpu.start()
    t0 = time.monotonic()
    sent = 0
    for i in range(n):
        value = seq.pack(i) + payload[8:]
        while True:
            try:
                p.produce(spec["topic"], value, partition=i % parts, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.01)
        sent += 1
        if i % 1000 == 0:
            p.poll(0)
            if time.monotonic() > deadline:
                break
    left = p.flush(max(1.0, deadline + 60 - time.monotonic()))
    wall = time.monotonic() - t0
    return {"records": acked[0], "sent": sent, "unacknowledged": left, "errors": errors,
            "bytes": acked[0] * size, "wall_s": wall, **cpu.stop(),
            "mb_per_s": acked[0] * size / wall / 1e6}


def fetch(spec: dict) -> dict:
    from confluent_kafka import Consumer, TopicPartition
    n, size = spec["records"], spec["size"]
    c = Consumer({"bootstrap.servers": spec["bootstrap"], "group.id": "bench-pf-reader",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 1_048_576,
                  "fetch.wait.max.ms": 100, "log_level": 3,
                  # librdkafka's default (1000 ms) idles a partition whose
                  # queue (queued.max.messages.kbytes, 64 MB) a server filled
                  # faster than this process reads it: with it, the fastest
                  # server sat out whole seconds and measured the slowest
                  "fetch.queue.backoff.ms": 10})
    c.assign([TopicPartition(spec["topic"], p, 0) for p in range(spec["partitions"])])
    seen = bytearray(n)
    got = dupes = bad = 0
    errors = []
    deadline = time.monotonic() + spec["seconds"]
    t_start = time.monotonic()
    cpu = Cpu(spec["pid"])
    t0 = None
    while got < n and time.monotonic() < deadline:
        msgs = c.consume(10_000, 0.5)
        if msgs and t0 is None:
            # timed from the first record on: connecting, metadata and the
            # offset lookups of the consumer's start are left out
            cpu.start()
            t0 = time.monotonic()
        for msg in msgs:
            if msg.error():
                if len(errors) < 5:
                    errors.append(str(msg.error()))
                continue
            value = msg.value()
            i = struct.unpack_from(">Q", value)[0] if value and len(value) >= 8 else -1
            if len(value) != size or not 0 <= i < n:
                bad += 1
                continue
            if seen[i]:
                dupes += 1
                continue
            seen[i] = 1
            got += 1
    if t0 is None:
        c.close()
        return {"error": f"no record arrived in {spec['seconds']} s"}
    wall = time.monotonic() - t0
    used = cpu.stop()
    c.close()
    return {"records": got, "expected": n, "duplicates": dupes, "bad": bad, "errors": errors,
            "bytes": got * size, "wall_s": wall, **used,
            "start_s": t0 - t_start, "mb_per_s": got * size / wall / 1e6}


if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    try:
        result = produce(spec) if spec["phase"] == "produce" else fetch(spec)
    except Exception as exc:
        result = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(result))
