"""Classic <-> consumer group interoperability (KIP-848 migration), following
Kafka's GroupMetadataManager with group.consumer.migration.policy:

- classic-protocol members (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) inside a
  non-empty consumer group: they are ConsumerMembers with ClassicMemberMetadata
  (session timeout and JoinGroup protocols, persisted in the member record);
  the server-side assignor computes their assignment, SyncGroup hands it out as
  ConsumerProtocolAssignment bytes, and a Heartbeat answers
  REBALANCE_IN_PROGRESS when the member must rejoin to reconcile
  (classicGroup{Join,Sync,Heartbeat,Leave}ToConsumerGroup);
- online upgrade: a ConsumerGroupHeartbeat joining a non-empty classic group
  converts it (convertToConsumerGroup);
- online downgrade: when the last consumer-protocol member leaves a group whose
  other members all use the classic protocol, it becomes a classic group again
  (convertToClassicGroup) and its members rebalance.

Deterministic like the rest of the core: results carry records, replies and
timers.  The consumer group changes only by replaying the records; a
downgrade has the classic manager install the classic group directly, as
its handlers do (the GroupMetadata record is appended unreplayed, see
classic_group_manager.py).

Built by the shard from both managers; it uses only their public methods.
The shard routes classic requests for consumer groups here, and the
consumer manager asks it (as its `conversions`) to upgrade and downgrade.

Timers of classic members in a consumer group (besides "cg-session"):
    ("cg-join", group, member)  the member did not rejoin within its rebalance timeout
    ("cg-sync", group, member)  the member did not sync within its rebalance timeout
"""
from __future__ import annotations

import logging
from typing import Any, Callable

from ..protocol.errors import Err
from ..protocol.messages.consumer_protocol import (decode_assignment, decode_subscription,
                                                   encode_assignment)
from . import consumer_group as cg
from .classic_group_manager import ClassicGroupManager
from .classic_group_records import GROUP_METADATA
from .classic_group import CONSUMER_PROTOCOL_TYPE, DEAD, STABLE, ClassicGroup, ClassicMember
from .classic_requests import heartbeat_answer, join_error, left_member, sync_error, sync_response
from .consumer_group import (EMPTY, UNRELEASED_PARTITIONS, UNREVOKED_PARTITIONS,
                             ConsumerGroup, ConsumerMember)
from .consumer_group_manager import SESSION_TIMER, ConsumerGroupManager
from .consumer_requests import HeartbeatError
from .consumer_subscriptions import compute_subscription_metadata
from .result import Record, Result
from .timers import Timers

log = logging.getLogger("kcoord.migration")

JOIN_TIMER = "cg-join"
SYNC_TIMER = "cg-sync"
MAX_ASSIGNMENT_VERSION = 3  # the newest ConsumerProtocolAssignment kcoord encodes
NOT_LAST = "the leaving member is not the last one using the consumer protocol"
WOULD_BE_EMPTY = "the group would be empty"


def classic_metadata(session_timeout_ms: int, protocols: list[tuple[str, bytes]]) -> dict:
    """The ClassicMemberMetadata of a member record."""
    return {"session_timeout_ms": session_timeout_ms,
            "supported_protocols": [{"name": n, "metadata": bytes(m)} for n, m in protocols]}


def classic_protocols(member: ConsumerMember) -> list[tuple[str, bytes]]:
    return [(p["name"], bytes(p["metadata"]))
            for p in member.classic["supported_protocols"]]


