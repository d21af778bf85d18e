"""The classic group model (ClassicGroup.java, ClassicGroupMember.java).

Durable fields (generation, protocol, leader, members with their selected
subscription and assignment) come back from GroupMetadata records; the
rebalance bookkeeping (parked JoinGroup/SyncGroup tokens, pending members,
pending syncs, the awaiting-join count, timer parameters) is in memory only,
as in Kafka.

A parked request is represented by the opaque token the runtime gave it;
the model answers it by appending (token, response) to a Result.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from ..protocol.errors import Err
from .classic_requests import sync_error
from .result import Result

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"

# allowed previous states of each state (ClassicGroupState.java)
VALID_PREVIOUS = {
    EMPTY: {PREPARING_REBALANCE},
    PREPARING_REBALANCE: {STABLE, COMPLETING_REBALANCE, EMPTY},
    COMPLETING_REBALANCE: {PREPARING_REBALANCE},
    STABLE: {COMPLETING_REBALANCE},
    DEAD: {EMPTY, PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE, DEAD},
}

CONSUMER_PROTOCOL_TYPE = "consumer"


class IllegalStateTransition(Exception):
    pass


@dataclass(eq=False)
class ClassicMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # (name, metadata) in the member's preference order
    assignment: bytes = b""
    # in-memory rebalance bookkeeping
    join_token: Any = None          # parked JoinGroup awaiting the join phase
    sync_token: Any = None          # parked SyncGroup awaiting the leader's assignment
    is_new: bool = False            # joined during this rebalance (new-member join timeout)

    @property
    def awaiting_join(self) -> bool:
        return self.join_token is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_token is not None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        raise KeyError(protocol)

    def protocol_names(self) -> set[str]:
        return {name for name, _ in self.protocols}

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Same protocols, same metadata, same order (ClassicGroupMember.matches)."""
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError("member supports none of the candidate protocols")

    def has_satisfied_heartbeat(self) -> bool:
        """A member parked in a rebalance needs no heartbeats, unless it is new."""
        if self.is_new:
            return False
        return self.awaiting_join or self.awaiting_sync


