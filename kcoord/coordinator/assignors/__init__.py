"""Server-side assignors of the KIP-848 consumer group protocol.

An assignor is a pure function `assign(GroupSpec, partitions) -> {member: assignment}`
where `partitions` maps each subscribed topic id to its partition count.
Members missing from the result get nothing.
"""
from __future__ import annotations

from typing import Callable, Mapping

from . import range as range_assignor
from . import roundrobin, uniform
from .spec import (EMPTY_ASSIGNMENT, Assignment, AssignorError, GroupSpec, MemberSpec, TopicId,
                   assignment_size, is_homogeneous)

AssignFn = Callable[[GroupSpec, Mapping[TopicId, int]], Mapping[str, Assignment]]

#: every assignor kcoord knows, by the name clients use in ServerAssignor
ASSIGNORS: dict[str, AssignFn] = {
    uniform.NAME: uniform.assign,
    range_assignor.NAME: range_assignor.assign,
    roundrobin.NAME: roundrobin.assign,
}


def register(name: str, assign: AssignFn) -> None:
    """Add a server assignor (custom ones come from the `kcoord.assignors`
    entry points, loaded by the server before it starts)."""
    ASSIGNORS[name] = assign

__all__ = ["ASSIGNORS", "AssignFn", "register", "Assignment", "AssignorError", "EMPTY_ASSIGNMENT",
           "GroupSpec", "MemberSpec", "TopicId", "assignment_size", "is_homogeneous"]
