"""The audit lines Kafka's authorizer and authenticator write, rate-limited.

Authorization denials go to the `kcoord.authorizer` logger at INFO in the
words of Kafka's StandardAuthorizer (kafka.authorizer.logger): principal,
operation, client address, resource, request, and the rule that decided.
Failed logins go to `kcoord.authenticator` at INFO as Kafka's Selector logs
them ("Failed authentication with /host (reason)"), the reason naming the
mechanism; no credential is ever part of a reason.  A client retrying in a
loop must not flood the log: the same line (same principal, operation,
resource and host; same peer address and reason) is written at most once per
REPEAT_S, the next one counting what was left out.
"""
from __future__ import annotations

import logging
import time

authorizer_log = logging.getLogger("kcoord.authorizer")
authenticator_log = logging.getLogger("kcoord.authenticator")

REPEAT_S = 10.0
MAX_KEYS = 10_000

# Kafka's SecurityUtils.resourceTypeName, by resource type code
RESOURCE_NAMES = {2: "Topic", 3: "Group", 4: "Cluster", 5: "TransactionalId",
                  6: "DelegationToken", 7: "User"}


class RateLimited:
    """At most one line per key per interval; the next says how many were dropped."""

    def __init__(self, logger: logging.Logger, interval_s: float = REPEAT_S,
                 clock=time.monotonic) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self.clock = clock
        self._seen: dict = {}  # key -> [last written at, dropped since]

    def info(self, key, message: str) -> None:
        if not self.logger.isEnabledFor(logging.INFO):
            return
        now = self.clock()
        seen = self._seen.get(key)
        if seen is not None and now - seen[0] < self.interval_s:
            seen[1] += 1
            return
        dropped = seen[1] if seen is not None else 0
        if len(self._seen) >= MAX_KEYS:
            self._seen.clear()
        self._seen[key] = [now, 0]
        if dropped:
            message += f" ({dropped} more like this in the last {self.interval_s:g} s not logged)"
        self.logger.info(message)


_denials = RateLimited(authorizer_log)
_failures = RateLimited(authenticator_log)


def denied(principal: str, operation: str, host: str, rtype: int, name: str,
           request: str, rule: str) -> None:
    resource = f"{RESOURCE_NAMES.get(rtype, str(rtype))}:LITERAL:{name}"
    _denials.info((principal, operation, host, resource),
                  f"Principal = {principal} is Denied operation = {operation} from host = "
                  f"{host} on resource = {resource} for request = {request} with "
                  f"resourceRefCount = 1 based on rule {rule}")


def failed_authentication(host: str, listener: str, reason: str) -> None:
    _failures.info((host, listener, reason),
                   f"Failed authentication with /{host} (listener={listener}) ({reason})")
