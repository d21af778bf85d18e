"""`kcoord configs`: kafka-configs.sh's --describe and --alter
(--add-config, --delete-config) for topics, brokers and groups, over the
Kafka protocol (DescribeConfigs, IncrementalAlterConfigs; works against
Apache Kafka too).

Entity types are entries of ENTITY_TYPES: an object with describe(admin,
name, args) and alter(admin, name, to_set, to_delete, args).  Another
entity type (users, with SCRAM credentials) is one more entry.
"""
from __future__ import annotations

import sys
from typing import Protocol

from ..protocol.errors import Err
from .client import AdminClient, AdminError, UsageError, error_name, read_properties

HELP = """Describe or change the configs of topics, brokers and groups. The flags and
output of Apache Kafka's kafka-configs.sh; it speaks the Kafka protocol, so it
works against Apache Kafka brokers as well as kcoord."""

SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
           3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG",
           6: "DYNAMIC_BROKER_LOGGER_CONFIG", 7: "DYNAMIC_CLIENT_METRICS_CONFIG",
           8: "DYNAMIC_GROUP_CONFIG"}
SET, DELETE = 0, 1


class EntityType(Protocol):
    def describe(self, admin: AdminClient, name: str | None, args) -> None: ...
    def alter(self, admin: AdminClient, name: str | None, to_set: dict[str, str],
              to_delete: list[str], args) -> None: ...


class ConfigResourceType:
    """An entity type backed by a DescribeConfigs/IncrementalAlterConfigs resource."""

    def __init__(self, resource_type: int, label: str, dynamic_source: int,
                 default_label: str | None = None) -> None:
        self.resource_type = resource_type
        self.label = label                    # "topic", "broker", "group"
        self.dynamic_source = dynamic_source  # what --describe shows without --all
        self.default_label = default_label    # brokers: the "" (cluster default) resource

    def names(self, admin: AdminClient, name: str | None) -> list[str]:
        if name is not None:
            return [name]
        if self.label == "topic":
            return sorted(t["name"] for t in admin.metadata(None)["topics"])
        if self.label.startswith("broker"):
            return [str(n) for n in sorted(admin.brokers())]
        raise UsageError(f"an entity name must be specified with --alter of {self.label}s")

    def _describe_one(self, admin: AdminClient, name: str) -> list[dict]:
        conn = admin.node(int(name)) if self.label.startswith("broker") and name \
            else admin.any()
        _, response = conn.call(32, {"resources": [{"resource_type": self.resource_type,
                                                    "resource_name": name,
                                                    "configuration_keys": None}],
                                     "include_synonyms": True, "include_documentation": False},
                                low=1)
        [result] = response["results"]
        if result["error_code"] != Err.NONE:
            raise AdminError(f"{error_name(result['error_code'])}: "
                             f"{result['error_message'] or name}")
        return result["configs"]

    def describe(self, admin: AdminClient, name: str | None, args) -> None:
        for each in self.names(admin, name):
            default = each == "" and self.default_label
            source = 3 if default else self.dynamic_source
            entries = sorted(self._describe_one(admin, each), key=lambda c: c["name"])
            if not args.all:
                entries = [c for c in entries if c["config_source"] == source]
            if default:
                print(f"{'All' if args.all else 'Default'} configs for {self.default_label} "
                      f"are:")
            else:
                print(f"{'All' if args.all else 'Dynamic'} configs for {self.label} {each} are:")
            for c in entries:
                synonyms = ", ".join(f"{SOURCES.get(s['source'], 'UNKNOWN')}:{s['name']}="
                                     f"{_show(s['value'])}" for s in c["synonyms"])
                print(f"  {c['name']}={_show(c['value'])} sensitive="
                      f"{'true' if c['is_sensitive'] else 'false'} synonyms={{{synonyms}}}")

    def alter(self, admin: AdminClient, name: str | None, to_set: dict[str, str],
              to_delete: list[str], _args) -> None:
        if name is None:
            raise UsageError(f"an entity name must be specified with --alter of {self.label}s")
        if to_delete:
            current = {c["name"] for c in self._describe_one(admin, name)
                       if c["config_source"] == (3 if name == "" and self.default_label
                                                 else self.dynamic_source)}
            invalid = [k for k in to_delete if k not in current]
            if invalid and self.label in ("topic", "group", "broker-logger"):
                raise AdminError(f"Invalid config(s): {','.join(invalid)}")
        ops = [{"name": k, "config_operation": SET, "value": v} for k, v in to_set.items()]
        ops += [{"name": k, "config_operation": DELETE, "value": None} for k in to_delete]
        conn = admin.node(int(name)) if self.label.startswith("broker") and name \
            else admin.any()
        _, response = conn.call(44, {"resources": [{"resource_type": self.resource_type,
                                                    "resource_name": name, "configs": ops}],
                                     "validate_only": False})
        [result] = response["responses"]
        if result["error_code"] != Err.NONE:
            raise AdminError(f"{error_name(result['error_code'])}: "
                             f"{result['error_message'] or name}")
        if name == "" and self.default_label:
            print(f"Completed updating default config for {self.default_label}.")
        else:
            print(f"Completed updating config for {self.label} {name}.")


