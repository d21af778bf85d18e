"""ConsumerGroupManager: the KIP-848 consumer groups of one shard in the
deterministic core (Kafka's GroupMetadataManager consumerGroupHeartbeat path,
KAFKA_REFERENCE section 2): the heartbeat (member update, subscription
metadata and epoch bump), leave and fence, timers, topic changes, replay.
Its parts, one job each: what a request may carry and its error answers
(consumer_requests.py), which member a heartbeat speaks for
(consumer_members.py), subscription metadata (consumer_subscriptions.py),
the target assignment and reconciliation (consumer_target.py), regex
authorization (consumer_regex_access.py), describe, admin and offsets
validation (consumer_group_admin.py).

Every entry point takes `now` and returns a Result: records to append (state
changes only when the runtime replays them), the answer (`response`),
replies to parked classic requests an upgrade answers, and timers as data.
Timer keys start with "cg":

    ("cg-session", group_id, member_id)    session expiry: fence the member
    ("cg-rebalance", group_id, member_id)  revocation deadline: fence the member
                                           if it is still at the epoch it had
"""
from __future__ import annotations

import base64
import logging
import uuid
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

from ..protocol.errors import Err
from ..protocol.messages.coordinator_records import GROUP_METADATA
from . import consumer_group as cg
from . import consumer_group_admin as admin
from .consumer_group import GROUP_EMPTY, GROUP_STABLE
from .assignors import ASSIGNORS
from .group_configs import HEARTBEAT_INTERVAL, SESSION_TIMEOUT
from .consumer_group import (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                             STABLE, UNREVOKED_PARTITIONS, ConsumerGroup, ConsumerMember)
from .consumer_group_admin import (delete_group, validate_offset_commit,
                                   validate_offset_fetch)
from .consumer_members import dynamic_member, static_member
from .consumer_regex_access import RegexAccess
from .consumer_requests import HeartbeatError, heartbeat_error, validate_heartbeat
from .consumer_subscriptions import compute_subscription_metadata
from .consumer_target import members_after, reconcile_member, update_target
from .result import Record, Result, Timer
from .observer import CoordinatorObserver
from .timers import Timers
from .compiled import mypyc_attr

if TYPE_CHECKING:
    from .classic_group import ClassicGroup

log = logging.getLogger("kcoord.consumer_group")

SESSION_TIMER = "cg-session"
REBALANCE_TIMER = "cg-rebalance"


class GroupConversions(Protocol):
    """What the consumer side asks of whoever converts between classic and
    consumer groups (migration.GroupMigration)."""

    def upgrade(self, classic: ClassicGroup, res: Result, side: Result,
                now: int) -> ConsumerGroup:
        """The consumer group a non-empty classic group becomes (online upgrade)."""

    def maybe_downgrade(self, group: ConsumerGroup, leaving: ConsumerMember,
                        now: int | None) -> Result | None:
        """The classic group left when `leaving` goes (None: no downgrade)."""

    def cancel_member_timers(self, res: Result, group_id: str, member_id: str) -> None:
        """The classic-protocol timers of a member that leaves."""


