"""Seeded simulation of one share partition (kcoord/share/partition.py) with
a fake clock: several members acquire and ACCEPT / RELEASE / REJECT (and
send acknowledgements that must be refused), locks expire, members leave
(releasing) or vanish (their locks run out), the persister answers late,
fails, or is unavailable for a while (the share coordinator unloaded), and
the leader crashes and reloads from what was persisted.  After every step:

- no record is ACQUIRED by two members: a record given to a member is not
  given to another while its lock holds, and every live lock the members
  hold is what the partition holds;
- no record is Acknowledged twice (an ACCEPT answered as done twice);
- delivery counts never exceed group.share.delivery.count.limit;
- the start offset never passes a record that is not finished (accepted,
  rejected or gap-acked, delivered `limit` times, or with no data record);
- an acknowledgement answered as done is never lost (not even by a crash).

Then the members drain the log: every record ends Acknowledged or Archived
(the start offset reaches the log end).  A restart when nothing is in flight
gives back exactly the state before it.  `BROKEN` lists deliberately wrong
share partitions; the suite shows each is caught.
"""
from __future__ import annotations

import random

from kcoord.protocol.errors import Err
from kcoord.share.partition import (
    ACCEPT, ACQUIRED, ACKNOWLEDGED, AVAILABLE, GAP, RELEASE, REJECT, RENEW, FetchedBatch,
    SharePartition, ShareLimits)
from kcoord.share.persister import ShareState

from .memory_persister import merge

LOCK_MS = 1000


class Violation(AssertionError):
    pass


# ------------------------------------------------- deliberately broken variants
class OverDelivers(SharePartition):
    """Never archives at the delivery limit: released records come back forever."""
    def _release_where(self, match, timed_out: bool = False) -> bool:
        limit = self.limits.delivery_count_limit
        self.limits = ShareLimits(10**6, self.limits.max_record_locks)
        try:
            return super()._release_where(match, timed_out)
        finally:
            self.limits = ShareLimits(limit, self.limits.max_record_locks)


class SkipsAvailable(SharePartition):
    """Moves the start offset past AVAILABLE records too."""
    def _advance(self) -> None:
        runs = self.runs
        n = 0
        while n < len(runs) and runs[n].state != ACQUIRED and runs[n].ticket is None:
            n += 1
        if n:
            self.start = runs[n - 1].last + 1
            del runs[:n]


class StealsLocks(SharePartition):
    """Acquires records another member holds (ignores the acquisition lock)."""
    def acquire(self, member, *args, **kw):
        for run in self.runs:
            if run.state == ACQUIRED and run.ticket is None and run.member != member:
                run.state, run.member, run.lock = AVAILABLE, None, None
        self._maybe_available = True
        return super().acquire(member, *args, **kw)


class AnswersBeforeDurable(SharePartition):
    """Writes the state without the acknowledgements it then answers as done."""
    def _batches(self, tentative: bool):
        del tentative                       # always the state without the tickets
        return super()._batches(tentative=False)


class IgnoresOwner(SharePartition):
    """Accepts an acknowledgement from any member (no owner check)."""
    def acknowledge(self, member, batches, now, lock_ms=0):
        owners = {}
        for run in self.runs:
            if run.state == ACQUIRED and run.ticket is None:
                owners[id(run)] = run.member
                run.member = member
        res = super().acknowledge(member, batches, now, lock_ms)
        if res.error_code:
            for run in self.runs:
                if id(run) in owners:
                    run.member = owners[id(run)]
        return res


BROKEN = {"over-delivers": OverDelivers, "skips-available": SkipsAvailable,
          "steals-locks": StealsLocks, "answers-before-durable": AnswersBeforeDurable,
          "ignores-owner": IgnoresOwner}


