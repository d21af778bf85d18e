"""SASL authentication on a connection, as Kafka's SaslServerAuthenticator.

Before authentication only ApiVersions (once) and SaslHandshake are
served; the handshake picks a mechanism, then tokens come either as raw
length-prefixed frames (handshake v0) or in SaslAuthenticate requests (v1).
Anything else before authentication closes the connection; a failure
answers SASL_AUTHENTICATION_FAILED with a message (v1) and closes.
KIP-368: with connections.max.reauth.ms (or an expiring OAUTHBEARER
token) the session has a lifetime, sent in SaslAuthenticate v1+; a
request after it ends closes the connection, and a SaslHandshake on the
live connection re-authenticates (same mechanism and principal).
"""
from __future__ import annotations

import logging
import struct
import time
from dataclasses import dataclass, field

from ..protocol.api import APIS, error_response, request_codec
from ..protocol.errors import Err, ProtocolError
from ..protocol.headers import skip_header_tags
from .jaas import OAUTH_MODULE, PLAIN_MODULE, SCRAM_MODULE, parse_jaas
from .listeners import listener_value
from . import audit
from .sasl_mechanisms import (AuthenticationFailed, OAuthBearerExchange, PlainExchange,
                              ScramExchange)

log = logging.getLogger("kcoord.sasl")

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
API_VERSIONS = 18
REAUTH_MIN_INTERVAL_S = 1.0
_KEY = struct.Struct(">h")
_MODULES = {"PLAIN": PLAIN_MODULE, "SCRAM-SHA-256": SCRAM_MODULE,
            "SCRAM-SHA-512": SCRAM_MODULE, "OAUTHBEARER": OAUTH_MODULE}


def mechanism_settings(values: dict, listener: str, mechanism: str) -> dict[str, str]:
    """The JAAS options for a mechanism on a listener
    (listener.name.<l>.<mech>.sasl.jaas.config, then sasl.jaas.config)."""
    key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    raw = values.get(key)
    if raw is None:
        key = "sasl.jaas.config"
        raw = values.get(key)
    options: dict[str, str] = {}
    if raw:
        module, options = parse_jaas(key, str(raw))
        if module != _MODULES[mechanism]:
            if key == "sasl.jaas.config":
                options = {}  # the global login is another mechanism's
            else:
                raise ValueError(f"{key}: {module} is not the login module of {mechanism}")
    if mechanism == "PLAIN" and not any(k.startswith("user_") for k in options):
        raise ValueError(f"sasl.jaas.config: PLAIN on listener {listener} needs users: "
                         f"listener.name.{listener.lower()}.plain.sasl.jaas.config="
                         f'{PLAIN_MODULE} required user_<name>="<password>";')
    if mechanism == "OAUTHBEARER":
        for k in options:
            if k.startswith("unsecuredValidator") and k not in (
                    "unsecuredValidatorPrincipalClaimName", "unsecuredValidatorScopeClaimName",
                    "unsecuredValidatorRequiredScope",
                    "unsecuredValidatorAllowableClockSkewMs"):
                raise ValueError(f"{key}: option {k} not implemented")
    return options


@dataclass
class SaslListenerConfig:
    """What the connections of one SASL listener share."""
    listener: str
    mechanisms: list[str]
    options: dict[str, dict[str, str]]
    reauth_ms: dict[str, int]
    max_receive: int
    credentials: object  # SecurityStore: credential(user, mechanism)
    failure_delay_s: float = 0.1
    stats: dict = field(default_factory=lambda: {"ok": 0, "failed": 0})

    @classmethod
    def build(cls, values: dict, listener: str, mechanisms: list[str],
              credentials) -> "SaslListenerConfig":
        options = {m: mechanism_settings(values, listener, m) for m in mechanisms}
        reauth = {m: int(listener_value(values, listener, "connections.max.reauth.ms", m) or 0)
                  for m in mechanisms}
        max_receive = int(listener_value(values, listener, "sasl.server.max.receive.size")
                          or 524288)
        delay = int(values.get("connection.failed.authentication.delay.ms") or 100) / 1000.0
        return cls(listener, mechanisms, options, reauth, max_receive, credentials, delay)

    def exchange(self, mechanism: str):
        if mechanism == "PLAIN":
            users = {k[5:]: v for k, v in self.options["PLAIN"].items() if k.startswith("user_")}
            return PlainExchange(users)
        if mechanism.startswith("SCRAM-"):
            return ScramExchange(mechanism, self.credentials.credential)
        return OAuthBearerExchange(self.options["OAUTHBEARER"])


