"""Secured kcoord servers for the security tests: certificates made here
(tests/security/certs.py), one server per module where possible."""
from __future__ import annotations

import base64
import json
import time

import pytest

from tests.security.certs import make_pki
from tests.support import ServerProcess

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_bob="bob-secret" user_admin="admin-secret";')
USERS = {"alice": "alice-secret", "bob": "bob-secret", "admin": "admin-secret"}


def secured_settings(pki, **extra) -> dict[str, str]:
    settings = {
        "group.initial.rebalance.delay.ms": "0",
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,"
                     "SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.server_keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca_file),
        "listener.name.ssl.ssl.client.auth": "requested",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
    }
    settings.update(extra)
    return settings


def scram_args(*users: str) -> list[str]:
    args = []
    for user in users:
        for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            args += ["--add-scram", f"{mech}=[name={user},password={USERS[user]}]"]
    return args


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def unsecured_jwt(sub: str, lifetime_s: int = 3600, **claims) -> str:
    """An unsecured JWS as Kafka's OAuthBearerUnsecuredLoginCallbackHandler makes it."""
    def b64(obj) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")
    now = int(time.time())
    return f"{b64({'alg': 'none'})}.{b64({'sub': sub, 'iat': now, 'exp': now + lifetime_s, **claims})}."
