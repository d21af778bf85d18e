"""Whose rights filter a consumer group's regex subscription while an
authorizer is on (Kafka 4.0 resolves a regex only to topics the heartbeat's
principal may DESCRIBE, KAFKA-18813).

The server passes each heartbeat's (principal, client host); this keeps,
per (group, regex), that of the latest heartbeat of a member subscribed
with the regex.  In memory only: after a load, see `filter`."""
from __future__ import annotations

from typing import Callable

from .consumer_group import ConsumerGroup

MAX_KNOWN = 100_000  # groups come and go: bounded (filter falls back to the persisted subscription)


class RegexAccess:
    __slots__ = ("config", "principals")

    def __init__(self, config) -> None:
        self.config = config  # config.topic_describable: set by the server with an authorizer
        self.principals: dict[tuple[str, str], tuple[str, str]] = {}

    def note(self, group: ConsumerGroup, regex: str | None,
             who: tuple[str, str] | None) -> None:
        """A heartbeat of a member subscribed with `regex` came from `who`."""
        if who is not None and regex:
            principals = self.principals
            key = (group.group_id, regex)
            old = principals.get(key)
            if old != who:
                if len(principals) > MAX_KNOWN:
                    principals.clear()
                principals[key] = who
                if old is None:
                    # the first known since a load (or a new regex): the group
                    # resolves again on this or its next heartbeat.  Members of
                    # other principals sharing the regex only change whose rights
                    # the next resolution uses (no refresh each, no epoch churn).
                    group.metadata_refresh = True

    def filter(self, group: ConsumerGroup) -> Callable[[str, str], bool] | None:
        """(regex, topic) -> does a resolution keep this match: all without an
        authorizer; with one, the topics the principal of the latest heartbeat
        of a member subscribed with the regex may DESCRIBE; and while that is
        unknown (a shard just loaded), only the topics the group's persisted
        subscription already holds, so nothing not yet authorized is assigned
        before a heartbeat says who."""
        describable = getattr(self.config, "topic_describable", None)
        if describable is None:
            return None
        principals = self.principals
        gid = group.group_id
        known = group.subscription_metadata

        def allows(regex: str, topic: str) -> bool:
            who = principals.get((gid, regex))
            if who is None:
                return topic in known
            return describable(who[0], who[1], topic)
        return allows