class GroupMigration:
    """Classic-protocol members of consumer groups, and the conversions."""

    def __init__(self, config, classic: ClassicGroupManager, consumer: ConsumerGroupManager,
                 timers: Timers) -> None:
        self.config = config
        self.classic = classic
        self.consumer = consumer
        self.timers = timers  # the shard's timer service

    # ------------------------------------------------------------ policy
    @property
    def policy(self) -> str:
        return self.config.consumer_group_migration_policy

    @property
    def upgrade_enabled(self) -> bool:
        return self.policy in ("upgrade", "bidirectional")

    @property
    def downgrade_enabled(self) -> bool:
        return self.policy in ("downgrade", "bidirectional")

    # ------------------------------------------------------------ topics
    def _ids_by_name(self) -> dict[str, bytes]:
        return {name: info[0] for name, info in self.consumer.topics.items()}

    def _names_by_id(self, group: ConsumerGroup | None) -> dict[bytes, str]:
        names = {info[0]: name for name, info in self.consumer.topics.items()}
        if group is not None:
            names.update({info[0]: n for n, info in group.subscription_metadata.items()})
        return names

    def _to_topic_ids(self, partitions: list[dict] | None) -> list[dict]:
        """ConsumerProtocol (topic name, partitions) -> heartbeat-style owned partitions;
        topics the coordinator does not know are dropped (Kafka's toTopicPartitions)."""
        ids = self._ids_by_name()
        return [{"topic_id": ids[tp["topic"]], "partitions": list(tp["partitions"])}
                for tp in partitions or () if tp["topic"] in ids]

    def assignment_bytes(self, group: ConsumerGroup | None, assignment: dict,
                         metadata: bytes) -> bytes:
        """ConsumerProtocolAssignment bytes, in the version of the member's subscription."""
        try:
            version = min(max(decode_subscription(metadata)[0], 0), MAX_ASSIGNMENT_VERSION)
        except Exception:
            version = 0
        names = self._names_by_id(group)
        parts = [{"topic": names[t], "partitions": sorted(p)}
                 for t, p in sorted(assignment.items(), key=lambda kv: names.get(kv[0], ""))
                 if p and t in names]
        return encode_assignment({"assigned_partitions": parts, "user_data": None}, version)

    # ============================================================ timers
    def _arm(self, res: Result, key: tuple, deadline: int) -> None:
        self.timers.arm(res, key, deadline)

    def _arm_if_absent(self, res: Result, key: tuple, deadline: int) -> None:
        self.timers.arm_if_absent(res, key, deadline)

    def _cancel(self, res: Result, key: tuple) -> None:
        self.timers.cancel(res, key)

    def cancel_member_timers(self, res: Result, group_id: str, member_id: str) -> None:
        self._cancel(res, (JOIN_TIMER, group_id, member_id))
        self._cancel(res, (SYNC_TIMER, group_id, member_id))

    def timer_handlers(self) -> dict[str, Callable[[tuple, int], Result]]:
        """Each timer kind of this manager and the handler its firing goes to
        (both fence the member; the kind only says why in the log)."""
        return {JOIN_TIMER: self.on_timer, SYNC_TIMER: self.on_timer}

    def on_timer(self, key: tuple, now: int) -> Result:
        res = Result()
        if not self.timers.fired(res, key, now):
            return res  # cancelled, or early: armed again for its deadline
        group = self.consumer.groups.get(key[1])
        member = group.members.get(key[2]) if group is not None else None
        if group is None or member is None:
            return res
        why = "rejoin" if key[0] == JOIN_TIMER else "sync"
        log.info("group %s: classic member %s fenced: it did not %s within %d ms",
                 key[1], key[2], why, member.rebalance_timeout_ms)
        return self.consumer.fence(group, member, now)

    def _touch_session(self, res: Result, group_id: str, member: ConsumerMember, now: int) -> None:
        timeout = member.classic["session_timeout_ms"]
        self.consumer.touch_session(res, (SESSION_TIMER, group_id, member.member_id), now + timeout)

    # ============================================================ upgrade
    def upgrade(self, classic: ClassicGroup, res: Result, side: Result, now: int) -> ConsumerGroup:
        """Kafka's validateOnlineUpgrade + convertToConsumerGroup: the classic group's
        members become consumer group members with their current assignments.  The
        records go to `res`; replies to parked requests and classic timer
        cancellations go to `side` (kept even if the heartbeat then fails)."""
        gid = classic.group_id
        refused = self._upgrade_refusal(classic)
        if refused:
            log.info("group %s: cannot upgrade the classic group: %s", gid, refused)
            raise HeartbeatError(Err.GROUP_ID_NOT_FOUND, f"Group {gid} is not a consumer group.")
        try:
            group = self._consumer_group_of(classic)
        except Exception as exc:  # malformed embedded protocol
            log.warning("group %s: cannot upgrade the classic group: %s", gid, exc)
            raise HeartbeatError(Err.GROUP_ID_NOT_FOUND,
                                 f"Cannot upgrade the classic group {gid} to consumer group "
                                 f"because the embedded consumer protocol is malformed.") from None
        # members parked in a rebalance are told to rejoin: they will join the consumer group
        self.classic.give_way(side, classic)
        res.records.append(Record(GROUP_METADATA, {"group": gid}, None))
        res.records.extend(self._consumer_group_records(group))
        self.consumer.epoch_reasons[gid] = "upgraded from a classic group"
        for m in group.members.values():
            self._touch_session(res, gid, m, now)
        log.info("group %s: upgraded from classic to consumer group (%d members)",
                 gid, len(group.members))
        return group

    def _upgrade_refusal(self, classic: ClassicGroup) -> str | None:
        if not self.upgrade_enabled:
            return "the online upgrade is disabled"
        if classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return "the group does not use the consumer embedded protocol"
        if classic.state == DEAD or not classic.protocol_name:
            return f"the group is {classic.state} and has no selected protocol"
        if len(classic.members) > self.consumer.max_size:
            return "the group size exceeds the consumer group maximum size"
        return None

    def _consumer_group_of(self, classic: ClassicGroup) -> ConsumerGroup:
        """Kafka's ConsumerGroup.fromClassicGroup (not registered: records create it)."""
        ids = self._ids_by_name()
        generation = classic.generation_id
        group = ConsumerGroup(classic.group_id, group_epoch=generation, assignment_epoch=generation)
        for m in classic.members.values():
            _, subscription = decode_subscription(m.metadata_for(classic.protocol_name))
            assigned: dict[bytes, frozenset[int]] = {}
            # A member without assignment bytes (it joined during a rebalance, or the
            # rebalance reset them) fails here, as in Kafka: its client may still own
            # partitions (cooperative), so an empty assignment would not be safe.
            _, assignment = decode_assignment(m.assignment)
            for tp in assignment["assigned_partitions"]:
                if tp["topic"] in ids and tp["partitions"]:
                    tid = ids[tp["topic"]]
                    assigned[tid] = assigned.get(tid, frozenset()) | frozenset(tp["partitions"])
            member = ConsumerMember(
                m.member_id, member_epoch=generation, previous_member_epoch=generation,
                instance_id=m.group_instance_id, rack_id=subscription.get("rack_id"),
                rebalance_timeout_ms=m.rebalance_timeout_ms, client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=frozenset(subscription["topics"]),
                classic_member_metadata=classic_metadata(m.session_timeout_ms, m.protocols),
                assigned=assigned)
            group.target[m.member_id] = assigned
            group.update_member(member)
        return group

    @staticmethod
    def _consumer_group_records(group: ConsumerGroup) -> list[Record]:
        """Kafka's createConsumerGroupRecords, in its order."""
        gid = group.group_id
        records = [cg.member_metadata_record(gid, m) for m in group.members.values()]
        records.append(cg.group_epoch_record(gid, group.group_epoch))
        records += [cg.target_member_record(gid, mid, group.target.get(mid, EMPTY))
                    for mid in group.members]
        records.append(cg.target_epoch_record(gid, group.group_epoch))
        records += [cg.current_assignment_record(gid, m) for m in group.members.values()]
        return records

    # ============================================================ downgrade
    def _downgrade_refusal(self, group: ConsumerGroup, leaving: ConsumerMember,
                           remaining: int) -> str | None:
        """Kafka's validateOnlineDowngrade* (None: downgrade): `leaving` is the last
        member using the consumer protocol, `remaining` the classic group's size."""
        if leaving.classic_member_metadata is not None or any(
                m.classic_member_metadata is None for m in group.members.values()
                if m.member_id != leaving.member_id):
            return NOT_LAST
        if remaining == 0:
            return WOULD_BE_EMPTY  # the usual end of a group: nothing to say
        if not self.downgrade_enabled:
            return "the online downgrade is disabled"
        if remaining > self.config.group_max_size:
            return "its size is greater than group.max.size"
        return None

    def maybe_downgrade(self, group: ConsumerGroup, leaving: ConsumerMember,
                        now: int | None) -> Result | None:
        """Kafka's validateOnlineDowngradeWithFencedMember + convertToClassicGroup:
        None when the group stays a consumer group.  The remaining members rebalance."""
        if now is None:
            return None
        refused = self._downgrade_refusal(group, leaving, len(group.members) - 1)
        if refused:
            if refused is not NOT_LAST and refused is not WOULD_BE_EMPTY:
                log.info("group %s: no downgrade to a classic group: %s", group.group_id, refused)
            return None
        members = [(m, m.member_id) for m in group.members.values()
                   if m.member_id != leaving.member_id]
        return self._convert_to_classic(group, members, {}, Result(), now, rebalance=True)

    def _convert_to_classic(self, group: ConsumerGroup, members: list[tuple], renamed: dict,
                            res: Result, now: int, rebalance: bool) -> Result | None:
        """Tombstone the consumer group (member ids `renamed` old -> new) and install
        the classic group of `members` ((member, id whose target it takes) pairs)."""
        gid = group.group_id
        try:
            classic = self._classic_group_of(group, members, now)
        except Exception as exc:  # inconsistent protocols or malformed metadata
            log.warning("group %s: cannot downgrade to a classic group: %s", gid, exc)
            return None
        res.records.extend(self._tombstones(group, renamed))
        for mid in list(group.members) + list(renamed.values()):
            self.consumer.cancel_timers(res, gid, mid)
        # the classic group is installed directly (Kafka does the same): the
        # rebalance needs the live object; its record is appended unreplayed
        self.classic.install(res, classic, now,
                             "downgraded from a consumer group" if rebalance else None)
        log.info("group %s: downgraded from consumer to classic group (%d members)",
                 gid, len(classic.members))
        return res

    @staticmethod
    def _tombstones(group: ConsumerGroup, renamed: dict) -> list[Record]:
        """Kafka's createGroupTombstoneRecords(WithReplacedMember), in its order."""
        gid = group.group_id
        ids = [renamed.get(mid, mid) for mid in group.members]
        records = [cg.current_assignment_tombstone(gid, mid) for mid in ids]
        records += [cg.target_member_tombstone(gid, mid) for mid in ids]
        records.append(cg.target_epoch_tombstone(gid))
        records += [cg.member_metadata_tombstone(gid, mid) for mid in ids]
        records.append(cg.subscription_metadata_tombstone(gid))
        records.append(cg.group_epoch_tombstone(gid))
        return records

    def _classic_group_of(self, group: ConsumerGroup, members: list[tuple],
                          now: int) -> ClassicGroup:
        """Kafka's ClassicGroup.fromConsumerGroup: Stable, generation = group epoch,
        each member's assignment = the target of the member whose place it takes,
        encoded in its subscription's version."""
        classic = ClassicGroup(group.group_id, state=STABLE, state_timestamp_ms=now,
                               protocol_type=CONSUMER_PROTOCOL_TYPE,
                               generation_id=group.group_epoch)
        for m, _ in members:
            classic.add(ClassicMember(
                m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                m.classic["session_timeout_ms"], CONSUMER_PROTOCOL_TYPE,
                classic_protocols(m)))
        classic.protocol_name = classic.select_protocol()
        classic.subscribed_topics = classic.compute_subscribed_topics()
        for m, target_of in members:
            member = classic.members[m.member_id]
            member.assignment = self.assignment_bytes(
                group, group.target.get(target_of, EMPTY), member.metadata_for(classic.protocol_name))
        return classic

    # ============================================================ JoinGroup
    def join(self, group: ConsumerGroup, join: dict, member_id: str, now: int) -> Result:
        """Kafka's classicGroupJoinToConsumerGroup: `join` is ClassicGroupManager.join_request's parse."""
        res = Result()
        token = join["token"]
        try:
            return self._join(group, join, member_id, now, res)
        except HeartbeatError as exc:
            return Result().reply(token, join_error(exc.code, member_id))

    def _supports(self, group: ConsumerGroup, protocol_type: str, names: set[str]) -> bool:
        """ConsumerGroup.supportsClassicProtocols."""
        if protocol_type != CONSUMER_PROTOCOL_TYPE or not names:
            return False
        classic = [m for m in group.members.values() if m.classic_member_metadata is not None]
        return any(all(any(p["name"] == n for p in m.classic["supported_protocols"])
                       for m in classic) for n in names)

    def _join(self, group: ConsumerGroup, join: dict, member_id: str, now: int,
              res: Result) -> Result:
        token, instance_id = join["token"], join["instance_id"]
        protocols = join["protocols"]
        gid = group.group_id
        unknown = member_id == ""
        if unknown:
            member_id = self.consumer.new_member_id()
        max_size = self.consumer.max_size
        if len(group.members) >= max_size and member_id not in group.members:
            raise HeartbeatError(Err.GROUP_MAX_SIZE_REACHED)
        if not self._supports(group, join["protocol_type"], {n for n, _ in protocols}):
            raise HeartbeatError(Err.INCONSISTENT_GROUP_PROTOCOL)
        if unknown and instance_id is None and join["version"] >= 4:
            # KIP-394: the member must join again with this id
            return res.reply(token, join_error(Err.MEMBER_ID_REQUIRED, member_id))
        try:
            _, subscription = decode_subscription(protocols[0][1])
        except Exception:
            raise HeartbeatError(Err.UNKNOWN_SERVER_ERROR) from None

        member, replaced = self._join_member(group, member_id, instance_id, unknown, res.records)
        updated = self._updated_member(member, join, subscription)
        changed = updated is not member
        if changed or (member.member_id not in group.members and replaced is None):
            res.records.append(cg.member_metadata_record(gid, updated))
        subscription_changed = not updated.subscription_equal(member)
        target_epoch, target = self.consumer.refresh_target(
            group, updated, replaced, subscription_changed, res.records)
        owned = self._to_topic_ids(subscription.get("owned_partitions"))
        updated = self.consumer.reconcile_member(group, updated, target_epoch, target, owned,
                                                 res.records)

        response = {
            "throttle_time_ms": 0, "error_code": Err.NONE, "generation_id": updated.member_epoch,
            "protocol_type": CONSUMER_PROTOCOL_TYPE, "protocol_name": protocols[0][0],
            "leader": "", "skip_assignment": False, "member_id": updated.member_id,
            "members": []}
        self._cancel(res, (JOIN_TIMER, gid, updated.member_id))
        if replaced is not None and not self._downgrade_refusal(group, replaced,
                                                                len(group.members)):
            # the last consumer-protocol member was a static member this classic one
            # replaces: the group becomes classic, the newcomer takes its assignment
            members = [(m, m.member_id) for m in group.members.values()
                       if m.member_id != replaced.member_id] + [(updated, replaced.member_id)]
            if self._convert_to_classic(group, members, {replaced.member_id: updated.member_id},
                                        res, now, rebalance=False) is not None:
                return res.reply(token, response)
        self._touch_session(res, gid, updated, now)
        self._arm(res, (SYNC_TIMER, gid, updated.member_id), now + join["rebalance"])
        return res.reply(token, response)

    def _join_member(self, group: ConsumerGroup, member_id: str, instance_id: str | None,
                     unknown: bool, records: list[Record]
                     ) -> tuple[ConsumerMember, ConsumerMember | None]:
        """(member, the static member it replaces or None): Kafka's
        getOrMaybeSubscribe{Dynamic,Static}ConsumerGroupMember for classic members."""
        gid = group.group_id
        if instance_id is None:
            return group.members.get(member_id) or ConsumerMember(member_id), None
        existing = group.static_member(instance_id)
        if unknown:
            if existing is None:
                return group.members.get(member_id) or ConsumerMember(member_id), None
            # a classic static member takes over its instance id (no UNRELEASED check)
            member = existing.copy(member_id=member_id, member_epoch=0, previous_member_epoch=0)
            records.extend(cg.member_tombstones(gid, existing.member_id))
            records.append(cg.member_metadata_record(gid, member))
            records.append(cg.target_member_record(gid, member_id,
                                                   group.target.get(existing.member_id, EMPTY)))
            records.append(cg.current_assignment_record(gid, member))
            return member, existing
        if existing is None:
            raise HeartbeatError(Err.UNKNOWN_MEMBER_ID)
        if existing.member_id != member_id:
            raise HeartbeatError(Err.FENCED_INSTANCE_ID)
        return existing, None

    @staticmethod
    def _updated_member(member: ConsumerMember, join: dict, subscription: dict) -> ConsumerMember:
        changes: dict[str, Any] = {}
        if join["instance_id"] is not None and join["instance_id"] != member.instance_id:
            changes["instance_id"] = join["instance_id"]
        rack = subscription.get("rack_id")
        if rack is not None and rack != member.rack_id:
            changes["rack_id"] = rack
        if join["rebalance"] != -1 and join["rebalance"] != member.rebalance_timeout_ms:
            changes["rebalance_timeout_ms"] = join["rebalance"]
        names = frozenset(subscription["topics"])
        if names != member.subscribed_topic_names:
            changes["subscribed_topic_names"] = names
        if join["client_id"] != member.client_id:
            changes["client_id"] = join["client_id"]
        if join["client_host"] != member.client_host:
            changes["client_host"] = join["client_host"]
        meta = classic_metadata(join["session"], join["protocols"])
        if meta != member.classic_member_metadata:
            changes["classic_member_metadata"] = meta
        return member.copy(**changes) if changes else member

    # ============================================================ SyncGroup
    @staticmethod
    def _classic_member(group: ConsumerGroup, member_id: str, instance_id: str | None,
                        any_member_id: bool = False) -> ConsumerMember:
        """validateConsumerGroupMember + throwIfMemberDoesNotUseClassicProtocol.
        any_member_id: a static member may be named by its instance id alone
        (LeaveGroup with an empty member id)."""
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise HeartbeatError(Err.UNKNOWN_MEMBER_ID)
        else:
            member = group.static_member(instance_id)
            if member is None:
                raise HeartbeatError(Err.UNKNOWN_MEMBER_ID)
            if member.member_id != member_id and not (any_member_id and not member_id):
                raise HeartbeatError(Err.FENCED_INSTANCE_ID)
        if member.classic_member_metadata is None:
            raise HeartbeatError(Err.UNKNOWN_MEMBER_ID)
        return member

    def _must_rejoin(self, res: Result, group: ConsumerGroup, member: ConsumerMember,
                     now: int) -> None:
        """The member has to rejoin: it gets the rebalance timeout to do so."""
        self._arm_if_absent(res, (JOIN_TIMER, group.group_id, member.member_id),
                            now + max(member.rebalance_timeout_ms, 0))

    def sync(self, group: ConsumerGroup, req: dict, version: int, token: Any, now: int) -> Result:
        """Kafka's classicGroupSyncToConsumerGroup: the member's assignment, now."""
        res = Result()
        ptype = req.get("protocol_type") if version >= 5 else None
        pname = req.get("protocol_name") if version >= 5 else None
        instance_id = req.get("group_instance_id") if version >= 3 else None
        try:
            member = self._classic_member(group, req["member_id"], instance_id)
            if req["generation_id"] != member.member_epoch:
                raise HeartbeatError(Err.ILLEGAL_GENERATION)
            protocols = member.classic["supported_protocols"]
            if (ptype is not None and ptype != CONSUMER_PROTOCOL_TYPE) or \
                    (pname is not None and pname != protocols[0]["name"]):
                raise HeartbeatError(Err.INCONSISTENT_GROUP_PROTOCOL)
            if group.group_epoch > member.member_epoch and member.state != UNREVOKED_PARTITIONS:
                self._must_rejoin(res, group, member, now)
                raise HeartbeatError(Err.REBALANCE_IN_PROGRESS)
        except HeartbeatError as exc:
            return res.reply(token, sync_error(exc.code))
        self._cancel(res, (SYNC_TIMER, group.group_id, member.member_id))
        self._touch_session(res, group.group_id, member, now)
        assignment = self.assignment_bytes(group, member.assigned, bytes(protocols[0]["metadata"]))
        return res.reply(token, sync_response(Err.NONE, assignment, ptype, pname))

    # ============================================================ Heartbeat
    def heartbeat_unknown(self, req: dict, version: int, now: int) -> Result | dict:
        """A classic Heartbeat for a group that is not classic (ClassicGroupManager
        asks): its classic member's in a consumer group, else UNKNOWN_MEMBER_ID."""
        group = self.consumer.groups.get(req["group_id"])
        if group is None:
            return heartbeat_answer(Err.UNKNOWN_MEMBER_ID)
        return self.heartbeat(group, req, version, now)

    def heartbeat(self, group: ConsumerGroup, req: dict, version: int, now: int) -> Result:
        """Kafka's classicGroupHeartbeatToConsumerGroup: REBALANCE_IN_PROGRESS when the
        member must rejoin (epoch behind the group, partitions to revoke, or partitions
        it waited for are free)."""
        res = Result()
        instance_id = req.get("group_instance_id") if version >= 3 else None
        try:
            member = self._classic_member(group, req["member_id"], instance_id)
        except HeartbeatError as exc:
            res.response = heartbeat_answer(exc.code)
            return res
        if req["generation_id"] != member.member_epoch:
            res.response = heartbeat_answer(Err.ILLEGAL_GENERATION)
            return res
        self._touch_session(res, group.group_id, member, now)
        if (member.member_epoch < group.group_epoch or member.state == UNREVOKED_PARTITIONS
                or (member.state == UNRELEASED_PARTITIONS
                    and not self._waiting_on_unreleased(group, member))):
            self._must_rejoin(res, group, member, now)
            res.response = heartbeat_answer(Err.REBALANCE_IN_PROGRESS)
        else:
            res.response = heartbeat_answer(Err.NONE)
        return res

    @staticmethod
    def _waiting_on_unreleased(group: ConsumerGroup, member: ConsumerMember) -> bool:
        """ConsumerGroup.waitingOnUnreleasedPartition."""
        for t, parts in group.target.get(member.member_id, EMPTY).items():
            assigned = member.assigned.get(t, frozenset())
            for p in parts:
                if p not in assigned and group.current_partition_epoch(t, p) != -1:
                    return True
        return False

    # ============================================================ LeaveGroup
    def leave(self, group: ConsumerGroup, identities: list[tuple]
              ) -> tuple[list[dict], Result]:
        """Kafka's classicGroupLeaveToConsumerGroup: per-member results and the records
        (tombstones, new subscription metadata, an epoch bump).  No downgrade here:
        a leaving classic member never leaves only classic members behind it."""
        res = Result()
        gid = group.group_id
        responses = []
        left: dict[str, ConsumerMember] = {}
        for member_id, instance_id in identities:
            try:
                member = self._classic_member(group, member_id, instance_id, any_member_id=True)
            except HeartbeatError as exc:
                responses.append(left_member(member_id, instance_id, exc.code))
                continue
            if member.member_id not in left:
                res.records.extend(cg.member_tombstones(gid, member.member_id))
                self.consumer.cancel_timers(res, gid, member.member_id)
                left[member.member_id] = member
            responses.append(left_member(member.member_id, instance_id, Err.NONE))
        if left:
            remaining = [m for mid, m in group.members.items() if mid not in left]
            metadata = compute_subscription_metadata(remaining, self.consumer.topics,
                                                     self.consumer.regex_filter(group))
            if metadata != group.subscription_metadata:
                res.records.append(cg.subscription_metadata_record(gid, metadata))
            res.records.append(cg.group_epoch_record(gid, group.group_epoch + 1))
            self.consumer.epoch_reasons[gid] = "classic members left the group"
        return responses, res
