"""TLS and SASL against one secured kcoord (PLAINTEXT, SSL, SASL_PLAINTEXT
and SASL_SSL listeners): every real client on every mechanism it supports,
and the failures Kafka gives (wrong password, unknown user or mechanism,
requests before authentication, TLS/plaintext mix-ups, session expiry)."""
from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import time

import pytest

from tests.clients.wire import WireClient, encode_request, wait_for_log
from tests.security import clients
from tests.security.conftest import USERS, scram_args, secured_settings, unsecured_jwt
from tests.security.sasl_wire import authenticate, handshake, plain_login, scram_login
from tests.support import ServerProcess

pytestmark = pytest.mark.clients
REAUTH_MS = 2000  # PLAIN sessions on SASL_PLAINTEXT only (aiokafka cannot re-authenticate)


@pytest.fixture(scope="module")
def secure(pki, tmp_path_factory):
    settings = secured_settings(pki, **{
        "listener.name.sasl_plaintext.plain.connections.max.reauth.ms": str(REAUTH_MS)})
    proc = ServerProcess(tmp_path_factory.mktemp("secure") / "data", settings,
                         extra_args=scram_args("alice", "admin"))
    proc.start()
    yield proc
    proc.stop()


def addr(server, listener: str) -> str:
    return f"127.0.0.1:{server.ports[listener]}"


# ------------------------------------------------------------ start-up errors
@pytest.mark.parametrize("setting,key", [
    ("ssl.keystore.type=JKS", "ssl.keystore.type"),
    ("sasl.enabled.mechanisms=GSSAPI", "sasl.enabled.mechanisms"),
    ("sasl.oauthbearer.jwks.endpoint.url=https://x", "sasl.oauthbearer.jwks.endpoint.url"),
    ("authorizer.class.name=com.example.Auth", "authorizer.class.name"),
])
def test_unimplemented_security_setting_refuses_to_start(pki, tmp_path, setting, key):
    base = secured_settings(pki)
    args = [sys.executable, "-m", "kcoord.cli", "serve", "--listen", "127.0.0.1:0",
            "--data-dir", str(tmp_path / "d")]
    for k, v in base.items():
        args += ["--set", f"{k}={v}"]
    args += ["--set", setting]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert key in proc.stderr
    assert "kcoord listening" not in proc.stderr


# ------------------------------------------------------------- real clients
def _check(result, topic):
    got, committed = result
    assert got == clients.values(topic)
    assert committed == clients.N


