"""What a server-side assignor sees and returns: plain data, no group objects.

A topic is identified by its 16-byte topic id.  An assignment maps topic id
to a set of partition numbers; assignments handed *to* an assignor are
read-only (the assignor copies before it changes one, so an unchanged
member keeps the very same object, which the caller can detect cheaply).
"""
from __future__ import annotations

import functools
import gc
from dataclasses import dataclass, field
from typing import AbstractSet, Callable, Mapping, TypeVar

_F = TypeVar("_F", bound=Callable)

TopicId = bytes
Assignment = Mapping[TopicId, AbstractSet[int]]

EMPTY_ASSIGNMENT: Mapping[TopicId, frozenset[int]] = {}


class AssignorError(Exception):
    """The assignor cannot compute an assignment (Kafka's PartitionAssignorException)."""


@dataclass(slots=True)
class MemberSpec:
    """One member: what it subscribes to and its current target assignment."""
    subscribed_topic_ids: AbstractSet[TopicId]
    assignment: Assignment = field(default_factory=dict)
    instance_id: str | None = None
    rack_id: str | None = None


@dataclass(slots=True)
class GroupSpec:
    """The members (in a stable order) and whether all subscribe to the same topics."""
    members: dict[str, MemberSpec]
    homogeneous: bool = True


def is_homogeneous(members: Mapping[str, MemberSpec]) -> bool:
    first = None
    for spec in members.values():
        if first is None:
            first = spec.subscribed_topic_ids
        elif spec.subscribed_topic_ids != first:
            return False
    return True


def assignment_size(assignment: Assignment) -> int:
    return sum(len(p) for p in assignment.values())


def without_gc(fn: _F) -> _F:
    """Run an assignor with the cyclic collector paused: it builds O(members) acyclic
    dicts and sets, and collections triggered by those allocations doubled its time."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        if not gc.isenabled():
            return fn(*args, **kwargs)
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            gc.enable()
    return run  # type: ignore[return-value]
