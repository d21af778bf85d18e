"""ShareGroupHeartbeat and ShareGroupDescribe in the deterministic core
(Kafka's GroupMetadataManager share-group path; SHARE_GROUPS_REFERENCE
section 2).  `ShareGroupManager` is composed into the shard beside the
consumer groups' manager.

Every entry point takes `now` and returns a Result with `response` set:
records to append (state changes only when the runtime replays them) and
timers as data.  Timer keys:

    ("sg-session", group_id, member_id)    session expiry: fence the member

Share partitions become assignable only once their share state is
initialized (section 2.8).  The core does no I/O: a heartbeat that finds
subscribed partitions without share state writes them as initializing and
answers with a `ShareInitialization` beside its response (ShareHeartbeatAnswer);
the runtime side asks the share coordinator (the persister) once the records
are durable and reports back through `initialize_done`, which records them
initialized (or forgets them, to retry).  The next heartbeat of any member
bumps the group epoch and hands them out.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Mapping

from ..protocol.errors import Err
from . import share_group as sg
from . import share_group_admin as admin
from .assignors import GroupSpec, MemberSpec
from .assignors import simple as simple_assignor
from .consumer_group import assignment_equal, assignment_to_wire, normalize
from .consumer_requests import HeartbeatError
from .group_configs import SHARE_HEARTBEAT_INTERVAL, SHARE_SESSION_TIMEOUT
from .result import Record, Result
from .share_group import EMPTY, LEAVE_GROUP_MEMBER_EPOCH, PartitionStates, ShareGroup, ShareMember
from .share_requests import (ADMIN_MISSING, NOT_EMPTY, UNKNOWN_PARTITION, ShareHeartbeatAnswer,
                             ShareInitialization, alter_offsets_error, delete_offsets_error,
                             heartbeat_error, validate_heartbeat)
from .target_assignment import write_new_target
from .timers import Timers

log = logging.getLogger("kcoord.share_group")

SESSION_TIMER = "sg-session"


class ShareGroupManager:
    """The share groups of one shard and the handlers that change them."""

    def __init__(self, config, timers: Timers | None = None,
                 other_groups: tuple[Mapping[str, Any], ...] = ()) -> None:
        self.config = config
        self.groups: dict[str, ShareGroup] = {}
        self.topics: Mapping[str, Any] = {}  # name -> (topic id, partitions)
        self.timers = timers if timers is not None else Timers()
        # the shard's classic and consumer groups (one id namespace, no conversion)
        self.other_groups = other_groups
        # (group, topic id) -> when its partitions started initializing (in memory,
        # as Kafka's timestamp set on replay; a load restarts the clock)
        self.init_since: dict[tuple[str, bytes], int] = {}

    # ------------------------------------------------------------- config
    def _group_value(self, group_id: str, key: str, default):
        overrides = self.config.group_overrides.by_group.get(group_id)
        return default if overrides is None else overrides.get(key, default)

    def session_timeout_for(self, group_id: str) -> int:
        return self._group_value(group_id, SHARE_SESSION_TIMEOUT,
                                 self.config.share_group_session_timeout_ms)

    def heartbeat_interval_for(self, group_id: str) -> int:
        return self._group_value(group_id, SHARE_HEARTBEAT_INTERVAL,
                                 self.config.share_group_heartbeat_interval_ms)

    @property
    def initialize_retry_ms(self) -> int:
        """group.share.initialize.retry.interval.ms, at least offsets.commit.timeout.ms."""
        return max(self.config.share_group_initialize_retry_interval_ms,
                   self.config.offsets_commit_timeout_ms)

    # ------------------------------------------------------------- replay
    def replay(self, record: Record) -> None:
        sg.replay(self.groups, record)

    def set_topics(self, topics: Mapping[str, Any]) -> set[bytes]:
        """New topic metadata: groups subscribed to a changed topic recompute
        their metadata hash (and so bump their epoch) on their next heartbeat.
        -> the ids of the topics deleted since the last metadata."""
        old = self.topics
        if topics is old:
            return set()
        self.topics = topics
        changed = {n for n in old if n not in topics}
        changed.update(n for n, info in topics.items() if tuple(old.get(n, ())) != tuple(info))
        if changed:
            for group in self.groups.values():
                if changed & group.subscribed_topic_names():
                    group.metadata_refresh = True
        return {info[0] for info in old.values()} - {info[0] for info in topics.values()}

    def on_topics_changed(self, topics: Mapping[str, Any]) -> Result:
        """Topics were created, deleted or grew.  A deleted topic leaves every
        group's share-partition states (Kafka's maybeCleanupShareGroupState;
        the share coordinator drops its state on its side)."""
        res = Result(response=None)
        deleted = self.set_topics(topics)
        if not deleted:
            return res
        for gid, group in self.groups.items():
            states = group.partition_states
            if states is None or not deleted & (set(states.initializing) | set(states.initialized)
                                                | set(states.deleting)):
                continue
            res.records.append(sg.partition_states_record(gid, PartitionStates(
                {t: v for t, v in states.initializing.items() if t not in deleted},
                {t: v for t, v in states.initialized.items() if t not in deleted},
                {t: n for t, n in states.deleting.items() if t not in deleted})))
        return res

    # ------------------------------------------------------------- heartbeat
    def heartbeat(self, req: dict, client_id: str, client_host: str, now: int,
                  topics: Mapping[str, Any] | None = None) -> Result:
        """ShareGroupHeartbeat: Result.response is the answer, or a
        ShareHeartbeatAnswer when share partitions must be initialized."""
        if topics is not None:
            self.set_topics(topics)
        error = validate_heartbeat(req)
        if error is None:
            try:
                if req["member_epoch"] == LEAVE_GROUP_MEMBER_EPOCH:
                    return self._leave(req)
                return self._heartbeat(req, client_id or "", client_host or "", now)
            except HeartbeatError as exc:
                error = exc
        return Result(response=heartbeat_error(error.code, error.message))

    def share_group(self, group_id: str, missing: str = "Share group {} not found.") -> ShareGroup:
        """The share group, or HeartbeatError GROUP_ID_NOT_FOUND (Kafka's
        getOrMaybeCreatePersistedShareGroup; the admin paths go through its
        shareGroup, whose message for a missing group is "Group g not found.")."""
        group = self.groups.get(group_id)
        if group is None:
            if self._other_type(group_id):
                raise HeartbeatError(Err.GROUP_ID_NOT_FOUND,
                                     f"Group {group_id} is not a share group.")
            raise HeartbeatError(Err.GROUP_ID_NOT_FOUND, missing.format(group_id))
        return group

    def _other_type(self, group_id: str) -> bool:
        """Does a classic or consumer group hold this id."""
        return any(group_id in groups for groups in self.other_groups)

    def _get_or_create(self, group_id: str, create: bool) -> ShareGroup:
        if group_id in self.groups or not create or self._other_type(group_id):
            return self.share_group(group_id)
        return ShareGroup(group_id)  # materialized when its records are replayed

    @staticmethod
    def _check_epoch(member: ShareMember, received: int) -> None:
        if received == 0:
            return
        if received > member.member_epoch:
            raise HeartbeatError(
                Err.FENCED_MEMBER_EPOCH,
                f"The share group member has a greater member epoch ({received}) than the one "
                f"known by the group coordinator ({member.member_epoch}). The member must "
                f"abandon all its partitions and rejoin.")
        if received < member.member_epoch and received != member.previous_member_epoch:
            raise HeartbeatError(
                Err.FENCED_MEMBER_EPOCH,
                f"The share group member has a smaller member epoch ({received}) than the one "
                f"known by the group coordinator ({member.member_epoch}), and it does not match "
                f"the previous member epoch ({member.previous_member_epoch}). The member must "
                f"abandon all its partitions and rejoin.")

    def _heartbeat(self, req: dict, client_id: str, client_host: str, now: int) -> Result:
        group_id, member_id, epoch = req["group_id"], req["member_id"], req["member_epoch"]
        res = Result()
        records = res.records
        group = self._get_or_create(group_id, epoch == 0)
        max_size = self.config.share_group_max_size
        if len(group.members) >= max_size and member_id not in group.members:
            raise HeartbeatError(Err.GROUP_MAX_SIZE_REACHED,
                                 f"The share group has reached its maximum capacity of "
                                 f"{max_size} members.")
        member = group.members.get(member_id)
        if member is None:
            if epoch != 0:
                raise HeartbeatError(Err.UNKNOWN_MEMBER_ID,
                                     f"Member {member_id} is not a member of group {group_id}.")
            member = ShareMember(member_id)
        self._check_epoch(member, epoch)

        # 1. the member: a changed one writes its metadata; a new subscription bumps the epoch
        names, rack = req.get("subscribed_topic_names"), req.get("rack_id")
        updated = member.copy(
            rack_id=rack if rack is not None else member.rack_id,
            subscribed_topic_names=frozenset(names) if names is not None
            else member.subscribed_topic_names,
            client_id=client_id, client_host=client_host)
        subscription_changed = False
        if member_id not in group.members or not updated.metadata_equal(member):
            records.append(sg.member_metadata_record(group_id, updated))
            subscription_changed = updated.subscribed_topic_names != member.subscribed_topic_names
        bump = subscription_changed or self.initialized_assignment_pending(group)
        members_after = dict(group.members)
        members_after[member_id] = updated
        subscribed = set().union(*(m.subscribed_topic_names for m in members_after.values()))
        group_epoch = group.group_epoch
        if bump or group.metadata_refresh:
            new_hash = sg.metadata_hash(subscribed, self.topics)
            if new_hash != group.metadata_hash:
                bump = True
            if bump:
                group_epoch += 1
                records.append(sg.group_epoch_record(group_id, group_epoch, new_hash))
            group.metadata_refresh = False

        # 2. a new target assignment once the group epoch passes the assignment epoch
        if group_epoch > group.assignment_epoch:
            target = self._update_target(group, group_epoch, members_after, updated.member_id,
                                         records)
            target_epoch = group_epoch
        else:
            target_epoch = group.assignment_epoch
            target = group.target.get(member_id, EMPTY)

        # 3. reconcile: a share member jumps straight to its target
        reconciled = self._reconcile(updated, target_epoch, target, bump)
        if reconciled != updated:
            records.append(sg.current_assignment_record(group_id, reconciled))

        self.timers.arm(res, (SESSION_TIMER, group_id, member_id),
                        now + self.session_timeout_for(group_id))
        response: dict[str, Any] = {
                    "throttle_time_ms": 0, "error_code": 0, "error_message": None,
                    "member_id": reconciled.member_id, "member_epoch": reconciled.member_epoch,
                    "heartbeat_interval_ms": self.heartbeat_interval_for(group_id),
                    "assignment": None}
        if epoch == 0 or names is not None or not assignment_equal(member.assigned,
                                                                    reconciled.assigned):
            response["assignment"] = {"topic_partitions": assignment_to_wire(reconciled.assigned)}
        initialize = self._maybe_initialize(group, group_epoch, subscribed, now, records)
        res.response = response if initialize is None else ShareHeartbeatAnswer(response, initialize)
        return res

    def _topic_ids(self, names) -> set[bytes]:
        topics = self.topics
        return {topics[n][0] for n in names if n in topics}

    def _reconcile(self, member: ShareMember, target_epoch: int, target: Mapping,
                   subscription_changed: bool) -> ShareMember:
        """ShareGroupAssignmentBuilder: the target filtered to the member's subscription."""
        if not subscription_changed and member.member_epoch == target_epoch:
            return member
        ids = self._topic_ids(member.subscribed_topic_names)
        assigned = normalize({t: p for t, p in target.items() if t in ids})
        if target_epoch != member.member_epoch:
            return member.copy(assigned=assigned, member_epoch=target_epoch,
                               previous_member_epoch=member.member_epoch)
        return member.copy(assigned=assigned)

    def initialized_assignment_pending(self, group: ShareGroup) -> bool:
        """Kafka's initializedAssignmentPending: a subscribed topic whose initialized
        partitions differ from those in the target assignment (hand them out)."""
        states = group.partition_states
        if not group.members or states is None or not states.initialized:
            return False
        names = group.subscribed_topic_names()
        if not names:
            return False
        assigned: dict[bytes, set[int]] = {}
        for a in group.target.values():
            for t, parts in a.items():
                assigned.setdefault(t, set()).update(parts)
        topics = self.topics
        for topic_id, (name, parts) in states.initialized.items():
            # (a topic deleted, or recreated under its name, is not assignable)
            if name in names and topics.get(name, (None,))[0] == topic_id \
                    and assigned.get(topic_id) != parts:
                return True
        return False

    def _update_target(self, group: ShareGroup, group_epoch: int,
                       members: dict[str, ShareMember], member_id: str,
                       records: list[Record]) -> dict:
        """The simple assignor over the initialized partitions; writes the targets
        that changed and the target epoch.  Members in id order (replay-stable)."""
        topics = self.topics
        states = group.partition_states or PartitionStates()
        specs: dict[str, MemberSpec] = {}
        partitions: dict[bytes, int] = {}
        for mid in sorted(members):
            m = members[mid]
            ids = set()
            for name in m.subscribed_topic_names:
                info = topics.get(name)
                if info is not None:
                    ids.add(info[0])
                    partitions[info[0]] = info[1]
            specs[mid] = MemberSpec(frozenset(ids), group.target.get(mid, EMPTY))
        first = None
        homogeneous = True
        for m in members.values():  # Kafka compares subscribed names, not ids
            if first is None:
                first = m.subscribed_topic_names
            elif m.subscribed_topic_names != first:
                homogeneous = False
                break
        result = write_new_target(
            simple_assignor.assign, (GroupSpec(specs, homogeneous), partitions,
                                     states.is_initialized),
            group.group_id, group_epoch, group.target, specs, records,
            sg.target_member_record, sg.target_epoch_record)
        return normalize(result.get(member_id, EMPTY))

    # ------------------------------------------------------------- initialization
    def _maybe_initialize(self, group: ShareGroup, group_epoch: int, subscribed: set[str],
                          now: int, records: list[Record]) -> ShareInitialization | None:
        """Kafka's maybeCreateInitializeShareGroupStateRequest: subscribed partitions
        neither initialized nor initializing (for less than the retry interval)
        are written as initializing and asked for."""
        if not subscribed or not self.topics:
            return None
        gid = group.group_id
        states = group.partition_states or PartitionStates()
        retry = self.initialize_retry_ms
        have: dict[bytes, set[int]] = {t: set(p) for t, (_, p) in states.initialized.items()}
        for t, (_, parts) in states.initializing.items():
            if now - self.init_since.get((gid, t), now) < retry:
                have.setdefault(t, set()).update(parts)
        change: dict[bytes, tuple[str, frozenset]] = {}
        for name in sorted(subscribed):
            info = self.topics.get(name)
            if info is None:
                continue
            topic_id, count = info[0], info[1]
            known = have.get(topic_id, set())
            if len(known) < count:
                missing = frozenset(range(count)) - known
                if missing:
                    change[topic_id] = (name, missing)
        if not change:
            return None
        records.append(self._initializing_record(group, change, now))
        return ShareInitialization(gid, group_epoch, {t: p for t, (_, p) in change.items()})

    def _initializing_record(self, group: ShareGroup, change: dict, now: int) -> Record:
        """Kafka's addInitializingTopicsRecords: `change` (topic id -> (name,
        partitions)) joins the initializing partitions and leaves deleting."""
        gid = group.group_id
        states = group.partition_states or PartitionStates()
        initializing = dict(states.initializing)
        for t, (name, parts) in change.items():
            prev = initializing.get(t)
            initializing[t] = (name, parts if prev is None else prev[1] | parts)
            self.init_since[(gid, t)] = now
        deleting = {t: n for t, n in states.deleting.items() if t not in change}
        return sg.partition_states_record(
            gid, PartitionStates(initializing, dict(states.initialized), deleting))

    def alter_offsets(self, group_id: str, topics: list[dict], now: int) -> Result:
        """AlterShareGroupOffsets (Kafka's alterShareGroupOffsets): an empty (or
        new) share group's named partitions are written as initializing and
        asked to be initialized at the given start offsets (a fresh snapshot,
        StateEpoch = the group epoch).  Result.response: the answer, or a
        ShareHeartbeatAnswer carrying the ShareInitialization."""
        group = self._admin_group(group_id, True, alter_offsets_error)
        if isinstance(group, Result):
            return group
        unknown = {"error_code": int(Err.UNKNOWN_TOPIC_OR_PARTITION),
                   "error_message": UNKNOWN_PARTITION}
        responses: list = []
        change: dict = {}
        offsets: dict = {}
        for t in topics:
            name = t["topic_name"]
            info = self.topics.get(name)
            if info is None:
                responses.append({"topic_name": name, "topic_id": bytes(16), "partitions": [
                    {"partition_index": p["partition_index"], **unknown} for p in t["partitions"]]})
                continue
            topic_id, count = info[0], info[1]
            entries, valid = [], set()
            for p in t["partitions"]:
                index = p["partition_index"]
                if 0 <= index < count:
                    entries.append({"partition_index": index, "error_code": 0,
                                    "error_message": None})
                    valid.add(index)
                    offsets[(topic_id, index)] = p["start_offset"]
                else:
                    entries.append({"partition_index": index, **unknown})
            if valid:
                prev = change.get(topic_id)
                change[topic_id] = (name, frozenset(valid) | (prev[1] if prev else frozenset()))
            responses.append({"topic_name": name, "topic_id": topic_id, "partitions": entries})
        response = {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                    "responses": responses}
        if not change:
            return Result(response=response)
        res = Result(records=[self._initializing_record(group, change, now)])
        res.response = ShareHeartbeatAnswer(response, ShareInitialization(
            group_id, group.group_epoch, {t: p for t, (_, p) in change.items()},
            offsets=offsets))
        return res

    def initialize_done(self, group_id: str, partitions: Mapping[bytes, frozenset],
                        succeeded: bool) -> Result:
        """The share coordinator answered an initialization: on success the
        partitions move from initializing to initialized (assignable); on a
        failure they leave initializing, so a later heartbeat asks again
        (Kafka's initializeShareGroupState / uninitializeShareGroupState)."""
        res = Result(response=succeeded)
        group = self.groups.get(group_id)
        if group is None or not partitions:
            return res
        states = group.partition_states or PartitionStates()
        initializing = {}
        for t, (name, parts) in states.initializing.items():
            left = parts - frozenset(partitions.get(t, ()))
            if left:
                initializing[t] = (name, left)
        initialized = dict(states.initialized)
        if succeeded:
            for t, parts in partitions.items():
                prev = initialized.get(t)
                name = (prev[0] if prev is not None else
                        states.initializing[t][0] if t in states.initializing else
                        self._topic_name(t) or "<UNKNOWN>")
                initialized[t] = (name, frozenset(parts) | (prev[1] if prev else frozenset()))
        elif initializing == states.initializing:
            return res
        res.records.append(sg.partition_states_record(
            group_id, PartitionStates(initializing, initialized, dict(states.deleting))))
        return res

    def _topic_name(self, topic_id: bytes) -> str | None:
        for name, info in self.topics.items():
            if info[0] == topic_id:
                return name
        return None

    # ------------------------------------------------------------- leave and fence
    def _leave(self, req: dict) -> Result:
        group_id, member_id = req["group_id"], req["member_id"]
        group = self.share_group(group_id)
        member = group.members.get(member_id)
        if member is None:
            raise HeartbeatError(Err.UNKNOWN_MEMBER_ID,
                                 f"Member {member_id} is not a member of group {group_id}.")
        log.info("group %s: member %s left the share group", group_id, member_id)
        res = self.fence(group, member)
        res.response = {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                        "member_id": member_id, "member_epoch": LEAVE_GROUP_MEMBER_EPOCH,
                        "heartbeat_interval_ms": 0, "assignment": None}
        return res

    def fence(self, group: ShareGroup, member: ShareMember) -> Result:
        """Remove the member and bump the group epoch (Kafka's shareGroupFenceMember)."""
        gid = group.group_id
        res = Result(records=sg.member_tombstones(gid, member.member_id))
        names = set().union(*(m.subscribed_topic_names for mid, m in group.members.items()
                              if mid != member.member_id))
        res.records.append(sg.group_epoch_record(gid, group.group_epoch + 1,
                                                 sg.metadata_hash(names, self.topics)))
        self.timers.cancel(res, (SESSION_TIMER, gid, member.member_id))
        return res

    # ------------------------------------------------------------- timers
    def timer_handlers(self) -> dict[str, Callable[[tuple, int], Result]]:
        """Each timer kind of this manager and the handler its firing goes to."""
        return {SESSION_TIMER: self.on_timer}

    def on_timer(self, key: tuple, now: int) -> Result:
        res = Result()
        if not self.timers.fired(res, key, now):
            return res  # cancelled, or early (heartbeats came since): armed again
        _, group_id, member_id = key
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None:
            return res
        log.info("group %s: share member %s fenced: its session expired", group_id, member_id)
        return self.fence(group, member).merge(res)

    def on_loaded(self, now: int) -> Result:
        """After loading: a session timer for every member; initializations in
        flight restart their retry clock (as Kafka's replay stamps them)."""
        res = self.restart_member_timers(now)
        for gid, group in self.groups.items():
            group.metadata_refresh = True
            if group.partition_states is not None:
                for t in group.partition_states.initializing:
                    self.init_since[(gid, t)] = now
        return res

    def restart_member_timers(self, now: int) -> Result:
        """Every member's session counts again from `now` (after a load, or a
        lapse of this coordinator's lease: consumer_group_manager's)."""
        res = Result()
        for gid, group in self.groups.items():
            for mid in group.members:
                self.timers.arm(res, (SESSION_TIMER, gid, mid), now + self.session_timeout_for(gid))
        return res

    # ------------------------------------------------------------- describe and admin
    def _admin_group(self, group_id: str, create: bool,
                     error: Callable[[int, str | None], dict]) -> ShareGroup | Result:
        """The empty group an admin change may touch (`create`: a new one if
        the id is free), or the Result refusing it with `error`'s answer."""
        try:
            group = self._get_or_create(group_id, True) if create else \
                self.share_group(group_id, ADMIN_MISSING)
        except HeartbeatError as exc:
            return Result(response=error(exc.code, exc.message))
        if group.members:
            return Result(response=error(Err.NON_EMPTY_GROUP, NOT_EMPTY))
        return group

    def describe(self, group_ids: list[str], include_authorized_operations: bool = False
                 ) -> list[dict]:
        return admin.describe(self.share_group, self.topics, group_ids,
                              include_authorized_operations)

    def list_groups(self, states: set[str], types: set[str]) -> list[dict]:
        return admin.list_groups(self.groups, states, types)

    delete_group = staticmethod(admin.delete_group)

    def begin_delete(self, group_id: str) -> Result:
        return admin.begin_delete(self.groups.get(group_id))

    def begin_delete_offsets(self, group_id: str, topic_names: list[str]) -> Result:
        """DeleteShareGroupOffsets, step 1 (share_group_admin.begin_delete_offsets)
        of an empty share group; Result.response: a ShareOffsetsDeletion, or the
        error answer."""
        group = self._admin_group(group_id, False, delete_offsets_error)
        if isinstance(group, Result):
            return group
        return admin.begin_delete_offsets(group, self.topics, topic_names)

    def complete_delete_offsets(self, group_id: str, topic_ids) -> Result:
        return admin.complete_delete_offsets(self.groups.get(group_id), topic_ids)

    def initialized_partitions(self, group_id: str) -> Result:
        return admin.initialized_partitions(self.groups.get(group_id))

    def share_state_partitions(self, group_id: str) -> dict[bytes, frozenset]:
        return admin.share_state_partitions(self.groups.get(group_id))

    def snapshot(self) -> dict:
        return {gid: g.snapshot() for gid, g in sorted(self.groups.items())}
