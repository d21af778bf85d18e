"""kcoord's own tools as OAUTHBEARER clients (Kafka's unsecured login in
sasl.jaas.config): `kcoord acls --command-config` and the pipeline's wire
client against a real kcoord whose SASL listeners offer OAUTHBEARER only,
with an authorizer, so the token's `sub` is the principal that is checked."""
from __future__ import annotations

import subprocess
import sys

import pytest

from kcoord.security.jaas import OAUTH_MODULE
from tests.clients.wire import WireClient, create_topic
from tests.support import ServerProcess

pytestmark = pytest.mark.clients

TOPIC, GROUP = "paid", "billing"


@pytest.fixture(scope="module")
def oauth_server(pki, tmp_path_factory):
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,"
                     "SASL_PLAINTEXT://127.0.0.1:0",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
        "sasl.enabled.mechanisms": "OAUTHBEARER",
        # SASL_PLAINTEXT wants a scope the tokens below do not all carry
        "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config":
            f'{OAUTH_MODULE} required unsecuredValidatorRequiredScope="kafka";',
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ops;User:ANONYMOUS",  # PLAINTEXT sets the data up
    }
    proc = ServerProcess(tmp_path_factory.mktemp("oauth") / "data", settings)
    proc.start()
    with WireClient(proc.ports["PLAINTEXT"]) as c:
        assert create_topic(c, TOPIC)["error_code"] == 0
        resp = c.request(8, 8, {
            "group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None, "topics": [{"name": TOPIC, "partitions": [
                {"partition_index": 0, "committed_offset": 42, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}]})
        assert resp["topics"][0]["partitions"][0]["error_code"] == 0
    yield proc
    proc.stop()


def props(pki, sub: str, listener: str = "SASL_SSL", extra: str = "") -> dict[str, str]:
    out = {"security.protocol": listener, "sasl.mechanism": "OAUTHBEARER",
           "sasl.jaas.config": f'{OAUTH_MODULE} required unsecuredLoginStringClaim_sub="{sub}"'
                               f'{extra};'}
    if listener == "SASL_SSL":
        out.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_file)})
    return out


def kcoord(server, config: dict, tmp_path, *args) -> subprocess.CompletedProcess:
    path = tmp_path / "client.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
    cmd = [sys.executable, "-m", "kcoord.cli", *args, "--bootstrap-server",
           f"localhost:{server.ports['SASL_SSL']}", "--command-config", str(path)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_acls_cli_over_oauthbearer(oauth_server, pki, tmp_path):
    out = kcoord(oauth_server, props(pki, "ops"), tmp_path, "acls", "--add",
                 "--allow-principal", "User:carol", "--operation", "Read", "--topic", TOPIC)
    assert out.returncode == 0, out.stderr
    out = kcoord(oauth_server, props(pki, "ops"), tmp_path, "acls", "--list", "--topic", TOPIC)
    assert out.returncode == 0, out.stderr
    assert "(principal=User:carol, host=*, operation=READ, permissionType=ALLOW)" in out.stdout
    # the token's sub is the principal: carol is no super user and may not list ACLs
    out = kcoord(oauth_server, props(pki, "carol"), tmp_path, "acls", "--list")
    assert out.returncode != 0
    assert "CLUSTER_AUTHORIZATION_FAILED" in out.stdout + out.stderr, out.stdout + out.stderr


def _committed_rows(server, listener: str, config: dict) -> list[dict]:
    from kcoord.pipeline.wire_source import WireOffsetsReader
    opts = {"bootstrap": f"127.0.0.1:{server.ports[listener]}",
            **{f"kafka.{k}": v for k, v in config.items()}}
    reader = WireOffsetsReader(opts, ["group", "topic", "committed_offset"])
    return [row for part in reader.partitions() for batch in reader.read(part)
            for row in batch.to_pylist() if row["group"] == GROUP]


def test_pipeline_wire_client_over_oauthbearer(oauth_server, pki):
    rows = _committed_rows(oauth_server, "SASL_SSL", props(pki, "ops"))
    assert [(r["topic"], r["committed_offset"]) for r in rows] == [(TOPIC, 42)]
    # a token with the scope the SASL_PLAINTEXT listener requires
    rows = _committed_rows(oauth_server, "SASL_PLAINTEXT", props(
        pki, "ops", "SASL_PLAINTEXT", ' unsecuredLoginListClaim_scope=",kafka,other"'))
    assert [r["committed_offset"] for r in rows] == [42]


def test_refused_token_and_unsupported_login_are_one_line_errors(oauth_server, pki):
    from kcoord.pipeline.preflight import InputError, check_inputs
    bootstrap = f"127.0.0.1:{oauth_server.ports['SASL_PLAINTEXT']}"
    with pytest.raises(InputError, match='OAUTHBEARER token refused: .*"insufficient_scope"'):
        check_inputs(None, bootstrap, props(pki, "ops", "SASL_PLAINTEXT"))
    with pytest.raises(InputError, match="unsecuredLoginStringClaim_sub"):
        check_inputs(None, bootstrap, {**props(pki, "ops", "SASL_PLAINTEXT"),
                                       "sasl.jaas.config": f"{OAUTH_MODULE} required;"})
    with pytest.raises(InputError, match="sasl.oauthbearer.token.endpoint.url"):
        check_inputs(None, bootstrap, {**props(pki, "ops", "SASL_PLAINTEXT"),
                                       "sasl.oauthbearer.token.endpoint.url": "https://idp"})


def test_unsecured_token_passes_kafkas_unsecured_validator():
    """The token the login makes, read by the server's validator (no server)."""
    from kcoord.security.client import SaslLoginError, _oauthbearer_login
    from kcoord.security.sasl_mechanisms import OAuthBearerExchange
    jaas = (f'{OAUTH_MODULE} required unsecuredLoginStringClaim_sub="dave" '
            f'unsecuredLoginNumberClaim_level="3" unsecuredLoginListClaim_scope="|a|b" '
            f'unsecuredLoginExtension_traceId="t1" unsecuredLoginLifetimeSeconds="60";')
    user, first, _ = _oauthbearer_login({"sasl.jaas.config": jaas})
    assert user == "dave"
    assert first.startswith(b"n,,\x01auth=Bearer ") and b"\x01traceId=t1\x01\x01" in first
    exchange = OAuthBearerExchange({"unsecuredValidatorRequiredScope": "a b"})
    assert exchange.step(first) == b"" and exchange.done
    assert exchange.authorization_id == "dave" and 0 < exchange.lifetime_ms <= 60_000
    # a broker's JAAS holds its validator options beside the login ones
    user, _, _ = _oauthbearer_login({"sasl.jaas.config": (
        f'{OAUTH_MODULE} required unsecuredLoginStringClaim_sub="broker" '
        f'unsecuredValidatorRequiredScope="kafka";')})
    assert user == "broker"
    with pytest.raises(SaslLoginError, match="unsecuredLoginStringClaim-sub"):
        _oauthbearer_login({"sasl.jaas.config": (
            f'{OAUTH_MODULE} required unsecuredLoginStringClaim-sub="x";')})
