"""One coordinator shard: the groups and offsets of one __consumer_offsets partition.

Deterministic and sans-I/O: every handler takes the request and `now` and
returns a Result; durable state changes only in `replay`, except for the
classic rebalance's AppliedRecords (result.py), whose change the handler
made itself.  The runtime appends a result's records, replays them
(`replay_emitted`: all but those), and sends its replies once the records
are durable.  Loading replays every record (`replay_all`).
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from ..protocol.commit_request import FlatTopic
from ..protocol.errors import Err
from ..protocol.messages.coordinator_records import LEGACY_OFFSET_COMMIT
from .classic_group import DEAD, EMPTY, ClassicGroup
from .classic_group_admin import offsets_expiry_base
from .classic_group_manager import ClassicGroupManager
from .classic_group_records import GROUP_METADATA
from .classic_requests import join_error, leave_response, leaving_members, sync_request_error
from .consumer_group import RECORD_TYPES as CONSUMER_GROUP_RECORDS
from .consumer_group_manager import ConsumerGroupManager
from .share_group import RECORD_TYPES as SHARE_GROUP_RECORDS
from .share_group_manager import ShareGroupManager
from .migration import GroupMigration
from .offsets import (OFFSET_COMMIT, OffsetStore, OffsetValue, commit_answer, commit_applied,
                      commit_records, commit_taken, delete_offsets, offset_tombstone)
from .group_configs import GroupOverrides
from .observer import NULL_OBSERVER, CoordinatorObserver
from ..protocol.record_codec import generic_commit
from .result import AppliedRecord, Record, Result
from .txn_offsets import PendingTxnOffsets
from .timers import Timers
from .compiled import mypyc_attr


# pickled with the core (snapshot.py) and patched by tests: an ordinary class, its methods compiled
@mypyc_attr(native_class=False)
@dataclass
class CoordinatorConfig:
    offset_metadata_max_bytes: int = 4096
    offsets_retention_ms: int = 10080 * 60000
    offsets_retention_check_interval_ms: int = 600000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    group_initial_rebalance_delay_ms: int = 3000
    group_max_size: int = 2**31 - 1
    # KIP-848 consumer groups (group.consumer.*)
    consumer_group_session_timeout_ms: int = 45000
    consumer_group_heartbeat_interval_ms: int = 5000
    consumer_group_max_size: int = 2**31 - 1
    consumer_group_assignors: tuple = ("uniform", "range")
    # classic <-> consumer conversions allowed: disabled, upgrade, downgrade, bidirectional
    consumer_group_migration_policy: str = "bidirectional"
    # KIP-932 share groups (group.share.*)
    share_group_session_timeout_ms: int = 45000
    share_group_heartbeat_interval_ms: int = 5000
    share_group_max_size: int = 200
    share_group_initialize_retry_interval_ms: int = 30000
    offsets_commit_timeout_ms: int = 5000
    # per-group overrides of the two settings above (GROUP configs); the server keeps them
    group_overrides: GroupOverrides = field(default_factory=GroupOverrides)
    # (principal, client host, topic) -> may it DESCRIBE the topic; set by the
    # server when an authorizer is on: Kafka 4.0 resolves a regex subscription
    # only to topics the heartbeat's principal may describe (KAFKA-18813)
    topic_describable: Callable[[str, str, str], bool] | None = None

    @classmethod
    def from_values(cls, v: dict) -> "CoordinatorConfig":
        """From the server's config values (server/config.py DEFAULTS fills
        every key: the defaults live there, not here a second time)."""
        return cls(
            offset_metadata_max_bytes=v["offset.metadata.max.bytes"],
            offsets_retention_ms=v["offsets.retention.minutes"] * 60000,
            offsets_retention_check_interval_ms=v["offsets.retention.check.interval.ms"],
            group_min_session_timeout_ms=v["group.min.session.timeout.ms"],
            group_max_session_timeout_ms=v["group.max.session.timeout.ms"],
            group_initial_rebalance_delay_ms=v["group.initial.rebalance.delay.ms"],
            group_max_size=v["group.max.size"],
            consumer_group_session_timeout_ms=v["group.consumer.session.timeout.ms"],
            consumer_group_heartbeat_interval_ms=v["group.consumer.heartbeat.interval.ms"],
            consumer_group_max_size=v["group.consumer.max.size"],
            consumer_group_assignors=tuple(v["group.consumer.assignors"]),
            consumer_group_migration_policy=v["group.consumer.migration.policy"],
            share_group_session_timeout_ms=v["group.share.session.timeout.ms"],
            share_group_heartbeat_interval_ms=v["group.share.heartbeat.interval.ms"],
            share_group_max_size=v["group.share.max.size"],
            share_group_initialize_retry_interval_ms=v["group.share.initialize.retry.interval.ms"],
            offsets_commit_timeout_ms=v["offsets.commit.timeout.ms"],
        )


def random_uuid() -> str:
    return str(uuid.uuid4())


def group_tombstone(group_id: str) -> Record:
    return Record(GROUP_METADATA, {"group": group_id}, None)


# pickled with the core (snapshot.py) and patched by tests: an ordinary class, its methods compiled
@mypyc_attr(native_class=False)
class CoordinatorShard:
    """The three group managers, the offsets, and the routing between them: a
    request goes to the manager of its group's type (a classic request for a
    consumer group to GroupMigration, as Kafka's GroupMetadataManager does)."""

    def __init__(self, partition: int, config: CoordinatorConfig | None = None,
                 new_uuid: Callable[[], str] | None = None) -> None:
        self.partition = partition
        self.config = config or CoordinatorConfig()
        self.offsets = OffsetStore()
        self.timers = Timers()  # every timer of the shard (classic, consumer, share, migration)
        self.classic = ClassicGroupManager(  # classic groups (JoinGroup/SyncGroup)
            self.config, self.timers, new_uuid or random_uuid)
        self.groups = self.classic.groups  # the classic groups (the name readers know)
        consumer_groups: dict = {}  # the consumer manager's, which the share manager reads too
        self.share = ShareGroupManager(  # KIP-932 share groups
            self.config, timers=self.timers, other_groups=(self.groups, consumer_groups))
        self.consumer = ConsumerGroupManager(  # KIP-848 consumer groups
            self.config, self.groups, timers=self.timers, share_groups=self.share.groups,
            groups=consumer_groups)
        # classic members in consumer groups, and conversions between the two types
        self.migration = GroupMigration(self.config, self.classic, self.consumer, self.timers)
        self.consumer.conversions = self.migration  # the consumer side asks it to convert
        self.classic.elsewhere = self.migration  # a heartbeat for a non-classic group
        self.txn_offsets = PendingTxnOffsets()  # TxnOffsetCommit offsets awaiting their marker
        self.observer: CoordinatorObserver = NULL_OBSERVER
        # a timer key's kind (its first element) -> its handler, named once by its manager
        self.timer_handlers: dict[str, Callable[[tuple, int], Result]] = {
            **self.classic.timer_handlers(), **self.consumer.timer_handlers(),
            **self.migration.timer_handlers(), **self.share.timer_handlers()}

    def set_observer(self, observer: CoordinatorObserver | None) -> None:
        """Report rebalances and expiries to `observer` (None: to nobody).  Set
        once the shard is loaded, so replaying the log reports nothing."""
        self.observer = self.classic.observer = observer or NULL_OBSERVER
        self.consumer.observer = observer

    # ================================================================ replay
    def replay(self, record: Record) -> None:
        if record.__class__ is tuple:  # a compact commit record (record_codec.py)
            record = generic_commit(record)
        rtype, key, value, version = record
        if rtype == OFFSET_COMMIT or rtype == LEGACY_OFFSET_COMMIT:
            if self.txn_offsets.by_group:
                tp = (key["topic"], key["partition"])
                if value is None:
                    self.txn_offsets.on_tombstone(key["group"], tp)
                else:
                    self.txn_offsets.on_plain_commit(key["group"], tp)
            self.offsets.replay(key, value, version)
            if value is not None:
                self._simple_group_for_commit(key["group"])
        elif record.type == GROUP_METADATA:
            self.classic.replay_group_metadata(record.key["group"], record.value)
        elif record.type in CONSUMER_GROUP_RECORDS:
            self.consumer.replay(record)
        elif record.type in SHARE_GROUP_RECORDS:
            self.share.replay(record)

    def _simple_group_for_commit(self, group_id: str) -> None:
        """A commit on an unknown group creates a simple (protocol-less) group;
        the name of a consumer or share group is not unknown.  The inlined
        replay loops (replay_plain_commits, _replay_records) keep their own
        copy of this check for speed."""
        if group_id not in self.groups and group_id not in self.consumer.groups \
                and group_id not in self.share.groups:
            self.groups[group_id] = ClassicGroup(group_id)

    def replay_plain_commits(self, commits: list) -> None:
        """replay() of OffsetCommit records with v3 values, in order, each
        given as its fields (group, topic, partition, offset, leader epoch,
        metadata, commit timestamp): what a loader that reads the records'
        bytes itself hands over (commit_runs.plain_commits)."""
        txn = self.txn_offsets
        by_group = self.offsets.by_group
        groups, consumer_groups, share_groups = self.groups, self.consumer.groups, self.share.groups
        new = tuple.__new__
        for group_id, topic, partition, offset, leader_epoch, metadata, timestamp in commits:
            tp = (topic, partition)
            if txn.by_group:
                txn.on_plain_commit(group_id, tp)
            offsets = by_group.get(group_id)
            if offsets is None:
                offsets = by_group[group_id] = {}
            offsets[tp] = new(OffsetValue, (offset, leader_epoch, metadata, timestamp, None))
            if group_id not in groups and group_id not in consumer_groups \
                    and group_id not in share_groups:
                groups[group_id] = ClassicGroup(group_id)

    def replay_txn_offsets(self, producer_id: int, _producer_epoch: int,
                           records: list[Record]) -> None:
        """OffsetCommit records of a producer's transactional batch: pending
        until its marker (txn_offsets.py)."""
        self.txn_offsets.replay_batch(producer_id, records)
        for group_id in {r.key["group"] for r in records if r.value is not None}:
            self._simple_group_for_commit(group_id)  # pending offsets too, as commits do

    def replay_txn_marker(self, producer_id: int, _producer_epoch: int, commit: bool) -> None:
        """The producer's transaction ended on this partition: its pending
        offsets are installed (COMMIT) or dropped (ABORT)."""
        self.txn_offsets.replay_marker(producer_id, commit, self.offsets)

    def replay_all(self, records: list[Record]) -> None:
        """replay() of every record, in order (loading a log)."""
        self._replay_records(records, False)

    def replay_emitted(self, records: list[Record]) -> None:
        """What the runtime replays of the records a handler just returned:
        every one but the AppliedRecords, whose change is already in memory
        (Kafka's replayRecords=false; result.py)."""
        self._replay_records(records, True)

    def _replay_records(self, records: list[Record], skip_applied: bool) -> None:
        """An OffsetCommit with a v3 value (what every commit writes) takes an
        inlined copy of its path (OffsetStore.replay, then the simple group):
        the runtime replays ten records per commit."""
        if self.txn_offsets.by_group:  # pending transactional offsets: the full path
            for record in records:
                if not (skip_applied and (record.__class__ is AppliedRecord
                                          or record.__class__ is tuple)):
                    self.replay(record)
            return
        by_group = self.offsets.by_group
        groups, consumer_groups, share_groups = self.groups, self.consumer.groups, self.share.groups
        new = tuple.__new__
        applied = AppliedRecord
        for record in records:
            if record.__class__ is tuple:  # a compact commit record (record_codec.py)
                if not skip_applied:  # (a check's replay of queued records)
                    self.replay(record)
                continue  # else its change is in memory (a plain commit)
            if skip_applied and record.__class__ is applied:
                continue  # its change is in memory (a classic rebalance)
            rtype, key, value, version = record
            if rtype != OFFSET_COMMIT or version != 3 or value is None:
                self.replay(record)
                continue
            group_id = key["group"]
            offsets = by_group.get(group_id)
            if offsets is None:
                offsets = by_group[group_id] = {}
            offsets[(key["topic"], key["partition"])] = new(OffsetValue, (
                value["offset"], value.get("leader_epoch", -1), value["metadata"] or "",
                value["commit_timestamp"], None))
            if group_id not in groups and group_id not in consumer_groups \
                    and group_id not in share_groups:
                groups[group_id] = ClassicGroup(group_id)

    # ================================================================ offsets
    def offset_commit(self, req: dict, version: int, now: int, lean: bool = False) -> Result:
        """Commit the partitions the runtime found valid (one record each) and
        refresh the committing classic member's session; the answer is the
        result's response.  `lean`: the response is None when every
        partition was taken (the caller answers all NONE from the request,
        group_handlers caches that answer's bytes)."""
        group_id = req["group_id"]
        generation = req.get("generation_id_or_member_epoch", -1)
        member_id = req.get("member_id", "") or ""
        instance_id = req.get("group_instance_id") if version >= 7 else None
        error = self._validate_commit(group_id, member_id, instance_id, generation, version)
        result = Result()
        if error == Err.NONE and group_id in self.groups:
            self.classic.refresh_session_on_commit(result, self.groups[group_id], member_id, now)
        retention = req.get("retention_time_ms", -1) if 2 <= version <= 4 else -1
        if error == Err.NONE and retention < 0 and not self.txn_offsets.by_group:
            # a consumer's plain commit: its change made here, as its replay
            # would (the AppliedRecords are not replayed again)
            store = self.offsets.by_group
            into = store.get(group_id)
            fresh = into is None
            if into is None:
                into = {}
            codes, result.records = commit_applied(
                group_id, req["topics"], now, self.config.offset_metadata_max_bytes, into)
            if result.records:
                if fresh:
                    store[group_id] = into
                if group_id not in self.groups and group_id not in self.consumer.groups:
                    # a commit on an unknown group creates a simple group (replay's rule)
                    self.groups[group_id] = ClassicGroup(group_id)
            if not (lean and codes is None):
                result.response = {"throttle_time_ms": 0,
                                   "topics": commit_answer(req["topics"], codes)}
            return result
        topics, result.records = commit_records(
            group_id, req["topics"], error, now, now + retention if retention >= 0 else None,
            self.config.offset_metadata_max_bytes)
        result.response = {"throttle_time_ms": 0, "topics": topics}
        return result

    def plain_commit(self, group_id: str, generation: int, member_id: str,
                     instance_id: str | None, topics: list[FlatTopic], version: int,
                     now: int) -> Result | list | None:
        """offset_commit(lean=True) of a flat request (protocol/commit_request.py)
        whose every partition the runtime found known, when it is a consumer's
        plain commit and every partition is taken: its response is None (all
        NONE).  A simple group's commit (no session to refresh) gives its
        records alone, a list (no Result: its interpreted __init__ was 2,400
        instructions).  None, before any change, when it is anything else (a
        group error, pending transactional offsets, metadata too long): the
        caller takes offset_commit with the request's dict."""
        if self.txn_offsets.by_group:
            return None
        group = self.groups.get(group_id)
        # a simple group's commit (an empty classic group, no generation):
        # valid, no session to refresh (_validate_commit and
        # refresh_session_on_commit, interpreted, said so at a tenth of a
        # commit's core cost)
        simple = (bool(group_id) and generation < 0 and group is not None and group.state == EMPTY
                  and group_id not in self.consumer.groups and group_id not in self.share.groups)
        if not simple and self._validate_commit(
                group_id, member_id, instance_id if version >= 7 else None, generation, version):
            return None
        metadata_max = self.config.offset_metadata_max_bytes
        for _, partitions in topics:
            for p in partitions:
                metadata: str | None = p[3]
                # n characters are n..2n UTF-16 code units (as commit_applied)
                if metadata is not None and 2 * len(metadata) > metadata_max and \
                        len(metadata.encode("utf-16-le")) // 2 > metadata_max:
                    return None
        result: Result | None = None
        if not simple:
            result = Result()
            if group is not None:
                self.classic.refresh_session_on_commit(result, group, member_id, now)
        store = self.offsets.by_group
        into = store.get(group_id)
        fresh = into is None
        if into is None:
            into = {}
        records = commit_taken(group_id, topics, now, into)
        if records:
            if fresh:
                store[group_id] = into
            if group is None and group_id not in self.consumer.groups:
                # a commit on an unknown group creates a simple group (replay's rule)
                self.groups[group_id] = ClassicGroup(group_id)
        if result is None:
            return records
        result.records = records
        return result

    def _validate_commit(self, group_id: str, member_id: str, instance_id: str | None,
                         generation: int, version: int) -> int:
        if not group_id:
            return Err.INVALID_GROUP_ID
        if group_id in self.share.groups:  # ShareGroup.validateOffsetCommit
            return Err.GROUP_ID_NOT_FOUND
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            return self.consumer.validate_offset_commit(consumer_group, member_id, generation, version)
        group = self.groups.get(group_id)
        if group is None:
            if generation < 0:
                return Err.NONE  # a simple group, created by the commit's replay
            return Err.GROUP_ID_NOT_FOUND if version >= 9 else Err.ILLEGAL_GENERATION
        return self.classic.validate_offset_commit(group, member_id, instance_id, generation)

    def offset_fetch(self, group_id: str, topics: list[dict] | None, member_id: str | None = None,
                     member_epoch: int = -1) -> tuple[int, list[dict]]:
        if not group_id:
            return Err.INVALID_GROUP_ID, []
        if group_id in self.share.groups:  # ShareGroup.validateOffsetFetch
            return Err.GROUP_ID_NOT_FOUND, []
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:  # v9: validated by member epoch
            error = self.consumer.validate_offset_fetch(consumer_group, member_id, member_epoch)
            if error:
                return error, []
            return Err.NONE, self.offsets.fetch(group_id, topics)
        group = self.groups.get(group_id)
        if group is None or group.state == DEAD:
            if topics is None:
                return Err.NONE, []
        return Err.NONE, self.offsets.fetch(group_id, topics)

    def offset_delete(self, req: dict) -> Result:
        response, records = self._offset_deletion(req)
        return Result(records=records, response=response)

    def _offset_deletion(self, req: dict) -> tuple[dict, list[Record]]:
        group_id = req["group_id"]
        if group_id in self.share.groups:  # share groups have no committed offsets
            return {"error_code": Err.GROUP_ID_NOT_FOUND, "throttle_time_ms": 0, "topics": []}, []
        if group_id in self.consumer.groups:
            return self.consumer.offset_delete(self.consumer.groups[group_id], req,
                                               self.offsets.group_offsets(group_id))
        group = self.groups.get(group_id)
        if group is None or group.state == DEAD:
            return {"error_code": Err.GROUP_ID_NOT_FOUND, "throttle_time_ms": 0, "topics": []}, []
        if not group.is_empty and group.protocol_type != "consumer":
            return {"error_code": Err.NON_EMPTY_GROUP, "throttle_time_ms": 0, "topics": []}, []
        return delete_offsets(group_id, req["topics"], group.is_subscribed_to,
                              self.offsets.group_offsets(group_id))

    # ============================================================ group admin
    def list_groups(self, states: list[str], types: list[str]) -> list[dict]:
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        out = self.classic.list_groups(wanted_states, wanted_types)
        out.extend(self.consumer.list_groups(wanted_states, wanted_types))
        out.extend(self.share.list_groups(wanted_states, wanted_types))
        return out

    def delete_group(self, group_id: str) -> Result:
        """DeleteGroups for one group: the answer is its DeletableGroupResult."""
        code, records = self._group_deletion(group_id)
        return Result(records=records, response={"group_id": group_id, "error_code": code})

    def _group_deletion(self, group_id: str) -> tuple[int, list[Record]]:
        if group_id in self.share.groups:
            result = self.share.delete_group(self.share.groups[group_id])
            return result.response, result.records
        if group_id in self.consumer.groups:
            error, group_records = self.consumer.delete_group(self.consumer.groups[group_id])
            if error:
                return error, []
            return Err.NONE, [offset_tombstone(group_id, t, p) for (t, p)
                              in self.offsets.group_offsets(group_id)] + group_records
        group = self.groups.get(group_id)
        if group is None or group.state == DEAD:
            return Err.GROUP_ID_NOT_FOUND, []
        if group.state != EMPTY:
            return Err.NON_EMPTY_GROUP, []
        records = [offset_tombstone(group_id, t, p) for (t, p) in self.offsets.group_offsets(group_id)]
        # partitions with only pending transactional offsets are tombstoned too (Kafka's
        # OffsetMetadataManager.deleteAllOffsets); replaying the tombstones drops them
        records += [offset_tombstone(group_id, t, p) for (t, p)
                    in sorted(self.txn_offsets.partitions(group_id))
                    if (t, p) not in self.offsets.group_offsets(group_id)]
        records.append(group_tombstone(group_id))
        return Err.NONE, records

    def describe_group(self, group_id: str) -> dict:
        return self.classic.describe_group(group_id)

    # ============================================================ expiration
    def cleanup(self, now: int) -> list[Record]:
        """Expire offsets and delete groups left with none (cleanupGroupMetadata)."""
        records: list[Record] = []
        for group_id in list(self.groups):
            group = self.groups[group_id]
            base = offsets_expiry_base(group)
            if base is False:
                continue
            subscribed = group.subscribed_topics  # as computed when the generation started
            expired = self.offsets.expired(group_id, now, self.config.offsets_retention_ms,
                                           base, subscribed)
            if self.txn_offsets.has_open(group_id):  # pending txn offsets keep their partition
                expired = [tp for tp in expired if not self.txn_offsets.is_pending(group_id, tp)]
            records.extend(offset_tombstone(group_id, t, p) for t, p in expired)
            remaining = len(self.offsets.group_offsets(group_id)) - len(expired)
            if remaining == 0 and group.is_empty and group.state == EMPTY \
                    and not self.txn_offsets.has_open(group_id):
                records.append(group_tombstone(group_id))
        records.extend(self.consumer.cleanup(now, self.offsets, self.config.offsets_retention_ms))
        return records

    # ================================================================ state
    @property
    def deadlines(self) -> dict[tuple, int]:
        """The pending timers: key -> deadline."""
        return self.timers.deadlines

    def snapshot(self) -> dict:
        """Durable state, for checking replayed state against live state."""
        # a group no GroupMetadata record describes and with no offsets left is
        # not durable: a reload does not bring it back
        return {"groups": {g: grp.snapshot() for g, grp in self.groups.items()
                           if grp.persisted is not None or self.offsets.has_offsets(g)},
                "offsets": self.offsets.snapshot(),
                "consumer_groups": self.consumer.snapshot(),
                "share_groups": self.share.snapshot()}

    def on_timer(self, key: tuple, now: int) -> Result:
        """A timer fired: its kind's handler acts (a kind no manager arms: nothing)."""
        handler = self.timer_handlers.get(key[0])
        return Result() if handler is None else handler(key, now)

    def on_loaded(self, now: int) -> Result:
        return self.classic.on_loaded(now).merge(
            self.consumer.on_loaded(now)).merge(self.share.on_loaded(now))

    def restart_member_timers(self, now: int) -> Result:
        """This coordinator serves again after a lapse of its lease (the
        runtime held its timers meanwhile): every member's session counts
        again from `now`, as after a load."""
        return self.classic.restart_member_timers(now).merge(
            self.consumer.restart_member_timers(now)).merge(
            self.share.restart_member_timers(now))

    # ================================================== classic groups
    # A classic request for a non-empty consumer group goes to GroupMigration
    # (Kafka's classicGroup*ToConsumerGroup), any other to the classic manager.
    def join_group(self, req: dict, version: int, client_id: str | None, client_host: str,
                   token: Any, now: int) -> Result:
        join = self.classic.join_request(req, version, client_id, client_host, token)
        if isinstance(join, Result):
            return join  # refused before any group is looked at
        res = Result()
        group_id, member_id = join["group_id"], join["member_id"]
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            if consumer_group.members:
                return self.migration.join(consumer_group, join, member_id, now)
            if member_id:  # no classic group to join: nothing replaces the consumer group
                return res.reply(token, join_error(Err.UNKNOWN_MEMBER_ID, member_id))
            # an empty consumer group gives way (maybeDeleteEmptyConsumerGroup)
            _, tombstones = self.consumer.delete_group(consumer_group)
            res.records.extend(tombstones)
        if group_id in self.share.groups:  # no classic member joins a share group
            return res.reply(token, join_error(Err.INCONSISTENT_GROUP_PROTOCOL, ""))
        return self.classic.join(join, now, res)

    def sync_group(self, req: dict, version: int, token: Any, now: int) -> Result:
        group_id = req["group_id"]
        if group_id not in self.groups:
            consumer_group = self.consumer.groups.get(group_id)
            if consumer_group is not None and consumer_group.members \
                    and not sync_request_error(req, version):
                return self.migration.sync(consumer_group, req, version, token, now)
        return self.classic.sync_group(req, version, token, now)

    def heartbeat(self, req: dict, version: int, now: int) -> Result | dict:
        """Heartbeat: a Result whose response is the answer, or the answer alone
        (classic_group_manager.py's hot path)."""
        return self.classic.heartbeat(req, version, now)  # it asks the migration for the others

    def leave_group(self, req: dict, version: int, now: int) -> Result:
        """LeaveGroup; the answer is the result's response."""
        group_id = req["group_id"]
        if group_id not in self.groups:
            consumer_group = self.consumer.groups.get(group_id)
            if consumer_group is not None:
                responses, res = self.migration.leave(consumer_group,
                                                      leaving_members(req, version))
                res.response = leave_response(version, Err.NONE, responses)
                return res
        return self.classic.leave_group(req, version, now)

    # ================================================== KIP-848 consumer groups

    def consumer_group_heartbeat(self, req: dict, version: int, client_id: str | None,
                                 client_host: str, now: int, topics=None,
                                 principal: tuple[str, str] | None = None) -> Result:
        """ConsumerGroupHeartbeat; `topics` is the current TopicMetadata (name -> (id,
        partitions)); `principal` who filters regexes while an authorizer is on."""
        return self.consumer.heartbeat(req, version, client_id or "", client_host, now, topics,
                                       principal)

    def consumer_group_describe(self, group_ids: list[str],
                                include_authorized_operations: bool = False) -> list[dict]:
        return self.consumer.describe(group_ids, include_authorized_operations)

    def on_topics_changed(self, topics) -> Result:
        """Topics were created, deleted or grew: update consumer group targets
        (share groups bump their epoch on their next heartbeat, as Kafka's)."""
        return self.consumer.on_topics_changed(topics).merge(
            self.share.on_topics_changed(topics))

    # ================================================== KIP-932 share groups
    def share_group_heartbeat(self, req: dict, client_id: str | None, client_host: str,
                              now: int, topics=None) -> Result:
        """ShareGroupHeartbeat; `topics` is the current TopicMetadata."""
        return self.share.heartbeat(req, client_id or "", client_host, now, topics)

    def share_alter_offsets(self, group_id: str, topics: list[dict], now: int,
                            topic_metadata=None) -> Result:
        """AlterShareGroupOffsets; `topic_metadata` is the current TopicMetadata."""
        if topic_metadata is not None:
            self.share.set_topics(topic_metadata)
        return self.share.alter_offsets(group_id, topics, now)

    def share_delete_offsets(self, group_id: str, topic_names: list[str],
                             topic_metadata=None) -> Result:
        """DeleteShareGroupOffsets, step 1; `topic_metadata` the current TopicMetadata."""
        if topic_metadata is not None:
            self.share.set_topics(topic_metadata)
        return self.share.begin_delete_offsets(group_id, topic_names)

    def share_group_describe(self, group_ids: list[str],
                             include_authorized_operations: bool = False, topics=None) -> Result:
        """ShareGroupDescribe; `topics` (the current TopicMetadata) names the assigned topics."""
        if topics is not None:
            self.share.set_topics(topics)
        return Result(response=self.share.describe(group_ids, include_authorized_operations))
