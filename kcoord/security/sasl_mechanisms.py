"""Server side of the SASL mechanisms, as Kafka's SaslServers behave:
PLAIN (RFC 4616), SCRAM-SHA-256/512 (RFC 5802/7677, Kafka's variant: no
SASLprep, no channel binding, only the `tokenauth` extension known) and
OAUTHBEARER (RFC 7628) with Kafka's unsecured JWS validator.

Each exchange is an object with `step(token) -> bytes`; when `done` is
set, `authorization_id` is the principal name and `lifetime_ms` the
credential's remaining life (None when the credential does not expire).
A failed step raises AuthenticationFailed with the message the client sees.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import secrets
import time
from typing import Callable

SCRAM_HASHES = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
SCRAM_MIN_ITERATIONS = 4096


class AuthenticationFailed(Exception):
    pass


class Exchange:
    done = False
    authorization_id: str | None = None
    lifetime_ms: int | None = None

    def step(self, token: bytes) -> bytes:
        raise NotImplementedError


# ------------------------------------------------------------------ PLAIN
class PlainExchange(Exchange):
    def __init__(self, users: dict[str, str]) -> None:
        self.users = users

    def step(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid SASL/PLAIN response: not UTF-8") from None
        parts = text.split("\0")
        if len(parts) != 3:
            raise AuthenticationFailed(
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authzid, user, password = parts
        if not user:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        if authzid and authzid != user:
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is "
                "different from username")
        expected = self.users.get(user)
        # compare in constant time even for an unknown user
        ok = hmac.compare_digest((expected or "\0" + password).encode(), password.encode())
        if expected is None or not ok:
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        self.done = True
        self.authorization_id = user
        return b""


# ------------------------------------------------------------------ SCRAM
def scram_keys(mechanism: str, salted_password: bytes) -> tuple[bytes, bytes]:
    """(StoredKey, ServerKey) from a SaltedPassword."""
    h = SCRAM_HASHES[mechanism]
    client_key = hmac.new(salted_password, b"Client Key", h).digest()
    return h(client_key).digest(), hmac.new(salted_password, b"Server Key", h).digest()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i): PBKDF2-HMAC over the UTF-8 password (no SASLprep)."""
    name = SCRAM_HASHES[mechanism]().name
    return hashlib.pbkdf2_hmac(name, password.encode("utf-8"), salt, iterations)


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while n:
        n, r = divmod(n, 36)
        out = digits[r] + out
    return out or "0"


def _unescape_saslname(name: str) -> str:
    if re.search(r"=(?!2C|3D)", name):
        raise AuthenticationFailed("Invalid SCRAM username")
    return name.replace("=2C", ",").replace("=3D", "=")


def _attrs(text: str) -> list[tuple[str, str]]:
    out = []
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise AuthenticationFailed("Invalid SCRAM message")
        out.append((key, value))
    return out


