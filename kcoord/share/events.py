"""What a share partition tells an observer as records change state.

The share partition stays sans-I/O: it only calls these at the points where
records are acquired, acknowledged, archived or their lock times out; the
server plugs in counters (kcoord/observe/share_metrics.py) when /metrics is
on.  The default does nothing.
"""
from __future__ import annotations

# why a record was archived (the `reason` of archived())
REJECTED = "rejected"              # acknowledged REJECT
DELIVERY_LIMIT = "delivery_limit"  # released or timed out at group.share.delivery.count.limit
NO_RECORD = "no_record"            # compacted away, below the log start, a gap, aborted data


class ShareEvents:
    """No-op base: override what you need.  `n` is a number of records."""

    def acquired(self, delivery_count: int, n: int) -> None:
        """n records acquired by a member, at this delivery count."""

    def acknowledged(self, kind: int, n: int) -> None:
        """n records acknowledged ACCEPT, RELEASE or REJECT (applied; durable
        once its write is done, as Kafka counts at the request)."""

    def archived(self, reason: str, n: int) -> None:
        """n records archived (never delivered again)."""

    def lock_timed_out(self, n: int) -> None:
        """n acquired records whose acquisition lock ran out."""

    def session_released(self, n: int) -> None:
        """n acquired records given back because their member's share session ended."""


NO_EVENTS = ShareEvents()
