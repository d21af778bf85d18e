"""Kafka's ACL model and the StandardAuthorizer's decision procedure.

Resource types TOPIC, GROUP, CLUSTER (named kafka-cluster) and
TRANSACTIONAL_ID (and DELEGATION_TOKEN, USER for storage); patterns
LITERAL (`*` is every name) and PREFIXED; ALLOW and DENY, any matching
DENY first; ALLOW of READ/WRITE/DELETE/ALTER implies DESCRIBE and ALLOW of
ALTER_CONFIGS implies DESCRIBE_CONFIGS; only `User:*` is a wildcard
principal and hosts are exact; a resource with no ACLs at all is allowed
only with allow.everyone.if.no.acl.found.  Pure: no I/O.
"""
from __future__ import annotations

from enum import IntEnum
from typing import Iterable, NamedTuple

CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


T, G, C, X = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, \
    ResourceType.TRANSACTIONAL_ID
O = Operation
SUPPORTED_OPERATIONS = {
    T: (O.READ, O.WRITE, O.CREATE, O.DESCRIBE, O.DELETE, O.ALTER, O.DESCRIBE_CONFIGS,
        O.ALTER_CONFIGS),
    G: (O.READ, O.DESCRIBE, O.DELETE, O.DESCRIBE_CONFIGS, O.ALTER_CONFIGS),
    C: (O.CREATE, O.CLUSTER_ACTION, O.DESCRIBE_CONFIGS, O.ALTER_CONFIGS, O.IDEMPOTENT_WRITE,
        O.ALTER, O.DESCRIBE),
    X: (O.DESCRIBE, O.WRITE),
    ResourceType.DELEGATION_TOKEN: (O.DESCRIBE,),
    ResourceType.USER: (O.CREATE_TOKENS, O.DESCRIBE_TOKENS),
}
# an ALLOW of any of these also allows the key (ALLOW-only implication)
_IMPLIED_BY = {
    O.DESCRIBE: (O.DESCRIBE, O.READ, O.WRITE, O.DELETE, O.ALTER, O.ALL),
    O.DESCRIBE_CONFIGS: (O.DESCRIBE_CONFIGS, O.ALTER_CONFIGS, O.ALL),
}


class AclBinding(NamedTuple):
    resource_type: int
    name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def to_record(self) -> dict:
        return dict(self._asdict())

    @classmethod
    def from_record(cls, r: dict) -> "AclBinding":
        return cls(r["resource_type"], r["name"], r["pattern_type"], r["principal"], r["host"],
                   r["operation"], r["permission"])


class AclFilter(NamedTuple):
    resource_type: int
    name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission: int

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != acl.resource_type:
            return False
        pt = self.pattern_type
        if pt not in (PatternType.ANY, PatternType.MATCH) and pt != acl.pattern_type:
            return False
        if self.name is not None:
            if pt in (PatternType.ANY, acl.pattern_type):
                if self.name != acl.name:
                    return False
            elif acl.pattern_type == PatternType.LITERAL:
                if acl.name not in (self.name, WILDCARD):
                    return False
            elif not self.name.startswith(acl.name):
                return False
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation != Operation.ANY and self.operation != acl.operation:
            return False
        if self.permission != Permission.ANY and self.permission != acl.permission:
            return False
        return True


def validate_binding(acl: AclBinding) -> str | None:
    """Why Kafka refuses to create this ACL (INVALID_REQUEST), or None."""
    try:
        rt, pt = ResourceType(acl.resource_type), PatternType(acl.pattern_type)
        op, perm = Operation(acl.operation), Permission(acl.permission)
    except ValueError:
        return "Unknown resource type, pattern type, operation or permission"
    if rt in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resource type {rt.name}"
    if pt not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid pattern type {pt.name}"
    if op in (Operation.UNKNOWN, Operation.ANY):
        return f"Invalid operation {op.name}"
    if perm in (Permission.UNKNOWN, Permission.ANY):
        return f"Invalid permission type {perm.name}"
    if not acl.name:
        return "Resource name should not be empty"
    if rt == ResourceType.CLUSTER and acl.name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    kind, sep, name = acl.principal.partition(":")
    if not sep or not kind or not name:
        return f"Could not parse principal from `{acl.principal}` (no colon is present " \
               f"separating the principal type from the principal name)"
    if op != Operation.ALL and op not in SUPPORTED_OPERATIONS.get(rt, ()):
        return f"ResourceType {rt.name} does not support operation {op.name}"
    if not acl.host:
        return "Host should not be empty"
    return None