# ------------------------------------------------------------------ the sim
class Sim:
    def __init__(self, seed: int, cls=SharePartition, steps: int = 150) -> None:
        self.rng = rng = random.Random(seed)
        self.seed = seed
        self.cls = cls
        self.steps = steps
        self.limits = ShareLimits(delivery_count_limit=rng.choice((2, 3, 5)),
                                  max_record_locks=rng.choice((8, 25, 2000)))
        self.limit = self.limits.delivery_count_limit
        self.max_log = rng.choice((40, 120))
        self.log: list[FetchedBatch] = []
        self.log_end = 0
        self.store = ShareState(start_offset=0)
        self.sp = cls.loaded(self._stored(), 0, self.limits)
        self.now = 0
        self.timers: list[tuple[int, int]] = []      # (deadline, lock)
        self.write = None                            # the StateWrite out
        self.down = 0                                # steps the persister stays unavailable
        self.tickets: dict[int, tuple] = {}          # ticket -> (member, segments, held)
        self.members: dict[str, set[int]] = {}       # member -> offsets it believes it holds
        self.next_member = 0
        # the shadow model
        self.holder: dict[int, tuple[str, int]] = {}  # offset -> (member, lock deadline)
        self.pending: set[int] = set()               # offsets under an unanswered ack
        self.acked: set[int] = set()                 # ACCEPT answered as done
        self.finished: set[int] = set()              # ACCEPT/REJECT/GAP sent
        self.delivered: dict[int, int] = {}          # highest delivery count given
        self.no_record: set[int] = set()             # aborted data, compacted offsets
        self.checked_to = 0                          # offsets below this passed the start check
        for _ in range(rng.randint(2, 4)):
            self._join()

    # ------------------------------------------------------------ running
    def run(self) -> None:
        actions = [(self.produce, 3), (self.acquire, 5), (self.acknowledge, 5),
                   (self.bogus_ack, 1), (self.persist, 4), (self.tick, 3), (self.leave, 1),
                   (self.vanish, 1), (self.crash, 1), (self.unload, 1)]
        fns = [a for a, _ in actions]
        weights = [w for _, w in actions]
        for step in range(self.steps):
            fn = self.rng.choices(fns, weights)[0]
            fn()
            self.check(f"step {step} {fn.__name__}")
        self.drain()
        self.restart_check()

    def fail(self, what: str) -> None:
        raise Violation(f"seed {self.seed} ({self.cls.__name__}): {what}")

    # ------------------------------------------------------------ actions
    def _join(self) -> None:
        self.members[f"m{self.next_member}"] = set()
        self.next_member += 1

    def produce(self) -> None:
        if self.log_end >= self.max_log:
            return
        for _ in range(self.rng.randint(1, 3)):
            if self.rng.random() < 0.1:                    # compacted away
                gap = self.rng.randint(1, 3)
                self.no_record.update(range(self.log_end, self.log_end + gap))
                self.log_end += gap
            size = self.rng.randint(1, 5)
            aborted = self.rng.random() < 0.1
            batch = FetchedBatch(self.log_end, self.log_end + size - 1, aborted)
            if aborted:
                self.no_record.update(range(batch.base, batch.last + 1))
            self.log.append(batch)
            self.log_end += size

    def _read(self, offset: int) -> list[FetchedBatch]:
        out = [b for b in self.log if b.last >= offset]
        return out[:self.rng.randint(1, 6)]

    def acquire(self, member: str | None = None, max_records: int | None = None) -> None:
        if not self.members:
            return self._join()
        member = member or self.rng.choice(sorted(self.members))
        batches = self._read(self.sp.next_fetch_offset())
        got = self.sp.acquire(member, max_records or self.rng.randint(1, 15), batches,
                              self.now, LOCK_MS, self.rng.choice((0, 2, 5)))
        deadline = self.now + LOCK_MS
        for r in got.ranges:
            if not 1 <= r.delivery_count <= self.limit:
                self.fail(f"delivery count {r.delivery_count} of {r.first}-{r.last} "
                          f"(limit {self.limit})")
            for o in range(r.first, r.last + 1):
                held = self.holder.get(o)
                if held is not None and held[1] > self.now:
                    self.fail(f"offset {o} given to {member} while {held[0]} holds it")
                if o in self.acked:
                    self.fail(f"offset {o} delivered again after it was acknowledged")
                self.holder[o] = (member, deadline)
                self.members[member].add(o)
                self.delivered[o] = max(self.delivered.get(o, 0), r.delivery_count)
        for t in got.timers:
            self.timers.append((t.deadline_ms, t.lock))

    def _ranges(self, offsets: list[int]) -> list[tuple[int, int]]:
        out: list[list[int]] = []
        for o in sorted(offsets):
            if out and out[-1][1] + 1 == o:
                out[-1][1] = o
            else:
                out.append([o, o])
        return [tuple(r) for r in out]

    def acknowledge(self, member: str | None = None,
                    kinds=(ACCEPT, RELEASE, REJECT, GAP, RENEW), everything: bool = False) -> None:
        if not self.members:
            return
        member = member or self.rng.choice(sorted(self.members))
        mine = sorted(self.members[member])
        if not mine:
            return
        pick = mine if everything else [o for o in mine if self.rng.random() < 0.6]
        batches, segments = [], []
        for first, last in self._ranges(pick):
            if self.rng.random() < 0.3 and last > first:   # one type per offset
                types = [self.rng.choice(kinds) for _ in range(first, last + 1)]
            else:
                types = [self.rng.choice(kinds)]
            batches.append({"first_offset": first, "last_offset": last,
                            "acknowledge_types": types})
            for o in range(first, last + 1):
                segments.append((o, types[0] if len(types) == 1 else types[o - first]))
        valid = all(self.holder.get(o, ("", 0))[0] == member and self.holder[o][1] > self.now
                    and o not in self.pending for o in pick)
        before = self.sp.view()
        res = self.sp.acknowledge(member, batches, self.now, LOCK_MS)
        self.members[member].difference_update(pick)
        if res.error_code:
            if valid:
                self.fail(f"{member}'s valid acknowledgement of {pick} refused: "
                          f"{Err(res.error_code).name}")
            if self.sp.view() != before:
                self.fail("a refused acknowledgement changed the state")
            return
        for t in res.timers:
            self.timers.append((t.deadline_ms, t.lock))
        for o, k in segments:
            if k == RENEW and o >= self.sp.start:      # held on, for a new lock duration
                self.holder[o] = (member, self.now + LOCK_MS)
                self.members[member].add(o)
        live = [(o, k) for o, k in segments if o >= self.sp.start and k != RENEW]
        if res.ticket is None:
            return
        held = {o: self.holder.pop(o) for o, _ in live if o in self.holder}
        self.pending.update(o for o, _ in live)
        self.finished.update(o for o, k in live if k in (ACCEPT, REJECT, GAP))
        self.tickets[res.ticket] = (member, live, held)

    def bogus_ack(self) -> None:
        """Acknowledge records not held (another member's, available, past the window)."""
        if not self.members or self.log_end == 0:
            return
        member = self.rng.choice(sorted(self.members))
        first = self.rng.randint(0, self.log_end)
        last = first + self.rng.randint(0, 4)
        offsets = range(max(first, self.sp.start), last + 1)
        if all(self.holder.get(o, ("", 0))[0] == member and self.holder[o][1] > self.now
               and o not in self.pending for o in offsets):
            return
        before = self.sp.view()
        res = self.sp.acknowledge(member, [{"first_offset": first, "last_offset": last,
                                            "acknowledge_types": [ACCEPT]}], self.now)
        if offsets and res.error_code == Err.NONE:
            self.fail(f"{member} acknowledged {first}-{last}, which it does not hold")
        if self.sp.view() != before:
            self.fail("a refused acknowledgement changed the state")

    def persist(self, ok: bool | None = None) -> None:
        if self.write is None:
            self.write = self.sp.take_write()
            return
        write, self.write = self.write, None
        if ok is None:
            ok = self.down == 0 and self.rng.random() < 0.85
        if self.down:
            self.down -= 1
        code = Err.NONE if ok else Err.COORDINATOR_NOT_AVAILABLE
        if ok:
            self._store(write)
        done = self.sp.write_done(write, code, self.now)
        for ticket, answer in done.answers:
            member, segments, held = self.tickets.pop(ticket)
            for o, kind in segments:
                self.pending.discard(o)
                if answer != Err.NONE:
                    h = held.get(o)
                    if h is not None and h[1] > self.now:
                        self.holder[o] = h               # back to its owner
                        if member in self.members:
                            self.members[member].add(o)
                    if kind != RELEASE:
                        self.finished.discard(o)
                elif kind == ACCEPT:
                    if o in self.acked:
                        self.fail(f"offset {o} acknowledged twice")
                    self.acked.add(o)

    def flush(self) -> None:
        """Every write out and due completes."""
        while True:
            if self.write is None:
                self.write = self.sp.take_write()
                if self.write is None:
                    return
            self.persist(ok=True)

    def tick(self, by: int | None = None) -> None:
        self.now += self.rng.randint(0, 1500) if by is None else by
        due = sorted(t for t in self.timers if t[0] <= self.now)
        self.timers = [t for t in self.timers if t[0] > self.now]
        for _, lock in due:
            self.sp.expire(lock, self.now)
        for o in [o for o, h in self.holder.items() if h[1] <= self.now]:
            del self.holder[o]

    def leave(self) -> None:
        """The member's share session ends: its records are released."""
        if self.members:
            member = self.rng.choice(sorted(self.members))
            self.sp.release_member(member)
            del self.members[member]
            for o in [o for o, h in self.holder.items() if h[0] == member]:
                del self.holder[o]
            self._join()

    def vanish(self) -> None:
        """The member is gone without a word: its locks run out."""
        if self.members:
            del self.members[self.rng.choice(sorted(self.members))]
            self._join()

    def unload(self) -> None:
        """The share coordinator's shard unloads: writes fail for a while."""
        self.down = self.rng.randint(1, 4)
        if self.write is not None:
            self.persist(ok=False)

    def crash(self) -> None:
        """The leader dies; a write out may or may not have reached the store."""
        clean = self.write is None and not self.tickets and not self.sp.dirty
        before = self.sp.durable_view()
        if self.write is not None and self.rng.random() < 0.5:
            self._store(self.write)
        self.write = None
        self._reload()
        if clean and self.sp.durable_view() != before:
            self.fail(f"state after restart {self.sp.durable_view()} != before {before}")

    def _reload(self) -> None:
        self.tickets.clear()
        self.pending.clear()
        self.timers.clear()
        self.holder.clear()
        for held in self.members.values():
            held.clear()
        start = self.store.start_offset
        self.sp = self.cls.loaded(self._stored(), start, self.limits)
        self.checked_to = min(self.checked_to, self.sp.start)

    def _stored(self) -> ShareState:
        return ShareState(start_offset=self.store.start_offset, batches=list(self.store.batches))

    def _store(self, write) -> None:
        self.store.start_offset = write.start_offset
        self.store.batches = merge(self.store.batches, write.batches, write.start_offset)

    # ---------------------------------------------------------- invariants
    def check(self, where: str) -> None:
        sp = self.sp
        owned: dict[int, str] = {}
        for run in sp.runs:
            if run.count > self.limit:
                self.fail(f"{where}: delivery count {run.count} > {self.limit} at {run.first}")
            if run.state == ACQUIRED and run.ticket is None:
                for o in range(run.first, run.last + 1):
                    owned[o] = run.member
        for o, (member, deadline) in self.holder.items():
            if deadline > self.now and o >= sp.start and owned.get(o) != member:
                self.fail(f"{where}: {member}'s live lock on {o} lost (held by {owned.get(o)})")
        for o, member in owned.items():
            held = self.holder.get(o)
            if held is not None and held[0] != member:
                self.fail(f"{where}: {o} acquired by {member} and {held[0]}")
        for o in range(self.checked_to, sp.start):
            if not (o in self.finished or o in self.no_record
                    or self.delivered.get(o, 0) >= self.limit):
                self.fail(f"{where}: start {sp.start} passed unfinished offset {o}")
        self.checked_to = max(self.checked_to, sp.start)
        for o in self.acked:
            state = sp.state_at(o)
            if o >= sp.start and (state is None or state[0] != ACKNOWLEDGED):
                self.fail(f"{where}: acknowledged offset {o} is {state}")

    def drain(self) -> None:
        """Members take everything left and finish it."""
        self.down = 0
        for rounds in range(400):
            self.flush()
            if self.sp.start >= self.log_end and not self.sp.runs:
                return
            if not self.members:
                self._join()
            for member in sorted(self.members):
                self.acquire(member, max_records=50)
                kinds = (ACCEPT, REJECT, RELEASE) if rounds < 3 else (ACCEPT, REJECT)
                self.acknowledge(member, kinds, everything=True)
                self.check(f"drain round {rounds}")
            self.persist(ok=True)
            self.tick(LOCK_MS if rounds % 5 == 4 else 0)
            self.check(f"drain round {rounds}")
        self.fail(f"drain did not finish: start {self.sp.start}, log end {self.log_end}, "
                  f"{self.sp.view()[:5]}")

    def restart_check(self) -> None:
        before = self.sp.durable_view()
        self._reload()
        if self.sp.durable_view() != before:
            self.fail(f"state after restart {self.sp.durable_view()} != before {before}")
        unfinished = [o for o in range(self.log_end)
                      if not (o in self.finished or o in self.no_record
                              or self.delivered.get(o, 0) >= self.limit)]
        if unfinished:
            self.fail(f"drained, but offsets {unfinished[:10]} were never finished")


def run_seed(seed: int, cls=SharePartition, steps: int = 150) -> None:
    Sim(seed, cls, steps).run()


def caught(cls, seeds) -> int:
    """How many of `seeds` catch a broken share partition."""
    n = 0
    for seed in seeds:
        try:
            run_seed(seed, cls)
        except Violation:
            n += 1
    return n
