"""What readers outside the core may ask a shard's core (the metrics, the
status page, the Burrow API, lag): plain data, computed from the core's
state on the runtime's read path (runtime.read_all), so a reader never
walks the core's dicts itself."""
from __future__ import annotations

from typing import NamedTuple

from ..protocol.messages.consumer_protocol import decode_assignment


class GroupOverview(NamedTuple):
    group_id: str
    protocol: str    # "classic", "simple" (offsets only) or "consumer" (KIP-848)
    state: str       # the group's state as DescribeGroups/ConsumerGroupDescribe name it
    members: int
    epoch: int       # generation (classic) or group epoch (consumer)


class CommittedOffset(NamedTuple):
    group_id: str
    topic: str
    partition: int
    offset: int


def group_overviews(core) -> list[GroupOverview]:
    """Every group of the shard, classic and KIP-848."""
    out = [GroupOverview(gid, "classic" if g.protocol_type is not None else "simple", g.state,
                         len(g.members), g.generation_id) for gid, g in core.groups.items()]
    out += [GroupOverview(gid, "consumer", g.state, len(g.members), g.group_epoch)
            for gid, g in core.consumer.groups.items()]
    return out


def share_group_overviews(core) -> list[GroupOverview]:
    """Every KIP-932 share group of the shard."""
    return [GroupOverview(gid, "share", g.state, len(g.members), g.group_epoch)
            for gid, g in core.share.groups.items()]


def committed_offsets(core) -> list[CommittedOffset]:
    """Every committed offset of the shard, by group, then partition."""
    return [CommittedOffset(group, topic, partition, value.offset)
            for group, offsets in core.offsets.by_group.items()
            for (topic, partition), value in sorted(offsets.items())]


def offset_count(core) -> int:
    return sum(len(o) for o in core.offsets.by_group.values())


def partition_owners(core, group_id: str) -> dict[tuple[str, int], tuple[str, str]]:
    """(topic, partition) -> (owner's client host, client id) in the live group."""
    out: dict[tuple[str, int], tuple[str, str]] = {}
    cgroup = core.consumer.groups.get(group_id)
    if cgroup is not None:
        names = {info[0]: n for n, info in cgroup.subscription_metadata.items()}
        for m in cgroup.members.values():
            for tid, parts in m.assigned.items():
                for p in parts:
                    out[(names.get(tid, ""), p)] = (m.client_host, m.client_id)
    classic = core.groups.get(group_id)
    if classic is not None and classic.protocol_type == "consumer":
        for m in classic.members.values():
            if not m.assignment:
                continue
            try:
                _, a = decode_assignment(m.assignment)
            except Exception:  # a client's bytes: an undecodable assignment owns nothing
                continue
            for tp in a.get("assigned_partitions") or []:
                for p in tp["partitions"]:
                    out[(tp["topic"], p)] = (m.client_host, m.client_id)
    return out
