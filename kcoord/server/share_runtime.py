"""The share coordinator on the coordinator runtime (Kafka's ShareCoordinatorService).

The same runtime as the group coordinator's (coordinator_runtime.py: load
and unload, the takeover fence, the group commit, the durability seam,
answers only once durable), over __share_group_state instead of
__consumer_offsets, with the share coordinator's core
(kcoord/share/coordinator.py) in every shard.  A share partition's key
"groupId:topicId:partition" (topicId as Kafka prints a Uuid) picks its
shard as a group id picks a group's: abs(javaHash(key)) % partitions.

The topic is created on first use (a FindCoordinator for key type 2, or
the first persister call); on a single node every shard then loads, and
one that existed at start loads at start like the group shards.
"""
from __future__ import annotations

import base64
import logging
import time

from ..coordinator.result import Result
from ..protocol.errors import CorruptRecordError, Err, ProtocolError
from ..protocol.internal_topics import SHARE_STATE_TOPIC
from ..protocol.records import build_batch, decode_batch, iter_batches
from ..share.coordinator import ShareCoordinatorConfig, ShareCoordinatorShard, share_request
from ..share.records import decode_share_record, encode_share_record
from .coordinator_runtime import CoordinatorRuntime, ShardRuntime
from .shard_loader import LogChunks
from .dispatch import Reply

log = logging.getLogger("kcoord.share")


def uuid_string(topic_id: bytes) -> str:
    """Kafka's Uuid.toString: URL-safe base64 without padding (22 characters)."""
    return base64.urlsafe_b64encode(topic_id).decode().rstrip("=")


def parse_uuid(text: str) -> bytes | None:
    """Uuid.fromString, or None for text that is not a 16-byte id."""
    if len(text) != 22:
        return None
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except (ValueError, TypeError):
        return None
    return raw if len(raw) == 16 else None


def share_key(group_id: str, topic_id: bytes, partition: int) -> str:
    """The share partition's coordinator key (Kafka's SharePartitionKey.asCoordinatorKey)."""
    return f"{group_id}:{uuid_string(topic_id)}:{partition}"


def parse_share_key(key: str) -> tuple[str, bytes, int] | None:
    """"groupId:topicId:partition" (the group id may hold ':') -> its parts,
    or None for a malformed key."""
    parts = key.rsplit(":", 2)
    if len(parts) != 3 or not parts[0]:
        return None
    topic_id = parse_uuid(parts[1])
    try:
        partition = int(parts[2])
    except ValueError:
        return None
    if topic_id is None or partition < 0 or not parts[2].isdigit():
        return None
    return parts[0], topic_id, partition


class ShareStateShard(ShardRuntime):
    """One __share_group_state partition: a share coordinator core, records
    written with their own codec, the log replayed record by record."""

    def new_core(self) -> ShareCoordinatorShard:
        return ShareCoordinatorShard(self.index, self.config)

    @staticmethod
    def encode_batch(records: list, now: int) -> bytes:
        return build_batch([(*encode_share_record(r), [], now) for r in records],
                           base_timestamp=now)

    async def replay_log(self) -> None:
        start = time.monotonic()
        self.replayed_end = self.plog.log_end_offset
        chunks = LogChunks(self.plog, self.plog.log_start_offset)
        async for chunk in chunks:
            for pos, header in iter_batches(chunk):
                chunks.offset = header.base_offset + header.last_offset_delta + 1
                if header.attributes & 0x20:  # a control batch: nothing of the share state
                    continue
                _, records = decode_batch(chunk, pos)  # CorruptRecordError ends the load
                for r in records:
                    self._replay_one(r.key, r.value, r.offset)
        if self.records_loaded:
            self.events.shard_loaded(self.index, self.records_loaded, time.monotonic() - start)

    def appended(self, records: list, first_offset: int) -> None:
        for i, record in enumerate(records):
            self.core.placed(record, first_offset + i)

    def prune(self, committed: int | None = None) -> int:
        """Drop the log below its oldest needed record (Kafka prunes with
        DeleteRecords), never past what is durable (in a cluster `committed`,
        the high watermark: a record that supersedes the pruned ones may
        still be truncated away).  -> the log start."""
        if not self.loaded:
            return self.plog.log_start_offset
        offset = self.core.redundant_offset()
        if offset is None:
            return self.plog.log_start_offset
        limit = self.plog.durable_end_offset if committed is None \
            else min(committed, self.plog.durable_end_offset)
        return self.plog.advance_log_start(min(offset, limit))

    def _replay_one(self, key, value, offset: int) -> None:
        if key is None:
            self.load_errors += 1
            return
        try:
            record = decode_share_record(bytes(key), None if value is None else bytes(value))
        except (ProtocolError, CorruptRecordError) as exc:
            self.load_errors += 1
            log.warning("share-state shard %d: skipping undecodable record: %s", self.index, exc)
            return
        if record is not None:
            self.core.replay(record)
            self.core.placed(record, offset)
            self.records_loaded += 1


