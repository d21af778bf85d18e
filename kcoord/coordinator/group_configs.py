"""Per-group config overrides (Kafka's GroupConfig, Kafka 4.2).

A group may override, within the broker's min/max bounds, the consumer-group
session timeout and heartbeat interval (consumer.*) and the share-group
settings (share.*: session timeout, heartbeat interval, record lock
duration, auto offset reset, isolation level; SHARE_GROUPS_REFERENCE 5.4).
The heartbeat paths and the share partitions read a group's effective
values through `GroupOverrides`.  Streams groups' keys are unknown here
(INVALID_CONFIG), not silently accepted.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from ..protocol.config_types import INT, STRING, ConfigError, ConfigKey

SESSION_TIMEOUT = "consumer.session.timeout.ms"
HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"
SHARE_SESSION_TIMEOUT = "share.session.timeout.ms"
SHARE_HEARTBEAT_INTERVAL = "share.heartbeat.interval.ms"
SHARE_RECORD_LOCK_DURATION = "share.record.lock.duration.ms"
SHARE_AUTO_OFFSET_RESET = "share.auto.offset.reset"
SHARE_ISOLATION_LEVEL = "share.isolation.level"

_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$")


def duration_ms(text: str) -> int | None:
    """An ISO-8601 duration (PnDTnHnMnS, as Java's Duration.parse) in ms;
    None if it is not one."""
    m = _DURATION.match(text.strip().upper())
    if m is None or not any(m.groups()):
        return None
    d, h, mi, s = m.groups()
    return int(((int(d or 0) * 24 + int(h or 0)) * 60 + int(mi or 0)) * 60000
               + float(s or 0) * 1000)


def _auto_offset_reset_problem(value: str) -> str | None:
    """ShareGroupAutoOffsetResetStrategy: earliest, latest or by_duration:<ISO-8601>."""
    text = value.strip().lower()
    if text in ("earliest", "latest"):
        return None
    if text.startswith("by_duration:"):
        if duration_ms(value.strip()[len("by_duration:"):]) is not None:
            return None
        return "Invalid duration, it must be an ISO-8601 duration that is not negative"
    return "Invalid value, it must be earliest, latest or by_duration:<ISO-8601 duration>"


# group key -> (definition, the broker key it defaults to (None: the definition's
# default), the broker's min and max keys (None: no bounds))
GROUP_CONFIGS: dict[str, tuple[ConfigKey, str | None, str | None, str | None]] = {
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
    SHARE_SESSION_TIMEOUT: (
        ConfigKey(SHARE_SESSION_TIMEOUT, INT, 45000,
                  "The timeout to detect client failures when using the share group protocol."),
        "group.share.session.timeout.ms", "group.share.min.session.timeout.ms",
        "group.share.max.session.timeout.ms"),
    SHARE_HEARTBEAT_INTERVAL: (
        ConfigKey(SHARE_HEARTBEAT_INTERVAL, INT, 5000,
                  "The heartbeat interval given to the members of a share group."),
        "group.share.heartbeat.interval.ms", "group.share.min.heartbeat.interval.ms",
        "group.share.max.heartbeat.interval.ms"),
    SHARE_RECORD_LOCK_DURATION: (
        ConfigKey(SHARE_RECORD_LOCK_DURATION, INT, 30000,
                  "The record acquisition lock duration in milliseconds for share groups.",
                  low=1000),
        "group.share.record.lock.duration.ms", "group.share.min.record.lock.duration.ms",
        "group.share.max.record.lock.duration.ms"),
    SHARE_AUTO_OFFSET_RESET: (
        ConfigKey(SHARE_AUTO_OFFSET_RESET, STRING, "latest",
                  "The strategy to initialize the share-partition start offset: earliest, "
                  "latest or by_duration:<ISO-8601 duration>.",
                  check=_auto_offset_reset_problem),
        None, None, None),
    SHARE_ISOLATION_LEVEL: (
        ConfigKey(SHARE_ISOLATION_LEVEL, STRING, "read_uncommitted",
                  "How to read records written transactionally: read_committed or "
                  "read_uncommitted.", choices=("read_committed", "read_uncommitted")),
        None, None, None),
}

# (session key, heartbeat key): a group's session must be longer than its interval
_SESSION_PAIRS = ((SESSION_TIMEOUT, HEARTBEAT_INTERVAL),
                  (SHARE_SESSION_TIMEOUT, SHARE_HEARTBEAT_INTERVAL))


def _normalized(key: ConfigKey, value: Any) -> Any:
    """A string config as stored: lower case, but a by_duration's duration as given."""
    if key.type != STRING:
        return value
    text = value.strip()
    if text.lower().startswith("by_duration:"):
        return "by_duration:" + text[len("by_duration:"):]
    return text.lower()


def broker_default(name: str, broker: Mapping[str, Any]) -> Any:
    """The value a group has for `name` when it does not override it."""
    key, broker_key, _, _ = GROUP_CONFIGS[name]
    return key.default if broker_key is None else broker.get(broker_key, key.default)


def validate_group_configs(configs: Mapping[str, str | None],
                           broker: Mapping[str, Any]) -> dict[str, Any]:
    """Check a group's complete override set against the broker's bounds;
    -> parsed values.  ConfigError (INVALID_CONFIG) on the first problem."""
    parsed: dict[str, Any] = {}
    for name, raw in configs.items():
        entry = GROUP_CONFIGS.get(name)
        if entry is None:
            raise ConfigError(f"Unknown group config name: {name}")
        key, _, low_key, high_key = entry
        value = _normalized(key, key.parse(raw))
        if low_key is not None and high_key is not None:
            low, high = broker[low_key], broker[high_key]
            if not low <= value <= high:
                raise ConfigError(f"Invalid value {raw} for configuration {name}: Value must be "
                                  f"in [{low}, {high}] ({low_key}, {high_key})")
        parsed[name] = value
    for session_key, heartbeat_key in _SESSION_PAIRS:
        session = parsed.get(session_key, broker_default(session_key, broker))
        heartbeat = parsed.get(heartbeat_key, broker_default(heartbeat_key, broker))
        if session <= heartbeat:
            raise ConfigError(f"{session_key} ({session}) must be greater than "
                              f"{heartbeat_key} ({heartbeat})")
    return parsed


def clamp_group_configs(configs: Mapping[str, str],
                        broker: Mapping[str, Any]) -> dict[str, Any]:
    """Stored overrides as they apply under the broker's current bounds
    (Kafka's GroupConfig.evaluate clamps rather than failing): unknown or
    unparsable keys are dropped, values are clamped into [min, max]."""
    out: dict[str, Any] = {}
    for name, raw in configs.items():
        entry = GROUP_CONFIGS.get(name)
        if entry is None:
            continue
        key, _, low_key, high_key = entry
        try:
            value = _normalized(key, key.parse(raw))
        except ConfigError:
            continue
        if low_key is not None and high_key is not None:
            value = min(max(value, broker[low_key]), broker[high_key])
        out[name] = value
    return out


@dataclass(frozen=True, slots=True)
class ShareGroupSettings:
    """What a share partition leader needs of its group's configs."""
    auto_offset_reset: str        # earliest, latest or by_duration:<ISO-8601>
    record_lock_duration_ms: int
    isolation_level: str          # read_committed or read_uncommitted


class GroupOverrides:
    """The parsed overrides of every group that has some (group id -> key ->
    value): data the server keeps current, the core only reads."""

    def __init__(self) -> None:
        self.by_group: dict[str, dict[str, Any]] = {}

    def get(self, group_id: str, key: str, default: Any) -> Any:
        overrides = self.by_group.get(group_id)
        if overrides is None:
            return default
        return overrides.get(key, default)

    def share_settings(self, group_id: str, broker: Mapping[str, Any]) -> ShareGroupSettings:
        """The read query for the share-partition leader: the group's effective
        share.auto.offset.reset, share.record.lock.duration.ms and
        share.isolation.level (its overrides, else the broker's defaults)."""
        def value(name: str):
            return self.get(group_id, name, broker_default(name, broker))
        return ShareGroupSettings(value(SHARE_AUTO_OFFSET_RESET),
                                  value(SHARE_RECORD_LOCK_DURATION),
                                  value(SHARE_ISOLATION_LEVEL))

    def set(self, group_id: str, values: dict[str, Any]) -> None:
        if values:
            self.by_group[group_id] = dict(values)
        else:
            self.by_group.pop(group_id, None)
