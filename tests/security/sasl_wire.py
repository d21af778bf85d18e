"""SASL by hand over the test wire client, for exact server behaviour."""
from __future__ import annotations

import scramp

from tests.clients.wire import WireClient

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


def handshake(client: WireClient, mechanism: str, version: int = 1) -> dict:
    return client.request(SASL_HANDSHAKE, version, {"mechanism": mechanism})


def authenticate(client: WireClient, token: bytes, version: int = 2) -> dict:
    return client.request(SASL_AUTHENTICATE, version, {"auth_bytes": token})


def plain_login(client: WireClient, user: str, password: str, version: int = 2) -> dict:
    assert handshake(client, "PLAIN")["error_code"] == 0
    return authenticate(client, f"\0{user}\0{password}".encode(), version)


def scram_login(client: WireClient, mechanism: str, user: str, password: str) -> dict:
    """The whole SCRAM exchange; returns the last SaslAuthenticate response."""
    assert handshake(client, mechanism)["error_code"] == 0
    c = scramp.ScramClient([mechanism], user, password)
    first = authenticate(client, c.get_client_first().encode())
    if first["error_code"]:
        return first
    c.set_server_first(first["auth_bytes"].decode())
    final = authenticate(client, c.get_client_final().encode())
    if final["error_code"] == 0:
        c.set_server_final(final["auth_bytes"].decode())  # checks the server's signature
    return final