def _has_error_code(key: int, version: int) -> bool:
    api = APIS[key]
    return api.min_version <= version <= api.max_version and any(
        f.name == "error_code" and version in f.versions for f in api.response.fields)


# gate states
START, AFTER_API_VERSIONS, RAW_TOKENS, AUTHENTICATE, AUTHENTICATED, FAILED = range(6)


class SaslGate:
    """One connection's authentication state.  `intercept(conn, frame)` sees
    every frame first and returns True when it handled the frame."""

    def __init__(self, cfg: SaslListenerConfig) -> None:
        self.cfg = cfg
        self.state = START
        self.mechanism: str | None = None
        self.exchange = None
        self.expiry: float | None = None   # monotonic seconds; None: no expiry
        self.reauthenticating = False
        self.last_auth_start = 0.0
        self.principal: str | None = None

    @property
    def authenticated(self) -> bool:
        return self.state == AUTHENTICATED

    # ----------------------------------------------------------- routing
    def intercept(self, conn, frame: bytes) -> bool:
        state = self.state
        if state == AUTHENTICATED:
            if self.expiry is None:
                key = _KEY.unpack_from(frame, 0)[0] if len(frame) >= 2 else -1
                if key == SASL_HANDSHAKE or key == SASL_AUTHENTICATE:
                    return self._after_auth(conn, frame, key)
                return False
            key = _KEY.unpack_from(frame, 0)[0] if len(frame) >= 2 else -1
            if key == SASL_HANDSHAKE or (key == SASL_AUTHENTICATE and self.reauthenticating):
                return self._after_auth(conn, frame, key)
            if time.monotonic() >= self.expiry and not self.reauthenticating:
                conn.close(f"SASL session of {self.principal} expired "
                           f"(connections.max.reauth.ms); the client did not re-authenticate")
                return True
            if key == SASL_AUTHENTICATE:
                return self._after_auth(conn, frame, key)
            return False
        if state == FAILED:
            return True
        if len(frame) > self.cfg.max_receive:
            conn.close(f"SASL frame of {len(frame)} bytes exceeds sasl.server.max.receive.size")
            self.state = FAILED
            return True
        if state == RAW_TOKENS:
            self._token(conn, frame, None)
            return True
        try:
            key, version, corr, _client, pos = conn.peek_header(frame)
        except ProtocolError as exc:
            conn.close(f"malformed request header before authentication: {exc}")
            return True
        if key == API_VERSIONS and state == START:
            self.state = AFTER_API_VERSIONS
            return False  # answered by the normal path
        if key == SASL_HANDSHAKE and state in (START, AFTER_API_VERSIONS):
            self._handshake(conn, frame, key, version, corr, pos)
            return True
        if key == SASL_AUTHENTICATE and state == AUTHENTICATE:
            req = self._decode(conn, frame, key, version, pos)
            if req is not None:
                self._token(conn, req["auth_bytes"], (version, corr))
            return True
        name = APIS[key].name if key in APIS else f"API key {key}"
        reason = (f"{name} request before SASL authentication completed "
                  f"(only ApiVersions and SaslHandshake are served first)")
        if state == AUTHENTICATE and key in APIS and _has_error_code(key, version):
            # after a v1 handshake Kafka answers the request itself with
            # ILLEGAL_SASL_STATE, then closes
            conn.respond(key, version, corr, {"error_code": Err.ILLEGAL_SASL_STATE})
            self._fail(conn, reason, close_now=True)
            return True
        conn.close(reason)
        self.state = FAILED
        return True

    def _decode(self, conn, frame, key, version, pos):
        lo, hi = APIS[key].min_version, APIS[key].max_version
        if not lo <= version <= hi:
            conn.close(f"unsupported version {version} of API {key}")
            self.state = FAILED
            return None
        try:
            if APIS[key].request.is_flexible(version):
                pos = skip_header_tags(frame, pos)
            return request_codec(key, version)[1](frame, pos)[0]
        except ProtocolError as exc:
            conn.close(f"malformed {APIS[key].name} request: {exc}")
            self.state = FAILED
            return None

    # ------------------------------------------------------------ steps
    def _handshake(self, conn, frame, key, version, corr, pos, reauth: bool = False) -> None:
        req = self._decode(conn, frame, key, version, pos)
        if req is None:
            return
        mech = req["mechanism"]
        if mech not in self.cfg.mechanisms:
            conn.respond(key, version, corr, {"error_code": Err.UNSUPPORTED_SASL_MECHANISM,
                                              "mechanisms": self.cfg.mechanisms})
            self._fail(conn, f"unsupported SASL mechanism {mech!r}", close_now=True)
            return
        conn.respond(key, version, corr, {"error_code": Err.NONE,
                                          "mechanisms": self.cfg.mechanisms})
        self.reauthenticating = reauth
        self.previous_mechanism = self.mechanism
        self.mechanism = mech
        self.exchange = self.cfg.exchange(mech)
        self.last_auth_start = time.monotonic()
        if not reauth:
            self.state = RAW_TOKENS if version == 0 else AUTHENTICATE

    def _token(self, conn, token: bytes, v1: tuple[int, int] | None) -> None:
        try:
            challenge = self.exchange.step(bytes(token))
            if self.exchange.done and self.reauthenticating:
                principal = "User:" + self.exchange.authorization_id
                if self.mechanism != self.previous_mechanism:
                    raise AuthenticationFailed(
                        "Re-authentication must use the same SASL mechanism")
                if principal != self.principal:
                    raise AuthenticationFailed(
                        "Cannot change principals during re-authentication from "
                        f"{self.principal}: {principal}")
        except AuthenticationFailed as exc:
            self.cfg.stats["failed"] += 1
            if v1 is not None:
                conn.respond(SASL_AUTHENTICATE, v1[0], v1[1], error_response(
                    SASL_AUTHENTICATE, v1[0], {}, Err.SASL_AUTHENTICATION_FAILED, str(exc)))
            self._fail(conn, f"SASL {self.mechanism} authentication failed: {exc}")
            return
        lifetime = 0
        if self.exchange.done:
            lifetime = self._complete(conn)
        if v1 is not None:
            conn.respond(SASL_AUTHENTICATE, v1[0], v1[1], {
                "error_code": Err.NONE, "error_message": None, "auth_bytes": challenge,
                "session_lifetime_ms": lifetime if v1[0] >= 1 else 0})
        else:
            conn.send_raw(struct.pack(">i", len(challenge)) + challenge)

    def _complete(self, conn) -> int:
        ex = self.exchange
        self.principal = "User:" + ex.authorization_id
        configured = self.cfg.reauth_ms.get(self.mechanism, 0)
        limits = [v for v in (configured or None, ex.lifetime_ms) if v is not None]
        lifetime = max(0, min(limits)) if limits else 0
        self.expiry = time.monotonic() + lifetime / 1000.0 if lifetime else None
        self.state = AUTHENTICATED
        self.reauthenticating = False
        self.exchange = None
        self.cfg.stats["ok"] += 1
        conn.set_principal(self.principal)
        return lifetime

    def _after_auth(self, conn, frame, key) -> bool:
        try:
            key, version, corr, _client, pos = conn.peek_header(frame)
        except ProtocolError as exc:
            conn.close(f"malformed request header: {exc}")
            return True
        if key == SASL_HANDSHAKE:
            allowed = (self.expiry is not None and not self.reauthenticating and
                       time.monotonic() - self.last_auth_start >= REAUTH_MIN_INTERVAL_S
                       and version >= 1)
            if allowed:
                self._handshake(conn, frame, key, version, corr, pos, reauth=True)
                return True
            req = self._decode(conn, frame, key, version, pos)
            if req is not None:
                conn.respond(key, version, corr, {"error_code": Err.ILLEGAL_SASL_STATE,
                                                  "mechanisms": self.cfg.mechanisms})
            return True
        req = self._decode(conn, frame, key, version, pos)
        if req is None:
            return True
        if self.reauthenticating:
            self._token(conn, req["auth_bytes"], (version, corr))
            return True
        conn.respond(key, version, corr, error_response(
            key, version, req, Err.ILLEGAL_SASL_STATE,
            "SaslAuthenticate request received after successful authentication"))
        return True

    def _fail(self, conn, reason: str, close_now: bool = False) -> None:
        self.state = FAILED
        audit.failed_authentication(conn.host, conn.listener, reason)
        conn.fail(reason, 0.0 if close_now else self.cfg.failure_delay_s)
