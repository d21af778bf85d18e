"""What the coordinator core tells an observer as it happens.

The core stays deterministic: it only calls these methods (no clock, no
I/O of its own) at a few well-named points; the server plugs in an object
that counts and logs (kcoord/admin/metrics.py).  The default does nothing.
"""
from __future__ import annotations


class CoordinatorObserver:
    """No-op base: override what you need.  What a method returns is ignored
    (-> object: the compiled core checks a declared None at run time)."""

    def rebalance_started(self, group_id: str, protocol: str, epoch: int, members: int,
                          reason: str) -> object:
        """A classic group entered PreparingRebalance (epoch = the generation it
        leaves), or a consumer group's epoch was bumped (epoch = the new one)."""

    def rebalance_completed(self, group_id: str, protocol: str, epoch: int,
                            members: int) -> object:
        """A classic group reached Stable (or Empty) with a new generation, or a
        consumer group reached Stable (or Empty) at its group epoch."""

    def member_expired(self, group_id: str, member_id: str, protocol: str) -> object:
        """A member was removed because its session timed out."""


NULL_OBSERVER = CoordinatorObserver()
