"""group.share.* broker configs: Kafka's defaults, ranges and relations
(SHARE_GROUPS_REFERENCE section 5); a bad value is one line naming the key."""
from __future__ import annotations

import pytest

from kcoord.coordinator.shard import CoordinatorConfig
from kcoord.server.config import Config, check_consistency


def test_defaults():
    c = Config()
    assert {k: c[k] for k in c.values if k.startswith("group.share.")} == {
        "group.share.session.timeout.ms": 45000,
        "group.share.min.session.timeout.ms": 45000,
        "group.share.max.session.timeout.ms": 60000,
        "group.share.heartbeat.interval.ms": 5000,
        "group.share.min.heartbeat.interval.ms": 5000,
        "group.share.max.heartbeat.interval.ms": 15000,
        "group.share.max.size": 200,
        "group.share.assignors": ["simple"],
        "group.share.initialize.retry.interval.ms": 30000,
        "group.share.delivery.count.limit": 5,
        "group.share.record.lock.duration.ms": 30000,
        "group.share.min.record.lock.duration.ms": 15000,
        "group.share.max.record.lock.duration.ms": 60000,
        "group.share.partition.max.record.locks": 2000,
        "group.share.max.share.sessions": 2000,
    }
    check_consistency(c.values)
    core = CoordinatorConfig.from_values(c.values)
    assert (core.share_group_session_timeout_ms, core.share_group_heartbeat_interval_ms,
            core.share_group_max_size) == (45000, 5000, 200)


@pytest.mark.parametrize("key, value", [
    ("group.share.max.size", "0"), ("group.share.max.size", "1001"),
    ("group.share.delivery.count.limit", "1"), ("group.share.delivery.count.limit", "11"),
    ("group.share.record.lock.duration.ms", "999"),
    ("group.share.min.record.lock.duration.ms", "30001"),
    ("group.share.max.record.lock.duration.ms", "29999"),
    ("group.share.partition.max.record.locks", "99"),
    ("group.share.partition.max.record.locks", "10001"),
    ("group.share.session.timeout.ms", "0"),
    ("group.share.max.share.sessions", "x"),
])
def test_out_of_range(key, value):
    with pytest.raises(ValueError) as info:
        Config().set(key, value)
    message = str(info.value)
    assert message.startswith(key + ":") and "\n" not in message


@pytest.mark.parametrize("settings, key", [
    ({"group.share.session.timeout.ms": "30000"}, "group.share.session.timeout.ms"),
    ({"group.share.heartbeat.interval.ms": "20000"}, "group.share.heartbeat.interval.ms"),
    ({"group.share.record.lock.duration.ms": "70000"}, "group.share.record.lock.duration.ms"),
    ({"group.share.min.session.timeout.ms": "50000",
      "group.share.max.session.timeout.ms": "46000",
      "group.share.session.timeout.ms": "46000"}, "group.share.max.session.timeout.ms"),
    ({"group.share.max.size": "300", "group.share.max.share.sessions": "250"},
     "group.share.max.share.sessions"),
    ({"group.share.assignors": "simple,other"}, "group.share.assignors"),
    ({"group.share.assignors": "uniform"}, "group.share.assignors"),
])
def test_relations(settings, key):
    c = Config()
    c.update(settings)
    with pytest.raises(ValueError) as info:
        check_consistency(c.values)
    assert str(info.value).startswith(key) and "\n" not in str(info.value)
