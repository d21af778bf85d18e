"""What a core handler returns: records to append, replies, timer changes.

The core never performs I/O.  A reply is addressed by the token the
runtime gave the request, so a handler can answer requests that were parked
earlier (a JoinGroup completed by another member's join, or by a timer).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..protocol.record_codec import Record  # noqa: F401 (the core's record type)


class AppliedRecord(Record):
    """A record whose change the handler has already made to memory: the
    runtime appends it but does not replay it (Kafka's CoordinatorResult with
    replayRecords=false, which the classic rebalance uses because it mutates
    the live group directly).  Loading a log replays it like any record: the
    decoded copy is a plain Record.

    Marked per record, not per Result as in Kafka, because kcoord's results
    mix the two kinds: a JoinGroup that replaces an empty consumer group, or
    a downgrade to a classic group, returns consumer-group tombstones (which
    only their replay removes from memory) beside the classic group's record
    (already in memory); and results are merged (Result.merge)."""
    __slots__ = ()


class Timer(NamedTuple):
    """Arm (deadline_ms set) or cancel (deadline_ms None) the timer named key."""
    key: tuple
    deadline_ms: int | None


@dataclass(slots=True)
class Result:
    records: list[Record] = field(default_factory=list)
    replies: list[tuple[Any, dict]] = field(default_factory=list)  # (token, response)
    timers: list[Timer] = field(default_factory=list)
    # The answer to the request that ran the handler, when it has one now
    # (None: it answers through its token, in `replies`, now or later).
    response: Any = None

    def reply(self, token: Any, response: dict) -> "Result":
        self.replies.append((token, response))
        return self

    def arm(self, key: tuple, deadline_ms: int) -> None:
        self.timers.append(Timer(key, deadline_ms))

    def cancel(self, key: tuple) -> None:
        self.timers.append(Timer(key, None))

    def merge(self, other: "Result") -> "Result":
        """Add another result's records, replies and timers (its response is not taken)."""
        self.records.extend(other.records)
        self.replies.extend(other.replies)
        self.timers.extend(other.timers)
        return self
