"""The compact form of the record a consumer's plain OffsetCommit writes.

A commit of ten partitions wrote ten generic Records, each with a fresh key
dict and value dict that the batch writer then read back field by field
(a third of the core's instructions per commit, bench instr_split).  A
CommitRecord holds the same OffsetCommit record (type 1, value v3) as one
flat tuple, which coordinator_batch.build_records_batch packs straight to
the bytes the generic Record gives (tests/server/test_commit_batch.py).

Its change is already in memory when it is made (offsets.commit_applied),
so, like an AppliedRecord, the runtime appends it without replaying it;
loading the log decodes it as a plain Record.  The `type`, `key`, `value`
and `value_version` views are the generic Record's, built on demand for
the rare readers that want them (encode_record of metadata-bearing
commits, tests).  Not compiled: nothing on the hot path calls into it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:  # record_codec imports this module (encode_record reads both forms)
    from .record_codec import Record

OFFSET_COMMIT_TYPE = 1  # the record type (key version) of an OffsetCommit
COMMIT_VALUE_VERSION = 3  # the value version Kafka and kcoord write without expiry


class CommitRecord(NamedTuple):
    """One OffsetCommit record, value v3, already applied to memory."""
    group: str
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int

    @property
    def type(self) -> int:
        return OFFSET_COMMIT_TYPE

    @property
    def value_version(self) -> int:
        return COMMIT_VALUE_VERSION

    @property
    def key(self) -> dict:
        return {"group": self.group, "topic": self.topic, "partition": self.partition}

    @property
    def value(self) -> dict:
        return {"offset": self.offset, "leader_epoch": self.leader_epoch,
                "metadata": self.metadata, "commit_timestamp": self.commit_timestamp}

    def record(self) -> Record:
        """The same record in the generic form (what loading the log gives)."""
        from .record_codec import Record
        return Record(OFFSET_COMMIT_TYPE, self.key, self.value, COMMIT_VALUE_VERSION)