def random_member_id() -> str:
    """Kafka's Uuid.randomUuid().toString(): URL-safe base64 of 16 random bytes."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def _answered(res: Result, response: dict) -> Result:
    res.response = response
    return res


# pickled with the core (snapshot.py) and patched by tests: an ordinary class, its methods compiled
@mypyc_attr(native_class=False)
class ConsumerGroupManager:
    """The consumer groups of one shard and the handlers that change them."""

    def __init__(self, config, classic_groups: dict | None = None,
                 new_member_id: Callable[[], str] | None = None,
                 timers: Timers | None = None,
                 share_groups: Mapping[str, Any] | None = None,
                 groups: dict[str, ConsumerGroup] | None = None) -> None:
        self.config = config
        # the overrides' dict itself (GroupOverrides mutates it, never replaces it):
        # one dict.get on the steady heartbeat's path
        self._overrides_by_group = config.group_overrides.by_group
        self.classic_groups = classic_groups if classic_groups is not None else {}
        self.groups: dict[str, ConsumerGroup] = groups if groups is not None else {}
        # the shard's share groups (one id namespace)
        self.share_groups: Mapping[str, Any] = share_groups if share_groups is not None else {}
        self.topics: Mapping[str, Any] = {}
        self.new_member_id = new_member_id or random_member_id
        # who converts classic <-> consumer groups (migration.GroupMigration); the
        # shard that composes both sets it (None: no conversions)
        self.conversions: GroupConversions | None = None
        # the shard's timer service (timers.py: session timers are re-armed
        # lazily, so a heartbeat only moves a deadline); in memory, rebuilt by on_loaded
        self.timers = timers if timers is not None else Timers()
        # rebalance timer key -> the member epoch it was armed for (in memory, like Kafka's timer)
        self._rebalance_epochs: dict[tuple, int] = {}
        # None: the default, and while loading
        self.observer: CoordinatorObserver | None = None
        self.epoch_reasons: dict[str, str] = {}  # group -> why its next epoch bump happens
        self._rebalancing: set[str] = set()  # groups with a bump not yet reconciled
        # whose DESCRIBE rights filter each regex subscription while an authorizer is on
        self.regex_access = RegexAccess(config)
        # the steady-heartbeat shortcut (off: every heartbeat the long way, which the
        # tests compare it with) and how many heartbeats it answered here
        self.steady_shortcut = True
        self.steady_answers = 0

    # ------------------------------------------------------------- config
    @property
    def assignor_names(self) -> list[str]:
        return [n for n in self.config.consumer_group_assignors if n in ASSIGNORS] or ["uniform"]

    @property
    def session_timeout_ms(self) -> int:
        return self.config.consumer_group_session_timeout_ms

    # a group's own values (IncrementalAlterConfigs on the group), else the broker's
    def session_timeout_for(self, group_id: str) -> int:
        return self.group_timeouts(group_id)[0]

    def heartbeat_interval_for(self, group_id: str) -> int:
        return self.group_timeouts(group_id)[1]

    def group_timeouts(self, group_id: str) -> tuple[int, int]:
        """(session timeout, heartbeat interval) of the group: one dict lookup
        when it has no overrides (the steady heartbeat's path)."""
        config = self.config
        overrides = config.group_overrides.by_group.get(group_id)
        if overrides is None:
            return (config.consumer_group_session_timeout_ms,
                    config.consumer_group_heartbeat_interval_ms)
        return (overrides.get(SESSION_TIMEOUT, config.consumer_group_session_timeout_ms),
                overrides.get(HEARTBEAT_INTERVAL, config.consumer_group_heartbeat_interval_ms))

    @property
    def max_size(self) -> int:
        return self.config.consumer_group_max_size

    # ------------------------------------------------------------- replay
    def replay(self, record: Record) -> None:
        if self.observer is None:
            cg.replay(self.groups, record, self._on_group_created)
            return
        gid = record.key["group_id"]
        group = self.groups.get(gid)
        before = group.group_epoch if group is not None else 0
        cg.replay(self.groups, record, self._on_group_created)
        self._observe(gid, before)

    def _observe(self, gid: str, epoch_before: int) -> None:
        """Tell the observer when a replayed record started or ended a rebalance."""
        observer = self.observer
        if observer is None:
            return
        group = self.groups.get(gid)
        members = len(group.members) if group is not None else 0
        if group is not None and group.group_epoch > epoch_before and members:
            reason = self.epoch_reasons.pop(gid, "the group epoch was bumped")
            self._rebalancing.add(gid)
            observer.rebalance_started(gid, "consumer", group.group_epoch, members, reason)
        elif gid in self._rebalancing and (group is None or group.state in (GROUP_STABLE,
                                                                             GROUP_EMPTY)):
            self._rebalancing.discard(gid)
            self.epoch_reasons.pop(gid, None)
            observer.rebalance_completed(gid, "consumer",
                                         group.group_epoch if group else 0, members)

    def _on_group_created(self, group_id: str) -> None:
        # A simple group (created by offset commits) is replaced by the consumer group.
        classic = self.classic_groups.get(group_id)
        if classic is not None and classic.protocol_type is None and not classic.members:
            del self.classic_groups[group_id]

    # ------------------------------------------------------------- validation
    def validate_heartbeat(self, req: dict, version: int) -> HeartbeatError | None:
        return validate_heartbeat(req, version, self.assignor_names)

    # ------------------------------------------------------------- heartbeat
    def heartbeat(self, req: dict, version: int, client_id: str, client_host: str,
                  now: int, topics: Mapping[str, Any] | None = None,
                  principal: tuple[str, str] | None = None) -> Result:
        """ConsumerGroupHeartbeat: the answer is the result's response (sent once
        the records are durable).  `principal`, (principal, client host) while an
        authorizer is on: whose DESCRIBE rights filter the member's regex."""
        if topics is not None and topics is not self.topics:
            self._set_topics(topics)
        steady = self.steady_heartbeat(req, client_id or "", client_host or "", now,
                                       principal=principal) if self.steady_shortcut else None
        if steady is not None:
            self.steady_answers += 1
            return steady if steady.__class__ is Result else Result(response=steady)
        error = self.validate_heartbeat(req, version)
        # replies to parked classic requests and timer changes of an online upgrade:
        # they stand even if the heartbeat then fails
        side = Result()
        if error is None:
            try:
                epoch = req["member_epoch"]
                if epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                    return self._leave(req, now)
                res = self._heartbeat(req, client_id or "", client_host or "", now, side,
                                      principal)
                res.replies[:0] = side.replies
                res.timers[:0] = side.timers
                return res
            except HeartbeatError as exc:
                error = exc
        side.response = heartbeat_error(error.code, error.message)
        return side

    def steady_heartbeat(self, req: dict, client_id: str, client_host: str, now: int,
                         topics: Mapping[str, Any] | None = None,
                         principal: tuple[str, str] | None = None) -> Result | dict | None:
        """The heartbeat of a member that is STABLE at the group's epoch and changes
        nothing (every optional field null, the same client id and host): no record,
        no new assignment, only the session moves.  Returns the answer alone (the
        runtime's fast path) or, when its session timer must be armed, a Result
        with the timer and the answer; None when the heartbeat is anything else: heartbeat()
        then takes it the long way (which gives the same answer for this case: no
        change of the member, no epoch bump, no target update, and a reconciled
        member is not reconciled again, so its owned partitions do not matter).
        The server calls this first (it writes nothing)."""
        if topics is not None and topics is not self.topics:
            self._set_topics(topics)
        epoch = req["member_epoch"]
        if epoch <= 0:
            return None
        # req.get itself, not a local alias: compiled, a dict's get is a direct call
        if (req.get("rebalance_timeout_ms", -1) != -1
                or req.get("subscribed_topic_names") is not None
                or req.get("subscribed_topic_regex") is not None
                or req.get("instance_id") is not None or req.get("rack_id") is not None
                or req.get("server_assignor") is not None):
            return None
        group_id, member_id = req["group_id"], req["member_id"]
        group = self.groups.get(group_id)
        if group is None or group.metadata_refresh or not member_id:
            return None
        member = group.members.get(member_id)
        if (member is None or member.member_epoch != epoch or member.state != STABLE
                or epoch != group.assignment_epoch or group.group_epoch > epoch
                or member.client_id != client_id or member.client_host != client_host
                or member.classic_member_metadata is not None):
            return None
        if principal is not None:  # an authorizer: who filters the regex
            self.regex_access.note(group, member.subscribed_topic_regex, principal)
        # the session moves (timers.py: a timer is armed only when none fires early enough)
        config = self.config
        if self._overrides_by_group.get(group_id) is None:  # group_timeouts, inlined
            session = config.consumer_group_session_timeout_ms
            interval = config.consumer_group_heartbeat_interval_ms
        else:
            session, interval = self.group_timeouts(group_id)
        # Timers.touch, inlined (the steady heartbeat is the hottest path)
        key = (SESSION_TIMER, group_id, member_id)
        deadline = now + session
        timers = self.timers
        timers.deadlines[key] = deadline
        armed = timers.armed.get(key)
        timer = None
        if armed is None or armed > deadline:
            timers.armed[key] = deadline
            timer = Timer(key, deadline)
        response = {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                    "member_id": member_id, "member_epoch": epoch,
                    "heartbeat_interval_ms": interval, "assignment": None}
        if timer is None:
            return response
        return Result(timers=[timer], response=response)

    def _get_or_create_group(self, group_id: str, create: bool, res: Result, now: int,
                             side: Result) -> ConsumerGroup:
        group = self.groups.get(group_id)
        if group is not None:
            return group
        records = res.records
        if group_id in self.share_groups:  # no conversion between group types
            raise HeartbeatError(Err.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        classic = self.classic_groups.get(group_id)
        if classic is not None and (classic.members or classic.state == "Dead"):
            if create and classic.members and self.conversions is not None:
                return self.conversions.upgrade(classic, res, side, now)  # online upgrade
            raise HeartbeatError(Err.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        if not create:
            raise HeartbeatError(Err.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
        if classic is not None:
            # an empty classic group is replaced: delete it with a tombstone first
            records.append(Record(GROUP_METADATA, {"group": group_id}, None))
        return ConsumerGroup(group_id)  # materialized when its records are replayed

    def _heartbeat(self, req: dict, client_id: str, client_host: str, now: int,
                   side: Result | None = None, principal: tuple[str, str] | None = None
                   ) -> Result:
        res = Result()
        records = res.records
        group_id = req["group_id"]
        member_id = req["member_id"]
        epoch = req["member_epoch"]
        instance_id = req.get("instance_id")
        owned = req.get("topic_partitions")
        create = epoch == 0

        group = self._get_or_create_group(group_id, create, res, now,
                                          side if side is not None else res)
        if len(group.members) >= self.max_size and (not member_id or member_id not in group.members):
            raise HeartbeatError(Err.GROUP_MAX_SIZE_REACHED,
                                 f"The consumer group has reached its maximum capacity of "
                                 f"{self.max_size} members.")
        if not member_id:
            member_id = self.new_member_id()

        if instance_id is None:
            member, replaced = dynamic_member(group, member_id, epoch, owned, create), None
        else:  # replaced: a departed static member this one replaces
            member, replaced = static_member(group, member_id, instance_id, epoch, owned,
                                             create, records)

        # 1. Update the member; a subscription change bumps the group epoch.
        names = req.get("subscribed_topic_names")
        regex = req.get("subscribed_topic_regex")
        updated = member
        changes: dict[str, Any] = {}
        if instance_id is not None and instance_id != member.instance_id:
            changes["instance_id"] = instance_id
        rack = req.get("rack_id")
        if rack is not None and rack != member.rack_id:
            changes["rack_id"] = rack
        rebalance_timeout = req.get("rebalance_timeout_ms", -1)
        if rebalance_timeout != -1 and rebalance_timeout != member.rebalance_timeout_ms:
            changes["rebalance_timeout_ms"] = rebalance_timeout
        assignor = req.get("server_assignor")
        if assignor is not None and assignor != member.server_assignor:
            changes["server_assignor"] = assignor
        if names is not None:
            fs = frozenset(names)
            if fs != member.subscribed_topic_names:
                changes["subscribed_topic_names"] = fs
        if regex is not None and regex != member.subscribed_topic_regex:
            changes["subscribed_topic_regex"] = regex
        if client_id != member.client_id:
            changes["client_id"] = client_id
        if client_host != member.client_host:
            changes["client_host"] = client_host
        if member.classic_member_metadata is not None:
            changes["classic_member_metadata"] = None
        subscription_changed = False
        if changes or member.member_id not in group.members and replaced is None:
            updated = member.copy(**changes)
            records.append(cg.member_metadata_record(group_id, updated))
            if "subscribed_topic_regex" in changes and updated.subscribed_topic_regex:
                try:
                    cg.compile_regex(updated.subscribed_topic_regex)
                except cg.InvalidRegex as exc:
                    raise HeartbeatError(
                        Err.INVALID_REGULAR_EXPRESSION,
                        f"SubscribedTopicRegex `{updated.subscribed_topic_regex}` is not a valid "
                        f"regular expression: {exc}.") from None
            subscription_changed = ("subscribed_topic_names" in changes
                                    or "subscribed_topic_regex" in changes)

        self.regex_access.note(group, updated.subscribed_topic_regex, principal)
        target_epoch, target = self.refresh_target(group, updated, replaced,
                                                   subscription_changed, records)

        # 3. Reconcile the member towards its target.
        reconciled = self.reconcile_member(group, updated, target_epoch, target, owned, records)
        if reconciled is not updated:
            key = (REBALANCE_TIMER, group_id, member_id)
            if reconciled.state == UNREVOKED_PARTITIONS:
                self._rebalance_epochs[key] = reconciled.member_epoch
                self.timers.arm(res, key, now + max(reconciled.rebalance_timeout_ms, 0))
            elif key in self._rebalance_epochs:
                del self._rebalance_epochs[key]
                self.timers.cancel(res, key)
            updated = reconciled

        self.touch_session(res, (SESSION_TIMER, group_id, member_id),
                            now + self.session_timeout_for(group_id))

        response: dict[str, Any] = {
            "throttle_time_ms": 0, "error_code": 0, "error_message": None,
            "member_id": updated.member_id, "member_epoch": updated.member_epoch,
            "heartbeat_interval_ms": self.heartbeat_interval_for(group_id),
            "assignment": None}
        full = epoch == 0 or (rebalance_timeout != -1 and owned is not None
                              and (names is not None or regex is not None))
        if full or not cg.assignment_equal(member.assigned, updated.assigned):
            response["assignment"] = {"topic_partitions": cg.assignment_to_wire(updated.assigned)}
        res.response = response
        return res

    def refresh_target(self, group: ConsumerGroup, updated: ConsumerMember,
                       replaced: ConsumerMember | None, subscription_changed: bool,
                       records: list[Record]) -> tuple[int, dict]:
        """Steps 1b-2 of a heartbeat (also of a classic member's join): the
        subscription metadata, the group epoch bump, and a new target
        assignment once the group epoch passes the assignment epoch.
        Returns the target's epoch and the member's target."""
        group_id = group.group_id
        group_epoch = group.group_epoch
        metadata = group.subscription_metadata
        if subscription_changed or group.metadata_refresh:
            after = members_after(group, updated, replaced)
            metadata = compute_subscription_metadata(after.values(), self.topics,
                                                     self.regex_filter(group))
            bump = subscription_changed
            if metadata != group.subscription_metadata:
                records.append(cg.subscription_metadata_record(group_id, metadata))
                bump = True
            if bump:
                group_epoch += 1
                records.append(cg.group_epoch_record(group_id, group_epoch))
                self.epoch_reasons[group_id] = (
                    f"member {updated.member_id} joined" if updated.member_id not in group.members
                    else f"member {updated.member_id} changed its subscription" if subscription_changed
                    else "the subscribed topics changed")
            group.metadata_refresh = False
        if group_epoch > group.assignment_epoch:
            target = update_target(group, group_epoch, updated, replaced, metadata, records,
                                   self.assignor_names, self.regex_filter(group))
            return group_epoch, target
        return group.assignment_epoch, group.target_of(updated.member_id, updated.instance_id)

    # ------------------------------------------------------------- leave and fence
    def _leave(self, req: dict, now: int | None = None) -> Result:
        group_id, member_id = req["group_id"], req["member_id"]
        epoch, instance_id = req["member_epoch"], req.get("instance_id")
        group = self.groups.get(group_id)
        if group is None:
            raise HeartbeatError(Err.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
        response = {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                    "member_id": member_id, "member_epoch": epoch, "heartbeat_interval_ms": 0,
                    "assignment": None}
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise HeartbeatError(Err.UNKNOWN_MEMBER_ID,
                                     f"Member {member_id} is not a member of group {group_id}.")
            return _answered(self.fence(group, member, now), response)
        member = group.static_member(instance_id)
        if member is None:
            raise HeartbeatError(Err.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
        if member.member_id != member_id:
            raise HeartbeatError(Err.FENCED_INSTANCE_ID,
                                 f"Static member {member_id} with instance id {instance_id} was "
                                 f"fenced by member {member.member_id}.")
        if epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # a temporary leave: the member keeps its assignment for a rejoin; no epoch bump
            leaving = member.copy(member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, pending_revocation={})
            res = Result(records=[cg.current_assignment_record(group_id, leaving)])
            response["member_id"] = member.member_id
            return _answered(res, response)
        return _answered(self.fence(group, member, now), response)

    def fence(self, group: ConsumerGroup, member: ConsumerMember, now: int | None = None,
              reason: str | None = None) -> Result:
        """Remove the member, recompute the subscription metadata, bump the group epoch;
        or, if only classic members remain, convert the group back to a classic
        group (online downgrade; needs `now`)."""
        gid = group.group_id
        if self.conversions is not None:
            downgraded = self.conversions.maybe_downgrade(group, member, now)
            if downgraded is not None:
                return downgraded
        res = Result(records=cg.member_tombstones(gid, member.member_id))
        remaining = [m for m in group.members.values() if m.member_id != member.member_id]
        metadata = compute_subscription_metadata(remaining, self.topics,
                                                 self.regex_filter(group))
        if metadata != group.subscription_metadata:
            res.records.append(cg.subscription_metadata_record(gid, metadata))
        res.records.append(cg.group_epoch_record(gid, group.group_epoch + 1))
        self.epoch_reasons[gid] = reason or f"member {member.member_id} left the group"
        self.cancel_timers(res, gid, member.member_id)
        return res

    def touch_session(self, res: Result, key: tuple, deadline: int) -> None:
        """The member's session now ends at `deadline` (lazily re-armed: timers.py)."""
        self.timers.arm(res, key, deadline)

    def cancel_timers(self, res: Result, group_id: str, member_id: str) -> None:
        """Every timer of the member (it leaves the group)."""
        self.timers.cancel(res, (SESSION_TIMER, group_id, member_id))
        key = (REBALANCE_TIMER, group_id, member_id)
        self._rebalance_epochs.pop(key, None)
        self.timers.cancel(res, key)
        if self.conversions is not None:  # a classic member's join and sync deadlines
            self.conversions.cancel_member_timers(res, group_id, member_id)

    # ------------------------------------------------------------- timers
    def timer_handlers(self) -> dict[str, Callable[[tuple, int], Result]]:
        """Each timer kind of this manager and the handler its firing goes to."""
        return {SESSION_TIMER: self.on_session_timer, REBALANCE_TIMER: self.on_rebalance_timer}

    def _timer_member(self, key: tuple) -> tuple[ConsumerGroup, ConsumerMember] | None:
        """(group, member) a member timer's key names (None: gone)."""
        group = self.groups.get(key[1])
        member = group.members.get(key[2]) if group is not None else None
        return None if member is None or group is None else (group, member)

    def on_session_timer(self, key: tuple, now: int) -> Result:
        res = Result()
        if not self.timers.fired(res, key, now):
            return res  # cancelled, or early (heartbeats came since): armed again
        due = self._timer_member(key)
        if due is None:
            return res
        group, member = due
        group_id, member_id = key[1], key[2]
        if self.observer is not None:  # it logs the expiry
            self.observer.member_expired(group_id, member_id, "consumer")
        else:
            log.info("group %s: member %s fenced: its session expired", group_id, member_id)
        return self.fence(group, member, now, f"member {member_id}'s session expired")

    def on_rebalance_timer(self, key: tuple, now: int) -> Result:
        res = Result()
        if not self.timers.fired(res, key, now):
            return res  # cancelled, or early: armed again
        armed_epoch = self._rebalance_epochs.pop(key, None)
        due = self._timer_member(key)
        if due is None or armed_epoch is None or due[1].member_epoch != armed_epoch:
            return res
        group, member = due
        log.info("group %s: member %s fenced: it did not revoke its partitions within %d ms",
                 key[1], key[2], member.rebalance_timeout_ms)
        return self.fence(group, member, now,
                          f"member {key[2]} did not revoke its partitions in time")

    def on_loaded(self, now: int) -> Result:
        """After loading: session timers for every member, rebalance timers where revoking."""
        for group in self.groups.values():
            group.metadata_refresh = True
        return self.restart_member_timers(now)

    def restart_member_timers(self, now: int) -> Result:
        """Every member's session (and a revoking member's rebalance timeout)
        counts again from `now`: after a load, or when this coordinator serves
        again after a lapse of its lease, during which the members' answers
        were held and their timers were not run (Kafka restarts them on load)."""
        res = Result()
        for gid, group in self.groups.items():
            for mid, m in group.members.items():
                classic = m.classic_member_metadata
                # a classic-protocol member keeps the session timeout it joined with
                self.timers.arm(res, (SESSION_TIMER, gid, mid),
                                now + (self.session_timeout_for(gid) if classic is None
                                       else classic["session_timeout_ms"]))
                if m.state == UNREVOKED_PARTITIONS and classic is None:
                    key = (REBALANCE_TIMER, gid, mid)
                    self._rebalance_epochs[key] = m.member_epoch
                    self.timers.arm(res, key, now + max(m.rebalance_timeout_ms, 0))
        return res

    # ------------------------------------------------------------- topic metadata
    def _set_topics(self, topics: Mapping[str, Any]) -> set[str]:
        """Install new topic metadata; returns the names whose metadata changed."""
        old = self.topics
        self.topics = topics
        changed = {n for n in old if n not in topics}
        for n, info in topics.items():
            prev = old.get(n)
            if prev is None or tuple(prev) != tuple(info):
                changed.add(n)
        if changed:
            for group in self.groups.values():
                group.metadata_refresh = True
        return changed

    def on_topics_changed(self, topics: Mapping[str, Any]) -> Result:
        """Topics were created, deleted or grew: bring the affected groups' targets up to date."""
        res = Result()
        changed = self._set_topics(topics)
        if not changed:
            return res
        for group in list(self.groups.values()):
            if not group.members:
                continue
            if not (changed & group.subscribed_topic_names(topics) or changed & set(group.subscription_metadata)):
                continue
            self._refresh(group, res.records)
        return res

    def _refresh(self, group: ConsumerGroup, records: list[Record]) -> None:
        metadata = compute_subscription_metadata(group.members.values(), self.topics,
                                                 self.regex_filter(group))
        group.metadata_refresh = False
        if metadata == group.subscription_metadata:
            return
        gid = group.group_id
        records.append(cg.subscription_metadata_record(gid, metadata))
        epoch = group.group_epoch + 1
        records.append(cg.group_epoch_record(gid, epoch))
        self.epoch_reasons[gid] = "the subscribed topics changed"
        try:
            update_target(group, epoch, None, None, metadata, records, self.assignor_names,
                          self.regex_filter(group))
        except HeartbeatError as exc:  # the next heartbeat tries again
            log.error("group %s: %s", gid, exc.message)

    # ------------------------------------------------------------- the rest (describe, admin)
    # methods, not staticmethod(...) class attributes: a compiled (mypyc) class
    # would keep those per instance, where pickling the core fails
    def reconcile_member(self, group: ConsumerGroup, member: ConsumerMember,
                         target_epoch: int, target: dict, owned,
                         records: list[Record]) -> ConsumerMember:
        return reconcile_member(group, member, target_epoch, target, owned, records)

    def validate_offset_commit(self, group: ConsumerGroup, member_id: str, epoch: int,
                               version: int, transactional: bool = False) -> int:
        return validate_offset_commit(group, member_id, epoch, version, transactional)

    def validate_offset_fetch(self, group: ConsumerGroup, member_id: str | None,
                              epoch: int) -> int:
        return validate_offset_fetch(group, member_id, epoch)

    def delete_group(self, group: ConsumerGroup) -> tuple[int, list[Record]]:
        return delete_group(group)

    def regex_filter(self, group: ConsumerGroup) -> Callable[[str, str], bool] | None:
        """RegexAccess.filter: which regex matches a resolution keeps."""
        return self.regex_access.filter(group)

    def describe(self, group_ids: list[str], include_authorized_operations: bool = False
                 ) -> list[dict]:
        return admin.describe(self.groups, self.topics, self.share_groups, self.assignor_names,
                              group_ids, include_authorized_operations)

    def list_groups(self, states: set[str], types: set[str]) -> list[dict]:
        return admin.list_groups(self.groups, states, types)

    def offset_delete(self, group: ConsumerGroup, req: dict,
                      committed: Mapping[tuple[str, int], Any]) -> tuple[dict, list[Record]]:
        return admin.offset_delete(group, self.topics, req, committed)

    def cleanup(self, now: int, offsets, retention_ms: int) -> list[Record]:
        return admin.cleanup(self.groups, self.topics, now, offsets, retention_ms)

    def snapshot(self) -> dict:
        return {gid: g.snapshot() for gid, g in self.groups.items()}
