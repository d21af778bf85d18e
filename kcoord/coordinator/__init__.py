"""The group coordinator's core: sans-I/O (no sockets, no asyncio, no wall
clock).  What the rest of kcoord uses of it is declared here: the shard and
its config, the result and record types its operations exchange with the
runtime, and the queries readers ask through runtime.read / read_all
(queries.py) instead of walking the core's state."""
from .queries import (CommittedOffset, GroupOverview, committed_offsets, group_overviews,
                      offset_count, partition_owners, share_group_overviews)
from .result import AppliedRecord, Record, Result, Timer
from .shard import CoordinatorConfig, CoordinatorShard

__all__ = ["AppliedRecord", "CommittedOffset", "CoordinatorConfig", "CoordinatorShard",
           "GroupOverview", "Record", "Result", "Timer", "committed_offsets", "group_overviews",
           "offset_count", "partition_owners", "share_group_overviews"]
