"""One share partition's in-flight records on the partition leader (Kafka's
SharePartition), sans-I/O: time comes in as `now` (ms), lock deadlines go out
as data (`LockTimer`), durable writes go out as `StateWrite`s and come back
through `write_done`.

The window [start, end) (SPSO .. SPEO+1) is covered by contiguous `Run`s, each
one state, delivery count and owner.  A run is split where an acquisition or
an acknowledgement covers part of it, and neighbours that became alike are
merged again, so a run is Kafka's in-flight batch and its per-offset state in
one shape.  Offsets with no record (compacted away, below a moved log start)
are ARCHIVED runs, so the window never has holes.

Acknowledgements are applied at once, tentatively, under a ticket: the runs
remember their previous state until the write carrying the ticket is
durable (commit) or fails (rollback, Kafka's rollbackOrProcessStateUpdates).
Writes are one at a time per share partition and carry the whole window
(acquired records as their last durable state: AVAILABLE, count - 1), so a
write that follows a failed one heals it, and a reload gives back exactly
the state that was written.
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from typing import NamedTuple

from ..protocol.errors import Err
from .events import DELIVERY_LIMIT, NO_EVENTS, NO_RECORD, REJECTED, ShareEvents
from .persister import ShareState, StateBatch

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
TERMINAL = frozenset((ACKNOWLEDGED, ARCHIVED))
STATE_NAMES = {AVAILABLE: "Available", ACQUIRED: "Acquired", ACKNOWLEDGED: "Acknowledged",
               ARCHIVED: "Archived"}


@dataclass(frozen=True, slots=True)
class ShareLimits:
    """The broker configs a share partition obeys (Kafka's defaults)."""
    delivery_count_limit: int = 5        # group.share.delivery.count.limit
    max_record_locks: int = 2000         # group.share.partition.max.record.locks


class FetchedBatch(NamedTuple):
    """A log batch the leader read for an acquisition: its offsets, and
    whether it is aborted transactional data (read_committed archives it)."""
    base: int
    last: int
    aborted: bool = False


class LockTimer(NamedTuple):
    """Arm the acquisition-lock timer `lock` for deadline_ms."""
    lock: int
    deadline_ms: int


class AcquiredRange(NamedTuple):
    first: int
    last: int
    delivery_count: int


@dataclass(slots=True)
class Acquired:
    """What an acquisition gives one member: Kafka's AcquiredRecords."""
    ranges: list[AcquiredRange] = field(default_factory=list)
    timers: list[LockTimer] = field(default_factory=list)
    count: int = 0          # records acquired (for MaxRecords across partitions)
    records: bytes = b""    # the log batches holding them (filled by the leader's reader)


@dataclass(slots=True)
class AckResult:
    """An acknowledgement's outcome: an error (nothing changed), or applied
    tentatively under `ticket`, answered once the write carrying it is done
    (None: nothing needed persisting, answered at once)."""
    error_code: int = Err.NONE
    ticket: int | None = None
    timers: list[LockTimer] = field(default_factory=list)   # renewed locks (RENEW)


@dataclass(slots=True)
class StateWrite:
    """One WriteShareGroupState of this share partition."""
    start_offset: int
    batches: list[StateBatch]
    delivery_complete_count: int
    tickets: frozenset


@dataclass(slots=True)
class WriteDone:
    """The answers a finished write releases: (ticket, error code)."""
    answers: list[tuple[int, int]] = field(default_factory=list)
    changed: bool = False   # records became available or the window moved: fetches may acquire


class Run:
    __slots__ = ("first", "last", "state", "count", "member", "lock", "ticket", "prev")

    def __init__(self, first: int, last: int, state: int, count: int,
                 member: str | None = None, lock: int | None = None) -> None:
        self.first = first
        self.last = last
        self.state = state
        self.count = count
        self.member = member
        self.lock = lock
        self.ticket: int | None = None     # the acknowledgement waiting to be durable
        self.prev: tuple | None = None     # (state, member, lock) before it

    def copy(self, first: int, last: int) -> "Run":
        run = Run(first, last, self.state, self.count, self.member, self.lock)
        run.ticket, run.prev = self.ticket, self.prev
        return run

    def alike(self, other: "Run") -> bool:
        return (self.state == other.state and self.count == other.count
                and self.member == other.member and self.lock == other.lock
                and self.ticket == other.ticket and self.prev == other.prev)

    def __repr__(self) -> str:
        return (f"Run({self.first}-{self.last} {STATE_NAMES[self.state]} n={self.count}"
                f" {self.member or ''}{' t=%d' % self.ticket if self.ticket else ''})")


def check_ack_batches(batches, max_type: int = REJECT) -> int:
    """KafkaApis' validation of one partition's AcknowledgementBatches:
    INVALID_REQUEST for a reversed range, batches out of order (a batch may
    start at the previous one's last offset), no types, a per-offset list of
    the wrong length, or an unknown type."""
    previous_last = None
    for b in batches:
        first, last, types = b["first_offset"], b["last_offset"], b["acknowledge_types"]
        if first > last or not types:
            return Err.INVALID_REQUEST
        if previous_last is not None and first < previous_last:
            return Err.INVALID_REQUEST
        if len(types) > 1 and len(types) != last - first + 1:
            return Err.INVALID_REQUEST
        if any(t < 0 or t > max_type for t in types):
            return Err.INVALID_REQUEST
        previous_last = last
    return Err.NONE


class SharePartition:
    def __init__(self, limits: ShareLimits = ShareLimits()) -> None:
        self.limits = limits
        self.start = 0                 # SPSO
        self.end = 0                   # SPEO + 1: the first offset not cached
        self.runs: list[Run] = []
        self.state_epoch = 0
        self.leader_epoch = 0          # the leader's epoch it was loaded in (fences writes)
        self.log_start = 0
        self.locks: dict[int, tuple[str, int]] = {}   # lock -> (member, deadline)
        self._next_lock = 0
        self._next_ticket = 0
        self._pending: set[int] = set()  # tickets applied, not yet in a write
        self.writing = False             # a write is out (one at a time)
        self.dirty = False               # a change not yet written (expiry, release)
        self._maybe_available = False    # a record may be AVAILABLE below `end`
        self.events: ShareEvents = NO_EVENTS   # counters, when the server keeps them

    # ------------------------------------------------------------- loading
    @classmethod
    def loaded(cls, state: ShareState, start_offset: int,
               limits: ShareLimits = ShareLimits()) -> "SharePartition":
        """A share partition from its durable state; `start_offset` is the
        stored one, or the share.auto.offset.reset answer when it was -1.
        Offsets between the stored batches are AVAILABLE never-delivered
        records (Kafka's gap window), fetched again."""
        sp = cls(limits)
        sp.state_epoch = state.state_epoch
        sp.start = sp.end = start_offset
        for b in sorted(state.batches, key=lambda b: b.first_offset):
            first = max(b.first_offset, sp.end)
            if b.last_offset < first:
                continue
            if first > sp.end:
                sp.runs.append(Run(sp.end, first - 1, AVAILABLE, 0))
            kind = b.delivery_state if b.delivery_state in TERMINAL else AVAILABLE
            sp._append(Run(first, b.last_offset, kind, b.delivery_count))
            sp.end = b.last_offset + 1
        sp._maybe_available = True
        sp._advance()
        sp._trim_tail()
        return sp

    # ------------------------------------------------------------ queries
    def next_fetch_offset(self) -> int:
        """Where the next log read for acquisition starts: the first AVAILABLE
        record in the window, else the end of the window."""
        if self._maybe_available:
            for run in self.runs:
                if run.state == AVAILABLE and run.ticket is None:
                    return run.first
            self._maybe_available = False
        return self.end

    def can_acquire(self) -> bool:
        """Something may be acquired now: a cached AVAILABLE record, or room
        in the window for new ones (group.share.partition.max.record.locks)."""
        return (self.next_fetch_offset() < self.end
                or self.end - self.start < self.limits.max_record_locks)

    def state_at(self, offset: int) -> tuple[int, int, str | None] | None:
        """(state, delivery count, member) of an offset in the window."""
        i = self._index(offset)
        if i is None:
            return None
        run = self.runs[i]
        return run.state, run.count, run.member

    def view(self) -> list[tuple]:
        """The window as (first, last, state, count, member) runs, merged."""
        out: list[list] = []
        for r in self.runs:
            row = [r.first, r.last, r.state, r.count, r.member]
            if out and out[-1][1] + 1 == r.first and out[-1][2:] == row[2:]:
                out[-1][1] = r.last
            else:
                out.append(row)
        return [tuple(r) for r in out]

    def in_flight(self) -> tuple[int, int, int]:
        """(records in the window, its runs, records ACQUIRED now): Kafka's
        InFlightMessageCount and InFlightBatchCount, and what members hold."""
        held = sum(r.last - r.first + 1 for r in self.runs if r.state == ACQUIRED)
        return self.end - self.start, len(self.runs), held

    def durable_view(self) -> tuple[int, list[tuple[int, int, int, int]]]:
        """What a reload from the last write should give (tickets not yet
        durable as before them; acquired records as AVAILABLE, count - 1):
        (start, [(first, last, delivery state, count)])."""
        return self.start, [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                            for b in self._batches(tentative=False)]

    # ---------------------------------------------------------- acquire
    def acquire(self, member: str, max_records: int, batches: list[FetchedBatch], now: int,
                lock_ms: int, batch_size: int = 0, strict: bool = False) -> Acquired:
        """Acquire for `member` the records of the log batches read from
        next_fetch_offset(): AVAILABLE cached records and new ones, whole log
        batches until max_records is reached (a soft limit, as Kafka's
        batch-optimized mode), new records only within the in-flight window.
        New ranges are cut into AcquiredRecords of about batch_size records
        at log-batch boundaries.  Offsets the log no longer holds are
        archived; aborted batches (read_committed) are archived, not given.
        strict (ShareAcquireMode record_limit): at most max_records records,
        log batches cut where the limit falls."""
        out = Acquired()
        if max_records <= 0 or not batches:
            return out
        lock = self._next_lock = self._next_lock + 1
        deadline = now + lock_ms
        cursor = self.next_fetch_offset()
        limit = self.limits.delivery_count_limit
        throttled = False
        for b in batches:
            lo = max(b.base, cursor, self.start)
            if b.last < lo:
                continue
            if out.count >= max_records or throttled:
                break
            if lo > cursor:
                self._no_records(cursor, lo)      # compacted away: nothing to deliver
            cursor = b.last + 1
            if lo < self.end:                     # cached: acquire what is AVAILABLE
                hi = min(b.last, self.end - 1)
                cap = max_records - out.count if strict else None
                got, throttled = self._acquire_cached(lo, hi, member, lock, b.aborted,
                                                      limit, out, cap)
                out.count += got
                lo = hi + 1
            if lo <= b.last and not throttled:    # new records
                room = self.limits.max_record_locks - (self.end - self.start)
                if room <= 0:
                    break
                hi = min(b.last, lo + room - 1)
                if strict:
                    if out.count >= max_records:
                        break
                    hi = min(hi, lo + max_records - out.count - 1)
                if b.aborted:
                    self._append(Run(lo, hi, ARCHIVED, 0))
                    self.dirty = True
                    self.events.archived(NO_RECORD, hi - lo + 1)
                else:
                    self._append(Run(lo, hi, ACQUIRED, 1, member, lock))
                    self._give(out, lo, hi, 1, batch_size)
                    out.count += hi - lo + 1
                    self.events.acquired(1, hi - lo + 1)
                self.end = hi + 1
                if hi < b.last:
                    break
        if out.ranges:
            self.locks[lock] = (member, deadline)
            out.timers.append(LockTimer(lock, deadline))
        self._merge()
        self._advance()
        return out

    def _acquire_cached(self, lo: int, hi: int, member: str, lock: int, aborted: bool,
                        limit: int, out: Acquired,
                        cap: int | None = None) -> tuple[int, bool]:
        i, j = self._split_range(lo, hi)
        got = 0
        threshold = max(2, -(-limit // 2))
        k = i
        while k < j:
            run = self.runs[k]
            k += 1
            if run.state != AVAILABLE or run.ticket is not None:
                continue
            if aborted:
                run.state = ARCHIVED
                self.dirty = True
                self.events.archived(NO_RECORD, run.last - run.first + 1)
                continue
            size = run.last - run.first + 1
            take = size
            poison = run.count >= threshold or (limit > 2 and run.count == limit - 1)
            if limit > 2 and run.count == limit - 1:
                take = 1                                   # its last attempt: alone
            elif poison:
                take = max(1, size >> (run.count - threshold + 1))  # shrinking slices
            if cap is not None:
                if cap - got <= 0:
                    return got, True
                take = min(take, cap - got)
            if take < size:
                self._split_at(run.first + take)
                j += 1
            if poison and out.ranges:
                return got, True                           # a poison slice goes alone
            run.state, run.count, run.member, run.lock = ACQUIRED, run.count + 1, member, lock
            self._give(out, run.first, run.last, run.count, 0)
            got += run.last - run.first + 1
            self.events.acquired(run.count, run.last - run.first + 1)
            if poison:
                return got, True
        return got, False

    @staticmethod
    def _give(out: Acquired, first: int, last: int, count: int, batch_size: int) -> None:
        ranges = out.ranges
        if ranges:
            prev = ranges[-1]
            if (prev.last + 1 == first and prev.delivery_count == count
                    and (not batch_size or prev.last - prev.first + 1 < batch_size)):
                ranges[-1] = AcquiredRange(prev.first, last, count)
                return
        ranges.append(AcquiredRange(first, last, count))

    def _no_records(self, lo: int, hi_excl: int) -> None:
        """Offsets [lo, hi_excl) hold no record: AVAILABLE ones are archived;
        beyond the window they enter it archived."""
        if lo < self.end:
            top = min(hi_excl, self.end) - 1
            i, j = self._split_range(lo, top)
            for run in self.runs[i:j]:
                if run.state == AVAILABLE and run.ticket is None:
                    run.state = ARCHIVED
                    self.dirty = True
                    self.events.archived(NO_RECORD, run.last - run.first + 1)
        if hi_excl > self.end:
            self.events.archived(NO_RECORD, hi_excl - self.end)
            self._append(Run(self.end, hi_excl - 1, ARCHIVED, 0))
            self.end = hi_excl
            self.dirty = True

    # -------------------------------------------------------- acknowledge
    def acknowledge(self, member: str, batches: list[dict], now: int,
                    lock_ms: int = 0) -> AckResult:
        """Apply one partition's acknowledgements (checked by
        check_ack_batches) for `member`, all or nothing.  Offsets below the
        start are done already (ignored); past the window INVALID_REQUEST;
        anything not ACQUIRED by this member (or with a change in flight)
        INVALID_RECORD_STATE.  RENEW (KIP-1222) restarts the records' lock
        for lock_ms and persists nothing."""
        segments: list[tuple[int, int, int]] = []
        prev_last = -1
        for b in batches:
            first, last, types = b["first_offset"], b["last_offset"], b["acknowledge_types"]
            if last < self.start:
                continue
            if last >= self.end:
                return AckResult(Err.INVALID_REQUEST)
            if first <= prev_last:
                return AckResult(Err.INVALID_RECORD_STATE)   # the same offset twice
            prev_last = last
            if len(types) == 1:
                segments.append((max(first, self.start), last, types[0]))
                continue
            for offset in range(max(first, self.start), last + 1):
                kind = types[offset - first]
                if segments and segments[-1][1] + 1 == offset and segments[-1][2] == kind:
                    segments[-1] = (segments[-1][0], offset, kind)
                else:
                    segments.append((offset, offset, kind))
        for first, last, _ in segments:
            i = self._index(first)
            while i < len(self.runs) and self.runs[i].first <= last:
                run = self.runs[i]
                if run.state != ACQUIRED or run.member != member or run.ticket is not None:
                    return AckResult(Err.INVALID_RECORD_STATE)
                i += 1
        result = AckResult()
        renewed = [seg for seg in segments if seg[2] == RENEW]
        if renewed:
            lock = self._next_lock = self._next_lock + 1
            self.locks[lock] = (member, now + lock_ms)
            result.timers.append(LockTimer(lock, now + lock_ms))
            for first, last, _ in renewed:
                i, j = self._split_range(first, last)
                for run in self.runs[i:j]:
                    run.lock = lock
            segments = [seg for seg in segments if seg[2] != RENEW]
        if not segments:
            return result
        ticket = result.ticket = self._next_ticket = self._next_ticket + 1
        limit = self.limits.delivery_count_limit
        for first, last, kind in segments:
            if kind != GAP:                 # Kafka's meter leaves gaps out too
                self.events.acknowledged(kind, last - first + 1)
            i, j = self._split_range(first, last)
            for run in self.runs[i:j]:
                run.prev = (run.state, run.member, run.lock)
                run.ticket = ticket
                if kind == ACCEPT:
                    run.state = ACKNOWLEDGED
                elif kind == RELEASE and run.count < limit:
                    run.state = AVAILABLE
                else:                       # REJECT, GAP, RELEASE at the limit
                    run.state = ARCHIVED
                    self.events.archived(REJECTED if kind == REJECT else
                                         DELIVERY_LIMIT if kind == RELEASE else NO_RECORD,
                                         run.last - run.first + 1)
                run.member = run.lock = None
        self._pending.add(ticket)
        return result

    # -------------------------------------------------- locks and members
    def expire(self, lock: int, now: int) -> bool:
        """The acquisition lock `lock` timed out: its records still ACQUIRED go
        back to AVAILABLE (ARCHIVED at the delivery limit).  -> changed."""
        held = self.locks.get(lock)
        if held is None or now < held[1]:
            return False
        del self.locks[lock]
        return self._release_where(lambda r: r.lock == lock, timed_out=True)

    def release_member(self, member: str) -> bool:
        """The member's share session ended: its ACQUIRED records go back."""
        return self._release_where(lambda r: r.member == member)

    def _release_where(self, match, timed_out: bool = False) -> bool:
        limit = self.limits.delivery_count_limit
        changed = False
        for run in self.runs:
            if run.state == ACQUIRED and run.ticket is None and match(run):
                archive = run.count >= limit or run.last < self.log_start
                run.state = ARCHIVED if archive else AVAILABLE
                run.member = run.lock = None
                changed = True
                size = run.last - run.first + 1
                if timed_out:
                    self.events.lock_timed_out(size)
                else:
                    self.events.session_released(size)
                if archive:
                    self.events.archived(DELIVERY_LIMIT if run.count >= limit else NO_RECORD,
                                         size)
        if changed:
            self.dirty = True
            self._maybe_available = True
            self._merge()
            self._advance()
        return changed

    def on_log_start(self, log_start: int) -> None:
        """The log's start moved (retention, DeleteRecords): records below it
        are gone; AVAILABLE ones are archived (ACQUIRED ones when their lock
        ends), an empty window moves up to it."""
        if log_start <= self.log_start and log_start <= self.start:
            return
        self.log_start = max(self.log_start, log_start)
        if log_start <= self.start:
            return
        if not self.runs:
            self.start = self.end = max(self.end, log_start)
            self.dirty = True
            return
        self._no_records(self.start, log_start)
        self._merge()
        self._advance()

    # ---------------------------------------------------------- persisting
    def take_write(self) -> StateWrite | None:
        """The next write to send, when there is something to write and no
        write is out: the whole window, tickets applied."""
        if self.writing or not (self.dirty or self._pending):
            return None
        self.writing = True
        self.dirty = False
        tickets = frozenset(self._pending)
        self._pending.clear()
        batches = self._batches(tentative=True)
        done = sum(b.last_offset - b.first_offset + 1 for b in batches
                   if b.delivery_state in TERMINAL)
        return StateWrite(self.start, batches, done, tickets)

    def abandon(self) -> list[int]:
        """The tickets no write will carry (the share partition is being
        dropped): -> them, for their acknowledgements to be answered."""
        tickets = sorted(self._pending)
        self._pending.clear()
        return tickets

    def write_done(self, write: StateWrite, error_code: int, now: int) -> WriteDone:
        """The write came back: its tickets commit, or (an error) roll back:
        their records are ACQUIRED by the same member again, unless the lock
        ran out meanwhile (then AVAILABLE, or ARCHIVED at the limit)."""
        self.writing = False
        out = WriteDone()
        start = self.start
        tickets = write.tickets
        limit = self.limits.delivery_count_limit
        for run in self.runs:
            if run.ticket is None or run.ticket not in tickets:
                continue
            if error_code == Err.NONE:
                if run.state == AVAILABLE:
                    out.changed = True
            else:
                run.state, run.member, run.lock = run.prev
                held = self.locks.get(run.lock)
                if held is None or now >= held[1]:
                    run.state = ARCHIVED if run.count >= limit else AVAILABLE
                    run.member = run.lock = None
                    self.events.lock_timed_out(run.last - run.first + 1)
                    if run.state == ARCHIVED:
                        self.events.archived(DELIVERY_LIMIT, run.last - run.first + 1)
                    out.changed = out.changed or run.state == AVAILABLE
            run.ticket = run.prev = None
        if error_code != Err.NONE:
            self.dirty = True      # what else this write carried is still unwritten
        if out.changed:
            self._maybe_available = True
        out.answers = [(t, error_code) for t in sorted(tickets)]
        self._merge()
        self._advance()
        if self.start != start:
            out.changed = True     # the window moved: room for new records
        return out

    def _batches(self, tentative: bool) -> list[StateBatch]:
        rows: list[list[int]] = []
        for run in self.runs:
            state, count = run.state, run.count
            if run.ticket is not None and not tentative:
                state = run.prev[0]
            if state == ACQUIRED:
                state, count = AVAILABLE, count - 1     # acquisitions are not persisted
            if state == AVAILABLE and count == 0:
                continue                                # never delivered: fetched again
            if rows and rows[-1][1] + 1 == run.first and rows[-1][2:] == [state, count]:
                rows[-1][1] = run.last
            else:
                rows.append([run.first, run.last, state, count])
        return [StateBatch(*r) for r in rows]

    # ------------------------------------------------------------- runs
    def _index(self, offset: int) -> int | None:
        if not self.start <= offset < self.end or not self.runs:
            return None
        return bisect_right(self.runs, offset, key=_first) - 1

    def _split_at(self, offset: int) -> int:
        """Make a run start at `offset` (inside the window) -> its index."""
        i = bisect_right(self.runs, offset, key=_first) - 1
        run = self.runs[i]
        if run.first == offset:
            return i
        tail = run.copy(offset, run.last)
        run.last = offset - 1
        self.runs.insert(i + 1, tail)
        return i + 1

    def _split_range(self, lo: int, hi: int) -> tuple[int, int]:
        """Runs exactly covering [lo, hi] -> (first index, index past)."""
        i = self._split_at(lo)
        j = self._split_at(hi + 1) if hi + 1 < self.end else len(self.runs)
        return i, j

    def _append(self, run: Run) -> None:
        runs = self.runs
        if runs and runs[-1].last + 1 == run.first and runs[-1].alike(run):
            runs[-1].last = run.last
        else:
            runs.append(run)

    def _merge(self) -> None:
        runs = self.runs
        if len(runs) < 2:
            return
        merged = [runs[0]]
        for run in runs[1:]:
            if merged[-1].alike(run):
                merged[-1].last = run.last
            else:
                merged.append(run)
        self.runs = merged

    def _advance(self) -> None:
        """SPSO moves past the leading run of finished (ACKNOWLEDGED or
        ARCHIVED) records with no change in flight."""
        runs = self.runs
        n = 0
        while n < len(runs) and runs[n].state in TERMINAL and runs[n].ticket is None:
            n += 1
        if n:
            self.start = runs[n - 1].last + 1
            del runs[:n]

    def _trim_tail(self) -> None:
        """Trailing never-delivered records are not in the window (as after a
        write that did not name them)."""
        runs = self.runs
        while runs and runs[-1].state == AVAILABLE and runs[-1].count == 0:
            self.end = runs.pop().first


def _first(run: Run) -> int:
    return run.first
