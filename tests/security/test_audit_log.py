"""The server log of a real process after authorization denials and failed
logins: Kafka's authorizer and authenticator lines at INFO (principal,
operation, resource, client address; the mechanism and reason of a failed
login, never the password), one line per repeat window, and a client
certificate no ssl.principal.mapping.rules rule maps made visible."""
from __future__ import annotations

import ssl

import pytest

from tests.clients.wire import WireClient, fetch, wait_for_log
from tests.security.sasl_wire import plain_login
from tests.security.test_authorization import (DENY, READ, TOPIC, acl, create_acls, settings,
                                               user)
from tests.clients.wire import create_topic
from tests.support import ServerProcess

pytestmark = pytest.mark.clients


@pytest.fixture(scope="module")
def server(pki, tmp_path_factory):
    values = settings(pki)
    values["ssl.principal.mapping.rules"] = "RULE:^CN=nobody,.*$/nobody/"  # matches no client
    proc = ServerProcess(tmp_path_factory.mktemp("audit") / "data", values).start()
    with user(proc, "admin") as admin:
        for name in ("orders", "secret"):
            assert create_topic(admin, name)["error_code"] == 0
    yield proc
    proc.stop()


def lines(server, *needles: str) -> list[str]:
    return [line for line in server.log_lines if all(n in line for n in needles)]


def test_denials_are_logged_once_per_window(server):
    since = len(server.log_lines)
    with user(server, "alice") as alice:
        for _ in range(5):
            assert fetch(alice, "secret", 0, 0)["error_code"] == 29
    line = wait_for_log(server, "Principal = User:alice is Denied operation = READ", since=since)
    assert ("INFO kcoord.authorizer: Principal = User:alice is Denied operation = READ from "
            "host = 127.0.0.1 on resource = Topic:LITERAL:secret for request = Fetch with "
            "resourceRefCount = 1 based on rule DefaultDeny") in line
    assert len(lines(server, "User:alice is Denied", "Topic:LITERAL:secret")) == 1
    # a DENY ACL is named as the rule
    create_acls(server, acl(TOPIC, "orders", "User:bob", READ, DENY))
    with user(server, "bob") as bob:
        assert fetch(bob, "orders", 0, 0)["error_code"] == 29
    line = wait_for_log(server, "User:bob is Denied", "Topic:LITERAL:orders")
    assert ("based on rule MatchingAcl(acl=StandardAcl(resourceType=TOPIC, resourceName=orders, "
            "patternType=LITERAL, principal=User:bob, host=*, operation=READ, "
            "permissionType=DENY))") in line


def test_failed_logins_name_mechanism_and_reason_not_password(server):
    since = len(server.log_lines)
    with WireClient(server.ports["SASL_PLAINTEXT"]) as c:
        assert plain_login(c, "alice", "not-her-password-xyz")["error_code"] == 58
    line = wait_for_log(server, "kcoord.authenticator", "Failed authentication", since=since)
    assert "INFO" in line and "/127.0.0.1" in line and "listener=SASL_PLAINTEXT" in line
    assert "PLAIN" in line and "Invalid username or password" in line
    assert not any("not-her-password-xyz" in entry for entry in server.log_lines)


def test_unmapped_client_certificate_is_visible(server, pki):
    ctx = ssl.create_default_context(cafile=str(pki.ca_file))
    ctx.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    c = WireClient(server.ports["SSL"])
    try:
        c.sock = ctx.wrap_socket(c.sock, server_hostname="localhost")
        c.wait_closed()
    except (ssl.SSLError, OSError):
        pass
    finally:
        c.close()
    line = wait_for_log(server, "Failed authentication", "listener=SSL", "no ssl.principal")
    assert "CN=" in line  # the DN as the rules saw it