class ScramExchange(Exchange):
    # The message every credential failure gives (user existence is not revealed)
    def __init__(self, mechanism: str,
                 lookup: Callable[[str, str], tuple[bytes, bytes, bytes, int] | None]) -> None:
        self.mechanism = mechanism
        self.lookup = lookup
        self.hash = SCRAM_HASHES[mechanism]
        self.state = 0
        self.generic = (f"Authentication failed during authentication due to invalid "
                        f"credentials with SASL mechanism {mechanism}")

    def step(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed(self.generic) from None
        if self.state == 0:
            return self._client_first(text)
        if self.state == 1:
            return self._client_final(text)
        raise AuthenticationFailed(self.generic)

    def _client_first(self, text: str) -> bytes:
        m = re.fullmatch(r"n,(a=([^,]*))?,(n=([^,]*),r=([^,]+)((,[A-Za-z][^,]*)*))", text)
        if not m:
            raise AuthenticationFailed(self.generic)
        authzid = m.group(2)
        user = _unescape_saslname(m.group(4))
        if authzid and authzid != user:
            raise AuthenticationFailed(self.generic)
        extensions = dict(_attrs(m.group(6)[1:])) if m.group(6) else {}
        if extensions.get("tokenauth", "").lower() == "true":
            raise AuthenticationFailed(self.generic)  # delegation tokens: not implemented
        credential = self.lookup(user, self.mechanism)
        if credential is None or credential[3] < SCRAM_MIN_ITERATIONS:
            raise AuthenticationFailed(self.generic)
        self.salt, self.stored_key, self.server_key, iterations = credential
        self.user = user
        self.client_nonce = m.group(5)
        self.server_nonce = _base36(secrets.randbits(130))
        self.client_first_bare = m.group(3)
        self.server_first = (f"r={self.client_nonce}{self.server_nonce},"
                             f"s={base64.b64encode(self.salt).decode()},i={iterations}")
        self.state = 1
        return self.server_first.encode()

    def _client_final(self, text: str) -> bytes:
        without_proof, sep, proof_b64 = text.rpartition(",p=")
        if not sep:
            raise AuthenticationFailed(self.generic)
        attrs = dict(_attrs(without_proof))
        nonce = attrs.get("r", "")
        try:
            base64.b64decode(attrs.get("c", ""), validate=True)
            proof = base64.b64decode(proof_b64, validate=True)
        except binascii.Error:
            raise AuthenticationFailed(self.generic) from None
        if not nonce.endswith(self.server_nonce) or "c" not in attrs:
            raise AuthenticationFailed(self.generic)
        auth_message = f"{self.client_first_bare},{self.server_first},{without_proof}".encode()
        signature = hmac.new(self.stored_key, auth_message, self.hash).digest()
        if len(proof) != len(signature):
            raise AuthenticationFailed(self.generic)
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(self.hash(client_key).digest(), self.stored_key):
            raise AuthenticationFailed(self.generic)
        server_signature = hmac.new(self.server_key, auth_message, self.hash).digest()
        self.state = 2
        self.done = True
        self.authorization_id = self.user
        return b"v=" + base64.b64encode(server_signature)


# ------------------------------------------------------------ OAUTHBEARER
_TOKEN = re.compile(r"[-_~+/.a-zA-Z0-9]+=*")


def _b64_json(part: str) -> dict:
    padded = part + "=" * (-len(part) % 4)
    try:
        # Kafka decodes with the standard alphabet; its own login writes base64url
        raw = base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
        value = json.loads(raw)
    except (binascii.Error, ValueError):
        raise ValueError("not base64 JSON") from None
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


class OAuthBearerExchange(Exchange):
    """Kafka's unsecured JWS validator (OAuthBearerUnsecuredValidatorCallbackHandler)."""

    def __init__(self, options: dict[str, str], now_ms: Callable[[], int] | None = None) -> None:
        self.principal_claim = options.get("unsecuredValidatorPrincipalClaimName", "sub")
        self.scope_claim = options.get("unsecuredValidatorScopeClaimName", "scope")
        self.required_scope = [s for s in options.get(
            "unsecuredValidatorRequiredScope", "").split() if s]
        self.skew_ms = int(options.get("unsecuredValidatorAllowableClockSkewMs", "0") or 0)
        self.now_ms = now_ms or (lambda: int(time.time() * 1000))
        self.failure: str | None = None

    def step(self, token: bytes) -> bytes:
        if self.failure is not None:
            # the client acknowledged the error challenge with 0x01
            raise AuthenticationFailed(self.failure)
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid OAUTHBEARER client first message") from None
        m = re.fullmatch(r"n,(a=([^,]*))?,\x01(.*)\x01\x01", text, re.S)
        if not m:
            raise AuthenticationFailed("Invalid OAUTHBEARER client first message")
        authzid = m.group(2)
        fields = {}
        for kv in m.group(3).split("\x01"):
            key, sep, value = kv.partition("=")
            if not sep:
                raise AuthenticationFailed("Invalid OAUTHBEARER client first message")
            fields[key] = value
        auth = fields.pop("auth", "")
        scheme, _, token_text = auth.partition(" ")
        if scheme.lower() != "bearer" or not _TOKEN.fullmatch(token_text.strip()):
            raise AuthenticationFailed("Invalid OAUTHBEARER client first message")
        for key, value in fields.items():
            if not re.fullmatch(r"[A-Za-z]+", key) or not re.fullmatch(r"[\x21-\x7e \t\r\n]*",
                                                                         value):
                raise AuthenticationFailed(f"Invalid OAUTHBEARER extension: {key}")
        problem, scope_problem = self._validate(token_text.strip())
        if problem is not None:
            body = {"status": "insufficient_scope" if scope_problem else "invalid_token"}
            if scope_problem:
                body["scope"] = " ".join(self.required_scope)
            self.failure = json.dumps(body, separators=(",", ":"))
            return self.failure.encode()
        if authzid and authzid != self.authorization_id:
            self.authorization_id = None
            raise AuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is "
                "different from the token's principal name")
        self.done = True
        return b""

    def _validate(self, token: str) -> tuple[str | None, bool]:
        parts = token.split(".")
        if len(parts) != 3 or parts[2] != "":
            return "not an unsecured JWS (3 parts, empty signature)", False
        try:
            header, claims = _b64_json(parts[0]), _b64_json(parts[1])
        except ValueError as exc:
            return str(exc), False
        if header.get("alg") != "none":
            return 'unsecured JWS "alg" must be "none"', False
        now = self.now_ms()
        exp = claims.get("exp")
        if not isinstance(exp, (int, float)) or isinstance(exp, bool):
            return "missing or non-numeric exp", False
        if now - self.skew_ms >= exp * 1000:
            return "token expired", False
        iat = claims.get("iat")
        if iat is not None:
            if not isinstance(iat, (int, float)) or iat * 1000 > now + self.skew_ms or exp <= iat:
                return "bad iat", False
        principal = claims.get(self.principal_claim)
        if not isinstance(principal, str) or not principal.strip():
            return "missing principal claim", False
        if self.required_scope:
            scope = claims.get(self.scope_claim)
            have = scope.split() if isinstance(scope, str) else list(scope or [])
            if any(s not in have for s in self.required_scope):
                return "insufficient scope", True
        self.authorization_id = principal
        self.lifetime_ms = max(0, int(exp * 1000) - now)
        return None, False
