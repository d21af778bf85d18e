"""ClassicGroupManager: the classic groups of one shard (JoinGroup, SyncGroup,
Heartbeat, LeaveGroup and their timers), following GroupMetadataManager's
classic-group code.  Composed into the shard beside the consumer and share
group managers; the shard sends a classic request for a consumer group to
GroupMigration instead (migration.py), so this manager only knows its own.

As in Kafka, the classic rebalance
mutates the in-memory group directly (most of it is soft state: parked
requests, pending members, awaiting counts) and writes a GroupMetadata
record when a generation completes or the group becomes Empty.  The records
the core emits are AppliedRecords (result.py): the runtime appends them but
does not replay them, because the model already holds them (Kafka's
replayRecords=false); emitting one moves the group's `persisted` view.  A
GroupMetadata record that is replayed (loading a log, a fresh shard in a
test) rebuilds the group from the record, exactly as Kafka's replay does.

Timers are data, kept by the shard's timer service (`self.timers`,
timers.py); a timer handler acts only on a timer that is still pending
there and due, so a stale, early or cancelled firing is harmless.
Timer keys, each kind with its handler (`timer_handlers`):

    ("classic-heartbeat", group, member)  session expiry, pending-member expiry,
                                          new-member join timeout
    ("classic-join", group)               initial delay or join-phase completion
    ("classic-sync", group)               pending-sync expiry
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol

from ..protocol.errors import Err
from . import classic_group_admin as admin
from .classic_group import (COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE,
                            ClassicGroup, ClassicMember, persisted_view)
from .classic_group_admin import validate_offset_commit
from .classic_group_records import (empty_group_metadata_record, group_from_metadata,
                                    group_metadata_record)
from .classic_requests import (HEARTBEAT_OK, HEARTBEAT_REBALANCING, heartbeat_answer,
                               join_error, leave_response, leaving_members, left_member,
                               protocols, sync_error, sync_request_error, sync_response)
from .observer import NULL_OBSERVER, CoordinatorObserver
from .result import AppliedRecord, Record, Result
from .timers import Timers
from .compiled import mypyc_attr

if TYPE_CHECKING:
    from .shard import CoordinatorConfig

NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000
HEARTBEAT = "classic-heartbeat"
JOIN = "classic-join"
SYNC = "classic-sync"


class OtherGroupHeartbeat(Protocol):
    """Answers a classic Heartbeat whose group is not a classic group here
    (the shard installs its GroupMigration: a classic member of a consumer group)."""

    def heartbeat_unknown(self, req: dict, version: int, now: int) -> Result | dict: ...


# pickled with the core (snapshot.py) and patched by tests: an ordinary class, its methods compiled
@mypyc_attr(native_class=False)
class ClassicGroupManager:
    """The classic groups of one shard and the handlers that change them."""

    def __init__(self, config: CoordinatorConfig, timers: Timers,
                 new_uuid: Callable[[], str]) -> None:
        self.config = config
        self.groups: dict[str, ClassicGroup] = {}
        self.timers = timers  # the shard's timer service
        self.new_uuid = new_uuid  # a function by name: the core pickles (snapshot.py)
        self.observer: CoordinatorObserver = NULL_OBSERVER  # the shard installs the server's
        self.elsewhere: OtherGroupHeartbeat | None = None  # the shard installs its migration

    # ============================================================ timers
    def _arm(self, res: Result, key: tuple, deadline: int) -> None:
        self.timers.arm(res, key, deadline)

    def _cancel(self, res: Result, key: tuple) -> None:
        self.timers.cancel(res, key)

    def _arm_heartbeat(self, res: Result, group: ClassicGroup, member_id: str,
                       timeout_ms: int, now: int) -> None:
        self._arm(res, (HEARTBEAT, group.group_id, member_id), now + timeout_ms)

    def _emit(self, res: Result, group: ClassicGroup, record: Record) -> None:
        """Append a record the live group already reflects (see the module doc):
        the runtime appends it without replaying it."""
        assert record.value is not None  # a GroupMetadata value, never a tombstone
        group.persisted = persisted_view(record.value)
        res.records.append(AppliedRecord(*record))

    def timer_handlers(self) -> dict[str, Callable[[tuple, int], Result]]:
        """Each timer kind of this manager and the handler its firing goes to."""
        return {HEARTBEAT: self.on_heartbeat_timer, JOIN: self.on_join_timer,
                SYNC: self.on_sync_timer}

    def _due_group(self, res: Result, key: tuple, now: int) -> ClassicGroup | None:
        """The group of a timer that fired and is due (None: nothing to do)."""
        if not self.timers.fired(res, key, now):
            return None  # cancelled, or early: armed again for its deadline
        return self.groups.get(key[1])

    def on_heartbeat_timer(self, key: tuple, now: int) -> Result:
        res = Result()
        group = self._due_group(res, key, now)
        if group is not None:
            self._expire_heartbeat(res, group, key[2], now)
        return res

    def on_join_timer(self, key: tuple, now: int) -> Result:
        res = Result()
        group = self._due_group(res, key, now)
        if group is not None and group.state == PREPARING_REBALANCE:
            if group.join_timer == "initial":
                self._try_complete_initial_rebalance(res, group, now)
            else:
                self._complete_join(res, group, now)
        return res

    def on_sync_timer(self, key: tuple, now: int) -> Result:
        res = Result()
        group = self._due_group(res, key, now)
        if group is not None:
            self._expire_pending_sync(res, group, now)
        return res

    def on_loaded(self, now: int) -> Result:
        """After loading: restart every member's session; rebalance oversized groups."""
        res = self.restart_member_timers(now)
        for group in list(self.groups.values()):
            if len(group.members) > self.config.group_max_size:
                self._prepare_rebalance(res, group, now, "loaded with more members than group.max.size")
        return res

    def restart_member_timers(self, now: int) -> Result:
        """Every member's session counts again from `now` (after a load, or a
        lapse of this coordinator's lease: consumer_group_manager's)."""
        res = Result()
        for group in list(self.groups.values()):
            for member in group.members.values():
                self._arm_heartbeat(res, group, member.member_id, member.session_timeout_ms, now)
        return res

    # ============================================ conversions (migration.py)
    def give_way(self, side: Result, group: ClassicGroup) -> None:
        """The group becomes a consumer group (an online upgrade): its parked
        requests are told to rejoin and its timers cancelled, in `side`."""
        gid = group.group_id
        for m in group.members.values():
            group.complete_join(m, join_error(Err.REBALANCE_IN_PROGRESS, m.member_id), side)
            group.complete_sync(m, sync_error(Err.REBALANCE_IN_PROGRESS), side)
            self._cancel(side, (HEARTBEAT, gid, m.member_id))
        self._cancel(side, (JOIN, gid))
        self._cancel(side, (SYNC, gid))

    def install(self, res: Result, group: ClassicGroup, now: int,
                rebalance_reason: str | None) -> None:
        """A consumer group converted to `group` (an online downgrade): installed
        directly, as Kafka does (its record is appended unreplayed), its members'
        sessions started, and a rebalance when `rebalance_reason` says why."""
        self.groups[group.group_id] = group
        self._emit(res, group, group_metadata_record(group, group.assignment_map()))
        for m in group.members.values():
            self._arm_heartbeat(res, group, m.member_id, m.session_timeout_ms, now)
        if rebalance_reason:
            self._prepare_rebalance(res, group, now, rebalance_reason)

    # ============================================================ replay
    def replay_group_metadata(self, group_id: str, value: dict | None) -> None:
        if value is None:
            self.groups.pop(group_id, None)
        else:  # loading (or a fresh shard): the record replaces the group, as in Kafka
            self.groups[group_id] = group_from_metadata(group_id, value)

    # ========================================================= JoinGroup
    def join_request(self, req: dict, version: int, client_id: str | None, client_host: str,
                     token: Any) -> dict | Result:
        """A JoinGroup parsed for `join` (and GroupMigration.join), or the Result
        refusing it (no group id, a session timeout out of bounds)."""
        member_id = req["member_id"]
        if not req["group_id"]:
            return Result().reply(token, join_error(Err.INVALID_GROUP_ID, member_id))
        session = req["session_timeout_ms"]
        if not (self.config.group_min_session_timeout_ms <= session
                <= self.config.group_max_session_timeout_ms):
            return Result().reply(token, join_error(Err.INVALID_SESSION_TIMEOUT, member_id))
        return {
            "group_id": req["group_id"], "member_id": member_id,
            "protocol_type": req["protocol_type"], "protocols": protocols(req),
            "session": session,
            "rebalance": session if version == 0 else req["rebalance_timeout_ms"],
            "instance_id": req.get("group_instance_id") if version >= 5 else None,
            "client_id": client_id or "", "client_host": client_host,
            "version": version, "token": token,
        }

    def join(self, join: dict, now: int, res: Result) -> Result:
        """JoinGroup (parsed by join_request) of a group that is not another
        type's: `res` may already hold the tombstones of an empty consumer
        group giving way to it."""
        group_id, member_id, token = join["group_id"], join["member_id"], join["token"]
        before = len(res.records)
        group = self.groups.get(group_id)
        is_new_group = group is None
        unknown = member_id == ""
        if group is None:
            if not unknown:
                return res.reply(token, join_error(Err.UNKNOWN_MEMBER_ID, member_id))
            group = self.groups[group_id] = ClassicGroup(group_id, state_timestamp_ms=now)
        if not self._accept_joining_member(group, member_id):
            self._remove_member(res, group, member_id)
            res.reply(token, join_error(Err.GROUP_MAX_SIZE_REACHED, ""))
        elif unknown:
            self._join_new_member(res, group, join, now)
        else:
            self._join_existing_member(res, group, member_id, join, now)
        if is_new_group and len(res.records) == before:
            # persist the new group, as Kafka does
            self._emit(res, group, empty_group_metadata_record(group))
        return res

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        max_size = self.config.group_max_size
        if group.state in (EMPTY, DEAD):
            return True
        member = group.members.get(member_id)
        if group.state == PREPARING_REBALANCE:
            return (member is not None and member.awaiting_join) or \
                group.num_awaiting_join < max_size
        return member is not None or len(group.members) < max_size

    def _join_new_member(self, res: Result, group: ClassicGroup, join: dict, now: int) -> None:
        token = join["token"]
        if group.state == DEAD:
            res.reply(token, join_error(Err.COORDINATOR_NOT_AVAILABLE, ""))
            return
        if not group.supports_protocols(join["protocol_type"], {n for n, _ in join["protocols"]}):
            res.reply(token, join_error(Err.INCONSISTENT_GROUP_PROTOCOL, ""))
            return
        instance_id = join["instance_id"]
        new_id = f"{instance_id if instance_id is not None else join['client_id']}-{self.new_uuid()}"
        if instance_id is not None:
            existing = group.static_members.get(instance_id)
            if existing is not None:
                self._update_static_member(res, group, existing, new_id, join, now)
            else:
                self._add_member_and_rebalance(res, group, new_id, join, now)
        elif join["version"] >= 4:
            # KIP-394: hand out a member id; the member must join again with it
            group.add_pending(new_id)
            self._arm_heartbeat(res, group, new_id, join["session"], now)
            res.reply(token, join_error(Err.MEMBER_ID_REQUIRED, new_id))
        else:
            self._add_member_and_rebalance(res, group, new_id, join, now)

    def _join_existing_member(self, res: Result, group: ClassicGroup, member_id: str,
                              join: dict, now: int) -> None:
        token = join["token"]
        instance_id = join["instance_id"]
        if group.state == DEAD:
            res.reply(token, join_error(Err.COORDINATOR_NOT_AVAILABLE, member_id))
            return
        if not group.supports_protocols(join["protocol_type"], {n for n, _ in join["protocols"]}):
            res.reply(token, join_error(Err.INCONSISTENT_GROUP_PROTOCOL, member_id))
            return
        if group.is_pending(member_id):
            if instance_id is not None:  # a pending member is never static (Kafka: IllegalState)
                res.reply(token, join_error(Err.UNKNOWN_SERVER_ERROR, member_id))
                return
            self._add_member_and_rebalance(res, group, member_id, join, now)
            return
        error = group.validate_member(member_id, instance_id)
        if error:
            res.reply(token, join_error(error, member_id))
            return
        member = group.members[member_id]
        if group.state == PREPARING_REBALANCE:
            self._update_member_and_rebalance(res, group, member, join, now)
        elif group.state == COMPLETING_REBALANCE:
            if member.matches(join["protocols"]):
                # the member lost the JoinGroup response: send this generation again
                members = group.join_members() if group.is_leader(member_id) else []
                res.reply(token, self._join_response(group, member_id, members))
            else:
                self._update_member_and_rebalance(res, group, member, join, now)
        elif group.state == STABLE:
            if group.is_leader(member_id) or not member.matches(join["protocols"]):
                # the leader rejoins to trigger a rebalance; changed metadata forces one
                self._update_member_and_rebalance(res, group, member, join, now)
            else:
                res.reply(token, self._join_response(group, member_id, []))
        else:  # Empty: the member has to reset its generation and join again
            res.reply(token, join_error(Err.UNKNOWN_MEMBER_ID, member_id))

    @staticmethod
    def _join_response(group: ClassicGroup, member_id: str, members: list[dict],
                       leader: str | None = None, skip_assignment: bool = False) -> dict:
        leader = group.leader_id if leader is None else leader
        return {"throttle_time_ms": 0, "error_code": Err.NONE,
                "generation_id": group.generation_id, "protocol_type": group.protocol_type,
                "protocol_name": group.protocol_name, "leader": leader or "",
                "skip_assignment": skip_assignment, "member_id": member_id, "members": members}

    def _add_member_and_rebalance(self, res: Result, group: ClassicGroup, member_id: str,
                                  join: dict, now: int) -> None:
        member = ClassicMember(member_id, join["instance_id"], join["client_id"],
                               join["client_host"], join["rebalance"], join["session"],
                               join["protocol_type"], join["protocols"], is_new=True)
        if group.state == PREPARING_REBALANCE and group.previous_state == EMPTY:
            group.new_member_added = True  # extends the initial rebalance delay
        group.add(member, join["token"])
        # the session does not apply to a member parked in its first join
        self._arm_heartbeat(res, group, member_id, NEW_MEMBER_JOIN_TIMEOUT_MS, now)
        self._maybe_prepare_rebalance_or_complete_join(
            res, group, now, f"new member {member_id} joined")

    def _update_member_and_rebalance(self, res: Result, group: ClassicGroup,
                                     member: ClassicMember, join: dict, now: int) -> None:
        displaced = group.update_member(member, join["protocols"], join["rebalance"],
                                        join["session"], join["token"])
        if displaced is not None:  # a newer JoinGroup of the same member replaces it
            res.reply(displaced, join_error(Err.REBALANCE_IN_PROGRESS, member.member_id))
        self._maybe_prepare_rebalance_or_complete_join(
            res, group, now, f"member {member.member_id} rejoined")

    def _update_static_member(self, res: Result, group: ClassicGroup, old_id: str,
                              new_id: str, join: dict, now: int) -> None:
        instance_id = join["instance_id"]
        current_leader = group.leader_id
        member = group.replace_static_member(instance_id, old_id, new_id, res)
        self._cancel(res, (HEARTBEAT, group.group_id, old_id))
        self._arm_heartbeat(res, group, new_id, member.session_timeout_ms, now)
        group.update_member(member, join["protocols"], join["rebalance"], join["session"],
                            join["token"])
        if group.state == STABLE:
            if (group.protocol_name or "") == group.select_protocol():
                # same protocol: no rebalance; persist the new member id
                self._emit(res, group, group_metadata_record(group, group.assignment_map()))
                if join["version"] >= 9:
                    is_leader = group.is_leader(new_id)
                    response = self._join_response(
                        group, new_id, group.join_members() if is_leader else [],
                        skip_assignment=is_leader)
                else:
                    response = self._join_response(group, new_id, [], leader=current_leader)
                group.complete_join(member, response, res)
            else:
                self._maybe_prepare_rebalance_or_complete_join(
                    res, group, now, f"static member {instance_id} rejoined with a new protocol")
        elif group.state == COMPLETING_REBALANCE:
            # the leader may already be assigning with the old member id
            self._prepare_rebalance(res, group, now,
                                    f"static member {instance_id} rejoined during the sync")
        else:
            self._maybe_complete_join_phase(res, group, now)

    # ---------------------------------------------------------- rebalance
    def _maybe_prepare_rebalance_or_complete_join(self, res: Result, group: ClassicGroup,
                                                  now: int, reason: str = "") -> None:
        if group.can_rebalance():
            self._prepare_rebalance(res, group, now, reason)
        else:
            self._maybe_complete_join_phase(res, group, now)

    def _prepare_rebalance(self, res: Result, group: ClassicGroup, now: int,
                           reason: str = "") -> None:
        if group.state == COMPLETING_REBALANCE:
            self._reset_and_propagate_assignment(res, group, Err.REBALANCE_IN_PROGRESS, now)
        group.pending_sync_members.clear()
        self._cancel(res, (SYNC, group.group_id))
        initial = group.state == EMPTY
        if initial:
            delay = self.config.group_initial_rebalance_delay_ms
            group.initial_delay_ms = delay
            group.initial_remaining_ms = max(group.rebalance_timeout_ms() - delay, 0)
            group.join_timer = "initial"
            self._arm(res, (JOIN, group.group_id), now + delay)
        old_generation = group.generation_id
        group.transition(PREPARING_REBALANCE, now)
        self.observer.rebalance_started(group.group_id, "classic", old_generation,
                                        len(group.members), reason)
        if not initial:
            self._maybe_complete_join_else_schedule(res, group, now)

    def _maybe_complete_join_else_schedule(self, res: Result, group: ClassicGroup,
                                           now: int) -> None:
        if group.has_all_members_joined():
            self._complete_join(res, group, now)
        else:
            group.join_timer = "complete"
            self._arm(res, (JOIN, group.group_id), now + group.rebalance_timeout_ms())

    def _try_complete_initial_rebalance(self, res: Result, group: ClassicGroup, now: int) -> None:
        delay, remaining = group.initial_delay_ms, group.initial_remaining_ms
        if group.new_member_added and remaining != 0:
            # a member joined during the delay: wait again, within the rebalance timeout
            group.new_member_added = False
            new_delay = min(self.config.group_initial_rebalance_delay_ms, remaining)
            group.initial_delay_ms = new_delay
            group.initial_remaining_ms = max(remaining - delay, 0)
            group.join_timer = "initial"
            self._arm(res, (JOIN, group.group_id), now + new_delay)
        else:
            self._complete_join(res, group, now)

    def _maybe_complete_join_phase(self, res: Result, group: ClassicGroup, now: int) -> None:
        if group.state != PREPARING_REBALANCE:
            return
        if group.previous_state == EMPTY:
            return  # the initial rebalance completes only on its timer
        if not group.has_all_members_joined():
            return
        self._complete_join(res, group, now)

    def _complete_join(self, res: Result, group: ClassicGroup, now: int) -> None:
        self._cancel(res, (JOIN, group.group_id))
        group.join_timer = None
        for member in group.not_yet_rejoined():
            if not member.is_static:
                self._remove_member(res, group, member.member_id)
                self._cancel(res, (HEARTBEAT, group.group_id, member.member_id))
        if group.state == DEAD:
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # nobody rejoined: wait another rebalance timeout for sessions to expire
            group.join_timer = "complete"
            self._arm(res, (JOIN, group.group_id), now + group.rebalance_timeout_ms())
            return
        group.init_next_generation(now)
        if group.state == EMPTY:
            self._emit(res, group, group_metadata_record(group, {}))
            self.observer.rebalance_completed(group.group_id, "classic", group.generation_id, 0)
            return
        leader_members = group.join_members()
        for member in group.members.values():
            members = leader_members if group.is_leader(member.member_id) else []
            group.complete_join(member, self._join_response(group, member.member_id, members),
                                res)
            self._arm_heartbeat(res, group, member.member_id, member.session_timeout_ms, now)
            member.is_new = False
            group.pending_sync_members[member.member_id] = None
        group.sync_timer_generation = group.generation_id
        self._arm(res, (SYNC, group.group_id), now + group.rebalance_timeout_ms())

    def _reset_and_propagate_assignment(self, res: Result, group: ClassicGroup, error: int,
                                        now: int) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(res, group, error, now)

    def _propagate_assignment(self, res: Result, group: ClassicGroup, error: int,
                              now: int) -> None:
        ptype = group.protocol_type if error == Err.NONE else None
        pname = group.protocol_name if error == Err.NONE else None
        for member in group.members.values():
            if group.complete_sync(member, sync_response(error, member.assignment, ptype, pname),
                                   res):
                # the session restarts once the member has its assignment
                self._arm_heartbeat(res, group, member.member_id, member.session_timeout_ms, now)

    def _remove_member(self, res: Result, group: ClassicGroup, member_id: str) -> None:
        """group.remove, answering any request the member still has parked."""
        member = group.remove(member_id)
        if member is None:
            return
        if member.join_token is not None:
            res.reply(member.join_token, join_error(Err.UNKNOWN_MEMBER_ID, ""))
            member.join_token = None
        if member.sync_token is not None:
            res.reply(member.sync_token, sync_error(Err.UNKNOWN_MEMBER_ID))
            member.sync_token = None

    # ------------------------------------------------------------ expiry
    def _expire_heartbeat(self, res: Result, group: ClassicGroup, member_id: str,
                          now: int) -> None:
        if group.state == DEAD:
            return
        if group.is_pending(member_id):
            group.remove(member_id)
            if group.state == PREPARING_REBALANCE and group.has_all_members_joined():
                self._complete_join(res, group, now)
            return
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return
        self.observer.member_expired(group.group_id, member_id, "classic")
        self._remove_member_and_update_group(res, group, member, now,
                                             f"member {member_id}'s session expired")

    def _remove_member_and_update_group(self, res: Result, group: ClassicGroup,
                                        member: ClassicMember, now: int,
                                        reason: str = "") -> None:
        # a new member may still be parked in its join: tell it to join again
        group.complete_join(member, join_error(Err.UNKNOWN_MEMBER_ID, ""), res)
        self._remove_member(res, group, member.member_id)
        if group.state in (STABLE, COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(res, group, now, reason)
        elif group.state == PREPARING_REBALANCE and group.has_all_members_joined():
            self._complete_join(res, group, now)

    def _expire_pending_sync(self, res: Result, group: ClassicGroup, now: int) -> None:
        if group.sync_timer_generation != group.generation_id:
            return
        if group.state not in (COMPLETING_REBALANCE, STABLE):
            return
        if not group.pending_sync_members:
            return
        for member_id in list(group.pending_sync_members):
            self._remove_member(res, group, member_id)
            self._cancel(res, (HEARTBEAT, group.group_id, member_id))
        self._prepare_rebalance(res, group, now, "members did not send SyncGroup in time")

    # ========================================================= SyncGroup
    def sync_group(self, req: dict, version: int, token: Any, now: int) -> Result:
        res = Result()
        group_id = req["group_id"]
        member_id = req["member_id"]
        ptype = req.get("protocol_type") if version >= 5 else None
        pname = req.get("protocol_name") if version >= 5 else None
        refused = sync_request_error(req, version)
        if refused:
            return res.reply(token, sync_error(refused))
        group = self.groups.get(group_id)
        if group is None or group.state == EMPTY:
            return res.reply(token, sync_error(Err.UNKNOWN_MEMBER_ID))
        instance_id = req.get("group_instance_id") if version >= 3 else None
        error: int
        if group.state == DEAD:
            error = Err.COORDINATOR_NOT_AVAILABLE
        else:
            error = group.validate_member(member_id, instance_id)
            if not error and req["generation_id"] != group.generation_id:
                error = Err.ILLEGAL_GENERATION
            if not error and (_inconsistent(ptype, group.protocol_type)
                              or _inconsistent(pname, group.protocol_name)):
                error = Err.INCONSISTENT_GROUP_PROTOCOL
        if error:
            return res.reply(token, sync_error(error))
        if group.state == PREPARING_REBALANCE:
            return res.reply(token, sync_error(Err.REBALANCE_IN_PROGRESS))
        member = group.members[member_id]
        if group.state == COMPLETING_REBALANCE:
            if member.sync_token is not None:  # a newer SyncGroup of the same member
                res.reply(member.sync_token, sync_error(Err.REBALANCE_IN_PROGRESS))
            member.sync_token = token
            self._remove_pending_sync_member(res, group, member_id)
            if group.is_leader(member_id):
                given = {a["member_id"]: bytes(a["assignment"]) for a in req["assignments"]}
                assignment = {mid: given.get(mid, b"") for mid in group.members}
                # the replies wait for this record to be durable (the runtime's apply)
                self._emit(res, group, group_metadata_record(group, assignment))
                for m in group.members.values():
                    m.assignment = assignment[m.member_id]
                self._propagate_assignment(res, group, Err.NONE, now)
                group.transition(STABLE, now)
                self.observer.rebalance_completed(group_id, "classic", group.generation_id,
                                                  len(group.members))
        else:  # Stable: hand out the current assignment
            self._remove_pending_sync_member(res, group, member_id)
            res.reply(token, sync_response(Err.NONE, member.assignment, group.protocol_type,
                                           group.protocol_name))
        return res

    def _remove_pending_sync_member(self, res: Result, group: ClassicGroup,
                                    member_id: str) -> None:
        group.pending_sync_members.pop(member_id, None)
        if group.state in (COMPLETING_REBALANCE, STABLE) and group.pending_sync_members:
            return
        self._cancel(res, (SYNC, group.group_id))

    # ========================================================= Heartbeat
    def heartbeat(self, req: dict, version: int, now: int) -> Result | dict:
        """Heartbeat as a Result whose response is the answer, or the answer
        alone when there is nothing else to do (no timer to arm: the usual
        case, timers.py): the hot path, kept short."""
        group_id = req["group_id"]
        if not group_id:
            return heartbeat_answer(Err.INVALID_GROUP_ID)
        group = self.groups.get(group_id)
        if group is None:  # routed here, not by the shard: one call less per heartbeat
            if self.elsewhere is not None:
                return self.elsewhere.heartbeat_unknown(req, version, now)
            return heartbeat_answer(Err.UNKNOWN_MEMBER_ID)
        if group.state == DEAD:
            return heartbeat_answer(Err.COORDINATOR_NOT_AVAILABLE)
        member_id = req["member_id"]
        instance_id = req.get("group_instance_id") if version >= 3 else None
        member = group.members.get(member_id)
        if instance_id is not None or member is None:
            error = group.validate_member(member_id, instance_id)
            if error:
                return heartbeat_answer(error)
        assert member is not None  # validate_member refused an unknown member
        if req["generation_id"] != group.generation_id:
            return heartbeat_answer(Err.ILLEGAL_GENERATION)
        if group.state == EMPTY:
            return heartbeat_answer(Err.UNKNOWN_MEMBER_ID)
        # as _arm_heartbeat (lazily re-armed: timers.py)
        timer = self.timers.touch((HEARTBEAT, group_id, member_id),
                                  now + member.session_timeout_ms)
        response = HEARTBEAT_REBALANCING if group.state == PREPARING_REBALANCE else HEARTBEAT_OK
        if timer is None:
            return response
        return Result(timers=[timer], response=response)

    # ======================================================== LeaveGroup
    def leave_group(self, req: dict, version: int, now: int) -> Result:
        """LeaveGroup; the answer is the result's response."""
        response, res = self._leave_group(req, version, now)
        res.response = response
        return res

    def _leave_group(self, req: dict, version: int, now: int) -> tuple[dict, Result]:
        res = Result()
        group_id = req["group_id"]
        identities = leaving_members(req, version)
        if not group_id:
            return leave_response(version, Err.INVALID_GROUP_ID, []), res
        group = self.groups.get(group_id)
        if group is None:
            return leave_response(version, Err.NONE, [
                left_member(mid, iid, Err.UNKNOWN_MEMBER_ID) for mid, iid in identities]), res
        if group.state == DEAD:
            return leave_response(version, Err.COORDINATOR_NOT_AVAILABLE, []), res
        responses = []
        for member_id, instance_id in identities:
            if member_id == "":
                # removal of a static member by instance id alone (admin)
                if instance_id is not None and instance_id in group.static_members:
                    self._remove_leaving_member(res, group, group.static_members[instance_id])
                    responses.append(left_member(member_id, instance_id, Err.NONE))
                else:
                    responses.append(left_member(member_id, instance_id, Err.UNKNOWN_MEMBER_ID))
            elif group.is_pending(member_id):
                group.remove(member_id)
                self._cancel(res, (HEARTBEAT, group_id, member_id))
                responses.append(left_member(member_id, instance_id, Err.NONE))
            else:
                error = group.validate_member(member_id, instance_id)
                if not error:
                    self._remove_leaving_member(res, group, member_id)
                responses.append(left_member(member_id, instance_id, error))
        if any(r["error_code"] == Err.NONE for r in responses):
            if group.state in (STABLE, COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(
                    res, group, now, "member left the group (LeaveGroup)")
            elif group.state == PREPARING_REBALANCE:
                self._maybe_complete_join_phase(res, group, now)
        return leave_response(version, Err.NONE, responses), res

    def _remove_leaving_member(self, res: Result, group: ClassicGroup, member_id: str) -> None:
        member = group.members[member_id]
        self._cancel(res, (HEARTBEAT, group.group_id, member_id))
        group.complete_join(member, join_error(Err.UNKNOWN_MEMBER_ID, ""), res)
        self._remove_member(res, group, member_id)

    # ===================================================== OffsetCommit
    def refresh_session_on_commit(self, res: Result, group: ClassicGroup, member_id: str,
                                  now: int) -> None:
        """A valid commit in Stable or PreparingRebalance keeps the member's session alive."""
        if group.state in (STABLE, PREPARING_REBALANCE):
            member = group.members.get(member_id)
            if member is not None:
                self._arm_heartbeat(res, group, member_id, member.session_timeout_ms, now)

    validate_offset_commit = staticmethod(validate_offset_commit)  # no extra call per commit

    # ============================================================ admin
    def list_groups(self, states: set[str], types: set[str]) -> list[dict]:
        return admin.list_groups(self.groups, states, types)

    def describe_group(self, group_id: str) -> dict:
        return admin.describe_group(self.groups, group_id)


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current
