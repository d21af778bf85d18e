"""Where one node's consume-transform-produce transaction spends its time,
request by request (issue 26): the same confluent-kafka loop as
bench/transactions.py against kcoord and the librdkafka mock, with
librdkafka's `debug=eos,protocol` log giving each request's round trip as
the client sees it, the client's time per call (produce, send_offsets,
commit), the server's CPU per transaction, and any retried or
CONCURRENT_TRANSACTIONS answer.

    python -m bench txn_round_trips [--quick]
"""
from __future__ import annotations

import collections
import re
import statistics
import time

from .common import CpuMeter, start_all, stop_all, table, write_results
from .transactions import PER_TXN, _fill, _topics

RTT = re.compile(r"Received (\w+)Response \(v\d+, \d+ bytes, CorrId \d+, rtt ([\d.]+)ms\)")
RETRY = re.compile(r"CONCURRENT_TRANSACTIONS|Retrying|retry in", re.I)


class _Log:
    """librdkafka's log callback: keeps the lines."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, _level, fmt, *args) -> None:
        self.lines.append(fmt % args if args else fmt)


def one_peer(peer, txns: int) -> dict:
    from confluent_kafka import Consumer, Producer, TopicPartition
    src, dst = "rtt-in", "rtt-out"
    _topics(peer, [src, dst])
    _fill(peer.bootstrap, src, txns * PER_TXN)
    consumer = Consumer({"bootstrap.servers": peer.bootstrap, "group.id": "rtt",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(src, 0, 0)])
    log = _Log()
    producer = Producer({"bootstrap.servers": peer.bootstrap, "transactional.id": "rtt",
                         "linger.ms": 0, "debug": "eos,protocol", "logger": log})
    producer.init_transactions(60)
    log.lines.clear()  # the loop's requests only
    calls: dict[str, list[float]] = collections.defaultdict(list)
    cpu = CpuMeter(peer.pid)
    for _ in range(txns):
        msgs = []
        t0 = time.monotonic()
        while len(msgs) < PER_TXN and time.monotonic() < t0 + 30:
            msgs += [m for m in consumer.consume(PER_TXN - len(msgs), timeout=1.0)
                     if not m.error()]
        t1 = time.monotonic()
        producer.begin_transaction()
        for m in msgs:
            producer.produce(dst, value=m.value(), partition=0)
        t2 = time.monotonic()
        producer.send_offsets_to_transaction(
            [TopicPartition(src, 0, msgs[-1].offset() + 1)], consumer.consumer_group_metadata(),
            30)
        t3 = time.monotonic()
        producer.commit_transaction(30)
        t4 = time.monotonic()
        for name, a, b in (("consume", t0, t1), ("produce", t1, t2),
                           ("send_offsets", t2, t3), ("commit", t3, t4)):
            calls[name].append(1000 * (b - a))
    server_cpu, wall = cpu.stop()
    consumer.close()
    rtts: dict[str, list[float]] = collections.defaultdict(list)
    for line in log.lines:
        m = RTT.search(line)
        if m:
            rtts[m.group(1)].append(float(m.group(2)))
    return {"txn_s": txns / wall, "server_cpu_ms_per_txn": 1000 * server_cpu / txns,
            "call_ms": {k: statistics.median(v) for k, v in calls.items()},
            "rtt_ms": {k: (len(v), statistics.median(v), max(v)) for k, v in rtts.items()},
            "retries": sum(1 for line in log.lines if RETRY.search(line))}


def run(args) -> None:
    txns = 40 if args.quick else 200
    peers, errors = start_all(["kcoord", "mock"], {
        "mock": {"topics": [("rtt-in", 1), ("rtt-out", 1)]},
        "kcoord": {"settings": {"group.initial.rebalance.delay.ms": "0"}}})
    out: dict = {}
    try:
        for name, peer in peers.items():
            if name not in errors:
                out[name] = one_peer(peer, txns)
    finally:
        stop_all(peers)
    names = list(out)
    calls = ["consume", "produce", "send_offsets", "commit"]
    apis = sorted({a for r in out.values() for a in r["rtt_ms"]})
    sections = [
        "## Per transaction", "",
        f"{txns} transactions of {PER_TXN} records and one offset commit, one client; "
        "client-side medians in ms.", "",
        table(["server", "transactions/s", "server CPU ms/txn", "retried requests",
               *[f"{c} ms" for c in calls]],
              [[n, out[n]["txn_s"], out[n]["server_cpu_ms_per_txn"], out[n]["retries"],
                *[out[n]["call_ms"][c] for c in calls]] for n in names]), "",
        "## Round trip per request (librdkafka's rtt, median ms, count)", "",
        table(["request", *names],
              [[a, *[(f"{out[n]['rtt_ms'][a][1]:.2f} ({out[n]['rtt_ms'][a][0]})"
                      if a in out[n]["rtt_ms"] else "-") for n in names]] for a in apis]), ""]
    sections += ["Where the server's time goes per transaction (profile split): "
                 "txn_server_split.md.", ""]
    if errors:
        sections += ["Errors: " + "; ".join(f"{k}: {v}" for k, v in errors.items()), ""]
    write_results("txn_round_trips", "One node's transaction, request by request", sections,
                  {"results": out, "errors": errors})
