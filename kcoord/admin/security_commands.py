"""Operator commands for security, on the shared admin client (kcoord/admin):

- `kcoord acls`: kafka-acls.sh's --add/--remove/--list with its resource,
  principal, host, operation and --producer/--consumer flags (CreateAcls,
  DeleteAcls, DescribeAcls);
- `kcoord configs --entity-type users`: SCRAM credentials as
  kafka-configs.sh (--add-config 'SCRAM-SHA-256=[iterations=8192,password=pw]',
  --delete-config SCRAM-SHA-512, --describe) over Alter/DescribeUserScramCredentials;
- TLS and SASL for every admin command's connections (--command-config
  with security.protocol, ssl.*, sasl.*).
"""
from __future__ import annotations

import secrets
import sys

from ..protocol.errors import Err
from ..security.acl import (CLUSTER_NAME, Operation, PatternType, Permission, ResourceType,
                           SUPPORTED_OPERATIONS)
from ..security.client import SaslLoginError, connect, sasl_login
from ..security.sasl_mechanisms import salted_password
from ..security.store import SCRAM_CODES, SCRAM_MECHANISM_CODES


def install(admin_client_module, configs_module) -> None:
    """Plug TLS/SASL into the admin client and the users entity into configs."""
    def connector(host, port, props, timeout):
        return connect(host, port, props, timeout)

    def authenticator(conn, props):
        try:
            sasl_login(conn.send, props)
        except SaslLoginError as exc:
            raise admin_client_module.AdminError(str(exc)) from None

    for proto in ("SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        admin_client_module.CONNECTORS[proto] = connector
    for proto in ("SASL_PLAINTEXT", "SASL_SSL"):
        admin_client_module.AUTHENTICATORS[proto] = authenticator
    configs_module.ENTITY_TYPES["users"] = ScramUsers(admin_client_module, configs_module)
    configs_module.SHORTHANDS.setdefault("user", "users")


# ------------------------------------------------------------ users / SCRAM
class ScramUsers:
    label = "user"

    def __init__(self, client_mod, configs_mod) -> None:
        self.client_mod, self.configs_mod = client_mod, configs_mod

    def _error(self, code, message, name):
        raise self.client_mod.AdminError(
            f"{self.client_mod.error_name(code)}: {message or name}")

    def describe(self, admin, name, _args) -> None:
        conn = admin.any()
        users = None if name is None else [{"name": name}]
        _, resp = conn.call(50, {"users": users})
        if resp["error_code"] != Err.NONE:
            self._error(resp["error_code"], resp["error_message"], name)
        for r in resp["results"]:
            if r["error_code"] == Err.RESOURCE_NOT_FOUND:
                continue  # kafka-configs prints nothing for a user without credentials
            if r["error_code"] != Err.NONE:
                self._error(r["error_code"], r["error_message"], r["user"])
            creds = ",".join(f"{SCRAM_MECHANISM_CODES.get(c['mechanism'], c['mechanism'])}="
                             f"iterations={c['iterations']}" for c in r["credential_infos"])
            print(f"SCRAM credential configs for user-principal '{r['user']}' are {creds}")

    def alter(self, admin, name, to_set, to_delete, _args) -> None:
        usage = self.configs_mod.UsageError
        if not name:
            raise usage("an entity name must be specified with --alter of users")
        upsertions, deletions = [], []
        for mech, spec in to_set.items():
            mech = mech.upper()
            if mech not in SCRAM_CODES:
                raise usage(f"Invalid config(s): {mech} (users take SCRAM-SHA-256 and "
                            f"SCRAM-SHA-512 credentials)")
            fields = dict(item.split("=", 1) for item in spec.split(",") if "=" in item)
            password = fields.get("password")
            if not password:
                raise usage(f"{mech}: password= is required")
            iterations = int(fields.get("iterations", 4096))
            if iterations < 4096:
                raise usage(f"{mech}: iterations must be at least 4096")
            salt = secrets.token_bytes(64)
            upsertions.append({"name": name, "mechanism": SCRAM_CODES[mech],
                               "iterations": iterations, "salt": salt,
                               "salted_password": salted_password(mech, password, salt,
                                                                  iterations)})
        for mech in to_delete:
            if mech.upper() not in SCRAM_CODES:
                raise usage(f"Invalid config(s): {mech}")
            deletions.append({"name": name, "mechanism": SCRAM_CODES[mech.upper()]})
        _, resp = admin.any().call(51, {"deletions": deletions, "upsertions": upsertions})
        for r in resp["results"]:
            if r["error_code"] != Err.NONE:
                self._error(r["error_code"], r["error_message"], r["user"])
        print(f"Completed updating config for user {name}.")


# ------------------------------------------------------------------- acls
HELP = """Add, remove or list ACLs. The flags of Apache Kafka's kafka-acls.sh; it speaks
the Kafka protocol (CreateAcls, DeleteAcls, DescribeAcls), so it works against
Apache Kafka brokers as well as kcoord."""

OPERATION_NAMES = {o.name.replace("_", "").lower(): o for o in Operation
                   if o not in (Operation.UNKNOWN, Operation.ANY)}


def add_parser(sub) -> None:
    p = sub.add_parser("acls", help="kafka-acls.sh: add, remove and list ACLs",
                       description=HELP)
    p.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]")
    p.add_argument("--command-config", metavar="FILE", help="client properties")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true")
    action.add_argument("--remove", action="store_true")
    action.add_argument("--list", action="store_true")
    p.add_argument("--topic", action="append", default=[])
    p.add_argument("--group", action="append", default=[])
    p.add_argument("--cluster", action="store_true")
    p.add_argument("--transactional-id", action="append", default=[])
    p.add_argument("--resource-pattern-type", default=None,
                   choices=["any", "match", "literal", "prefixed", "ANY", "MATCH", "LITERAL",
                            "PREFIXED"])
    p.add_argument("--allow-principal", action="append", default=[])
    p.add_argument("--deny-principal", action="append", default=[])
    p.add_argument("--principal", action="append", default=[], help="--list: filter")
    p.add_argument("--allow-host", action="append", default=[])
    p.add_argument("--deny-host", action="append", default=[])
    p.add_argument("--operation", action="append", default=[])
    p.add_argument("--producer", action="store_true")
    p.add_argument("--consumer", action="store_true")
    p.add_argument("--idempotent", action="store_true")
    p.add_argument("--force", action="store_true", help="accepted; kcoord never prompts")
    p.add_argument("--timeout", type=int, default=30000, metavar="MS")
    p.set_defaults(run=run)