class Authorizer:
    """ACL decisions (Kafka's StandardAuthorizerData semantics), cached
    until the ACLs change."""
    CACHE_MAX = 100_000

    def __init__(self, super_users: Iterable[str] = (), allow_everyone: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_everyone = allow_everyone
        self.acls: set[AclBinding] = set()
        self._by_type: dict[int, list[AclBinding]] = {}
        self._cache: dict[tuple, bool] = {}

    # ---------------------------------------------------------- ACL set
    def add(self, acl: AclBinding) -> None:
        if acl not in self.acls:
            self.acls.add(acl)
            self._by_type.setdefault(acl.resource_type, []).append(acl)
            self._cache.clear()

    def remove(self, acl: AclBinding) -> None:
        if acl in self.acls:
            self.acls.discard(acl)
            self._by_type[acl.resource_type].remove(acl)
            self._cache.clear()

    def matching(self, flt: AclFilter) -> list[AclBinding]:
        return sorted(a for a in self.acls if flt.matches(a))

    # ---------------------------------------------------------- decisions
    def authorize(self, principal: str, host: str, op: int, rtype: int, name: str) -> bool:
        key = (principal, host, op, rtype, name)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._decide(principal, host, op, rtype, name)
            if len(self._cache) >= self.CACHE_MAX:
                self._cache.clear()
            self._cache[key] = hit
        return hit

    def _decide(self, principal: str, host: str, op: int, rtype: int, name: str) -> bool:
        if principal in self.super_users:
            return True
        on_resource = [a for a in self._by_type.get(rtype, ())
                       if (a.name == name or a.name == WILDCARD)
                       if a.pattern_type == PatternType.LITERAL] + \
                      [a for a in self._by_type.get(rtype, ())
                       if a.pattern_type == PatternType.PREFIXED and name.startswith(a.name)]
        if not on_resource:
            return self.allow_everyone
        mine = [a for a in on_resource
                if a.principal in (principal, WILDCARD_PRINCIPAL) and a.host in (host, WILDCARD)]
        for a in mine:
            if a.permission == Permission.DENY and a.operation in (op, Operation.ALL):
                return False
        allowing = _IMPLIED_BY.get(op, (op, Operation.ALL))
        return any(a.permission == Permission.ALLOW and a.operation in allowing for a in mine)

    def deciding_rule(self, principal: str, host: str, op: int, rtype: int, name: str) -> str:
        """The rule behind a denial, named as Kafka's audit log names it."""
        for a in self._by_type.get(rtype, ()):
            if (a.permission == Permission.DENY and a.operation in (op, Operation.ALL)
                    and a.principal in (principal, WILDCARD_PRINCIPAL) and a.host in (host, WILDCARD)
                    and (a.name in (name, WILDCARD) if a.pattern_type == PatternType.LITERAL
                         else name.startswith(a.name))):
                return (f"MatchingAcl(acl=StandardAcl(resourceType={ResourceType(rtype).name}, "
                        f"resourceName={a.name}, patternType={PatternType(a.pattern_type).name}, "
                        f"principal={a.principal}, host={a.host}, "
                        f"operation={Operation(a.operation).name}, permissionType=DENY))")
        return "DefaultDeny"

    def authorize_by_resource_type(self, principal: str, host: str, op: int,
                                   rtype: int) -> bool:
        """May the principal do `op` on *some* resource of the type (Kafka's
        Authorizer.authorizeByResourceType, used by InitProducerId)."""
        if self._decide(principal, host, op, rtype, "\0kcoord-dummy\0"):
            return True
        mine = [a for a in self._by_type.get(rtype, ())
                if a.principal in (principal, WILDCARD_PRINCIPAL) and a.host in (host, WILDCARD)
                and a.operation in (op, Operation.ALL)]
        denies = [a for a in mine if a.permission == Permission.DENY]
        if any(a.pattern_type == PatternType.LITERAL and a.name == WILDCARD for a in denies):
            return False
        for a in mine:
            if a.permission != Permission.ALLOW:
                continue
            if a.pattern_type == PatternType.LITERAL and a.name == WILDCARD:
                return True
            dominated = any(
                (d.pattern_type == PatternType.LITERAL and a.pattern_type == PatternType.LITERAL
                 and d.name == a.name) or
                (d.pattern_type == PatternType.PREFIXED and a.name.startswith(d.name))
                for d in denies)
            if not dominated:
                return True
        return False

    def authorized_operations(self, principal: str, host: str, rtype: int, name: str) -> int:
        """Kafka's AuthorizedOperations bitfield: bit N for operation code N."""
        bits = 0
        for op in SUPPORTED_OPERATIONS[rtype]:
            if self.authorize(principal, host, op, rtype, name):
                bits |= 1 << op
        return bits
