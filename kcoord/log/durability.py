"""The durability seam of the coordinator runtimes (group and transaction).

A runtime appends a round of writes to its logs, then asks its Durability
when they may be answered.  Single node: once fsynced here
(`LocalDurability`).  In a cluster: once every in-sync replica has them
(`cluster/durability.py`, `ReplicatedDurability`).
"""
from __future__ import annotations

from typing import Callable, Protocol

from ..protocol.errors import Err
from .fsync_batcher import FsyncBatcher


# Kafka codes that say another node leads the log now
LOST_LEADERSHIP = frozenset({Err.NOT_LEADER_OR_FOLLOWER, Err.NOT_COORDINATOR,
                             Err.FENCED_LEADER_EPOCH})


# What Kafka's group and transaction coordinators answer a client for an
# append the replica manager refused (or timed out): retriable codes of
# their own APIs (GroupCoordinatorService, TransactionStateManager)
_CLIENT_ANSWER = {Err.NOT_ENOUGH_REPLICAS: Err.COORDINATOR_NOT_AVAILABLE,
                  Err.NOT_ENOUGH_REPLICAS_AFTER_APPEND: Err.COORDINATOR_NOT_AVAILABLE,
                  Err.REQUEST_TIMED_OUT: Err.COORDINATOR_NOT_AVAILABLE,
                  Err.NOT_LEADER_OR_FOLLOWER: Err.NOT_COORDINATOR,
                  Err.KAFKA_STORAGE_ERROR: Err.NOT_COORDINATOR}


def coordinator_answer(code: int) -> int:
    """The coordinator's client-facing code for an append error `code`."""
    return _CLIENT_ANSWER.get(code, code)


class NotReplicated(Exception):
    """A write the replicas will not acknowledge here; `error` is the Kafka
    code that says why.  A lost leadership (LOST_LEADERSHIP) unloads the
    shard; any other code fails its writes and reloads it, as a failed
    fsync does."""

    def __init__(self, error: int) -> None:
        super().__init__(error)
        self.error = error

    @property
    def lost_leadership(self) -> bool:
        return self.error in LOST_LEADERSHIP


class Durability(Protocol):
    # True when a write waits for other nodes: the runtime then times a
    # write out after offsets.commit.timeout.ms (Kafka's write timeout)
    replicated: bool
    closed: bool

    def append_error(self, plog) -> int:
        """May a coordinator write be appended to `plog` now (Kafka's check
        before an acks=all append)?  NONE, NOT_LEADER_OR_FOLLOWER, or
        NOT_ENOUGH_REPLICAS (the ISR is below min.insync.replicas)."""

    def serve_error(self, plog) -> int:
        """May a read be answered from the memory of `plog`'s shard now?
        NONE, or NOT_LEADER_OR_FOLLOWER when this node may no longer lead it."""

    def sync(self, logs: list, done: Callable[[list], None]) -> None:
        """Call `done(errors)` on the loop once what was appended to each log
        is durable: errors[i] None, a NotReplicated, or the fsync's error."""

    async def replayed(self, plog, end_offset: int, epoch: int) -> None:
        """The takeover fence: return once a shard that replayed `plog` up to
        `end_offset` for leader epoch `epoch` may serve what it replayed."""

    def close(self) -> None:
        """Wait for what is under way; later writes are made durable by the caller."""


class LocalDurability:
    """Single node: a write is durable once fsynced here (in worker threads,
    in the fsync batcher's adaptive rounds shared with the data plane)."""

    replicated = False

    def __init__(self, batcher: FsyncBatcher | None = None) -> None:
        self.batcher = batcher if batcher is not None else FsyncBatcher()

    @property
    def closed(self) -> bool:
        return self.batcher.closed

    @staticmethod
    def append_error(_plog) -> int:
        return Err.NONE  # one node: it is the whole ISR

    @staticmethod
    def serve_error(_plog) -> int:
        return Err.NONE  # one node: it always leads

    def sync(self, logs: list, done: Callable[[list], None]) -> None:
        self.batcher.sync_then(logs, done)   # the shared adaptive rounds

    async def replayed(self, _plog, _end_offset: int, _epoch: int) -> None:
        return None  # one node: everything in its log is committed

    def close(self) -> None:
        self.batcher.close()
