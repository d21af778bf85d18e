"""The client side of OAUTHBEARER with Kafka's unsecured login
(OAuthBearerUnsecuredLoginCallbackHandler): the token is an unsigned JWS
made from the JAAS options of `OAuthBearerLoginModule required
unsecuredLoginStringClaim_sub="alice" ...;`, sent in the RFC 7628 client
first message.  For test and development listeners, as in Kafka: a real
identity provider (sasl.oauthbearer.token.endpoint.url) is not implemented
and is refused by name, never skipped."""
from __future__ import annotations

import base64
import json
import time

from .jaas import OAUTH_MODULE

STRING, NUMBER, LIST, EXTENSION = ("unsecuredLoginStringClaim_", "unsecuredLoginNumberClaim_",
                                   "unsecuredLoginListClaim_", "unsecuredLoginExtension_")
OTHER_OPTIONS = {"unsecuredLoginPrincipalClaimName", "unsecuredLoginScopeClaimName",
                 "unsecuredLoginLifetimeSeconds"}
# client settings of Kafka's secured (OIDC) login, which this client does not implement
SECURED_LOGIN_KEYS = ("sasl.oauthbearer.token.endpoint.url", "sasl.login.callback.handler.class")


class OAuthLoginError(ValueError):
    pass


def _b64url(obj: dict) -> str:
    raw = json.dumps(obj, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def unsecured_token(module: str, options: dict[str, str], now_s: float | None = None) -> str:
    """The unsecured JWS Kafka's login makes from the JAAS options: header
    {"alg":"none"}; claims iat, exp (iat + unsecuredLoginLifetimeSeconds,
    default 3600) and the String/Number/List claims; the principal claim
    (unsecuredLoginPrincipalClaimName, default sub) must be a string claim."""
    if module != OAUTH_MODULE:
        raise OAuthLoginError(f"sasl.jaas.config: OAUTHBEARER needs {OAUTH_MODULE}, not {module}")
    now = time.time() if now_s is None else now_s
    try:
        lifetime = int(options.get("unsecuredLoginLifetimeSeconds", "3600"))
    except ValueError:
        raise OAuthLoginError("sasl.jaas.config: unsecuredLoginLifetimeSeconds must be a "
                              "whole number of seconds") from None
    claims: dict = {}
    for key, value in options.items():
        if key.startswith(STRING):
            claims[key[len(STRING):]] = value
        elif key.startswith(NUMBER):
            try:
                claims[key[len(NUMBER):]] = float(value) if "." in value else int(value)
            except ValueError:
                raise OAuthLoginError(f"sasl.jaas.config: {key} is not a number") from None
        elif key.startswith(LIST):
            # Kafka's list syntax: the first character is the separator
            claims[key[len(LIST):]] = [v for v in value[1:].split(value[:1]) if v] if value else []
        elif (key.startswith("unsecuredLogin") and not key.startswith(EXTENSION)
              and key not in OTHER_OPTIONS):
            # a misspelt login option would change the token: refused by name.
            # Others (a broker's unsecuredValidator* beside its login) are the server's.
            raise OAuthLoginError(f"sasl.jaas.config: unknown OAUTHBEARER login option {key}")
    for reserved in ("iat", "exp"):
        if reserved in claims:
            raise OAuthLoginError(f"sasl.jaas.config: the {reserved} claim is set by the login "
                                  f"(unsecuredLoginLifetimeSeconds), not by an option")
    principal_claim = options.get("unsecuredLoginPrincipalClaimName", "sub")
    principal = claims.get(principal_claim)
    if not isinstance(principal, str) or not principal.strip():
        raise OAuthLoginError(f"sasl.jaas.config: OAUTHBEARER unsecured login needs "
                              f"unsecuredLoginStringClaim_{principal_claim}=\"<principal>\"")
    # iat in whole milliseconds, never rounded up past the server's clock
    claims = {"iat": int(now * 1000) / 1000, "exp": int(now) + lifetime, **claims}
    return f"{_b64url({'alg': 'none'})}.{_b64url(claims)}."


def extensions(options: dict[str, str]) -> dict[str, str]:
    return {k[len(EXTENSION):]: v for k, v in options.items() if k.startswith(EXTENSION)}


def client_first_message(token: str, exts: dict[str, str]) -> bytes:
    """RFC 7628 as Kafka's OAuthBearerClientInitialResponse: no authzid."""
    parts = "".join(f"{k}={v}\x01" for k, v in exts.items())
    return f"n,,\x01auth=Bearer {token}\x01{parts}\x01".encode()


def principal_of(token: str, options: dict[str, str]) -> str:
    claims = token.split(".")[1]
    padded = claims + "=" * (-len(claims) % 4)
    return json.loads(base64.urlsafe_b64decode(padded))[
        options.get("unsecuredLoginPrincipalClaimName", "sub")]
