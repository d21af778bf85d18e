"""One coordinator shard: the groups and offsets of one __consumer_offsets partition.

Deterministic and sans-I/O: every handler takes the request and `now` and
returns a Result; durable state changes only in `replay`.  The runtime
appends a result's records, replays them, and sends its replies once the
records are durable.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..protocol.errors import Err
from .classic_group import DEAD, EMPTY, ClassicGroup, ClassicMember
from .consumer_group import RECORD_TYPES as CONSUMER_GROUP_RECORDS
from .consumer_protocol_handlers import ConsumerGroupManager
from .offsets import OFFSET_COMMIT, OffsetStore, OffsetValue, offset_record, offset_tombstone
from .result import Record, Result

GROUP_METADATA = 2
LEGACY_OFFSET_COMMIT = 0


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

    @classmethod
    def from_values(cls, v: dict) -> "CoordinatorConfig":
        return cls(
            offset_metadata_max_bytes=v["offset.metadata.max.bytes"],
            offsets_retention_ms=v["offsets.retention.minutes"] * 60000,
            offsets_retention_check_interval_ms=v["offsets.retention.check.interval.ms"],
            group_min_session_timeout_ms=v["group.min.session.timeout.ms"],
            group_max_session_timeout_ms=v["group.max.session.timeout.ms"],
            group_initial_rebalance_delay_ms=v["group.initial.rebalance.delay.ms"],
            group_max_size=v["group.max.size"],
            consumer_group_session_timeout_ms=v.get("group.consumer.session.timeout.ms", 45000),
            consumer_group_heartbeat_interval_ms=v.get("group.consumer.heartbeat.interval.ms", 5000),
            consumer_group_max_size=v.get("group.consumer.max.size", 2**31 - 1),
            consumer_group_assignors=tuple(v.get("group.consumer.assignors", ("uniform", "range"))),
        )


def group_metadata_record(group: ClassicGroup, now_ms: int) -> Record:
    """GroupMetadataValue v3, as Kafka writes it."""
    members = [{
        "member_id": m.member_id, "group_instance_id": m.group_instance_id,
        "client_id": m.client_id, "client_host": m.client_host,
        "rebalance_timeout": m.rebalance_timeout_ms, "session_timeout": m.session_timeout_ms,
        "subscription": m.metadata_for(group.protocol_name) if group.protocol_name else b"",
        "assignment": m.assignment,
    } for m in group.members.values()]
    value = {"protocol_type": group.protocol_type or "", "generation": group.generation_id,
             "protocol": group.protocol_name, "leader": group.leader_id,
             "current_state_timestamp": now_ms, "members": members}
    return Record(GROUP_METADATA, {"group": group.group_id}, value, 3)


def group_tombstone(group_id: str) -> Record:
    return Record(GROUP_METADATA, {"group": group_id}, None)


class CoordinatorShard:
    def __init__(self, partition: int, config: CoordinatorConfig | None = None) -> None:
        self.partition = partition
        self.config = config or CoordinatorConfig()
        self.groups: dict[str, ClassicGroup] = {}
        self.offsets = OffsetStore()
        self.consumer = ConsumerGroupManager(self.config, self.groups)  # KIP-848 consumer groups

    # ================================================================ replay
    def replay(self, record: Record) -> None:
        if record.type in (OFFSET_COMMIT, LEGACY_OFFSET_COMMIT):
            self.offsets.replay(record.key, record.value, record.value_version)
            if record.value is not None:
                # a commit on an unknown group creates a simple (protocol-less) group
                if record.key["group"] not in self.consumer.groups:
                    self.groups.setdefault(record.key["group"], ClassicGroup(record.key["group"]))
        elif record.type == GROUP_METADATA:
            self._replay_group_metadata(record.key["group"], record.value)
        elif record.type in CONSUMER_GROUP_RECORDS:
            self.consumer.replay(record)

    def _replay_group_metadata(self, group_id: str, value: dict | None) -> None:
        if value is None:
            self.groups.pop(group_id, None)
            return
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = ClassicGroup(group_id)
        group.protocol_type = value["protocol_type"] or None
        group.protocol_name = value["protocol"]
        group.generation_id = value["generation"]
        group.leader_id = value["leader"]
        group.state_timestamp_ms = value.get("current_state_timestamp", -1)
        members = {}
        static = {}
        for m in value["members"]:
            member = group.members.get(m["member_id"])
            if member is None:  # loading: rebuild the member from the record
                member = ClassicMember(
                    m["member_id"], m["group_instance_id"], m["client_id"], m["client_host"],
                    m.get("rebalance_timeout", m["session_timeout"]), m["session_timeout"],
                    group.protocol_type or "", [(group.protocol_name or "", m["subscription"])])
            # live: the in-memory member keeps its parked requests; durable fields follow the record
            member.assignment = m["assignment"]
            member.session_timeout_ms = m["session_timeout"]
            member.rebalance_timeout_ms = m.get("rebalance_timeout", m["session_timeout"])
            members[m["member_id"]] = member
            if m["group_instance_id"]:
                static[m["group_instance_id"]] = m["member_id"]
        group.members = members
        group.static_members = static
        if not members:
            group.state = EMPTY
        elif group.state in (EMPTY, DEAD):
            group.state = "Stable"

    # ================================================================ offsets
    def offset_commit(self, req: dict, version: int, now: int) -> tuple[dict, list[Record]]:
        """Commit the partitions the runtime found valid; returns (response, records)."""
        group_id = req["group_id"]
        generation = req.get("generation_id_or_member_epoch", -1)
        error = self._validate_commit(group_id, req.get("member_id", ""),
                                      req.get("group_instance_id"), generation, version)
        retention = req.get("retention_time_ms", -1) if 2 <= version <= 4 else -1
        records: list[Record] = []
        topics = []
        for t in req["topics"]:
            parts = []
            for p in t["partitions"]:
                code = p.get("error_code")  # set by the runtime for unknown partitions
                if code is None:
                    code = error
                if code == Err.NONE:
                    meta = p.get("committed_metadata") or ""
                    if len(meta.encode()) > self.config.offset_metadata_max_bytes:
                        code = Err.OFFSET_METADATA_TOO_LARGE
                    else:
                        value = OffsetValue(p["committed_offset"], p.get("committed_leader_epoch", -1),
                                            meta, now, now + retention if retention >= 0 else None)
                        records.append(offset_record(group_id, t["name"], p["partition_index"], value))
                parts.append({"partition_index": p["partition_index"], "error_code": code})
            topics.append({"name": t["name"], "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}, records

    def _validate_commit(self, group_id: str, member_id: str, instance_id: str | None,
                         generation: int, version: int) -> int:
        if not group_id:
            return Err.INVALID_GROUP_ID
        consumer_group = self.consumer.groups.get(group_id)
        if consumer_group is not None:
            return self.consumer.validate_offset_commit(consumer_group, member_id, generation, version)
        group = self.groups.get(group_id)
        if group is None:
            if generation < 0:
                return Err.NONE  # a simple group, created by the commit's replay
            return Err.GROUP_ID_NOT_FOUND if version >= 9 else Err.ILLEGAL_GENERATION
        return self.validate_classic_commit(group, member_id, instance_id, generation)

    def validate_classic_commit(self, group: ClassicGroup, member_id: str,
                                instance_id: str | None, generation: int) -> int:
        if group.state == DEAD:
            return Err.COORDINATOR_NOT_AVAILABLE
        if generation < 0 and group.state == EMPTY:
            return Err.NONE
        if member_id not in group.members:
            return Err.UNKNOWN_MEMBER_ID
        if generation != group.generation_id:
            return Err.ILLEGAL_GENERATION
        return Err.NONE

    def offset_fetch(self, group_id: str, topics: list[dict] | None, member_id: str | None = None,
                     member_epoch: int = -1) -> tuple[int, list[dict]]:
        if not group_id:
            return Err.INVALID_GROUP_ID, []
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

    def offset_delete(self, req: dict) -> tuple[dict, list[Record]]:
        group_id = req["group_id"]
        if group_id in self.consumer.groups:
            return self.consumer.offset_delete(self.consumer.groups[group_id], req,
                                               self.offsets.group_offsets(group_id))
        group = self.groups.get(group_id)
        if group is None or group.state == DEAD:
            return {"error_code": Err.GROUP_ID_NOT_FOUND, "throttle_time_ms": 0, "topics": []}, []
        if not group.is_empty and group.protocol_type != "consumer":
            return {"error_code": Err.NON_EMPTY_GROUP, "throttle_time_ms": 0, "topics": []}, []
        subscribed = self.subscribed_topics(group)
        records = []
        topics = []
        for t in req["topics"]:
            parts = []
            for p in t["partitions"]:
                code = p.get("error_code")
                if code is None:
                    if subscribed is not None and t["name"] in subscribed:
                        code = Err.GROUP_SUBSCRIBED_TO_TOPIC
                    else:
                        code = Err.NONE
                        if (t["name"], p["partition_index"]) in self.offsets.group_offsets(group_id):
                            records.append(offset_tombstone(group_id, t["name"], p["partition_index"]))
                parts.append({"partition_index": p["partition_index"], "error_code": code})
            topics.append({"name": t["name"], "partitions": parts})
        return {"error_code": Err.NONE, "throttle_time_ms": 0, "topics": topics}, records

    def subscribed_topics(self, group: ClassicGroup) -> set[str] | None:
        """Topics the group's members subscribe to (consumer protocol), or None if empty."""
        if group.is_empty or group.protocol_type != "consumer" or not group.protocol_name:
            return None
        from ..protocol.messages.consumer_protocol import decode_subscription
        topics: set[str] = set()
        for m in group.members.values():
            try:
                _, sub = decode_subscription(m.metadata_for(group.protocol_name))
            except Exception:  # unparseable metadata: treat as subscribed to nothing
                continue
            topics.update(sub.get("topics") or ())
        return topics

    # ============================================================ group admin
    def list_groups(self, states: list[str], types: list[str]) -> list[dict]:
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types}
        out = []
        for group in self.groups.values():
            if group.state == DEAD:
                continue
            if wanted_states and group.state.lower() not in wanted_states:
                continue
            if wanted_types and "classic" not in wanted_types:
                continue
            out.append({"group_id": group.group_id, "protocol_type": group.protocol_type or "",
                        "group_state": group.state, "group_type": "classic"})
        out.extend(self.consumer.list_groups(wanted_states, wanted_types))
        return out

    def delete_group(self, group_id: str) -> tuple[int, list[Record]]:
        if group_id in self.consumer.groups:
            error, group_records = self.consumer.delete_group(self.consumer.groups[group_id])
            if error:
                return error, []
            return Err.NONE, [offset_tombstone(group_id, t, p) for (t, p)
                              in self.offsets.group_offsets(group_id)] + group_records
        group = self.groups.get(group_id)
        if group is None or group.state == DEAD:
            return Err.GROUP_ID_NOT_FOUND, []
        if not group.is_empty or group.state != EMPTY:
            return Err.NON_EMPTY_GROUP, []
        records = [offset_tombstone(group_id, t, p) for (t, p) in self.offsets.group_offsets(group_id)]
        records.append(group_tombstone(group_id))
        return Err.NONE, records

    def describe_group(self, group_id: str) -> dict:
        group = self.groups.get(group_id)
        base = {"error_code": Err.NONE, "group_id": group_id, "group_state": DEAD,
                "protocol_type": "", "protocol_data": "", "members": [],
                "authorized_operations": -(2**31)}
        if not group_id:
            base["error_code"] = Err.INVALID_GROUP_ID
            return base
        if group is None:
            return base
        base.update(group_state=group.state, protocol_type=group.protocol_type or "")
        stable = group.state == "Stable"
        if stable:
            base["protocol_data"] = group.protocol_name or ""
        for m in group.members.values():
            base["members"].append({
                "member_id": m.member_id, "group_instance_id": m.group_instance_id,
                "client_id": m.client_id, "client_host": m.client_host,
                "member_metadata": m.metadata_for(group.protocol_name) if stable and group.protocol_name else b"",
                "member_assignment": m.assignment if stable else b""})
        return base

    # ============================================================ expiration
    def cleanup(self, now: int) -> list[Record]:
        """Expire offsets and delete groups left with none (cleanupGroupMetadata)."""
        records: list[Record] = []
        for group_id in list(self.groups):
            group = self.groups[group_id]
            base = self._expiry_base(group)
            if base is False:
                continue
            subscribed = self.subscribed_topics(group)
            expired = self.offsets.expired(group_id, now, self.config.offsets_retention_ms,
                                           base, subscribed)
            records.extend(offset_tombstone(group_id, t, p) for t, p in expired)
            remaining = len(self.offsets.group_offsets(group_id)) - len(expired)
            if remaining == 0 and group.is_empty and group.state == EMPTY:
                records.append(group_tombstone(group_id))
        records.extend(self.consumer.cleanup(now, self.offsets, self.config.offsets_retention_ms))
        return records

    def _expiry_base(self, group: ClassicGroup):
        """The base timestamp offsets expire from; False: nothing expires now."""
        if group.protocol_type is None:
            return None  # simple group: each offset's commit time
        if group.state == EMPTY:
            return group.state_timestamp_ms if group.state_timestamp_ms is not None else None
        if group.state == "Stable" and group.protocol_type == "consumer":
            return None
        return False

    # ================================================================ state
    def snapshot(self) -> dict:
        """Durable state, for checking replayed state against live state."""
        # a simple group with no offsets left is not durable: it exists only
        # until the next cleanup, and a reload does not bring it back
        return {"groups": {g: grp.snapshot() for g, grp in self.groups.items()
                           if grp.protocol_type is not None or grp.members
                           or self.offsets.has_offsets(g)},
                "offsets": self.offsets.snapshot(),
                "consumer_groups": self.consumer.snapshot()}

    # ================================================== KIP-848 consumer groups
    def on_timer(self, key: tuple, now: int) -> Result:
        if isinstance(key[0], str) and key[0].startswith("cg"):
            return self.consumer.on_timer(key, now)
        return Result()

    def on_loaded(self, now: int) -> Result:
        return self.consumer.on_loaded(now)

    def consumer_group_heartbeat(self, token: Any, req: dict, version: int, client_id: str | None,
                                 client_host: str, now: int, topics=None) -> Result:
        """ConsumerGroupHeartbeat; `topics` is the current TopicMetadata (name -> (id, partitions))."""
        return self.consumer.heartbeat(token, req, version, client_id or "", client_host, now, topics)

    def consumer_group_describe(self, group_ids: list[str],
                                include_authorized_operations: bool = False) -> list[dict]:
        return self.consumer.describe(group_ids, include_authorized_operations)

    def on_topics_changed(self, topics, now: int) -> Result:
        """Topics were created, deleted or grew: update consumer group targets."""
        return self.consumer.on_topics_changed(topics, now)