def _error_answer(partition: int, extra: dict):
    """The runtime's error answer for one key (NOT_COORDINATOR, loading, a failed write)."""
    def error(code: int) -> dict:
        return {"partition": partition, "error_code": code, "error_message": None, **extra}
    return error


# the fields an error answer carries beside partition/error_code/error_message
READ_DEFAULTS = {"state_epoch": 0, "start_offset": -1, "state_batches": []}
SUMMARY_DEFAULTS = {"state_epoch": 0, "leader_epoch": 0, "start_offset": -1,
                    "delivery_complete_count": -1}


class ShareCoordinatorRuntime(CoordinatorRuntime):
    """Every __share_group_state shard of this node; `call` runs one
    operation of the share coordinator's core on one share partition's key."""

    TOPIC = SHARE_STATE_TOPIC
    SHARD = ShareStateShard
    PARTITIONS_KEY = "share.coordinator.state.topic.num.partitions"
    SNAPSHOT_KEY = None  # its log is pruned below the oldest share snapshot instead
    LINGER_KEY = "share.coordinator.append.linger.ms"
    WRITE_TIMEOUT_KEY = "share.coordinator.write.timeout.ms"
    CREATE_AT_START = False  # created on first use, as Kafka's auto-creation
    WHAT = "share-state shards"

    def new_core_config(self, values: dict) -> ShareCoordinatorConfig:
        return ShareCoordinatorConfig.from_values(values)

    def topic_configs(self) -> dict[str, str]:
        # Kafka: delete policy, kept forever (old records go by pruning, not retention)
        return {"cleanup.policy": "delete", "retention.ms": "-1",
                "segment.bytes": str(self.config["share.coordinator.state.topic.segment.bytes"])}

    def _schedule_cleanup(self) -> None:
        """No offset expiry and no compaction on __share_group_state: every
        share.coordinator.state.topic.prune.interval.ms each shard's log is
        cut below its oldest needed snapshot; in a cluster only up to the
        high watermark, and the followers' log start follows the leader's
        (their fetchers, as for any topic)."""
        interval = self.config["share.coordinator.state.topic.prune.interval.ms"] / 1000.0
        self._cleanup = self.clock.call_later(interval, self._prune_all)

    def _prune_all(self) -> None:
        durability = self.commit.durability
        for shard in self.shards:
            try:
                shard.prune(durability.committed_end(shard.plog) if durability.replicated
                            else None)
            except OSError:
                log.exception("share-state shard %d: pruning failed", shard.index)
        self._schedule_cleanup()

    @property
    def ready(self) -> bool:
        """Does the topic exist (and so the shards)?"""
        return bool(self.shards)

    def call(self, op: str, group_id: str, topic_id: bytes, partition: int, *args):
        """The core's `op` (initialize, read, write, delete, summary) on one
        key, through the runtime: -> the partition's answer dict, or a
        Reply of it (answered once its records are durable)."""
        extra = READ_DEFAULTS if op == "read" else SUMMARY_DEFAULTS if op == "summary" else {}
        if not self.shards:
            if (self.commit.durability.replicated
                    and self.catalogue.get(self.TOPIC) is None):
                # a cluster's internal topics come from its control plane (created
                # by FindCoordinator key type 2), not from one node's catalogue
                return _error_answer(partition, extra)(Err.COORDINATOR_NOT_AVAILABLE)
            self.open_topic()
        topic = self.catalogue.by_id.get(topic_id)
        req = share_request(group_id, topic_id, partition,
                            None if topic is None else len(topic.partitions))
        if op in _ALWAYS_WRITE:
            write = self.write_checked
        else:   # read, summary: answered from memory, so only by a sure leader
            write = self.write
            shard = self.shard_for(share_key(group_id, topic_id, partition))
            code = shard.serve_error()
            if code:
                return _error_answer(partition, extra)(code)
        return write(share_key(group_id, topic_id, partition), _CORE_OPS[op],
                     _error_answer(partition, extra), req, *args)


def _op(name: str):
    def run(core: ShareCoordinatorShard, now: int, *args) -> Result:
        return getattr(core, name)(now, *args)
    run.__name__ = name
    return run


_CORE_OPS = {name: _op(name) for name in ("initialize", "read", "write", "delete", "summary")}
_ALWAYS_WRITE = frozenset({"initialize", "write", "delete"})  # refused before they run


async def answered(answer) -> dict:
    """The answer of `call`, waited for if it is a Reply."""
    if answer.__class__ is Reply:
        return await answer
    return answer

