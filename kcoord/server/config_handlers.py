"""DescribeConfigs (32), AlterConfigs (33) and IncrementalAlterConfigs (44).

Each resource type is a small adapter (describe its entries, read its
current overrides, validate a complete override set, replace it) in
RESOURCES; the handlers do what is common: key filtering, synonyms and
documentation by version, duplicate checks, the incremental operations,
validate_only, and one result per resource in request order.
"""
from __future__ import annotations

import logging
from typing import Protocol

from ..broker.catalogue import Catalogue, topic_name_problem
from ..broker.topic_configs import TOPIC_CONFIGS, validate_topic_configs
from ..coordinator.group_configs import (GROUP_CONFIGS, GroupOverrides, clamp_group_configs,
                                         validate_group_configs)
from ..protocol.config_types import (LIST, SOURCE_DEFAULT, SOURCE_GROUP, SOURCE_TOPIC,
                                     ConfigError)
from ..protocol.api import serves
from ..protocol.errors import Err
from .broker_configs import BROKER_KEYS, BrokerConfigs
from .config import Config
from .config_store import ConfigStore
from .logger_configs import BrokerLoggerResource

log = logging.getLogger("kcoord.configs")

TOPIC, BROKER, BROKER_LOGGER, GROUP = 2, 4, 8, 32
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


class ConfigResource(Protocol):
    def check_name(self, name: str, altering: bool = False) -> None: ...  # ConfigError if bad
    def entries(self, name: str) -> list[dict]: ...          # every entry, unfiltered
    def current(self, name: str) -> dict[str, str]: ...      # stored overrides
    def key_type(self, name: str, key: str) -> int | None: ...
    def effective_list(self, name: str, key: str) -> list[str]: ...
    def validate(self, name: str, configs: dict) -> dict[str, str]: ...  # canonical set
    def replace(self, name: str, configs: dict[str, str]) -> None: ...


def _entry(name, value, source, synonyms, key_type, doc, read_only=False, sensitive=False):
    return {"name": name, "value": value, "read_only": read_only, "config_source": source,
            "is_sensitive": sensitive,
            "synonyms": [{"name": n, "value": v, "source": s} for n, v, s in synonyms],
            "config_type": key_type, "documentation": doc or None}


class TopicResource:
    def __init__(self, catalogue: Catalogue, brokers: BrokerConfigs) -> None:
        self.catalogue = catalogue
        self.brokers = brokers
        # cluster mode: the node whose etcd catalogue every node mirrors
        self.cluster = None

    @property
    def replicated(self) -> bool:
        return self.cluster is not None

    def check_name(self, name: str, altering: bool = False) -> None:
        if name == "" and altering:
            raise ConfigError("Default topic resources are not allowed.", Err.INVALID_REQUEST)
        problem = topic_name_problem(name)
        if problem:
            raise ConfigError(problem, Err.INVALID_TOPIC_EXCEPTION)
        if self.catalogue.get(name) is None:
            raise ConfigError(f"Topic {name} does not exist", Err.UNKNOWN_TOPIC_OR_PARTITION)

    def current(self, name: str) -> dict[str, str]:
        return dict(self.catalogue.get(name).configs)

    def key_type(self, _name: str, key: str) -> int | None:
        entry = TOPIC_CONFIGS.get(key)
        return entry[0].type if entry else None

    def value(self, name: str, key: str, overrides: dict[str, str] | None = None):
        """The typed effective value: override, else the broker's, else the default."""
        definition, synonyms = TOPIC_CONFIGS[key]
        if overrides is None:
            overrides = self.catalogue.get(name).configs
        override = overrides.get(key)
        if override is not None:
            return definition.parse(override)
        if synonyms:
            value = self.brokers.effective(synonyms)
            if value is not None:
                return value
        return definition.default

    def effective_list(self, name: str, key: str) -> list[str]:
        return list(self.value(name, key))

    def entries(self, name: str, overrides: dict[str, str] | None = None) -> list[dict]:
        """Every key's entry; `overrides` (a topic being created) instead of the stored ones."""
        if overrides is None:
            overrides = self.catalogue.get(name).configs
        out = []
        for key in sorted(TOPIC_CONFIGS):
            definition, synonyms = TOPIC_CONFIGS[key]
            chain = []
            if key in overrides:
                chain.append((key, definition.render(definition.parse(overrides[key])),
                              SOURCE_TOPIC))
            broker = self.brokers.synonyms(synonyms) if synonyms else []
            # Kafka's ConfigHelper cuts the broker part so it starts at the primary synonym
            while broker and broker[0][0] != synonyms[0]:
                broker.pop(0)
            chain += broker
            source = chain[0][2] if chain else SOURCE_DEFAULT
            value = definition.parse(overrides[key]) if key in overrides \
                else self.value(name, key, {})
            out.append(_entry(key, definition.render(value), source, chain,
                              definition.type, definition.doc))
        return out

    def validate(self, _name: str, configs: dict) -> dict[str, str]:
        parsed = validate_topic_configs(configs)
        return {k: TOPIC_CONFIGS[k][0].render(v) for k, v in parsed.items()}

    def replace(self, name: str, configs: dict[str, str]):
        if self.cluster is not None:  # through etcd: an awaitable the handler waits for
            return self.cluster.set_topic_configs(name, configs)
        self.catalogue.set_configs(name, configs)
        log.info("topic %s configs now %s", name, configs or "{}")


