"""Per-group config overrides (Kafka's GroupConfig, KIP-848 settings).

A group may override the broker's group.consumer.session.timeout.ms and
group.consumer.heartbeat.interval.ms, within the broker's min/max bounds;
the heartbeat path reads a group's effective values through
`GroupOverrides`.  kcoord has no share or streams groups, so their keys are
unknown here (INVALID_CONFIG), not silently accepted.
"""
from __future__ import annotations

from typing import Any, Mapping

from ..protocol.config_types import INT, ConfigError, ConfigKey

SESSION_TIMEOUT = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"

# group key -> (definition, the broker key it overrides, the broker's min and max keys)
GROUP_CONFIGS: dict[str, tuple[ConfigKey, str, str, str]] = {
    SESSION_TIMEOUT: (
        ConfigKey(SESSION_TIMEOUT, INT, 45000,
                  "The timeout to detect client failures when using the consumer group protocol."),
        "group.consumer.session.timeout.ms", "group.consumer.min.session.timeout.ms",
        "group.consumer.max.session.timeout.ms"),
    HEARTBEAT_INTERVAL: (
        ConfigKey(HEARTBEAT_INTERVAL, INT, 5000,
                  "The heartbeat interval given to the members of a consumer group."),
        "group.consumer.heartbeat.interval.ms", "group.consumer.min.heartbeat.interval.ms",
        "group.consumer.max.heartbeat.interval.ms"),
}


def validate_group_configs(configs: Mapping[str, str | None],
                           broker: Mapping[str, Any]) -> dict[str, int]:
    """Check a group's complete override set against the broker's bounds;
    -> parsed values.  ConfigError (INVALID_CONFIG) on the first problem."""
    parsed: dict[str, int] = {}
    for name, raw in configs.items():
        entry = GROUP_CONFIGS.get(name)
        if entry is None:
            raise ConfigError(f"Unknown group config name: {name}")
        key, _, low_key, high_key = entry
        value = key.parse(raw)
        low, high = broker[low_key], broker[high_key]
        if not low <= value <= high:
            raise ConfigError(f"Invalid value {raw} for configuration {name}: Value must be in "
                              f"[{low}, {high}] ({low_key}, {high_key})")
        parsed[name] = value
    session = parsed.get(SESSION_TIMEOUT, broker["group.consumer.session.timeout.ms"])
    heartbeat = parsed.get(HEARTBEAT_INTERVAL, broker["group.consumer.heartbeat.interval.ms"])
    if session <= heartbeat:
        raise ConfigError(f"{SESSION_TIMEOUT} ({session}) must be greater than "
                          f"{HEARTBEAT_INTERVAL} ({heartbeat})")
    return parsed


def clamp_group_configs(configs: Mapping[str, str],
                        broker: Mapping[str, Any]) -> dict[str, int]:
    """Stored overrides as they apply under the broker's current bounds
    (Kafka's GroupConfig.evaluate clamps rather than failing): unknown or
    unparsable keys are dropped, values are clamped into [min, max]."""
    out: dict[str, int] = {}
    for name, raw in configs.items():
        entry = GROUP_CONFIGS.get(name)
        if entry is None:
            continue
        key, _, low_key, high_key = entry
        try:
            value = key.parse(raw)
        except ConfigError:
            continue
        out[name] = min(max(value, broker[low_key]), broker[high_key])
    return out


class GroupOverrides:
    """The parsed overrides of every group that has some (group id -> key ->
    value): data the server keeps current, the core only reads."""

    def __init__(self) -> None:
        self.by_group: dict[str, dict[str, int]] = {}

    def get(self, group_id: str, key: str, default: int) -> int:
        overrides = self.by_group.get(group_id)
        if overrides is None:
            return default
        return overrides.get(key, default)

    def set(self, group_id: str, values: dict[str, int]) -> None:
        if values:
            self.by_group[group_id] = dict(values)
        else:
            self.by_group.pop(group_id, None)
