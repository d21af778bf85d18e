"""`kcoord topics`: kafka-topics.sh's --list, --describe, --create,
--delete and --alter --partitions, with --config, over the Kafka protocol
(works against Apache Kafka too)."""
from __future__ import annotations

import sys

from ..protocol.errors import Err
from .client import AdminClient, AdminError, UsageError, error_name, read_properties

HELP = """Create, delete, describe, or change a topic. The flags and output of Apache
Kafka's kafka-topics.sh; it speaks the Kafka protocol, so it works against
Apache Kafka brokers as well as kcoord."""


def add_parser(sub) -> None:
    p = sub.add_parser("topics", help="kafka-topics.sh: list, describe, create, delete, "
                       "alter topics", description=HELP)
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    p.add_argument("--command-config", metavar="FILE", help="client properties")
    p.add_argument("--list", action="store_true")
    p.add_argument("--describe", action="store_true")
    p.add_argument("--create", action="store_true")
    p.add_argument("--delete", action="store_true")
    p.add_argument("--alter", action="store_true", help="with --partitions: add partitions")
    p.add_argument("--topic", metavar="TOPIC", help="the topic (--list/--describe: a regex)")
    p.add_argument("--partitions", type=int)
    p.add_argument("--replication-factor", type=int)
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--if-exists", action="store_true")
    p.add_argument("--if-not-exists", action="store_true")
    p.add_argument("--exclude-internal", action="store_true")
    p.add_argument("--timeout", type=int, default=30000, metavar="MS")
    p.set_defaults(run=run)


def run(args) -> int:
    actions = [a for a in ("list", "describe", "create", "delete", "alter") if getattr(args, a)]
    if len(actions) != 1:
        print("Command must include exactly one action: --list, --describe, --create, "
              "--alter or --delete", file=sys.stderr)
        return 1
    if actions[0] in ("create", "delete", "alter") and not args.topic:
        print("Missing required argument \"[topic]\"", file=sys.stderr)
        return 1
    try:
        with AdminClient(args.bootstrap_server, read_properties(args.command_config),
                         args.timeout) as admin:
            return {"list": list_topics, "describe": describe, "create": create,
                    "delete": delete, "alter": alter}[actions[0]](admin, args)
    except UsageError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    except AdminError as exc:
        print(f"Error while executing topic command : {exc}", file=sys.stderr)
        return 1


def _matching(admin: AdminClient, args) -> list[dict]:
    import re
    topics = admin.metadata(None)["topics"]
    if args.topic:
        pattern = re.compile(args.topic)
        topics = [t for t in topics if pattern.fullmatch(t["name"])]
    if args.exclude_internal:
        topics = [t for t in topics if not t["is_internal"]]
    return sorted(topics, key=lambda t: t["name"])


def list_topics(admin: AdminClient, args) -> int:
    for t in _matching(admin, args):
        print(t["name"])
    return 0


def _overrides(admin: AdminClient, name: str) -> str:
    conn = admin.any()
    if not conn.supports(32):
        return ""
    _, response = conn.call(32, {"resources": [{"resource_type": 2, "resource_name": name,
                                                "configuration_keys": None}],
                                 "include_synonyms": False, "include_documentation": False},
                            low=1)
    [result] = response["results"]
    return ",".join(f"{c['name']}={c['value']}" for c in result["configs"]
                    if c["config_source"] not in (5, -1) and not c["is_sensitive"])


def describe(admin: AdminClient, args) -> int:
    topics = _matching(admin, args)
    if args.topic and not topics and not args.if_exists:
        raise AdminError(f"Topic '{args.topic}' does not exist as expected")
    for t in topics:
        parts = sorted(t["partitions"], key=lambda p: p["partition_index"])
        rf = len(parts[0]["replica_nodes"]) if parts else 0
        topic_id = _uuid(t.get("topic_id"))
        print(f"Topic: {t['name']}\tTopicId: {topic_id}\tPartitionCount: {len(parts)}\t"
              f"ReplicationFactor: {rf}\tConfigs: {_overrides(admin, t['name'])}")
        for p in parts:
            print(f"\tTopic: {t['name']}\tPartition: {p['partition_index']}\t"
                  f"Leader: {p['leader_id'] if p['leader_id'] >= 0 else 'none'}\t"
                  f"Replicas: {','.join(map(str, p['replica_nodes']))}\t"
                  f"Isr: {','.join(map(str, p['isr_nodes']))}\tElr: \tLastKnownElr: ")
    return 0


def _uuid(raw: bytes | None) -> str:
    """Kafka's Uuid.toString: URL-safe base64 without padding."""
    import base64
    return base64.urlsafe_b64encode(raw or bytes(16)).decode().rstrip("=")


def _configs(pairs: list[str]) -> list[dict]:
    out = []
    for item in pairs:
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"Invalid topic config: all configs to be added must be in the "
                             f"format \"key=val\": {item}")
        out.append({"name": key.strip(), "value": value.strip()})
    return out


def create(admin: AdminClient, args) -> int:
    body = {"topics": [{"name": args.topic,
                        "num_partitions": -1 if args.partitions is None else args.partitions,
                        "replication_factor": -1 if args.replication_factor is None
                        else args.replication_factor,
                        "assignments": [], "configs": _configs(args.config)}],
            "timeout_ms": args.timeout, "validate_only": False}
    conn = admin.any()
    low = 4 if args.partitions is None or args.replication_factor is None else 2
    _, response = conn.call(19, body, low=low)
    [result] = response["topics"]
    code = result["error_code"]
    if code == Err.TOPIC_ALREADY_EXISTS and args.if_not_exists:
        return 0
    if code != Err.NONE:
        raise AdminError(f"{error_name(code)}: {result.get('error_message') or args.topic}")
    print(f"Created topic {args.topic}.")
    return 0


def delete(admin: AdminClient, args) -> int:
    names = [t["name"] for t in _matching(admin, args)]
    if not names:
        if args.if_exists:
            return 0
        raise AdminError(f"Topic '{args.topic}' does not exist as expected")
    conn = admin.any()
    version = conn.version(20)
    body = {"topic_names": names, "topics": [{"name": n, "topic_id": bytes(16)} for n in names],
            "timeout_ms": args.timeout}
    response = conn.send(20, version, body)
    failed = [(r["name"], r["error_code"]) for r in response["responses"] if r["error_code"]]
    if failed:
        raise AdminError(", ".join(f"{n}: {error_name(c)}" for n, c in failed))
    return 0


def alter(admin: AdminClient, args) -> int:
    if args.partitions is None:
        raise UsageError("--alter needs --partitions (use `kcoord configs` for topic configs)")
    names = [t["name"] for t in _matching(admin, args)]
    if not names:
        if args.if_exists:
            return 0
        raise AdminError(f"Topic '{args.topic}' does not exist as expected")
    _, response = admin.any().call(37, {"topics": [{"name": n, "count": args.partitions,
                                                    "assignments": None} for n in names],
                                        "timeout_ms": args.timeout, "validate_only": False})
    failed = [(r["name"], r["error_code"], r.get("error_message")) for r in response["results"]
              if r["error_code"]]
    if failed:
        raise AdminError(", ".join(f"{n}: {error_name(c)}{': ' + m if m else ''}"
                                   for n, c, m in failed))
    return 0
