"""The classic group model (ClassicGroup.java): durable fields and members.

Durable fields come back from GroupMetadata records; the rebalance
bookkeeping (who is awaiting join or sync, parked request tokens, pending
members) is in-memory only, as in Kafka.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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


class IllegalStateTransition(Exception):
    pass


@dataclass
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
    join_version: int = 0
    sync_token: Any = None          # parked SyncGroup awaiting the leader's assignment
    sync_version: int = 0
    is_new: bool = False            # joined during this rebalance (300 s join timeout)

    @property
    def awaiting_join(self) -> bool:
        return self.join_token is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_token is not None

    def metadata_for(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        raise KeyError(protocol)

    def supports(self, protocol_type: str, names: set[str]) -> bool:
        return self.protocol_type == protocol_type and bool(names & {n for n, _ in self.protocols})


@dataclass
class ClassicGroup:
    group_id: str
    state: str = EMPTY
    protocol_type: str | None = None   # None for a "simple" group created by a commit
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    state_timestamp_ms: int | None = None
    members: dict[str, ClassicMember] = field(default_factory=dict)  # insertion order matters
    static_members: dict[str, str] = field(default_factory=dict)     # instance id -> member id
    pending_members: set[str] = field(default_factory=set)           # KIP-394 awaiting 2nd join
    pending_sync: set[str] = field(default_factory=set)
    new_member_added: bool = False
    initial_join_deadline_ms: int | None = None  # group.initial.rebalance.delay bookkeeping
    initial_delay_remaining_ms: int = 0

    def transition(self, target: str, now_ms: int) -> None:
        if self.state not in VALID_PREVIOUS[target]:
            raise IllegalStateTransition(f"group {self.group_id}: {self.state} -> {target}")
        self.state = target
        self.state_timestamp_ms = now_ms

    @property
    def is_empty(self) -> bool:
        return not self.members

    def is_subscribed_to(self, topic: str) -> bool | None:
        """Whether the consumer protocol subscription names the topic (None: unknown)."""
        return None  # refined by the classic-protocol module when subscriptions are parsed

    def snapshot(self) -> dict:
        """The durable part, for comparing live and replayed state."""
        return {
            "protocol_type": self.protocol_type, "protocol": self.protocol_name,
            "generation": self.generation_id, "leader": self.leader_id,
            "state": self.state if self.state in (EMPTY, DEAD) else "non-empty",
            "members": sorted((m.member_id, m.group_instance_id, m.client_id, m.client_host,
                               m.rebalance_timeout_ms, m.session_timeout_ms, m.assignment)
                              for m in self.members.values()),
        }
