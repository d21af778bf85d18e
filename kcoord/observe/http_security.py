"""TLS and authentication of the HTTP endpoint (http.listen), with Kafka's
key names under `http.`: `http.ssl.keystore.location` (PEM: the PKCS#8 key
and the certificate chain), `http.ssl.key.password`, `http.ssl.truststore.*`
and `http.ssl.client.auth` as for a Kafka listener; `http.auth.basic.users`
(`name:password,...`, HTTP basic) or `http.auth.bearer.token` (a bearer
token).  Both secrets are sensitive: DescribeConfigs shows them as null.

The endpoint serves lag, group names and topic names: `exposed_warning`
says when a server that secures its Kafka listeners leaves it open.
"""
from __future__ import annotations

import base64
import hmac
import ipaddress
import ssl

HTTP_KEYS = ("http.ssl.keystore.location", "http.ssl.keystore.type", "http.ssl.key.password",
             "http.ssl.truststore.location", "http.ssl.truststore.type", "http.ssl.client.auth",
             "http.auth.basic.users", "http.auth.bearer.token")


def ssl_context(values: dict) -> ssl.SSLContext | None:
    """The endpoint's TLS context, or None when http.ssl.keystore.location is unset;
    ValueError names the key (the broker listeners' loader, on the http.ssl.* keys)."""
    if not values.get("http.ssl.keystore.location"):
        return None
    from ..security.tls import server_context
    own = {k[len("http."):]: v for k, v in values.items()
           if k.startswith("http.ssl.") and v not in (None, "")}
    try:
        return server_context(own, "HTTP")
    except ValueError as exc:
        raise ValueError(f"http.{exc}") from None


class HttpAuth:
    """Checks a request's Authorization header against the configured users or token."""

    def __init__(self, values: dict) -> None:
        self.users: dict[str, str] = {}
        for item in (values.get("http.auth.basic.users") or "").split(","):
            name, sep, password = item.strip().partition(":")
            if item.strip() and (not sep or not name):
                raise ValueError("http.auth.basic.users: entries are name:password")
            if name:
                self.users[name] = password
        self.token = values.get("http.auth.bearer.token") or ""
        if self.users and self.token:
            raise ValueError("http.auth.basic.users and http.auth.bearer.token: set one")

    @property
    def enabled(self) -> bool:
        return bool(self.users or self.token)

    @property
    def challenge(self) -> str:
        return 'Bearer realm="kcoord"' if self.token else 'Basic realm="kcoord"'

    def allows(self, authorization: str | None) -> bool:
        if not self.enabled:
            return True
        scheme, _, cred = (authorization or "").strip().partition(" ")
        cred = cred.strip()
        if self.token:
            return scheme.lower() == "bearer" and hmac.compare_digest(cred.encode(),
                                                                      self.token.encode())
        if scheme.lower() != "basic":
            return False
        try:
            name, sep, password = base64.b64decode(cred, validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        want = self.users.get(name)
        # compared even for an unknown name: no timing difference tells names apart
        ok = hmac.compare_digest(password.encode(), (want or "\0").encode())
        return bool(sep) and want is not None and ok


def _loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def exposed_warning(values: dict, listeners, host: str) -> str | None:
    """The warning for a server that secures its Kafka side (TLS/SASL
    listeners or an authorizer) but serves http.listen on a non-loopback
    address without authentication; None otherwise."""
    secured = bool(values.get("authorizer.class.name")) or any(
        getattr(lsn, "protocol", "PLAINTEXT") != "PLAINTEXT" for lsn in listeners)
    if not secured or _loopback(host) or HttpAuth(values).enabled:
        return None
    return (f"http.listen {host}: the HTTP endpoint (metrics, group and topic names, lag) is "
            "served without authentication on a non-loopback address while the Kafka "
            "listeners are secured; set http.auth.basic.users or http.auth.bearer.token "
            "(and http.ssl.keystore.location), or listen on 127.0.0.1")