class _EntityOverrides:
    """Group and broker overrides: in cluster mode they go through etcd and
    every node applies them; alone, they apply here."""
    entity_type = ""
    cluster = None

    @property
    def replicated(self) -> bool:
        return self.cluster is not None

    def replace(self, name: str, configs: dict[str, str]):
        if self.cluster is not None:
            return self.cluster.set_entity_configs(self.entity_type, name, configs)
        self.apply(name, configs)


class GroupResource(_EntityOverrides):
    entity_type = "group"

    def __init__(self, config: Config, store: ConfigStore, overrides: GroupOverrides) -> None:
        self.config = config
        self.store = store
        self.overrides = overrides
        for group_id in store.names("group"):  # a restart brings the overrides back
            stored = store.get("group", group_id)
            try:
                overrides.set(group_id, validate_group_configs(stored, config.values))
            except ConfigError as exc:  # the broker's bounds changed since: clamp, as Kafka
                log.warning("group %s: stored configs %s do not fit the broker's bounds (%s); "
                            "clamped", group_id, stored, exc.message)
                overrides.set(group_id, clamp_group_configs(stored, config.values))

    def check_name(self, name: str,
                   altering: bool = False) -> None:  # noqa: ARG002 (the interface's keyword)
        if name == "":
            raise ConfigError("Group name must not be empty", Err.INVALID_REQUEST)

    def current(self, name: str) -> dict[str, str]:
        return self.store.get("group", name)

    def key_type(self, _name: str, key: str) -> int | None:
        entry = GROUP_CONFIGS.get(key)
        return entry[0].type if entry else None

    def effective_list(self, _name: str, _key: str) -> list[str]:
        return []

    def entries(self, name: str) -> list[dict]:
        overrides = self.store.get("group", name)
        out = []
        for key in sorted(GROUP_CONFIGS):
            definition, broker_key, _, _ = GROUP_CONFIGS[key]
            if key in overrides:
                value, source = definition.render(definition.parse(overrides[key])), SOURCE_GROUP
                chain = [(key, value, SOURCE_GROUP)]
            else:  # the broker's value, or the group config's own default
                default = definition.default if broker_key is None else self.config.values[broker_key]
                value, source, chain = definition.render(default), SOURCE_DEFAULT, []
            out.append(_entry(key, value, source, chain, definition.type, definition.doc))
        return out

    def validate(self, _name: str, configs: dict) -> dict[str, str]:
        for key, raw in configs.items():
            if raw is None:
                raise ConfigError(f"Null value not supported for {key}", Err.INVALID_REQUEST)
        parsed = validate_group_configs(configs, self.config.values)
        return {k: str(v) for k, v in parsed.items()}

    def apply(self, name: str, configs: dict[str, str]) -> None:
        self.store.put("group", name, configs)
        try:
            self.overrides.set(name, validate_group_configs(configs, self.config.values))
        except ConfigError:  # another node's bounds accepted it: clamp into ours
            self.overrides.set(name, clamp_group_configs(configs, self.config.values))
        log.info("group %s configs now %s", name, configs or "{}")


