"""Group config overrides (pure): validation against the broker's bounds,
clamping of stored values, and the lookup the heartbeat path uses."""
import pytest

from kcoord.coordinator.group_configs import (GroupOverrides, ShareGroupSettings,
                                              clamp_group_configs, validate_group_configs)
from kcoord.protocol.config_types import ConfigError

BROKER = {"group.consumer.session.timeout.ms": 45000,
          "group.consumer.min.session.timeout.ms": 45000,
          "group.consumer.max.session.timeout.ms": 60000,
          "group.consumer.heartbeat.interval.ms": 5000,
          "group.consumer.min.heartbeat.interval.ms": 5000,
          "group.consumer.max.heartbeat.interval.ms": 15000}


def test_validate():
    assert validate_group_configs({"consumer.session.timeout.ms": " 50000 "}, BROKER) == {
        "consumer.session.timeout.ms": 50000}
    for bad in ({"consumer.session.timeout.ms": "44999"},
                {"consumer.heartbeat.interval.ms": "15001"},
                {"consumer.heartbeat.interval.ms": "abc"},
                {"streams.session.timeout.ms": "45000"},
                {"consumer.session.timeout.ms": "45000", "consumer.heartbeat.interval.ms": "45000"}):
        with pytest.raises(ConfigError) as info:
            validate_group_configs(bad, BROKER)
        assert info.value.code == 40


def test_clamp_and_lookup():
    assert clamp_group_configs({"consumer.session.timeout.ms": "90000",
                                "consumer.heartbeat.interval.ms": "1",
                                "nope": "1", "consumer.group.x": "y"}, BROKER) == {
        "consumer.session.timeout.ms": 60000, "consumer.heartbeat.interval.ms": 5000}
    overrides = GroupOverrides()
    assert overrides.get("g", "consumer.session.timeout.ms", 45000) == 45000
    overrides.set("g", {"consumer.session.timeout.ms": 50000})
    assert overrides.get("g", "consumer.session.timeout.ms", 45000) == 50000
    assert overrides.get("g", "consumer.heartbeat.interval.ms", 5000) == 5000
    overrides.set("g", {})
    assert overrides.by_group == {}


SHARE_BROKER = {**BROKER,
                "group.share.session.timeout.ms": 45000,
                "group.share.min.session.timeout.ms": 45000,
                "group.share.max.session.timeout.ms": 60000,
                "group.share.heartbeat.interval.ms": 5000,
                "group.share.min.heartbeat.interval.ms": 5000,
                "group.share.max.heartbeat.interval.ms": 15000,
                "group.share.record.lock.duration.ms": 30000,
                "group.share.min.record.lock.duration.ms": 15000,
                "group.share.max.record.lock.duration.ms": 60000}


def test_share_group_configs():
    """SHARE_GROUPS_REFERENCE 5.4: each share.* key checked as Kafka's GroupConfig."""
    assert validate_group_configs({
        "share.session.timeout.ms": "50000", "share.heartbeat.interval.ms": "6000",
        "share.record.lock.duration.ms": "15000", "share.auto.offset.reset": " Earliest ",
        "share.isolation.level": "READ_COMMITTED"}, SHARE_BROKER) == {
        "share.session.timeout.ms": 50000, "share.heartbeat.interval.ms": 6000,
        "share.record.lock.duration.ms": 15000, "share.auto.offset.reset": "earliest",
        "share.isolation.level": "read_committed"}
    assert validate_group_configs({"share.auto.offset.reset": "by_duration:PT1H30M"},
                                  SHARE_BROKER) == {"share.auto.offset.reset": "by_duration:PT1H30M"}
    for bad in ({"share.session.timeout.ms": "44999"},
                {"share.heartbeat.interval.ms": "15001"},
                {"share.record.lock.duration.ms": "60001"},
                {"share.record.lock.duration.ms": "999"},
                {"share.auto.offset.reset": "none"},
                {"share.auto.offset.reset": "by_duration:-PT1H"},
                {"share.auto.offset.reset": "by_duration:1h"},
                {"share.isolation.level": "serializable"}):
        with pytest.raises(ConfigError) as info:
            validate_group_configs(bad, SHARE_BROKER)
        assert info.value.code == 40 and list(bad)[0] in info.value.message


def test_share_settings_read_query():
    overrides = GroupOverrides()
    assert overrides.share_settings("g", SHARE_BROKER) == ShareGroupSettings(
        "latest", 30000, "read_uncommitted")
    overrides.set("g", validate_group_configs({"share.auto.offset.reset": "earliest",
                                               "share.record.lock.duration.ms": "20000"},
                                              SHARE_BROKER))
    assert overrides.share_settings("g", SHARE_BROKER) == ShareGroupSettings(
        "earliest", 20000, "read_uncommitted")
    assert clamp_group_configs({"share.record.lock.duration.ms": "90000",
                                "share.isolation.level": "bad"}, SHARE_BROKER) == {
        "share.record.lock.duration.ms": 60000}
