"""Group config overrides (pure): validation against the broker's bounds,
clamping of stored values, and the lookup the heartbeat path uses."""
import pytest

from kcoord.coordinator.group_configs import (GroupOverrides, clamp_group_configs,
                                              validate_group_configs)
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
                {"share.session.timeout.ms": "45000"},
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