class BrokerResource(_EntityOverrides):
    entity_type = "broker"

    def __init__(self, brokers: BrokerConfigs) -> None:
        self.brokers = brokers

    def check_name(self, name: str,
                   altering: bool = False) -> None:  # noqa: ARG002 (the interface's keyword)
        self.brokers.check_name(name)

    def current(self, name: str) -> dict[str, str]:
        return self.brokers.current(name)

    def key_type(self, _name: str, key: str) -> int | None:
        definition = BROKER_KEYS.get(key)
        return definition.type if definition else None

    def effective_list(self, _name: str, key: str) -> list[str]:
        value = self.brokers.effective((key,))
        return list(value or [])

    def entries(self, name: str) -> list[dict]:
        return self.brokers.entries(name)

    def validate(self, name: str, configs: dict) -> dict[str, str]:
        return self.brokers.validate(name, configs)

    def apply(self, name: str, configs: dict[str, str]) -> None:
        self.brokers.replace(name, configs)
        log.info("broker %r dynamic configs now %s", name, configs or "{}")


class ConfigHandlers:
    def __init__(self, resources: dict[int, ConfigResource]) -> None:
        self.resources = resources  # resource type id -> adapter; more types can be added
        # cluster mode: a change that would reach this node only is refused
        # (validate_only still answers) rather than leave the nodes disagreeing
        self.local_only = False

    def join_cluster(self, cluster) -> None:
        """Cluster mode: topic configs go through etcd's catalogue, broker and
        group overrides through etcd's configs keys; every node applies them."""
        self.local_only = True
        for rtype in (TOPIC, BROKER, GROUP):
            self.resources[rtype].cluster = cluster
        cluster.on_configs = self._mirror

    def _mirror(self, entity_type: str | None, name: str | None, configs) -> None:
        """Apply etcd's overrides of one entity (None: removed), or, with no
        entity type, etcd's whole set (at start: local ones it lacks go)."""
        adapters = {"broker": self.resources[BROKER], "group": self.resources[GROUP]}
        if entity_type is None:
            for kind, adapter in adapters.items():
                wanted = {n: c for (t, n), c in configs.items() if t == kind}
                for stale in set(adapter.store.names(kind) if kind == "group"
                                 else adapter.brokers.store.names(kind)) - set(wanted):
                    adapter.apply(stale, {})
                for n, c in wanted.items():
                    adapter.apply(n, c)
            return
        adapter = adapters.get(entity_type)
        if adapter is not None:
            adapter.apply(name, dict(configs or {}))

    # ----------------------------------------------------------- describe
    @serves("DescribeConfigs")
    def describe_configs(self, _ctx, req: dict) -> dict:
        results = []
        for res in req["resources"]:
            rtype, name = res["resource_type"], res["resource_name"]
            result = {"error_code": Err.NONE, "error_message": None, "resource_type": rtype,
                      "resource_name": name, "configs": []}
            results.append(result)
            adapter = self.resources.get(rtype)
            try:
                if adapter is None:
                    raise ConfigError(f"Unsupported resource type {rtype}", Err.INVALID_REQUEST)
                adapter.check_name(name)
                entries = adapter.entries(name)
            except ConfigError as exc:
                result["error_code"] = exc.code
                result["error_message"] = None if exc.code == Err.UNKNOWN_TOPIC_OR_PARTITION \
                    else exc.message
                continue
            keys = res["configuration_keys"]
            if keys:  # null or empty: every key; unknown names are dropped
                wanted = set(keys)
                entries = [e for e in entries if e["name"] in wanted]
            for entry in entries:
                if not req.get("include_synonyms"):
                    entry["synonyms"] = []
                if not req.get("include_documentation"):
                    entry["documentation"] = None
            result["configs"] = entries
        return {"throttle_time_ms": 0, "results": results}

    # -------------------------------------------------------------- alter
    @serves("AlterConfigs")
    def alter_configs(self, _ctx, req: dict) -> dict:
        """Legacy: the request is the resource's complete override set."""
        def new_set(adapter, _name, configs):
            if getattr(adapter, "incremental_only", False):
                raise ConfigError(f"Unknown resource type {BROKER_LOGGER}", Err.INVALID_REQUEST)
            out = {}
            for c in configs:
                if c["value"] is None:
                    raise ConfigError("Null value not supported for : " + c["name"],
                                      Err.INVALID_REQUEST)
                out[c["name"]] = c["value"]
            return out
        return self._alter(req, new_set)

    @serves("IncrementalAlterConfigs")
    def incremental_alter_configs(self, _ctx, req: dict) -> dict:
        def new_set(adapter, name, configs):
            merged = adapter.current(name)
            for c in configs:
                key, op, value = c["name"], c["config_operation"], c["value"]
                if op not in (SET, DELETE, APPEND, SUBTRACT):
                    raise ConfigError(f"Unknown alter config operation {op}", Err.INVALID_REQUEST)
                if op != DELETE and value is None:
                    raise ConfigError(f"Null value not supported for : {key}", Err.INVALID_REQUEST)
                if op == SET:
                    merged[key] = value
                elif op == DELETE:
                    merged.pop(key, None)
                else:
                    if adapter.key_type(name, key) != LIST:
                        raise ConfigError(f"Config value append is not allowed for config key "
                                          f"{key} because its type is not LIST",
                                          Err.INVALID_CONFIG)
                    items = [i.strip() for i in value.split(",") if i.strip()]
                    if key in merged:
                        base = [i.strip() for i in merged[key].split(",") if i.strip()]
                    else:
                        base = adapter.effective_list(name, key)
                    if op == APPEND:
                        base += [i for i in items if i not in base]
                    else:
                        base = [i for i in base if i not in items]
                    merged[key] = ",".join(base)
            return merged
        return self._alter(req, new_set)

    def _alter(self, req: dict, new_set) -> dict:
        seen: dict[tuple[int, str], int] = {}
        for res in req["resources"]:
            ident = (res["resource_type"], res["resource_name"])
            seen[ident] = seen.get(ident, 0) + 1
        responses = []
        pending = []  # (result, awaitable) of changes made through the cluster's catalogue
        for res in req["resources"]:
            rtype, name = res["resource_type"], res["resource_name"]
            result = {"error_code": Err.NONE, "error_message": None, "resource_type": rtype,
                      "resource_name": name}
            responses.append(result)
            try:
                adapter = self.resources.get(rtype)
                if adapter is None:
                    raise ConfigError(f"Unknown resource type {rtype}", Err.INVALID_REQUEST)
                if seen[(rtype, name)] > 1:
                    raise ConfigError(f"Duplicate resource {name} of type {rtype}",
                                      Err.INVALID_REQUEST)
                names = [c["name"] for c in res["configs"]]
                if len(set(names)) != len(names):
                    raise ConfigError("Duplicate config keys in one resource", Err.INVALID_REQUEST)
                adapter.check_name(name, altering=True)
                configs = adapter.validate(name, new_set(adapter, name, res["configs"]))
                if self.local_only and not req["validate_only"] \
                        and not getattr(adapter, "node_local", False) \
                        and not getattr(adapter, "replicated", False):
                    raise ConfigError("This config change is not replicated between "
                                      "kcoord cluster nodes", Err.INVALID_REQUEST)
                if not req["validate_only"]:
                    waiting = adapter.replace(name, configs)
                    if waiting is not None:
                        pending.append((result, waiting))
            except ConfigError as exc:
                result["error_code"], result["error_message"] = exc.code, exc.message
        response = {"throttle_time_ms": 0, "responses": responses}
        if pending:
            return self._after(pending, response)
        return response

    @staticmethod
    async def _after(pending, response: dict) -> dict:
        for result, waiting in pending:
            try:
                await waiting
            except (ConnectionError, OSError) as exc:
                result["error_code"] = Err.REQUEST_TIMED_OUT
                result["error_message"] = f"the cluster catalogue did not take the change: {exc}"
        return response


def build_config_handlers(config: Config, catalogue: Catalogue, overrides: GroupOverrides,
                          topic_admin=None) -> ConfigHandlers:
    store = ConfigStore(config.data_dir)
    brokers = BrokerConfigs(config, store, on_change=catalogue.reconfigure)
    topics = TopicResource(catalogue, brokers)
    if topic_admin is not None:
        topic_admin.config_entries = topics.entries
    return ConfigHandlers({TOPIC: topics,
                           BROKER: BrokerResource(brokers),
                           BROKER_LOGGER: BrokerLoggerResource(config["node.id"]),
                           GROUP: GroupResource(config, store, overrides)})
