"""Which member a ConsumerGroupHeartbeat speaks for (Kafka's
getOrMaybeSubscribe{Dynamic,Static}ConsumerGroupMember and its member
epoch check): pure functions over a ConsumerGroup that raise HeartbeatError
to refuse, and add the records of a static member's replacement."""
from __future__ import annotations

from ..protocol.errors import Err
from . import consumer_group as cg
from .consumer_group import EMPTY, LEAVE_GROUP_STATIC_MEMBER_EPOCH, ConsumerGroup, ConsumerMember
from .consumer_requests import HeartbeatError
from .result import Record


def check_epoch(member: ConsumerMember, received: int, owned: list[dict] | None) -> None:
    if received == 0:
        # a fenced member rejoins with its member id (KAFKA-19233): accepted, it gets its
        # current assignment back instead of FENCED_MEMBER_EPOCH until its session expires
        return
    if received > member.member_epoch:
        raise HeartbeatError(
            Err.FENCED_MEMBER_EPOCH,
            f"The consumer group member has a greater member epoch ({received}) than the one "
            f"known by the group coordinator ({member.member_epoch}). The member must abandon "
            f"all its partitions and rejoin.")
    if received < member.member_epoch:
        # a lost response: the previous epoch with owned partitions we still assign is fine
        if received != member.previous_member_epoch or not cg.is_subset(owned, member.assigned):
            raise HeartbeatError(
                Err.FENCED_MEMBER_EPOCH,
                f"The consumer group member has a smaller member epoch ({received}) than the "
                f"one known by the group coordinator ({member.member_epoch}). The member must "
                f"abandon all its partitions and rejoin.")


def dynamic_member(group: ConsumerGroup, member_id: str, epoch: int, owned,
                   create: bool) -> ConsumerMember:
    """Kafka's getOrMaybeSubscribeDynamicConsumerGroupMember."""
    member = group.members.get(member_id)
    if member is None:
        if not create:
            raise HeartbeatError(Err.UNKNOWN_MEMBER_ID,
                                 f"Member {member_id} is not a member of group "
                                 f"{group.group_id}.")
        member = ConsumerMember(member_id)
    check_epoch(member, epoch, owned)
    return member


def static_member(group: ConsumerGroup, member_id: str, instance_id: str, epoch: int,
                  owned, create: bool, records: list[Record]
                  ) -> tuple[ConsumerMember, ConsumerMember | None]:
    """Kafka's getOrMaybeSubscribeStaticConsumerGroupMember: (member, the
    departed static member it replaces or None); a replacement writes the
    old member's tombstones and the new one's records, with its target."""
    group_id = group.group_id
    existing = group.static_member(instance_id)
    if not create:
        if existing is None:
            raise HeartbeatError(Err.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
        if existing.member_id != member_id:
            raise HeartbeatError(
                Err.FENCED_INSTANCE_ID,
                f"Static member {member_id} with instance id {instance_id} was fenced by "
                f"member {existing.member_id}.")
        check_epoch(existing, epoch, owned)
        return existing, None
    if existing is None:
        return group.members.get(member_id) or ConsumerMember(member_id), None
    if existing.member_id == member_id:
        return existing, None  # the same instance rejoins after being fenced
    if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise HeartbeatError(
            Err.UNRELEASED_INSTANCE_ID,
            f"Static member {member_id} with instance id {instance_id} cannot join "
            f"the group because the instance id is owned by {existing.member_id} member.")
    member = existing.copy(member_id=member_id, member_epoch=0, previous_member_epoch=0)
    records.extend(cg.member_tombstones(group_id, existing.member_id))
    records.append(cg.member_metadata_record(group_id, member))
    records.append(cg.target_member_record(
        group_id, member_id, group.target.get(existing.member_id, EMPTY)))
    records.append(cg.current_assignment_record(group_id, member))
    return member, existing
