"""The BROKER config resource: the server's effective config as Kafka's
DescribeConfigs reports it, and its dynamic (AlterConfigs) part.

Sources, highest first: a dynamic override for this node (resource name =
its id), a dynamic cluster default (name ""), the static value from
--config/--set, the default.  Dynamic overrides are kept in the
ConfigStore and written into the live Config values, so the topic log
settings derived from them (log.retention.ms, log.segment.bytes, ...) and
message.max.bytes take effect at once.  A key is dynamic (ReadOnly false)
when it is the primary broker synonym of a topic config, as in Kafka's
DynamicLogConfig; every other key is read-only here (Kafka also makes some
thread-pool and listener keys dynamic; kcoord has nothing to reconfigure
there).  Sensitive keys (PASSWORD type, or a key kcoord does not know)
are described with a null value, in the entry and in its synonyms.
"""
from __future__ import annotations

import re
from typing import Any, Callable

from ..broker.topic_configs import SYNONYM_FACTORS, TOPIC_CONFIGS
from ..protocol.config_types import (BOOLEAN, INT, LIST, LONG, LONG_MAX, PASSWORD, SOURCE_DEFAULT,
                                     SOURCE_DYNAMIC_BROKER, SOURCE_DYNAMIC_DEFAULT_BROKER,
                                     SOURCE_STATIC_BROKER, STRING, ConfigError, ConfigKey)
from .config import DEFAULTS, Config
from .config_store import ConfigStore

# Kafka's PASSWORD-typed broker keys (and listener-prefixed forms of them).
# The security settings added to server config are matched here, so they are
# never shown; add an exact name to SENSITIVE_KEYS if a new one does not match.
SENSITIVE_PATTERN = re.compile(
    r"(^|\.)(ssl\.(keystore|key|truststore)\.password|ssl\.keystore\.key|"
    r"ssl\.keystore\.certificate\.chain|ssl\.truststore\.certificates|sasl\.jaas\.config|"
    r"sasl\.oauthbearer\.client\.credentials\.client\.secret|delegation\.token\.secret\.key|"
    r"password\.encoder\.(old\.)?secret|http\.auth\.basic\.users|http\.auth\.bearer\.token)$")
SENSITIVE_KEYS: set[str] = set()

# broker keys of the topic synonyms that are not a topic key's primary synonym
_SECONDARY = {
    "log.retention.minutes": (INT, None), "log.retention.hours": (INT, 168),
    "log.roll.hours": (INT, 168), "log.roll.jitter.hours": (INT, 0),
    "log.flush.scheduler.interval.ms": (LONG, LONG_MAX),
}
# Kafka broker defaults that differ from the topic key's default
_BROKER_DEFAULTS = {"log.retention.ms": None, "log.roll.ms": None, "log.roll.jitter.ms": None,
                    "log.flush.interval.ms": None}
_LONG_KEYS = {"log.retention.ms", "log.retention.bytes", "log.retention.check.interval.ms",
              "log.flush.interval.messages", "log.cleaner.delete.retention.ms",
              "offsets.retention.check.interval.ms", "offsets.retention.minutes"}
# other Kafka keys tools read (kafka-ui: the version and delete.topic.enable)
_EXTRA = {"delete.topic.enable": (BOOLEAN, True),
          "inter.broker.protocol.version": (STRING, "3.9-IV0"),
          "log.dirs": (STRING, None), "listeners": (STRING, None), "broker.id": (INT, None)}


def _key_type(kind: type, name: str) -> int:
    if kind is bool:
        return BOOLEAN
    if kind is list:
        return LIST
    if kind is int:
        return LONG if name in _LONG_KEYS else INT
    return STRING


