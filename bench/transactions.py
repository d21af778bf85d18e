"""Transactions (issue 14), side by side in one run:

1. consume-transform-produce transactions per second: confluent-kafka
   (librdkafka) reads `in` read_committed, and per transaction produces 10
   records to `out` and commits the consumed offset with
   send_offsets_to_transaction (AddPartitions, Produce, AddOffsets,
   TxnOffsetCommit, EndTxn); kcoord beside Tansu and the librdkafka mock,
   with the server's CPU per transaction;
2. read_committed fetch MB/s beside read_uncommitted on kcoord: a topic
   filled by transactions (1 KiB records, 1,000 per transaction, one in ten
   aborted) consumed whole under each isolation level, the two taking turns.

    python -m bench transactions [--quick] [--peers kcoord,tansu,mock]
"""
from __future__ import annotations

import time

from .common import CpuMeter, median, start_all, stop_all, table, timed, write_results

PER_TXN = 10
NOTE = ('kcoord makes every step durable before it answers (fsync of the transaction log, of the data partitions for acks=all, of __consumer_offsets through the group commit); Tansu runs with its memory:// storage engine and the librdkafka mock keeps everything in memory, so neither fsyncs. kcoord runs with the adaptive append linger (group.coordinator.append.linger.ms=-1, the default: a group-commit round starts once the loop\'s queue drained, and every fsync goes through the fsync batcher\'s shared adaptive rounds); the "linger 10" row runs with the fixed 10 ms linger of the old default (TxnOffsetCommit and markers still start their round at once there, FsyncRounds.hurry); the "no preallocate" row runs without the zeroed zone kept ahead of each active segment (log.preallocate=false), so each fdatasync also writes the inode\'s new size.')
TIME_LIMIT_S = 60.0


def _topics(peer, names: list[str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    if peer.name == "librdkafka mock":
        return  # created by the helper
    admin = AdminClient({"bootstrap.servers": peer.bootstrap})
    for fut in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        try:
            fut.result(30)
        except Exception as exc:  # already there is fine
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise


def _fill(bootstrap: str, topic: str, n: int) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, value=b"r%07d" % i, partition=0)
        if i % 10000 == 0:
            p.poll(0)
    if p.flush(120):
        raise RuntimeError("input not fully produced")


def ctp_run(peer, txns: int, tag: str) -> dict:
    """Transactions/s of a consume-transform-produce loop on `peer`."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    src, dst = f"ctp-in-{tag}", f"ctp-out-{tag}"
    _topics(peer, [src, dst])
    _fill(peer.bootstrap, src, txns * PER_TXN)
    consumer = Consumer({"bootstrap.servers": peer.bootstrap, "group.id": f"ctp-{tag}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(src, 0, 0)])
    producer = Producer({"bootstrap.servers": peer.bootstrap, "transactional.id": f"ctp-{tag}",
                         "linger.ms": 0})
    producer.init_transactions(60)
    done = 0
    cpu = CpuMeter(peer.pid)
    deadline = time.monotonic() + TIME_LIMIT_S
    while done < txns and time.monotonic() < deadline:
        msgs = []
        while len(msgs) < PER_TXN and time.monotonic() < deadline:
            msgs += [m for m in consumer.consume(PER_TXN - len(msgs), timeout=1.0)
                     if not m.error()]
        if len(msgs) < PER_TXN:
            break
        producer.begin_transaction()
        for m in msgs:
            producer.produce(dst, value=m.value(), partition=0)
        producer.send_offsets_to_transaction(
            [TopicPartition(src, 0, msgs[-1].offset() + 1)], consumer.consumer_group_metadata(),
            30)
        producer.commit_transaction(30)
        done += 1
    server_cpu, wall = cpu.stop()
    consumer.close()
    return {"transactions": done, "seconds": wall, "txn_s": done / wall if wall else 0.0,
            "server_cpu_ms_per_txn": 1000 * server_cpu / done if done else None}


def _fill_transactions(bootstrap: str, topic: str, mb: int) -> int:
    """`mb` MiB of 1 KiB records in transactions of 1,000; every tenth aborted.
    -> records committed."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"fill-{topic}",
                  "linger.ms": 5, "batch.size": 1_000_000})
    p.init_transactions(60)
    value = b"x" * 1024
    committed = 0
    for t in range(mb):
        p.begin_transaction()
        for _ in range(1000):
            while True:
                try:
                    p.produce(topic, value, partition=0)
                    break
                except BufferError:
                    p.poll(0.01)
        if t % 10 == 9:
            p.flush(60)
            p.abort_transaction(60)
        else:
            p.commit_transaction(60)
            committed += 1000
    return committed