def _show(value) -> str:
    return "null" if value is None else str(value)


ENTITY_TYPES: dict[str, EntityType] = {
    "topics": ConfigResourceType(2, "topic", 1),
    "brokers": ConfigResourceType(4, "broker", 2, "brokers in the cluster"),
    "groups": ConfigResourceType(32, "group", 8),
    "broker-loggers": ConfigResourceType(8, "broker-logger", 6),
}
SHORTHANDS = {"topic": "topics", "broker": "brokers", "group": "groups",
              "broker-logger": "broker-loggers"}


def add_parser(sub) -> None:
    p = sub.add_parser("configs", help="kafka-configs.sh: describe and alter topic, broker "
                       "and group configs", description=HELP)
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    p.add_argument("--command-config", metavar="FILE", help="client properties")
    p.add_argument("--describe", action="store_true")
    p.add_argument("--alter", action="store_true")
    p.add_argument("--all", action="store_true", help="describe: every config, not only "
                   "the dynamic ones")
    p.add_argument("--entity-type", metavar="TYPE",
                   help="topics, brokers, groups, broker-loggers (singular forms accepted)")
    p.add_argument("--entity-name", metavar="NAME")
    p.add_argument("--entity-default", action="store_true",
                   help="brokers: the cluster-wide default")
    p.add_argument("--topic", metavar="TOPIC", help="shorthand: --entity-type topics "
                   "--entity-name TOPIC")
    p.add_argument("--group", metavar="GROUP")
    p.add_argument("--broker", metavar="ID")
    p.add_argument("--broker-defaults", action="store_true")
    p.add_argument("--add-config", metavar="K1=V1,K2=[A,B]")
    p.add_argument("--add-config-file", metavar="FILE")
    p.add_argument("--delete-config", metavar="K1,K2")
    p.add_argument("--timeout", type=int, default=30000, metavar="MS")
    p.set_defaults(run=run)


def parse_add_config(text: str) -> dict[str, str]:
    """k=v pairs split on commas outside [...]; brackets keep list values whole."""
    out, depth, item = {}, 0, ""
    for ch in text + ",":
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            if item.strip():
                key, sep, value = item.partition("=")
                if not sep:
                    raise UsageError("Invalid entity config: all configs to be added must be "
                                     "in the format \"key=val\".")
                value = value.strip()
                if value.startswith("[") and value.endswith("]"):
                    value = value[1:-1]
                out[key.strip()] = value
            item = ""
        else:
            item += ch
    return out


def _entity(args) -> tuple[EntityType, str | None]:
    chosen = [(SHORTHANDS[k], getattr(args, k)) for k in ("topic", "group", "broker")
              if getattr(args, k) is not None]
    if args.broker_defaults:
        chosen.append(("brokers", ""))
    if args.entity_type:
        kind = args.entity_type.lower()
        kind = SHORTHANDS.get(kind, kind)
        name = "" if args.entity_default else args.entity_name
        chosen.append((kind, name))
    if len(chosen) != 1:
        raise UsageError("exactly one entity must be given: --entity-type (with --entity-name "
                         "or --entity-default), --topic, --group, --broker or --broker-defaults")
    kind, name = chosen[0]
    if kind not in ENTITY_TYPES:
        raise UsageError(f"Invalid entity type {args.entity_type}, the entity type must be one "
                         f"of {', '.join(ENTITY_TYPES)}")
    return ENTITY_TYPES[kind], name


def run(args) -> int:
    try:
        if args.describe == args.alter:
            raise UsageError("Command must include exactly one action: --describe, --alter")
        entity, name = _entity(args)
        to_set = parse_add_config(args.add_config) if args.add_config else {}
        if args.add_config_file:
            to_set.update(read_properties(args.add_config_file))
        to_delete = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
        if args.alter and not to_set and not to_delete:
            raise UsageError("--alter needs --add-config, --add-config-file or --delete-config")
        with AdminClient(args.bootstrap_server, read_properties(args.command_config),
                         args.timeout) as admin:
            if args.describe:
                entity.describe(admin, name, args)
            else:
                entity.alter(admin, name, to_set, to_delete, args)
    except UsageError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    except AdminError as exc:
        print(f"Error while executing config command with args '{' '.join(sys.argv[1:])}'",
              file=sys.stderr)
        print(str(exc), file=sys.stderr)
        return 1
    return 0