def _catalogue() -> tuple[dict[str, ConfigKey], set[str], dict[str, tuple[str, ...]]]:
    """-> (broker keys, the dynamic ones, each key's synonym group from it on)."""
    keys: dict[str, ConfigKey] = {}
    dynamic: set[str] = set()
    groups: dict[str, tuple[str, ...]] = {}
    for topic_key, synonyms in TOPIC_CONFIGS.values():
        for i, name in enumerate(synonyms):
            if i == 0:
                default = _BROKER_DEFAULTS.get(name, topic_key.default)
                keys[name] = ConfigKey(name, topic_key.type, default, topic_key.doc,
                                       topic_key.low, topic_key.high, topic_key.choices,
                                       topic_key.check)
                dynamic.add(name)
            else:
                kind, default = _SECONDARY.get(name, (LONG, None))
                keys[name] = ConfigKey(name, kind, default)
            groups[name] = synonyms[i:]
    for name, (kind, default) in _EXTRA.items():
        keys[name] = ConfigKey(name, kind, default)
    for name, (kind, default) in DEFAULTS.items():
        old = keys.get(name)
        if name in _BROKER_DEFAULTS:
            default = _BROKER_DEFAULTS[name]  # kcoord's own default shows as the hours synonym
        keys[name] = ConfigKey(name, old.type if old else _key_type(kind, name), default,
                               old.doc if old else "", old.low if old else None,
                               old.high if old else None, old.choices if old else None,
                               old.check if old else None)
    return keys, dynamic, groups


BROKER_KEYS, DYNAMIC_KEYS, SYNONYM_GROUPS = _catalogue()


def _security_base(name: str) -> str | None:
    """The security setting a key names (listener.name.<l>[.<mech>]. stripped),
    if kcoord implements it."""
    from ..security.settings import IMPLEMENTED, _base_key
    base = _base_key(name)
    return base if base in IMPLEMENTED else None


def is_sensitive(name: str) -> bool:
    key = BROKER_KEYS.get(name)
    if key is not None and key.type == PASSWORD:
        return True
    if name in SENSITIVE_KEYS or SENSITIVE_PATTERN.search(name):
        return True
    # a key kcoord does not know may hold a secret (Kafka: unknown type is sensitive)
    return key is None and _security_base(name) is None


def key_type(name: str) -> int:
    key = BROKER_KEYS.get(name)
    if key is not None:
        return key.type
    if _security_base(name) is not None:
        return PASSWORD if is_sensitive(name) else STRING
    return 0  # UNKNOWN