def fetch_mb_s(bootstrap: str, topic: str, isolation: str, expect: int) -> dict:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"fetch-{isolation}-{time.time()}",
                  "isolation.level": isolation, "enable.auto.commit": False,
                  "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 10485760})
    c.assign([TopicPartition(topic, 0, 0)])
    got = size = 0
    t0 = time.monotonic()
    deadline = t0 + TIME_LIMIT_S
    while got < expect and time.monotonic() < deadline:
        for m in c.consume(10000, timeout=0.5):
            if not m.error():
                got += 1
                size += len(m.value())
    wall = time.monotonic() - t0
    c.close()
    return {"records": got, "seconds": wall, "mb_s": size / 1048576 / wall}


def run(args) -> None:
    quick = args.quick
    txns = 50 if quick else 300
    rounds = 1 if quick else 3
    names = list(args.peers) if not isinstance(args.peers, str) else args.peers.split(",")
    topics = [(f"ctp-{k}-r{r}", 1) for r in range(rounds) for k in ("in", "out")]
    peers, errors = start_all(names, {"mock": {"topics": topics},
                                      "kcoord": {"settings": {
                                          "group.initial.rebalance.delay.ms": "0"}}})
    if "kcoord" in peers:
        from .common import KcoordServer
        # beside the defaults: the fixed 10 ms linger of the old default
        # (group.coordinator.append.linger.ms=10, the adaptive one is -1), and
        # segments without the zeroed zone ahead (log.preallocate=false: every
        # durable step's fdatasync then writes the file's new size as well)
        variants = [("kcoord (linger 10)", {"group.coordinator.append.linger.ms": "10"}),
                    ("kcoord (no preallocate)", {"log.preallocate": "false"})]
        at = names.index("kcoord") + 1
        for name, settings in variants:
            try:
                extra = KcoordServer({"group.initial.rebalance.delay.ms": "0", **settings})
                extra.start()
                extra.name = name
                peers[name] = extra
                names = names[:at] + [name] + names[at:]
                at += 1
            except Exception as exc:
                errors[name] = f"could not start: {exc}"
    ctp: dict = {n: [] for n in names}
    try:
        for r in range(rounds):
            for name, peer in peers.items():
                if name in errors:
                    continue
                with timed(f"consume-transform-produce on {name}, round {r + 1}"):
                    try:
                        ctp[name].append(ctp_run(peer, txns, f"r{r}"))
                    except KeyboardInterrupt:
                        raise
                    except Exception as exc:
                        errors[name] = f"failed: {exc}"
        fetch = {"read_committed": [], "read_uncommitted": []}
        kcoord = peers.get("kcoord")
        committed = 0
        if kcoord is not None:
            mb = 8 if quick else 64
            _topics(kcoord, ["fetch-txn"])
            with timed(f"filling {mb} MiB in transactions"):
                committed = _fill_transactions(kcoord.bootstrap, "fetch-txn", mb)
            for r in range(rounds):
                for iso in ("read_committed", "read_uncommitted"):
                    expect = committed if iso == "read_committed" else mb * 1000
                    with timed(f"fetch {iso}, round {r + 1}"):
                        fetch[iso].append(fetch_mb_s(kcoord.bootstrap, "fetch-txn", iso, expect))
    finally:
        stop_all(peers)
    rows = []
    for name in names:
        runs = ctp.get(name) or []
        if not runs:
            rows.append([name, None, None, None, errors.get(name, "did not run")])
            continue
        rows.append([name, median([x["txn_s"] for x in runs]),
                     median([x["server_cpu_ms_per_txn"] for x in runs]),
                     sum(x["transactions"] for x in runs), errors.get(name, "")])
    sections = [
        "## Consume-transform-produce transactions per second",
        "",
        f"One confluent-kafka client: per transaction {PER_TXN} records consumed "
        "(read_committed), produced, and their offset committed in the transaction "
        f"(send_offsets_to_transaction); {txns} transactions per round, {rounds} rounds, "
        "median. Server CPU per transaction from /proc.",
        "",
        NOTE,
        "",
        table(["server", "transactions/s", "server CPU ms/txn", "transactions", "note"], rows),
        "",
    ]
    frows = []
    for iso, runs in (fetch.items() if kcoord is not None else []):
        if runs:
            frows.append([iso, median([x["mb_s"] for x in runs]), runs[-1]["records"]])
    if frows:
        sections += [
            "## kcoord fetch MB/s: read_committed beside read_uncommitted",
            "",
            "A one-partition topic filled by transactions of 1,000 1 KiB records (one in ten "
            "aborted), consumed from offset 0 by confluent-kafka under each isolation level; "
            "read_committed gets the aborted-transaction list and the client skips those "
            f"batches; median of {rounds} alternating rounds.",
            "",
            table(["isolation", "MB/s", "records delivered"], frows),
            "",
        ]
    write_results("transactions", "Transactions: kcoord beside Tansu and the librdkafka mock",
                  sections, {"ctp": ctp, "fetch": fetch if kcoord else {}, "errors": errors,
                             "txns_per_round": txns, "rounds": rounds})