@dataclass(eq=False)
class ClassicGroup:
    group_id: str
    state: str = EMPTY
    state_timestamp_ms: int | None = None
    protocol_type: str | None = None   # None for a "simple" group created by a commit
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    previous_state: str = DEAD
    members: dict[str, ClassicMember] = field(default_factory=dict)  # insertion order matters
    static_members: dict[str, str] = field(default_factory=dict)     # instance id -> member id
    pending_join_members: dict[str, None] = field(default_factory=dict)  # KIP-394, ordered set
    pending_sync_members: dict[str, None] = field(default_factory=dict)
    supported_protocols: dict[str, int] = field(default_factory=dict)  # name -> members supporting it
    num_awaiting_join: int = 0
    new_member_added: bool = False
    subscribed_topics: set[str] | None = None  # None: not known (Optional.empty in Kafka)
    # timer parameters that Kafka keeps in closures
    initial_delay_ms: int = 0
    initial_remaining_ms: int = 0
    join_timer: str | None = None        # "initial" or "complete" while the join timer is armed
    sync_timer_generation: int | None = None
    # the last GroupMetadata value written or loaded, normalized (see persisted_view)
    persisted: dict | None = None

    # ------------------------------------------------------------ states
    def transition(self, target: str, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS[target]:
            raise IllegalStateTransition(f"group {self.group_id}: {self.state} -> {target}")
        self.previous_state = self.state
        self.state = target
        self.state_timestamp_ms = now_ms

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS[PREPARING_REBALANCE]

    @property
    def is_empty(self) -> bool:
        """Kafka's ClassicGroup.isEmpty(): the group is in the Empty state."""
        return self.state == EMPTY

    # ----------------------------------------------------------- members
    def is_leader(self, member_id: str) -> bool:
        return self.leader_id is not None and self.leader_id == member_id

    def is_pending(self, member_id: str) -> bool:
        return member_id in self.pending_join_members

    def add_pending(self, member_id: str) -> None:
        if member_id in self.members:
            raise ValueError(f"pending member {member_id} is already a member")
        self.pending_join_members[member_id] = None

    def add(self, member: ClassicMember, token: Any = None) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise ValueError(f"static member {member.group_instance_id} is already a member")
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.protocol_type != member.protocol_type:
            raise ValueError("the group and member protocol types differ")
        if not self.supports_protocols(member.protocol_type, member.protocol_names()):
            raise ValueError("none of the member's protocols is supported")
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self._count_protocols(member, 1)
        member.join_token = token
        if token is not None:
            self.num_awaiting_join += 1
        self.pending_join_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> ClassicMember | None:
        """Remove a member or pending member; the leader passes to the next member."""
        member = self.members.pop(member_id, None)
        if member is not None:
            self._count_protocols(member, -1)
            if member.awaiting_join:
                self.num_awaiting_join -= 1
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_join_members.pop(member_id, None)
        self.pending_sync_members.pop(member_id, None)
        return member

    def update_member(self, member: ClassicMember, protocols: list[tuple[str, bytes]],
                      rebalance_timeout_ms: int, session_timeout_ms: int, token: Any) -> Any:
        """Refresh a member from a JoinGroup; returns a displaced parked join token, if any."""
        self._count_protocols(member, -1)
        member.protocols = protocols
        self._count_protocols(member, 1)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        displaced = None
        if token is not None and not member.awaiting_join:
            self.num_awaiting_join += 1
        elif token is None and member.awaiting_join:
            self.num_awaiting_join -= 1
        elif token is not None:
            displaced = member.join_token
        member.join_token = token
        return displaced

    def complete_join(self, member: ClassicMember, response: dict, res: Result) -> bool:
        if member.join_token is None:
            return False
        res.reply(member.join_token, response)
        member.join_token = None
        self.num_awaiting_join -= 1
        return True

    def complete_sync(self, member: ClassicMember, response: dict, res: Result) -> bool:
        if member.sync_token is None:
            return False
        res.reply(member.sync_token, response)
        member.sync_token = None
        return True

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str,
                              res: Result) -> ClassicMember:
        """Give a static member a new member id; the old id's parked requests are fenced."""
        old = self.members.get(old_id)
        if old is None:
            raise ValueError(f"cannot replace unknown member {old_id}")
        fenced_join: dict[str, Any] = {"throttle_time_ms": 0, "error_code": Err.FENCED_INSTANCE_ID,
                       "generation_id": -1, "protocol_type": None, "protocol_name": None,
                       "leader": "", "skip_assignment": False, "member_id": old_id, "members": []}
        self.complete_join(old, fenced_join, res)
        self.complete_sync(old, sync_error(Err.FENCED_INSTANCE_ID), res)
        new = ClassicMember(new_id, old.group_instance_id, old.client_id, old.client_host,
                            old.rebalance_timeout_ms, old.session_timeout_ms, old.protocol_type,
                            list(old.protocols), old.assignment)
        # keep the member's position: leader succession follows member order
        self.members = {(new_id if mid == old_id else mid): (new if mid == old_id else m)
                        for mid, m in self.members.items()}
        if self.is_leader(old_id):
            self.leader_id = new_id
        self.static_members[instance_id] = new_id
        return new

    def maybe_elect_new_joined_leader(self) -> bool:
        if self.leader_id is None:
            return False
        leader = self.members[self.leader_id]
        if leader.awaiting_join:
            return True
        for member in self.members.values():
            if member.awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_join_members

    def not_yet_rejoined(self) -> list[ClassicMember]:
        return [m for m in self.members.values() if not m.awaiting_join]

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def validate_member(self, member_id: str, instance_id: str | None) -> int:
        """ClassicGroup.validateMember: an error code, or NONE."""
        if instance_id is not None:
            existing = self.static_members.get(instance_id)
            if existing is None:
                return Err.UNKNOWN_MEMBER_ID
            if existing != member_id:
                return Err.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return Err.UNKNOWN_MEMBER_ID
        return Err.NONE

    # --------------------------------------------------------- protocols
    def _count_protocols(self, member: ClassicMember, delta: int) -> None:
        counts = self.supported_protocols
        for name, _ in member.protocols:
            counts[name] = counts.get(name, 0) + delta

    def supports_protocols(self, protocol_type: str, names: set[str]) -> bool:
        if self.state == EMPTY:
            return bool(protocol_type) and bool(names)
        n = len(self.members)
        return self.protocol_type == protocol_type and any(
            self.supported_protocols.get(name, 0) == n for name in names)

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, count in self.supported_protocols.items() if count == n}

    def select_protocol(self) -> str:
        """Every member votes for its first candidate; most votes wins (first vote on a tie)."""
        if not self.members:
            raise ValueError("cannot select a protocol for an empty group")
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            name = member.vote(candidates)
            votes[name] = votes.get(name, 0) + 1
        best = max(votes.values())
        return next(name for name, count in votes.items() if count == best)

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition(COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition(EMPTY, now_ms)
        self.pending_sync_members.clear()

    def join_members(self) -> list[dict]:
        """The member list of the leader's JoinGroup response."""
        return [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                 "metadata": m.metadata_for(self.protocol_name)} for m in self.members.values()]

    def assignment_map(self) -> dict[str, bytes]:
        return {m.member_id: m.assignment for m in self.members.values()}

    # -------------------------------------------------------- subscriptions
    def compute_subscribed_topics(self) -> set[str] | None:
        """Topics of the members' consumer-protocol subscriptions (None: not known)."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return set()
        if not self.protocol_name:
            return None
        topics: set[str] = set()
        try:
            for m in self.members.values():
                topics.update(parse_subscription_topics(m.metadata_for(self.protocol_name)))
        except Exception:  # unparseable: the coordinator does not know the topics
            return None
        return topics

    def is_subscribed_to(self, topic: str) -> bool:
        if self.subscribed_topics is not None:
            return topic in self.subscribed_topics
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    # ------------------------------------------------------------ durable
    def durable_view(self) -> dict:
        """The durable part as the live model has it (comparable to `persisted`)."""
        protocol = self.protocol_name
        return {
            "protocol_type": self.protocol_type or None, "protocol": protocol,
            "generation": self.generation_id, "leader": self.leader_id,
            "members": [(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                         m.rebalance_timeout_ms, m.session_timeout_ms,
                         bytes(m.metadata_for(protocol)) if protocol else b"",
                         bytes(m.assignment)) for m in self.members.values()],
        }

    def snapshot(self) -> dict:
        """The durable state, for comparing live and replayed shards."""
        if self.persisted is None:
            return {"simple": True}
        return dict(self.persisted)


def persisted_view(value: dict) -> dict:
    """A GroupMetadataValue normalized the way `ClassicGroup.durable_view` reports it."""
    return {
        "protocol_type": value["protocol_type"] or None, "protocol": value["protocol"],
        "generation": value["generation"], "leader": value["leader"],
        "timestamp": value.get("current_state_timestamp", -1),
        "members": [(m["member_id"], m.get("group_instance_id"), m["client_id"], m["client_host"],
                     m["session_timeout"] if m.get("rebalance_timeout", -1) == -1
                     else m["rebalance_timeout"],
                     m["session_timeout"], bytes(m["subscription"]), bytes(m["assignment"]))
                    for m in value["members"]],
    }


_INT16 = struct.Struct(">h")


def parse_subscription_topics(metadata: bytes) -> list[str]:
    """Topics of ConsumerProtocolSubscription bytes, read with the v0 layout every
    version starts with (as Kafka's computeSubscribedTopics does)."""
    from ..protocol.api import schema_codec
    version, = _INT16.unpack_from(metadata, 0)
    if version < 0:
        raise ValueError(f"negative consumer protocol version {version}")
    _, decode = schema_codec("ConsumerProtocolSubscription", 0)
    msg, _ = decode(metadata, 2)
    return list(msg["topics"])