class BrokerConfigs:
    def __init__(self, config: Config, store: ConfigStore,
                 on_change: Callable[[], None] | None = None) -> None:
        self.config = config
        self.store = store
        self.on_change = on_change  # re-derive what depends on the values (topic logs)
        self.base = dict(config.values)  # static or default, before dynamic overrides
        self._applied: set[str] = set()  # dynamic keys written into the live values
        self.node_id = str(config["node.id"])
        self._apply()

    # ------------------------------------------------------------ values
    def _layers(self) -> list[tuple[int, dict[str, str]]]:
        static = {k: v for k, v in self.config.static.items()}
        return [(SOURCE_DYNAMIC_BROKER, self.store.get("broker", self.node_id)),
                (SOURCE_DYNAMIC_DEFAULT_BROKER, self.store.get("broker", "")),
                (SOURCE_STATIC_BROKER, static)]

    def _apply(self) -> None:
        """Write the effective dynamic values into the live config."""
        values = self.config.values
        dynamic_now = {**self.store.get("broker", ""), **self.store.get("broker", self.node_id)}
        for name in DYNAMIC_KEYS | set(dynamic_now) | self._applied:
            if name in dynamic_now:
                key = BROKER_KEYS.get(name)
                values[name] = key.parse(dynamic_now[name]) if key else dynamic_now[name]
            elif name in self.base:
                values[name] = self.base[name]
            else:
                values.pop(name, None)
        self._applied = set(dynamic_now)
        if self.on_change is not None:
            self.on_change()

    def _value(self, name: str, raw: str) -> str | None:
        if is_sensitive(name):
            return None
        key = BROKER_KEYS.get(name)
        try:
            return key.render(key.parse(raw)) if key else raw
        except ConfigError:
            return raw

    def synonyms(self, names: tuple[str, ...]) -> list[tuple[str, str | None, int]]:
        """(name, value, source) of every set synonym, highest source first,
        each source's synonyms in priority order; defaults last (null ones left out)."""
        out = []
        for source, layer in self._layers():
            for name in names:
                if name in layer:
                    out.append((name, self._value(name, layer[name]), source))
        for name in names:
            key = BROKER_KEYS.get(name)
            if key is not None and key.default is not None:
                out.append((name, None if is_sensitive(name) else key.render(key.default),
                            SOURCE_DEFAULT))
        return out

    def effective(self, names: tuple[str, ...]) -> Any:
        """The typed value of the highest set synonym (converted to the first
        name's unit), or None if none is set and none has a default."""
        for name, _value, source in self.synonyms(names):
            raw = self._raw(name, source)
            key = BROKER_KEYS.get(name)
            value = key.parse(raw) if key is not None and isinstance(raw, str) else raw
            if value is not None and name in SYNONYM_FACTORS and names[0] not in SYNONYM_FACTORS:
                value = value * SYNONYM_FACTORS[name]
            return value
        return None

    def _raw(self, name: str, source: int) -> Any:
        if source == SOURCE_DEFAULT:
            return BROKER_KEYS[name].default
        return dict(self._layers())[source][name]

    # ---------------------------------------------------------- describe
    def entries(self, resource_name: str) -> list[dict]:
        """Every config entry of the resource, before key filtering: for this
        node's id all keys, for "" only the dynamic cluster defaults."""
        if resource_name == "":
            return [self._entry(name, ((name, self._value(name, raw),
                                        SOURCE_DYNAMIC_DEFAULT_BROKER),))
                    for name, raw in sorted(self.store.get("broker", "").items())]
        names = set(BROKER_KEYS) | set(self.config.static)
        for _, layer in self._layers():
            names |= set(layer)
        out = []
        for name in sorted(names):
            synonyms = self.synonyms(SYNONYM_GROUPS.get(name, (name,)))
            if name in ("log.dirs",):
                synonyms = [(name, str(self.config.data_dir.resolve()), SOURCE_STATIC_BROKER)]
            elif name == "listeners" and name not in self.config.static:
                synonyms = [(name, f"PLAINTEXT://{self.config.host}:{self.config.port}",
                             SOURCE_STATIC_BROKER)]
            elif name == "broker.id":
                synonyms = [(name, self.node_id, SOURCE_STATIC_BROKER)]
            out.append(self._entry(name, synonyms))
        return out

    def _entry(self, name: str, synonyms) -> dict:
        key = BROKER_KEYS.get(name)
        sensitive = is_sensitive(name)
        value = None
        # Kafka shows the key's own value: null while only a coarser synonym is
        # set or defaulted (log.retention.ms beside log.retention.hours=168),
        # the source being that synonym's
        if synonyms and not sensitive and (synonyms[0][0] == name or key is None):
            value = synonyms[0][1]
        source = synonyms[0][2] if synonyms else SOURCE_DEFAULT
        return {"name": name, "value": value, "read_only": name not in DYNAMIC_KEYS,
                "config_source": source, "is_sensitive": sensitive,
                "synonyms": [{"name": n, "value": v, "source": s} for n, v, s in synonyms],
                "config_type": key_type(name),
                "documentation": key.doc if key and key.doc else None}

    # ------------------------------------------------------------- alter
    def check_name(self, resource_name: str) -> None:
        if resource_name != "" and resource_name != self.node_id:
            try:
                int(resource_name)
            except ValueError:
                raise ConfigError(f"Invalid broker id {resource_name!r}", code=42) from None
            raise ConfigError(f"Unexpected broker id, expected {self.node_id} but received "
                              f"{resource_name}", code=42)

    def current(self, resource_name: str) -> dict[str, str]:
        return self.store.get("broker", resource_name)

    def validate(self, _resource_name: str, configs: dict[str, str | None]) -> dict[str, str]:
        """Check a complete dynamic set; failures are INVALID_REQUEST, as in Kafka."""
        out = {}
        for name, raw in configs.items():
            if raw is None:
                raise ConfigError(f"Null value not supported for {name}", code=42)
            key = BROKER_KEYS.get(name)
            if key is not None and name not in DYNAMIC_KEYS:
                raise ConfigError(f"Cannot update these configs dynamically: [{name}]", code=42)
            if key is None:
                out[name] = raw  # a custom key: kept (and shown as sensitive), used by nothing
                continue
            try:
                out[name] = key.render(key.parse(raw))
            except ConfigError as exc:
                raise ConfigError(exc.message, code=42) from None
        return out

    def replace(self, resource_name: str, configs: dict[str, str]) -> None:
        self.store.put("broker", resource_name, configs)
        self._apply()
