"""`kcoord configs --entity-type users` (SCRAM credentials) and `kcoord acls`
against a SASL_SSL listener with SCRAM-SHA-512 and an authorizer, the
commands themselves connecting with --command-config."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.clients.wire import WireClient
from tests.security.sasl_wire import scram_login
from tests.support import ServerProcess

pytestmark = pytest.mark.clients


@pytest.fixture(scope="module")
def secured(pki, tmp_path_factory):
    settings = {
        "listeners": "SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
        "sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
    }
    proc = ServerProcess(tmp_path_factory.mktemp("cli") / "data", settings, extra_args=[
        "--add-scram", "SCRAM-SHA-512=[name=admin,password=admin-secret]"])
    proc.start()
    props = tmp_path_factory.mktemp("props") / "admin.properties"
    props.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="admin" password="admin-secret";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={pki.ca_file}\n")
    proc.command_config = str(props)
    yield proc
    proc.stop()


def kcoord(server, *args) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "kcoord.cli", *args, "--bootstrap-server",
           f"localhost:{server.ports['SASL_SSL']}", "--command-config", server.command_config]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def alice_login(server, password: str) -> int:
    with WireClient(server.ports["SASL_PLAINTEXT"]) as c:
        return scram_login(c, "SCRAM-SHA-256", "alice", password)["error_code"]


def test_scram_users_with_kcoord_configs(secured):
    out = kcoord(secured, "configs", "--alter", "--entity-type", "users", "--entity-name",
                 "alice", "--add-config",
                 "SCRAM-SHA-256=[iterations=8192,password=alice-secret],"
                 "SCRAM-SHA-512=[password=alice-secret]")
    assert out.returncode == 0, out.stderr
    assert "Completed updating config for user alice." in out.stdout
    out = kcoord(secured, "configs", "--describe", "--entity-type", "users",
                 "--entity-name", "alice")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ("SCRAM credential configs for user-principal 'alice' are "
                                  "SCRAM-SHA-256=iterations=8192,SCRAM-SHA-512=iterations=4096")
    assert alice_login(secured, "alice-secret") == 0
    assert alice_login(secured, "wrong") == 58
    out = kcoord(secured, "configs", "--alter", "--entity-type", "users", "--entity-name",
                 "alice", "--delete-config", "SCRAM-SHA-256")
    assert out.returncode == 0, out.stderr
    assert alice_login(secured, "alice-secret") == 58  # the SHA-256 credential is gone


def test_acls_add_list_remove(secured):
    out = kcoord(secured, "acls", "--add", "--allow-principal", "User:carol", "--operation",
                 "Write", "--topic", "orders")
    assert out.returncode == 0, out.stderr
    out = kcoord(secured, "acls", "--add", "--allow-principal", "User:bob", "--consumer",
                 "--topic", "orders", "--group", "billing")
    assert out.returncode == 0, out.stderr
    # kafka-acls.sh: each resource named with the ACLs being added, then every ACL
    # the resources now hold (carol's from before too)
    topic = "`ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`: \n"
    adding, current = out.stdout.split("Current ACLs for resource", 1)
    assert ("Adding ACLs for resource " + topic + " \t(principal=User:bob, host=*, "
            "operation=READ, permissionType=ALLOW)\n\t(principal=User:bob, host=*, "
            "operation=DESCRIBE, permissionType=ALLOW) \n") in adding
    assert "Adding ACLs for resource `ResourcePattern(resourceType=GROUP, name=billing" in adding
    assert "User:carol" not in adding
    assert current.startswith(" " + topic)
    assert "(principal=User:carol, host=*, operation=WRITE, permissionType=ALLOW)" in current
    assert "(principal=User:bob, host=*, operation=READ, permissionType=ALLOW)" in current
    out = kcoord(secured, "acls", "--list", "--topic", "orders")
    assert out.returncode == 0, out.stderr
    assert "ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)" in out.stdout
    assert "(principal=User:bob, host=*, operation=READ, permissionType=ALLOW)" in out.stdout
    assert "operation=DESCRIBE" in out.stdout
    out = kcoord(secured, "acls", "--remove", "--allow-principal", "User:bob", "--operation",
                 "Read", "--topic", "orders", "--force")
    assert out.returncode == 0, out.stderr
    assert "operation=READ" in out.stdout
    out = kcoord(secured, "acls", "--list", "--topic", "orders")
    assert "operation=READ" not in out.stdout and "operation=DESCRIBE" in out.stdout
    out = kcoord(secured, "acls", "--list", "--group", "billing")
    assert "resourceType=GROUP, name=billing" in out.stdout


def test_wrong_admin_password_is_one_line(secured, tmp_path):
    bad = tmp_path / "bad.properties"
    bad.write_text(open(secured.command_config).read().replace("admin-secret", "nope"))
    cmd = [sys.executable, "-m", "kcoord.cli", "acls", "--list", "--bootstrap-server",
           f"localhost:{secured.ports['SASL_SSL']}", "--command-config", str(bad)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert "SASL authentication failed" in out.stderr
    assert "Traceback" not in out.stderr


def test_inter_broker_connection_helper(secured, pki):
    """kcoord.security.client.open_connection: TLS + SCRAM-SHA-512 login from
    the client properties a node derives from its own config."""
    import asyncio
    from kcoord.security.client import SaslLoginError, client_properties_from_config, open_connection
    values = {"listeners": "SASL_SSL://127.0.0.1:0", "inter.broker.listener.name": "SASL_SSL",
              "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
              "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config":
                  "org.apache.kafka.common.security.scram.ScramLoginModule required "
                  'username="admin" password="admin-secret";',
              "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_file)}
    props = client_properties_from_config(values)

    async def main():
        reader, writer = await open_connection("localhost", secured.ports["SASL_SSL"], props, 30)
        from tests.clients.wire import decode_response, encode_request
        writer.write(encode_request(3, 9, {"topics": [], "allow_auto_topic_creation": False}))
        size = int.from_bytes(await reader.readexactly(4), "big")
        _, resp = decode_response(3, 9, await reader.readexactly(size))
        writer.close()
        bad = dict(props, **{"sasl.jaas.config": props["sasl.jaas.config"].replace(
            "admin-secret", "nope")})
        try:
            await open_connection("localhost", secured.ports["SASL_SSL"], bad, 30)
        except SaslLoginError as exc:
            return resp, str(exc)
        return resp, None
    resp, failure = asyncio.run(main())
    assert resp["brokers"]  # an authenticated Metadata answer
    assert failure is not None and "SASL authentication failed" in failure