@pytest.mark.parametrize("mode", ["SSL", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kafka_python(secure, pki, mode):
    tls = {"ssl_cafile": str(pki.ca_file), "ssl_check_hostname": True}
    topic = f"kp-{mode.lower()}"
    if mode == "SSL":
        kw = {"security_protocol": "SSL", **tls}
        listener = "SSL"
    else:
        user = "bob" if mode == "PLAIN" else "alice"
        kw = {"security_protocol": "SASL_SSL", "sasl_mechanism": mode,
              "sasl_plain_username": user, "sasl_plain_password": USERS[user], **tls}
        listener = "SASL_SSL"
    _check(clients.kafka_python_roundtrip(addr(secure, listener), topic, f"g-{topic}", **kw),
           topic)


@pytest.mark.parametrize("mode", ["mTLS", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512",
                                  "OAUTHBEARER"])
def test_confluent_kafka(secure, pki, mode):
    topic = f"ck-{mode.lower()}"
    tls = {"ssl.ca.location": str(pki.ca_file)}
    if mode == "mTLS":
        conf = {"security.protocol": "ssl", "ssl.certificate.location": str(pki.client_cert),
                "ssl.key.location": str(pki.client_key), **tls}
        listener = "SSL"
    elif mode == "OAUTHBEARER":
        conf = {"security.protocol": "sasl_ssl", "sasl.mechanisms": "OAUTHBEARER",
                "enable.sasl.oauthbearer.unsecure.jwt": True,
                "sasl.oauthbearer.config": "principal=carol scope=kafka", **tls}
        listener = "SASL_SSL"
    else:
        user = "bob" if mode == "PLAIN" else "alice"
        conf = {"security.protocol": "sasl_ssl", "sasl.mechanisms": mode,
                "sasl.username": user, "sasl.password": USERS[user], **tls}
        listener = "SASL_SSL"
    _check(clients.confluent_roundtrip(addr(secure, listener), topic, f"g-{topic}", conf), topic)


@pytest.mark.parametrize("mode", ["SSL", "PLAIN", "SCRAM-SHA-256"])
def test_aiokafka(secure, pki, mode):
    from aiokafka.helpers import create_ssl_context
    topic = f"aio-{mode.lower()}"
    ctx = create_ssl_context(cafile=str(pki.ca_file))
    if mode == "SSL":
        kw = {"security_protocol": "SSL", "ssl_context": ctx}
    else:
        user = "bob" if mode == "PLAIN" else "alice"
        kw = {"security_protocol": "SASL_SSL", "ssl_context": ctx, "sasl_mechanism": mode,
              "sasl_plain_username": user, "sasl_plain_password": USERS[user]}
    listener = "SSL" if mode == "SSL" else "SASL_SSL"
    _check(clients.aiokafka_roundtrip(addr(secure, listener), topic, f"g-{topic}", **kw), topic)


@pytest.mark.parametrize("mode", ["SSL", "PLAIN", "SCRAM-SHA-512"])
def test_kafkajs(secure, pki, mode, tmp_path):
    topic = f"js-{mode.lower()}"
    tls = {"ca": str(pki.ca_file)}
    if mode == "SSL":
        sasl, listener = None, "SSL"
    else:
        user = "bob" if mode == "PLAIN" else "alice"
        sasl = {"mechanism": mode.lower(), "username": user, "password": USERS[user]}
        listener = "SASL_SSL"
    _check(clients.kafkajs_roundtrip(addr(secure, listener), topic, f"g-{topic}", tls, sasl,
                                     tmp_path), topic)


def test_kafka_python_sasl_plaintext_scram(secure):
    topic = "kp-sasl-plaintext"
    _check(clients.kafka_python_roundtrip(
        addr(secure, "SASL_PLAINTEXT"), topic, f"g-{topic}", security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="admin",
        sasl_plain_password=USERS["admin"]), topic)


# ------------------------------------------------------------ wire failures
def sasl_client(server) -> WireClient:
    return WireClient(server.ports["SASL_PLAINTEXT"])


def test_plain_wrong_password_fails_with_message_then_closes(secure):
    with sasl_client(secure) as c:
        resp = plain_login(c, "bob", "not-the-password")
        assert resp["error_code"] == 58
        assert "Invalid username or password" in resp["error_message"]
        c.wait_closed()


@pytest.mark.parametrize("user,password", [("alice", "wrong"), ("nobody", "whatever")])
def test_scram_bad_credentials_give_one_generic_message(secure, user, password):
    with sasl_client(secure) as c:
        resp = scram_login(c, "SCRAM-SHA-256", user, password)
        assert resp["error_code"] == 58
        # the same message for a wrong password and an unknown user
        assert resp["error_message"] == ("Authentication failed during authentication due to "
                                         "invalid credentials with SASL mechanism SCRAM-SHA-256")
        c.wait_closed()


def test_scram_and_plain_succeed_on_the_wire(secure):
    with sasl_client(secure) as c:
        assert scram_login(c, "SCRAM-SHA-512", "alice", USERS["alice"])["error_code"] == 0
        assert c.request(3, 9, {"topics": [], "allow_auto_topic_creation": False})["brokers"]
    with sasl_client(secure) as c:
        resp = plain_login(c, "bob", USERS["bob"])
        assert resp["error_code"] == 0
        assert resp["session_lifetime_ms"] == REAUTH_MS


def test_unknown_mechanism_lists_enabled_ones_then_closes(secure):
    with sasl_client(secure) as c:
        resp = handshake(c, "GSSAPI")
        assert resp["error_code"] == 33
        assert resp["mechanisms"] == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
        c.wait_closed()


def test_request_before_authentication_closes(secure):
    since = len(secure.log_lines)
    with sasl_client(secure) as c:
        assert c.api_versions()["error_code"] == 0  # ApiVersions is served first
        c.send_raw(encode_request(
            3, 9, {"topics": None, "allow_auto_topic_creation": False}))
        c.wait_closed()
    wait_for_log(secure, "Metadata request before SASL authentication", since=since)


def test_oauthbearer_expired_token_is_refused(secure):
    token = unsecured_jwt("carol", lifetime_s=-10)
    with sasl_client(secure) as c:
        assert handshake(c, "OAUTHBEARER")["error_code"] == 0
        first = authenticate(c, f"n,,\x01auth=Bearer {token}\x01\x01".encode())
        assert first["error_code"] == 0 and b"invalid_token" in first["auth_bytes"]
        final = authenticate(c, b"\x01")
        assert final["error_code"] == 58 and "invalid_token" in final["error_message"]
        c.wait_closed()


def test_session_expiry_closes_and_reauthentication_extends(secure):
    with sasl_client(secure) as c:
        assert plain_login(c, "bob", USERS["bob"])["error_code"] == 0
        # re-authenticate after the 1 s minimum: the session goes on
        end = time.monotonic() + 1.2
        while time.monotonic() < end:
            time.sleep(0.1)
        assert plain_login(c, "bob", USERS["bob"])["session_lifetime_ms"] == REAUTH_MS
        assert c.api_versions()["error_code"] == 0
    since = len(secure.log_lines)
    with sasl_client(secure) as c:
        assert plain_login(c, "bob", USERS["bob"])["error_code"] == 0
        # wait past the lifetime (bounded), then any request closes the connection
        end = time.monotonic() + REAUTH_MS / 1000 + 0.5
        while time.monotonic() < end:
            time.sleep(0.1)
        c.send_raw(encode_request(
            18, 3, {"client_software_name": "t", "client_software_version": "0"}))
        c.wait_closed()
    wait_for_log(secure, "expired", since=since)


def test_reauthentication_cannot_change_principal(secure):
    with sasl_client(secure) as c:
        assert plain_login(c, "bob", USERS["bob"])["error_code"] == 0
        end = time.monotonic() + 1.2
        while time.monotonic() < end:
            time.sleep(0.1)
        resp = plain_login(c, "admin", USERS["admin"])
        assert resp["error_code"] == 58
        assert "Cannot change principals" in resp["error_message"]
        c.wait_closed()


def test_plaintext_client_on_tls_port_is_closed_with_log(secure):
    since = len(secure.log_lines)
    with WireClient(secure.ports["SSL"]) as c:
        c.send_raw(encode_request(
            18, 3, {"client_software_name": "t", "client_software_version": "0"}))
        c.wait_closed()
    wait_for_log(secure, "not TLS", since=since)


def test_tls_client_on_plaintext_port_fails(secure, pki):
    ctx = ssl.create_default_context(cafile=str(pki.ca_file))
    raw = socket.create_connection(("127.0.0.1", secure.ports["PLAINTEXT"]), timeout=20)
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            tls.recv(1)
    raw.close()


def test_sasl_handshake_on_plaintext_listener_is_illegal_state(secure):
    with WireClient(secure.ports["PLAINTEXT"]) as c:
        assert handshake(c, "PLAIN")["error_code"] == 34


def test_credentials_are_stored_salted(secure):
    log = (secure.data_dir / "__kcoord_security" / "metadata.log").read_text()
    assert "stored_key" in log and "alice" in log
    for password in USERS.values():
        assert password not in log


def test_handshake_v0_raw_tokens(secure):
    """SaslHandshake v0: the token goes as a raw length-prefixed frame (no
    header); PLAIN's empty server token comes back as a zero-length frame."""
    import struct
    with sasl_client(secure) as c:
        assert handshake(c, "PLAIN", version=0)["error_code"] == 0
        token = b"\0bob\0" + USERS["bob"].encode()
        c.send_raw(struct.pack(">i", len(token)) + token)
        assert c.recv_frame() == b""
        assert c.api_versions()["error_code"] == 0  # authenticated: requests are served
    with sasl_client(secure) as c:
        assert handshake(c, "PLAIN", version=0)["error_code"] == 0
        token = b"\0bob\0wrong"
        c.send_raw(struct.pack(">i", len(token)) + token)
        assert c.wait_closed() == b""  # v0: no error frame, the connection closes


def test_request_after_v1_handshake_gets_illegal_sasl_state(secure):
    with sasl_client(secure) as c:
        assert handshake(c, "PLAIN")["error_code"] == 0
        resp = c.request(10, 3, {"key": "g", "key_type": 0})  # FindCoordinator
        assert resp["error_code"] == 34
        c.wait_closed()


def test_confluent_reauthenticates_before_the_session_ends(secure):
    """KIP-368 with a real client: librdkafka re-authenticates within the
    2 s session lifetime, so a producer keeps working well past it."""
    from confluent_kafka import Producer
    since = len(secure.log_lines)
    p = Producer({"bootstrap.servers": addr(secure, "SASL_PLAINTEXT"),
                  "security.protocol": "sasl_plaintext", "sasl.mechanisms": "PLAIN",
                  "sasl.username": "bob", "sasl.password": USERS["bob"], "acks": "all"})
    delivered = []
    end = time.monotonic() + 3 * REAUTH_MS / 1000
    while time.monotonic() < end:
        p.produce("reauth", b"x", on_delivery=lambda err, msg: delivered.append(err))
        p.poll(0.2)
    assert p.flush(30) == 0
    assert delivered and all(err is None for err in delivered)
    # without re-authentication each 2 s session would end in a close (at least 2
    # in 6 s); one late re-authentication on a loaded machine is tolerated
    assert len([line for line in secure.log_lines[since:] if "expired" in line]) <= 1
