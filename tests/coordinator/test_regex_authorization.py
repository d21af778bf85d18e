"""Regex subscriptions with an authorizer, in the core with a fake clock: a
regex resolves only to topics the principal of a heartbeat of a member
subscribed with it may DESCRIBE (Kafka 4.0).  The server passes
each heartbeat's principal as its argument; here the test does."""
from __future__ import annotations

import pytest

from kcoord.coordinator.consumer_group import TopicInfo
from kcoord.coordinator.shard import CoordinatorConfig
from tests.coordinator.cg_harness import Harness, hb_request, join_request, owned_list, tid

FOO, FOO_EU, SECRET, NEW = tid(1), tid(2), tid(3), tid(4)
TOPICS = {"foo": TopicInfo(FOO, 2), "foo-eu": TopicInfo(FOO_EU, 1),
          "foo-secret": TopicInfo(SECRET, 1)}
ALICE, BOB = ("User:alice", "127.0.0.1"), ("User:bob", "127.0.0.1")


def describable(principal: str, host: str, topic: str) -> bool:
    return principal == "User:bob" or topic != "foo-secret"


@pytest.fixture
def h():
    harness = Harness(CoordinatorConfig(topic_describable=describable), topics=TOPICS)
    yield harness
    assert harness.replayed().snapshot() == harness.shard.snapshot()


def beat(h, who, req) -> dict:
    return h.heartbeat(req, principal=who)


def ack(h, who, member_id) -> dict:
    m = h.member(member_id)
    return beat(h, who, hb_request("g", member_id, m.member_epoch,
                                   owned=owned_list(m.assigned)))


def topics_of(h, member_id) -> set[bytes]:
    return {t for t, parts in h.group().target[member_id].items() if parts}


def test_regex_skips_topics_the_principal_may_not_describe(h):
    beat(h, ALICE, join_request("a", names=None, regex="foo.*"))
    assert set(h.group().subscription_metadata) == {"foo", "foo-eu"}
    assert topics_of(h, "a") == {FOO, FOO_EU}
    # bob subscribes by name to foo-secret: it is in the group's topics now,
    # yet alice's regex still does not resolve to it
    beat(h, BOB, join_request("b", names=["foo-secret"]))
    assert "foo-secret" in h.group().subscription_metadata
    assert topics_of(h, "b") == {SECRET}
    assert SECRET not in topics_of(h, "a")


def test_without_an_authorizer_the_regex_takes_every_match():
    h = Harness(topics=TOPICS)
    h.heartbeat(join_request("a", names=None, regex="foo.*"))
    assert set(h.group().subscription_metadata) == {"foo", "foo-eu", "foo-secret"}


def test_after_a_load_nothing_new_until_a_heartbeat_says_who(h):
    beat(h, ALICE, join_request("a", names=None, regex="foo.*"))
    ack(h, ALICE, "a")
    h.reload()  # in-memory principals are gone
    h.set_topics(dict(TOPICS, **{"foo-new": TopicInfo(NEW, 1)}))
    # unknown principal: only what the persisted subscription held
    assert set(h.group().subscription_metadata) == {"foo", "foo-eu"}
    ack(h, ALICE, "a")  # a steady heartbeat: now alice's rights are known
    ack(h, ALICE, "a")  # the next one resolves again
    assert set(h.group().subscription_metadata) == {"foo", "foo-eu", "foo-new"}
    assert topics_of(h, "a") == {FOO, FOO_EU, NEW}