class _Usage(Exception):
    pass


def _resources(args, pattern: int) -> list[tuple[int, str, int]]:
    out = [(ResourceType.TOPIC, t, pattern) for t in args.topic]
    out += [(ResourceType.GROUP, g, pattern) for g in args.group]
    out += [(ResourceType.TRANSACTIONAL_ID, t, pattern) for t in args.transactional_id]
    if args.cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL))
    return out


def _operations(args) -> list[int]:
    ops = []
    for name in args.operation or ["All"]:
        op = OPERATION_NAMES.get(name.replace("_", "").replace("-", "").lower())
        if op is None:
            raise _Usage(f"Invalid operation {name}; valid: "
                         f"{', '.join(o.name.title().replace('_', '') for o in OPERATION_NAMES.values())}")
        ops.append(op)
    return ops


def _bindings(args, pattern: int) -> list[tuple]:
    """(resource type, name, pattern, principal, host, operation, permission)"""
    perms = [(p, Permission.ALLOW, args.allow_host or ["*"]) for p in args.allow_principal]
    perms += [(p, Permission.DENY, args.deny_host or ["*"]) for p in args.deny_principal]
    if not perms:
        raise _Usage("You must specify one of: --allow-principal, --deny-principal when "
                     "trying to add or remove ACLs.")
    wanted: list[tuple[int, str, int, int]] = []
    if args.producer or args.consumer:
        for t in args.topic:
            ops = []
            if args.producer:
                ops += [Operation.WRITE, Operation.DESCRIBE, Operation.CREATE]
            if args.consumer:
                ops += [Operation.READ, Operation.DESCRIBE]
            wanted += [(ResourceType.TOPIC, t, pattern, op) for op in dict.fromkeys(ops)]
        if args.consumer:
            wanted += [(ResourceType.GROUP, g, pattern, Operation.READ) for g in args.group]
        if args.producer:
            wanted += [(ResourceType.TRANSACTIONAL_ID, t, pattern, op)
                       for t in args.transactional_id
                       for op in (Operation.WRITE, Operation.DESCRIBE)]
            if args.idempotent:
                wanted.append((ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL,
                               Operation.IDEMPOTENT_WRITE))
    else:
        for rtype, name, pat in _resources(args, pattern):
            for op in _operations(args):
                if op != Operation.ALL and op not in SUPPORTED_OPERATIONS[rtype]:
                    raise _Usage(f"ResourceType {rtype.name} only supports operations "
                                 f"{', '.join(o.name for o in SUPPORTED_OPERATIONS[rtype])}")
                wanted.append((rtype, name, pat, op))
    if not wanted:
        raise _Usage("You must specify a resource: --topic, --group, --cluster or "
                     "--transactional-id.")
    return [(rt, name, pat, principal, host, op, perm)
            for rt, name, pat, op in wanted
            for principal, perm, hosts in perms for host in hosts]


