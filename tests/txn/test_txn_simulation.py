"""Seeded simulation of the transaction coordinator and its marker writing,
with crashes at every step.

The model runtime replays a result's records at once and makes them
durable at a later "sync" step (a crash loses what is not synced); markers
are written one partition per step once a Prepare* is durable, then the
Complete* record.  A crash rebuilds the core from the durable log and
finishes every Prepare* it finds.  Invariants checked after every step:
no transaction is committed on one partition and aborted on another, the
live core equals a replay of its log, and at the end every transaction
that wrote data is decided on all of its partitions.
"""
from __future__ import annotations

import random

import pytest

from kcoord.protocol.errors import Err
from kcoord.txn.coordinator import TxnConfig, TxnCoordinator
from kcoord.txn.records import (EMPTY, ONGOING, TxnRecord, decode_key, decode_value,
                                encode_key, encode_value)

PARTITIONS = [("t", 0), ("t", 1), ("u", 0), ("__consumer_offsets", 3)]
TIMEOUT = 3000


class Sim:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.now = 0
        self.pids = iter(range(100, 10**9))
        self.durable: list[bytes] = []      # the log as bytes: what survives a crash
        self.unsynced: list[TxnRecord] = []
        self.core = self._new_core()
        self.logs = {tp: [] for tp in PARTITIONS}  # ("data", pid, epoch, txn) / ("marker", pid, commit)
        self.jobs: list[list] = []           # completions under way: [completion, next index]
        self.waiting: list = []              # (records synced?) replies waiting for a sync
        self.clients = [self._client(f"tx-{i % 4}") for i in range(5)]
        self.txn_seq = 0
        self.crashes = 0

    def _new_core(self) -> TxnCoordinator:
        return TxnCoordinator(TxnConfig(num_partitions=4, max_timeout_ms=10_000,
                                        id_expiration_ms=20_000), lambda: next(self.pids))

    @staticmethod
    def _client(tid: str) -> dict:
        return {"tid": tid, "pid": -1, "epoch": -1, "state": "init", "txn": None, "parts": set(),
                "wait": None}

    # ----------------------------------------------------------- runtime
    def write(self, records) -> int:
        """Replay now, durable at the next sync; -> the sync ticket."""
        self.core.replay_all(records)
        self.unsynced += records
        return len(self.durable) + len(self.unsynced)

    def sync(self) -> None:
        for r in self.unsynced:
            self.durable.append((r.partition, encode_key(r.transactional_id),
                                 encode_value(r.value)))
        self.unsynced = []
        # Prepare* now durable: start its markers
        for c in self.core.pending_completions():
            if not any(j[0].transactional_id == c.transactional_id for j in self.jobs):
                self.jobs.append([c, 0])

    def durable_len(self) -> int:
        return len(self.durable)

    def crash(self) -> None:
        self.crashes += 1
        self.unsynced = []
        self.jobs = []
        self.core = self._new_core()
        for partition, key, value in self.durable:
            self.core.replay(TxnRecord(partition, decode_key(key), decode_value(value)))
        for c in self.clients:  # answers in flight are lost; clients retry from scratch
            if c["wait"] is not None:
                c["wait"] = None
                c["state"] = "lost"
        self.sync()  # finish every Prepare* found in the log

    def step_marker(self) -> None:
        job = self.rng.choice(self.jobs)
        c, i = job
        if i < len(c.partitions):
            self.logs[c.partitions[i]].append(("marker", c.producer_id, c.commit))
            job[1] += 1
            return
        self.jobs.remove(job)
        self.write(self.core.complete(c.transactional_id, self.now))

    # ----------------------------------------------------------- clients
    def step_client(self, c: dict) -> None:
        if c["wait"] is not None:
            ticket, then = c["wait"]
            if self.durable_len() >= ticket:
                c["wait"] = None
                then()
            return
        core, rng = self.core, self.rng
        state = c["state"]
        if state in ("init", "lost", "fenced"):
            res = core.init_producer_id(c["tid"], TIMEOUT, -1, -1, self.now)
            if res.error == Err.NONE:
                def done(res=res):
                    c.update(pid=res.producer_id, epoch=res.producer_epoch, state="ready",
                             txn=None, parts=set())
                c["wait"] = (self.write(res.records), done)
            elif res.records:
                self.write(res.records)
            return
        if state == "ready":
            roll = rng.random()
            if c["parts"] and roll < 0.45:
                self.produce(c)
            elif c["parts"] and roll < 0.6:
                self.end(c, rng.random() < 0.7)
            else:
                self.add(c)

    def add(self, c: dict) -> None:
        parts = set(self.rng.sample(PARTITIONS, self.rng.randint(1, 2)))
        res = self.core.add_partitions(c["tid"], c["pid"], c["epoch"], parts, self.now)
        if res.error == Err.NONE:
            if c["txn"] is None:
                self.txn_seq += 1
                c["txn"] = self.txn_seq

            def added(parts=parts):
                c["parts"] |= parts
                c["state"] = "ready"
            c["state"] = "adding"
            c["wait"] = (self.write(res.records), added)
        elif res.error in (Err.PRODUCER_FENCED, Err.INVALID_PRODUCER_ID_MAPPING):
            c["state"] = "fenced"
        # CONCURRENT_TRANSACTIONS: retried at a later step

    def produce(self, c: dict) -> None:
        tp = self.rng.choice(sorted(c["parts"]))
        code = self.core.in_transaction(c["pid"], c["epoch"], *tp)
        if code == Err.NONE:
            self.logs[tp].append(("data", c["pid"], c["epoch"], c["txn"]))

    def end(self, c: dict, commit: bool) -> None:
        res = self.core.end_txn(c["tid"], c["pid"], c["epoch"], commit, self.now)
        if res.error == Err.NONE:
            def ended():
                c.update(state="ready", txn=None, parts=set())
            c["state"] = "ending"
            c["wait"] = (self.write(res.records), ended)
        elif res.error in (Err.PRODUCER_FENCED, Err.INVALID_PRODUCER_ID_MAPPING,
                           Err.INVALID_TXN_STATE):
            c["state"] = "fenced"

    # ------------------------------------------------------------ checks
    def outcomes(self) -> dict:
        """txn -> {partition: True/False/None (undecided)} from the partition logs."""
        out: dict = {}
        for tp, entries in self.logs.items():
            open_by_pid: dict = {}
            for e in entries:
                if e[0] == "data":
                    _, pid, _epoch, txn = e
                    open_by_pid.setdefault(pid, set()).add(txn)
                    out.setdefault(txn, {})[tp] = None
                else:
                    _, pid, commit = e
                    for txn in open_by_pid.pop(pid, ()):
                        out[txn][tp] = commit
        return out

    def check(self) -> None:
        for txn, by_part in self.outcomes().items():
            decided = {v for v in by_part.values() if v is not None}
            assert len(decided) <= 1, f"txn {txn} mixed: {by_part}"
        replayed = self._new_core()
        for partition, key, value in self.durable:
            replayed.replay(TxnRecord(partition, decode_key(key), decode_value(value)))
        replayed.replay_all(self.unsynced)
        assert replayed.snapshot() == self.core.snapshot()
        for tid, meta in self.core.txns.items():
            if meta.state == EMPTY:
                assert not meta.partitions

    def run(self, steps: int) -> None:
        for _ in range(steps):
            self.now += self.rng.randint(0, 40)
            roll = self.rng.random()
            if roll < 0.006:
                self.crash()
            elif roll < 0.25:
                self.sync()
            elif roll < 0.45 and self.jobs:
                self.step_marker()
            elif roll < 0.5:
                self.write(self.core.abort_timed_out(self.now))
            elif roll < 0.52:
                self.write(self.core.expire_ids(self.now))
            else:
                self.step_client(self.rng.choice(self.clients))
            self.check()
        # drain: no more clients; time passes, every open transaction times out
        self.now += 10 * TIMEOUT
        self.write(self.core.abort_timed_out(self.now))
        for _ in range(1000):
            self.sync()
            if not self.jobs:
                break
            while self.jobs:
                self.step_marker()
            self.check()
        self.sync()
        assert not self.jobs and not self.core.pending_completions()
        for txn, by_part in self.outcomes().items():
            assert None not in by_part.values(), f"txn {txn} undecided: {by_part}"
        assert all(m.state != ONGOING for m in self.core.txns.values())


@pytest.mark.parametrize("seed", range(24))
def test_every_transaction_ends_committed_or_aborted_everywhere(seed):
    sim = Sim(seed)
    sim.run(1000)
    outcomes = sim.outcomes()
    assert outcomes, "the schedule wrote no transactional data"
    if seed == 0:
        # the schedules exercise both outcomes, and crashes
        assert {v for o in outcomes.values() for v in o.values()} == {True, False}
        assert sim.crashes > 0
