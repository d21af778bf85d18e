"""A consumer group's subscription metadata: the existing topics its members
subscribe to by name or regex (Kafka's computeSubscriptionMetadata)."""
from __future__ import annotations

from typing import Any, Callable, Mapping

from . import consumer_group as cg
from .consumer_group import TopicInfo


def as_topic_info(info) -> TopicInfo:
    return info if isinstance(info, TopicInfo) else TopicInfo(info[0], info[1])


def compute_subscription_metadata(members, topics: Mapping[str, Any],
                                  regex_allows: Callable[[str, str], bool] | None = None
                                  ) -> dict[str, TopicInfo]:
    """The topics the members subscribe to (by name or regex) that exist in
    `topics`; a regex's matches only where `regex_allows(regex, topic)` says
    so (the authorizer's DESCRIBE filter: ConsumerGroupManager.regex_filter)."""
    names: set[str] = set()
    regexes: set[str] = set()
    for m in members:
        names.update(m.subscribed_topic_names)
        if m.subscribed_topic_regex:
            regexes.add(m.subscribed_topic_regex)
    out: dict[str, TopicInfo] = {}
    for n in names:
        info = topics.get(n)
        if info is not None:
            out[n] = as_topic_info(info)
    for rx in sorted(regexes):
        for n in cg.regex_matches(rx, topics):
            if regex_allows is None or regex_allows(rx, n):
                out[n] = as_topic_info(topics[n])
    return out