def _pattern_str(rt, name, pt) -> str:
    return (f"ResourcePattern(resourceType={ResourceType(rt).name}, name={name}, "
            f"patternType={PatternType(pt).name})")


def _entry_str(principal, host, op, perm) -> str:
    return (f"(principal={principal}, host={host}, operation={Operation(op).name}, "
            f"permissionType={Permission(perm).name})")


def _block(title: str, pattern: tuple, entries) -> None:
    """Kafka's AclCommand block: the title naming the resource, one tab-led ACL a line."""
    print(f"{title} `{_pattern_str(*pattern)}`: \n " + "\n".join("\t" + e for e in entries)
          + " \n")


def _print_grouped(rows, title: str = "Current ACLs for resource") -> None:
    groups: dict = {}
    for rt, name, pt, principal, host, op, perm in rows:
        groups.setdefault((rt, name, pt), []).append(_entry_str(principal, host, op, perm))
    for key, entries in groups.items():
        _block(title, key, entries)


def _describe(conn, rt, name, pt, principal=None) -> list[tuple]:
    from ..admin.client import AdminError, error_name
    _, resp = conn.call(29, {
        "resource_type_filter": rt, "resource_name_filter": name,
        "pattern_type_filter": pt, "principal_filter": principal,
        "host_filter": None, "operation": Operation.ANY,
        "permission_type": Permission.ANY}, low=1)
    if resp["error_code"] != Err.NONE:
        raise AdminError(f"Error while listing ACLs: {error_name(resp['error_code'])}: "
                         f"{resp['error_message'] or ''}")
    return [(r["resource_type"], r["resource_name"], r["pattern_type"], a["principal"],
             a["host"], a["operation"], a["permission_type"])
            for r in resp["resources"] for a in r["acls"]]


def run(args) -> int:
    from ..admin.client import AdminClient, AdminError, error_name, read_properties
    try:
        pattern_name = (args.resource_pattern_type or ("any" if args.list else "literal")).upper()
        pattern = PatternType[pattern_name]
        if (args.add or args.remove) and pattern not in (PatternType.LITERAL,
                                                         PatternType.PREFIXED):
            raise _Usage(f"A '--resource-pattern-type' value of '{pattern_name.lower()}' is "
                         f"not valid when adding or removing acls.")
        with AdminClient(args.bootstrap_server, read_properties(args.command_config),
                         args.timeout) as admin:
            conn = admin.any()
            if args.add:
                rows = _bindings(args, pattern)
                _print_grouped(rows, "Adding ACLs for resource")
                _, resp = conn.call(30, {"creations": [
                    {"resource_type": rt, "resource_name": n, "resource_pattern_type": pt,
                     "principal": pr, "host": h, "operation": op, "permission_type": pe}
                    for rt, n, pt, pr, h, op, pe in rows]}, low=1)
                for row, r in zip(rows, resp["results"]):
                    if r["error_code"] != Err.NONE:
                        raise AdminError(f"Error while adding ACLs: "
                                         f"{error_name(r['error_code'])}: "
                                         f"{r['error_message'] or _pattern_str(*row[:3])}")
                # then every ACL the resources now hold, read back (kafka-acls.sh's listAcls)
                current = []
                for pattern_ in dict.fromkeys(row[:3] for row in rows):
                    current += _describe(conn, *pattern_)
                _print_grouped(sorted(set(current)))
            elif args.remove:
                rows = _bindings(args, pattern)
                _, resp = conn.call(31, {"filters": [
                    {"resource_type_filter": rt, "resource_name_filter": n,
                     "pattern_type_filter": pt, "principal_filter": pr, "host_filter": h,
                     "operation": op, "permission_type": pe}
                    for rt, n, pt, pr, h, op, pe in rows]}, low=1)
                removed = []
                for r in resp["filter_results"]:
                    if r["error_code"] != Err.NONE:
                        raise AdminError(f"Error while removing ACLs: "
                                         f"{error_name(r['error_code'])}: {r['error_message']}")
                    removed += [(m["resource_type"], m["resource_name"], m["pattern_type"],
                                 m["principal"], m["host"], m["operation"],
                                 m["permission_type"]) for m in r["matching_acls"]]
                print("Removed ACLs:")
                _print_grouped(removed)
            else:
                resources = _resources(args, pattern) or [(ResourceType.ANY, None, pattern)]
                rows = []
                for rt, name, pt in resources:
                    for principal in args.principal or [None]:
                        rows += _describe(conn, rt, name, pt, principal)
                _print_grouped(sorted(set(rows)))
    except _Usage as exc:
        print(str(exc), file=sys.stderr)
        return 1
    except AdminError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    return 0
