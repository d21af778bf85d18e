"""A consumer group's target assignment and a member's reconciliation
towards it (Kafka's TargetAssignmentBuilder and CurrentAssignmentBuilder
steps of a heartbeat): pure functions over a ConsumerGroup that add the
records of what changed and raise HeartbeatError when an assignor fails or
a member is fenced."""
from __future__ import annotations

from typing import Callable, Iterable, Mapping

from ..protocol.errors import Err
from . import consumer_group as cg
from .assignors import ASSIGNORS, GroupSpec, MemberSpec, is_homogeneous
from .consumer_group import EMPTY, ConsumerGroup, ConsumerMember, TopicInfo
from .consumer_requests import HeartbeatError
from .result import Record
from .target_assignment import write_new_target


def members_after(group: ConsumerGroup, updated: ConsumerMember | None,
                  replaced: ConsumerMember | None) -> dict[str, ConsumerMember]:
    """The group's members once `updated` is in and `replaced` is out."""
    members = group.members
    if replaced is not None or (updated is not None and
                                members.get(updated.member_id) is not updated):
        members = dict(members)
        if replaced is not None:
            members.pop(replaced.member_id, None)
        if updated is not None:
            members[updated.member_id] = updated
    return members


def preferred_assignor(members: Iterable[ConsumerMember], names: list[str]) -> str:
    """The assignor most members ask for (ServerAssignor), else the first configured."""
    counts: dict[str, int] = {}
    for m in members:
        if m.server_assignor is not None:
            counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
    if counts:
        best = max(counts.items(), key=lambda kv: (kv[1], -names.index(kv[0])
                                                    if kv[0] in names else -len(names)))
        if best[0] in ASSIGNORS:
            return best[0]
    return names[0]


def update_target(group: ConsumerGroup, group_epoch: int, updated: ConsumerMember | None,
                  replaced: ConsumerMember | None, metadata: Mapping[str, TopicInfo],
                  records: list[Record], assignor_names: list[str],
                  allows: Callable[[str, str], bool] | None) -> dict:
    """A new target assignment at `group_epoch` (records of the members whose
    target changed, then the target epoch); returns `updated`'s target.
    `allows(regex, topic)` filters regex matches (None: all)."""
    members = members_after(group, updated, replaced)
    assignor = preferred_assignor(members.values(), assignor_names)
    partitions = {info[0]: info[1] for info in metadata.values()}
    subscription_cache: dict[tuple, frozenset] = {}
    specs: dict[str, MemberSpec] = {}
    for mid, m in members.items():
        key = (m.subscribed_topic_names, m.subscribed_topic_regex)
        subscribed = subscription_cache.get(key)
        if subscribed is None:
            ids = [metadata[n][0] for n in m.subscribed_topic_names if n in metadata]
            regex = m.subscribed_topic_regex
            if regex:
                ids += [metadata[n][0] for n in cg.regex_matches(regex, metadata)
                        if allows is None or allows(regex, n)]
            subscribed = subscription_cache[key] = frozenset(ids)
        current = group.target.get(mid)
        if current is None:
            current = group.target.get(replaced.member_id, EMPTY) \
                if replaced is not None and m is updated else EMPTY
        specs[mid] = MemberSpec(subscribed, current, m.instance_id, m.rack_id)
    result = write_new_target(ASSIGNORS[assignor], (GroupSpec(specs, is_homogeneous(specs)),
                                                    partitions),
                              group.group_id, group_epoch, group.target, specs, records,
                              cg.target_member_record, cg.target_epoch_record)
    if updated is None:
        return EMPTY
    return cg.normalize(result.get(updated.member_id, EMPTY))


def reconcile_member(group: ConsumerGroup, member: ConsumerMember, target_epoch: int,
                     target: dict, owned, records: list[Record]) -> ConsumerMember:
    """Step 3 of a heartbeat (also of a classic member's join): the member
    reconciled towards its target, with a CurrentMemberAssignment record
    if that changed it."""
    if member.is_reconciled_to(target_epoch):
        return member
    try:
        reconciled = cg.reconcile(member, target_epoch, target,
                                  group.current_partition_epoch, owned)
    except cg.FencedError as exc:
        raise HeartbeatError(Err.FENCED_MEMBER_EPOCH, str(exc)) from None
    if reconciled is not member:
        records.append(cg.current_assignment_record(group.group_id, reconciled))
    return reconciled
