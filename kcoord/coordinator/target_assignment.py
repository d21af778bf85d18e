"""The target-assignment step consumer and share groups take alike (Kafka's
TargetAssignmentBuilder): run the assignor, then write a record for each
member whose target changed and one for the new target epoch."""
from __future__ import annotations

from typing import AbstractSet, Any, Callable, Iterable, Mapping

from ..protocol.errors import Err
from .consumer_group import EMPTY, assignment_equal, normalize
from .consumer_requests import HeartbeatError
from .result import Record


Targets = Mapping[str, Mapping[bytes, AbstractSet[int]]]  # member id -> topic id -> partitions


def write_new_target(assign: Callable[..., Targets], args: tuple[Any, ...],
                     group_id: str, group_epoch: int, before: Targets,
                     member_ids: Iterable[str], records: list[Record],
                     member_record: Callable[[str, str, Mapping], Record],
                     epoch_record: Callable[[str, int], Record]) -> Targets:
    """`assign(*args)`'s targets (member id -> assignment); a failing assignor
    is the heartbeat's UNKNOWN_SERVER_ERROR, never a crash."""
    try:
        result = assign(*args)
    except Exception as exc:  # AssignorError, or a custom assignor's failure
        raise HeartbeatError(Err.UNKNOWN_SERVER_ERROR,
                             f"Failed to compute a new target assignment for epoch "
                             f"{group_epoch}: {exc}") from None
    for mid in member_ids:
        new = result.get(mid, EMPTY)
        old = before.get(mid)
        if old is None or (new is not old and not assignment_equal(normalize(old),
                                                                   normalize(new))):
            records.append(member_record(group_id, mid, new))
    records.append(epoch_record(group_id, group_epoch))
    return result
