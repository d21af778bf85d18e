"""Workload 3, transactions: consume-transform-produce with
send_offsets_to_transaction (confluent-kafka), and a read_committed reader.

A feeder writes unique inputs to `txn-in`; two transactional processors in
one classic group read them (read_committed), write "partition:offset:txn"
to `txn-out` and commit their input offsets in the same transaction.  A
transaction whose commit returned is ok; one aborted by
abort_transaction() (which returned) is a failure; any other end (a fatal
error, a commit that never returned) is unknown.  After an abort the
processor rewinds to its group's committed offsets, as an exactly-once
application must."""
from __future__ import annotations

import os
import random
import sys
import threading
import time
import traceback
from typing import Any

from .checkers import check_transactions
from .cluster import join_threads, start_threads
from .history import FAIL, OK, UNKNOWN, History
from .queue import _Silent
from .reads import committed_offsets

IN_TOPIC, OUT_TOPIC = "txn-in", "txn-out"
PARTITIONS = 2
GROUP = "txn-group"
OVERDUE_S = 10.0  # a librdkafka call this far past its own timeout is stuck for good
TXN_IDS = ["kfx-txn-0", "kfx-txn-1"]


class TxnWorkload:
    name = "transactions"

    def __init__(self, history: History, bootstrap: str, addrs: dict, seed: int = 0,
                 rate: float = 20.0) -> None:
        self.history, self.bootstrap, self.addrs = history, bootstrap, addrs
        self.rng = random.Random(seed)
        self.rate = rate
        self.stop = threading.Event()
        self.stop_processing = threading.Event()
        self.threads: list[threading.Thread] = []
        self.final_output: list[str] = []
        self.final_committed: dict[int, int] = {}
        self.join_phases: dict[str, float] = {}  # seconds into join() each step ended
        self.stuck_fenced: list[str] = []  # where fenced processors were stuck
        self.replaced: list[str] = []      # where processors stuck mid-run were replaced
        self.processors: dict[str, threading.Thread] = {}  # the current one per id
        self._generation: dict[str, int] = {}
        self._consumers: dict[str, Any] = {}  # each processor's current consumer
        self._call_deadlines: dict[tuple[str, int], float] = {}  # a call's end + OVERDUE_S
        # per transactional id, what its processors met short of a transaction: errors
        # of init_transactions and of consume (by name), polls that returned nothing
        self.stats: dict[str, dict] = {tid: {"init_errors": {}, "consume_errors": {},
                                             "polls": 0, "empty_polls": 0} for tid in TXN_IDS}

    def start(self) -> None:
        self.threads = start_threads([(self._feeder, ()), (self._reader, ()),
                                      (self._watchdog, ())])
        for tid in TXN_IDS:
            self._start_processor(tid)

    def _start_processor(self, tid: str) -> None:
        gen = self._generation[tid] = self._generation.get(tid, -1) + 1
        self.processors[tid] = start_threads([(self._processor, (tid, gen))])[0]

    def _watchdog(self) -> None:
        """A processor stuck in a librdkafka call past its own timeout (issues
        5456, 5511) is replaced, as an application's watchdog would: the new
        producer's init_transactions fences the stuck one (its open transaction
        aborted), its consumer is closed so the group hands its partitions on."""
        while not self.stop.wait(1.0):
            for tid in TXN_IDS:
                if not self._overdue(tid):
                    continue
                self.replaced.append(_where(self.processors[tid]))
                stuck = self._consumers.pop(tid, None)
                self._start_processor(tid)
                if stuck is not None:
                    try:
                        stuck.close()
                    except Exception:  # already closed: nothing to hand on
                        pass

    def join(self, timeout: float = 75.0) -> None:
        # a transaction under way may take its calls' bounds: 10 + 3 x 10 + 10 s;
        # a processor whose call outlived its own timeout by OVERDUE_S is stuck
        # in librdkafka: it is fenced at once instead of waited for
        t0 = time.monotonic()
        join_threads(self.threads, self.stop, timeout)
        processors = dict(self.processors)
        while time.monotonic() < t0 + timeout and not all(
                self._overdue(tid) for tid, t in processors.items() if t.is_alive()):
            time.sleep(0.2)
        self.join_phases = {"threads": round(time.monotonic() - t0, 1)}
        stuck = {tid: t for tid, t in processors.items() if t.is_alive()}
        if stuck:
            # librdkafka's send_offsets_to_transaction can outlive its timeout for
            # good (librdkafka issues 5456, 5511): a processor stuck in it might
            # still commit and race the final reads, unless a new producer with
            # its transactional.id fences it (its open transaction aborted)
            where = "; ".join(_where(t) for t in stuck.values())
            unfenced = [tid for tid in stuck if not self._fence(tid)]
            if unfenced:
                raise TimeoutError(f"transactional processors {unfenced} did not stop and "
                                   f"could not be fenced, in {where}")
            self.stuck_fenced = [where]
        committed = committed_offsets(self.addrs, GROUP, IN_TOPIC, PARTITIONS)
        self.final_committed = {p: max(o, 0) for p, o in committed.items()}
        self.join_phases["fence-and-offsets"] = round(time.monotonic() - t0, 1)
        self.final_output = self._read_all(deadline=time.monotonic() + 45)
        self.join_phases["final-read"] = round(time.monotonic() - t0, 1)

    def _call(self, tid: str, timeout_s: float, fn, *args):
        """A blocking transactional call of `tid`'s processor, its deadline known
        to the watchdog and to join."""
        key = (tid, self._generation[tid])
        self._call_deadlines[key] = time.monotonic() + timeout_s + OVERDUE_S
        try:
            return fn(*args)
        finally:
            self._call_deadlines.pop(key, None)

    def progress_report(self) -> str:
        """Each processor's counts and its consumer's assignment and positions:
        why no transaction was made (seed 190's run made none in 5 minutes)."""
        parts = []
        for tid in TXN_IDS:
            consumer = self._consumers.get(tid)
            try:
                assigned = consumer.position(consumer.assignment()) if consumer else None
                where = [(tp.topic, tp.partition, tp.offset) for tp in assigned or ()]
            except Exception as exc:  # noqa: BLE001 - a report: say what failed
                where = f"({type(exc).__name__}: {exc})"
            parts.append(f"{tid} (generation {self._generation.get(tid)}, "
                         f"in {_where(self.processors[tid])}): {self.stats[tid]}, "
                         f"assigned {where}")
        return "; ".join(parts)

    def _overdue(self, tid: str) -> bool:
        """`tid`'s current processor is in a call past its timeout + OVERDUE_S."""
        deadline = self._call_deadlines.get((tid, self._generation[tid]))
        return deadline is not None and time.monotonic() > deadline

    def check(self, ops) -> dict:
        mine = [op for op in ops if op.f in ("txn", "txn-read")]
        result = check_transactions(mine, self.final_output, self.final_committed)
        result["join_phases_s"] = self.join_phases
        result["processor_stats"] = self.stats
        if self.replaced:  # the client's too (see _watchdog)
            result["counts"]["processor stuck in librdkafka, replaced"] = len(self.replaced)
            result["replaced_in_client"] = self.replaced
        if self.stuck_fenced:  # the client's, counted apart (see join)
            result["counts"]["processor stuck in librdkafka, fenced"] = len(self.stuck_fenced)
            result["stuck_in_client"] = self.stuck_fenced
        return result

    def _fence(self, tid: str, within_s: float = 60.0) -> bool:
        """init_transactions of a new producer with `tid`: the coordinator
        bumps its epoch and aborts what the old one left open."""
        from confluent_kafka import KafkaException, Producer
        producer = Producer(self._txn_config(tid))
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            try:
                producer.init_transactions(20)
                return True
            except KafkaException:
                time.sleep(0.5)
        return False

    def _config(self, **extra) -> dict:
        return {"bootstrap.servers": self.bootstrap, "logger": _Silent(), **extra}

    def _txn_config(self, tid: str) -> dict:
        """A processor's producer; with KCOORD_FAULTS_TXN_DEBUG=1 librdkafka prints
        its eos/protocol debug log, stamped as it happens, on the run's stderr
        (client.id = the transactional id: which request a stuck processor waits on)."""
        extra = {"transactional.id": tid, "transaction.timeout.ms": 15000}
        if os.environ.get("KCOORD_FAULTS_TXN_DEBUG"):
            return {"bootstrap.servers": self.bootstrap, "client.id": tid,
                    "debug": "eos,protocol,broker", **extra}
        return self._config(**extra)

    # ------------------------------------------------------------ feeder
    def _feeder(self) -> None:
        from confluent_kafka import Producer
        producer = Producer(self._config(acks="all", **{"enable.idempotence": True,
                                                        "message.timeout.ms": 20000}))
        n = 0
        while not self.stop.is_set():
            n += 1
            try:
                producer.produce(IN_TOPIC, f"i{n}".encode(), partition=n % PARTITIONS)
            except BufferError:
                pass
            producer.poll(0)
            time.sleep(1.0 / self.rate)
        producer.flush(30)

    # ------------------------------------------------------------ processors
    def _processor(self, tid: str, gen: int) -> None:
        from confluent_kafka import Consumer, KafkaException, Producer
        h = self.history

        def current() -> bool:  # not replaced by the watchdog, not told to stop
            return self._generation[tid] == gen and not self.stop.is_set()

        def new_consumer():
            c = Consumer(self._config(**{
                "group.id": GROUP, "enable.auto.commit": False, "auto.offset.reset": "earliest",
                "isolation.level": "read_committed", "session.timeout.ms": 10000,
                "heartbeat.interval.ms": 1000}))
            c.subscribe([IN_TOPIC])
            self._consumers[tid] = c
            return c
        consumer = new_consumer()

        stats = self.stats[tid]

        def new_producer():
            p = Producer(self._txn_config(tid))
            while current():
                try:
                    p.init_transactions(20)
                    return p
                except KafkaException as exc:
                    _count(stats["init_errors"], exc.args[0].name())
                    time.sleep(0.5)
            return None
        producer = new_producer()
        seq = 0
        try:
            while producer is not None and current():
                msgs = []
                for m in consumer.consume(num_messages=20, timeout=0.5):
                    if m.error() is None:
                        msgs.append(m)
                    else:
                        _count(stats["consume_errors"], m.error().name())
                stats["polls"] += 1
                if not msgs:
                    stats["empty_polls"] += 1
                    continue
                seq += 1
                values = [f"{m.partition()}:{m.offset()}:{tid}.{seq}" for m in msgs]
                op = h.invoke(tid if gen == 0 else f"{tid}/{gen}", "txn", None, values,
                              inputs=[[m.partition(), m.offset()] for m in msgs])
                outcome = self._one_transaction(tid, producer, consumer, msgs, values)
                h.complete(op, outcome[0], error=outcome[1])
                if not current():
                    break
                if outcome[0] != OK and not _rewind(consumer):
                    consumer.close()
                    consumer = new_consumer()
                if outcome[2]:  # the producer is unusable: a new one fences it
                    producer = new_producer()
        finally:
            try:
                consumer.close()
            except Exception:  # closing during a fault: nothing left to record
                pass

    def _one_transaction(self, tid, producer, consumer, msgs, values):
        """(outcome, error, producer lost)."""
        from confluent_kafka import KafkaException
        try:
            producer.begin_transaction()
            for m, v in zip(msgs, values):
                producer.produce(OUT_TOPIC, v.encode(), partition=m.partition())
            self._call(tid, 10, producer.send_offsets_to_transaction,
                       consumer.position(consumer.assignment()),
                       consumer.consumer_group_metadata(), 10)
            for _ in range(3):
                try:
                    self._call(tid, 10, producer.commit_transaction, 10)
                    return OK, None, False
                except KafkaException as exc:
                    if not exc.args[0].retriable():
                        raise
            return UNKNOWN, "commit kept failing", True
        except KafkaException as exc:
            err = exc.args[0]
            if err.txn_requires_abort():
                try:
                    self._call(tid, 10, producer.abort_transaction, 10)
                    return FAIL, err.name(), False
                except KafkaException as exc2:
                    return UNKNOWN, exc2.args[0].name(), True
            return UNKNOWN, err.name(), True

    # ------------------------------------------------------------ reader
    def _reader(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
        h = self.history
        consumer = Consumer(self._config(**{"group.id": "txn-reader",
                                            "enable.auto.commit": False,
                                            "isolation.level": "read_committed"}))
        consumer.assign([TopicPartition(OUT_TOPIC, p, OFFSET_BEGINNING)
                         for p in range(PARTITIONS)])
        try:
            while not self.stop.is_set():
                for m in consumer.consume(num_messages=100, timeout=0.3):
                    if m.error() is None:
                        op = h.invoke("reader", "txn-read", None, m.value().decode(),
                                      offset=[m.partition(), m.offset()])
                        h.complete(op, OK)
        finally:
            consumer.close()

    def _read_all(self, deadline: float) -> list[str]:
        """Everything a read_committed reader sees in txn-out, to the end: each
        partition's end-of-partition event (at its last stable offset) at or past
        the high watermark it had when the read began (an aborted or open
        transaction last in a partition leaves no record to see there)."""
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
        consumer = Consumer(self._config(**{"group.id": "txn-final",
                                            "enable.auto.commit": False,
                                            "enable.partition.eof": True,
                                            "isolation.level": "read_committed"}))
        ends = {}
        while not ends and time.monotonic() < deadline:
            try:
                ends = {p: consumer.get_watermark_offsets(TopicPartition(OUT_TOPIC, p), 5)[1]
                        for p in range(PARTITIONS)}
            except Exception:  # a coordinator still settling: ask again
                time.sleep(0.5)
        consumer.assign([TopicPartition(OUT_TOPIC, p, OFFSET_BEGINNING)
                         for p in range(PARTITIONS)])
        out: list[str] = []
        at_end: set[int] = set()
        while len(at_end) < PARTITIONS and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=500, timeout=0.5):
                err = m.error()
                if err is None:
                    out.append(m.value().decode())
                elif (err.code() == KafkaError._PARTITION_EOF
                      and m.offset() >= ends.get(m.partition(), 0)):
                    at_end.add(m.partition())
        consumer.close()
        return out


def _count(counts: dict, key: str) -> None:
    counts[key] = counts.get(key, 0) + 1


def _rewind(consumer) -> bool:
    """Back to the group's committed offsets (what an aborted transaction
    read is read again); False when the consumer could not seek."""
    from confluent_kafka import OFFSET_BEGINNING
    try:
        parts = consumer.committed(consumer.assignment(), 10)
        for tp in parts:
            if tp.offset < 0:
                tp.offset = OFFSET_BEGINNING
            consumer.seek(tp)
        return True
    except Exception:  # noqa: BLE001 - any failure: start over with a new consumer
        return False


def _where(thread) -> str:
    """The innermost calls of a live thread (which client call it is stuck in)."""
    frame = sys._current_frames().get(thread.ident)
    if frame is None:
        return "(gone)"
    calls = traceback.extract_stack(frame)[-3:]
    return " <- ".join(f"{c.name}:{c.lineno} {c.line}" for c in reversed(calls))
