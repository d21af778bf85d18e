"""The security pieces on their own: ACL decisions, principal mapping, the
SCRAM/PLAIN/OAUTHBEARER exchanges, JAAS parsing, listener parsing and the
metadata log's torn tail."""
from __future__ import annotations

import base64
import json

import pytest
import scramp

from kcoord.security.acl import (AclBinding, AclFilter, Authorizer, Operation as O,
                                 PatternType as P, Permission, ResourceType as R)
from kcoord.security.jaas import parse_jaas
from kcoord.security.listeners import parse_listeners
from kcoord.security.metadata_log import MetadataLog
from kcoord.security.sasl_mechanisms import (AuthenticationFailed, OAuthBearerExchange,
                                             PlainExchange, ScramExchange)
from kcoord.security.store import SecurityStore, parse_add_scram, scram_record_from_password
from kcoord.security.tls import NoMatchingRule, PrincipalMapper, subject_dn

ALLOW, DENY = Permission.ALLOW, Permission.DENY


def binding(rtype, name, principal, op, perm=ALLOW, pattern=P.LITERAL, host="*"):
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def test_acl_decisions():
    az = Authorizer(super_users=["User:root"])
    assert not az.authorize("User:a", "1.2.3.4", O.READ, R.TOPIC, "t")  # no ACLs: deny
    assert az.authorize("User:root", "1.2.3.4", O.READ, R.TOPIC, "t")   # super user
    az.add(binding(R.TOPIC, "*", "User:a", O.READ))
    az.add(binding(R.TOPIC, "t-secret", "User:a", O.ALL, DENY))
    az.add(binding(R.TOPIC, "pre-", "User:*", O.WRITE, pattern=P.PREFIXED))
    az.add(binding(R.TOPIC, "hosted", "User:b", O.READ, host="10.0.0.1"))
    assert az.authorize("User:a", "h", O.READ, R.TOPIC, "t")
    assert az.authorize("User:a", "h", O.DESCRIBE, R.TOPIC, "t")        # READ implies DESCRIBE
    assert not az.authorize("User:a", "h", O.READ, R.TOPIC, "t-secret")  # DENY ALL wins
    assert az.authorize("User:z", "h", O.WRITE, R.TOPIC, "pre-x")        # User:* + PREFIXED
    assert not az.authorize("User:z", "h", O.WRITE, R.TOPIC, "pr")
    assert az.authorize("User:b", "10.0.0.1", O.READ, R.TOPIC, "hosted")
    assert not az.authorize("User:b", "10.0.0.2", O.READ, R.TOPIC, "hosted")
    # DENY READ does not deny DESCRIBE (implication is ALLOW-only)
    az.add(binding(R.GROUP, "g", "User:a", O.DESCRIBE))
    az.add(binding(R.GROUP, "g", "User:a", O.READ, DENY))
    assert az.authorize("User:a", "h", O.DESCRIBE, R.GROUP, "g")
    assert not az.authorize("User:a", "h", O.READ, R.GROUP, "g")
    # bitfield over GROUP's operations: READ only -> READ and DESCRIBE
    az.add(binding(R.GROUP, "g2", "User:a", O.READ))
    assert az.authorized_operations("User:a", "h", R.GROUP, "g2") == (1 << 3) | (1 << 8)
    # allow.everyone only for resources without any ACL
    everyone = Authorizer(allow_everyone=True)
    everyone.add(binding(R.TOPIC, "owned", "User:x", O.READ))
    assert everyone.authorize("User:y", "h", O.READ, R.TOPIC, "free")
    assert not everyone.authorize("User:y", "h", O.READ, R.TOPIC, "owned")


def test_authorize_by_resource_type():
    az = Authorizer()
    az.add(binding(R.TOPIC, "a-", "User:p", O.WRITE, pattern=P.PREFIXED))
    assert az.authorize_by_resource_type("User:p", "h", O.WRITE, R.TOPIC)
    az.add(binding(R.TOPIC, "a", "User:p", O.WRITE, DENY, pattern=P.PREFIXED))
    assert not az.authorize_by_resource_type("User:p", "h", O.WRITE, R.TOPIC)  # dominated
    assert not az.authorize_by_resource_type("User:q", "h", O.WRITE, R.TOPIC)


def test_acl_filters():
    lit = binding(R.TOPIC, "orders", "User:a", O.READ)
    star = binding(R.TOPIC, "*", "User:a", O.READ)
    pre = binding(R.TOPIC, "ord", "User:a", O.READ, pattern=P.PREFIXED)
    match = AclFilter(R.TOPIC, "orders", P.MATCH, None, None, O.ANY, Permission.ANY)
    assert all(match.matches(a) for a in (lit, star, pre))
    any_ = AclFilter(R.TOPIC, "orders", P.ANY, None, None, O.ANY, Permission.ANY)
    assert [any_.matches(a) for a in (lit, star, pre)] == [True, False, False]


def test_principal_mapping():
    cert = {"subject": ((("countryName", "US"),), (("organizationName", "Kcoord"),),
                        (("organizationalUnitName", "Eng"),), (("commonName", "Alice, A"),))}
    dn = subject_dn(cert)
    assert dn == "CN=Alice\\, A,OU=Eng,O=Kcoord,C=US"
    mapper = PrincipalMapper.parse("RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/L,DEFAULT")
    assert mapper.map(dn) == "alice\\, a@eng"
    assert PrincipalMapper.parse("DEFAULT").map(dn) == dn
    with pytest.raises(NoMatchingRule):
        PrincipalMapper.parse("RULE:^CN=bob$/x/").map(dn)


def test_plain_exchange():
    ok = PlainExchange({"bob": "pw"})
    assert ok.step(b"\0bob\0pw") == b"" and ok.done and ok.authorization_id == "bob"
    for token, message in [(b"\0bob\0no", "Invalid username or password"),
                           (b"\0nobody\0pw", "Invalid username or password"),
                           (b"bob\0pw", "expected 3 tokens, got 2"),
                           (b"carl\0bob\0pw", "authorization id")]:
        with pytest.raises(AuthenticationFailed, match=message):
            PlainExchange({"bob": "pw"}).step(token)


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_exchange_with_stored_credentials(mech, tmp_path):
    store = SecurityStore(tmp_path)
    store.write_now([scram_record_from_password("a,b=c", mech, "pw")])
    client = scramp.ScramClient([mech], "a,b=c", "pw")
    ex = ScramExchange(mech, store.credential)
    server_first = ex.step(client.get_client_first().encode()).decode()
    client.set_server_first(server_first)
    client.set_server_final(ex.step(client.get_client_final().encode()).decode())
    assert ex.done and ex.authorization_id == "a,b=c"
    # a wrong password fails with the generic message
    bad = scramp.ScramClient([mech], "a,b=c", "nope")
    ex = ScramExchange(mech, store.credential)
    bad.set_server_first(ex.step(bad.get_client_first().encode()).decode())
    with pytest.raises(AuthenticationFailed, match="invalid credentials"):
        ex.step(bad.get_client_final().encode())
    # delegation tokens are not implemented: tokenauth fails
    ex = ScramExchange(mech, store.credential)
    with pytest.raises(AuthenticationFailed):
        ex.step(b"n,,n=a=2Cb=3Dc,r=abc,tokenauth=true")


def _jwt(claims, alg="none") -> str:
    def b64(o):
        return base64.urlsafe_b64encode(json.dumps(o).encode()).decode().rstrip("=")
    return f"{b64({'alg': alg})}.{b64(claims)}."


def test_oauthbearer_unsecured_validator():
    now = 1_000_000_000_000
    ex = OAuthBearerExchange({"unsecuredValidatorRequiredScope": "kafka"}, lambda: now)
    token = _jwt({"sub": "carol", "exp": now // 1000 + 60, "scope": ["kafka"]})
    assert ex.step(f"n,,\x01auth=Bearer {token}\x01\x01".encode()) == b""
    assert ex.authorization_id == "carol" and ex.lifetime_ms == 60_000
    for claims, status in [({"sub": "c", "exp": now // 1000 - 1, "scope": "kafka"}, "invalid_token"),
                           ({"sub": "c", "exp": now // 1000 + 60}, "insufficient_scope"),
                           ({"exp": now // 1000 + 60, "scope": "kafka"}, "invalid_token")]:
        ex = OAuthBearerExchange({"unsecuredValidatorRequiredScope": "kafka"}, lambda: now)
        challenge = ex.step(f"n,,\x01auth=Bearer {_jwt(claims)}\x01\x01".encode())
        assert json.loads(challenge)["status"] == status
        with pytest.raises(AuthenticationFailed, match=status):
            ex.step(b"\x01")
    signed = OAuthBearerExchange({}, lambda: now)
    assert b"invalid_token" in signed.step(
        f"n,,\x01auth=Bearer {_jwt({'sub': 'c', 'exp': now}, alg='RS256')}\x01\x01".encode())


def test_jaas_and_add_scram_parsing():
    module, options = parse_jaas("k", 'org.x.PlainLoginModule required username="a" '
                                      'password="p;w" user_bob="b\\"s";')
    assert module == "org.x.PlainLoginModule"
    assert options == {"username": "a", "password": "p;w", "user_bob": 'b"s'}
    with pytest.raises(ValueError, match="k"):
        parse_jaas("k", "org.x.M required a=b")  # no ';'
    record = parse_add_scram("SCRAM-SHA-256=[name=alice,password=secret,iterations=8192]")
    assert record["user"] == "alice" and record["iterations"] == 8192
    assert "secret" not in json.dumps(record)
    with pytest.raises(ValueError, match="iterations"):
        parse_add_scram("SCRAM-SHA-256=[name=a,password=b,iterations=100]")


def test_listener_parsing():
    values = {"listeners": "PLAINTEXT://h:1,INTERNAL://:2",
              "listener.security.protocol.map": "INTERNAL:SASL_SSL",
              "advertised.listeners": "PLAINTEXT://public:11"}
    a, b = parse_listeners(values, "127.0.0.1", 0)
    assert (a.name, a.protocol, a.advertised) == ("PLAINTEXT", "PLAINTEXT", ("public", 11))
    assert (b.name, b.protocol, b.host, b.port) == ("INTERNAL", "SASL_SSL", "127.0.0.1", 2)
    for bad, key in [({"listeners": "FOO://h:1"}, "listener.security.protocol.map"),
                     ({"listeners": "PLAINTEXT://h:1,PLAINTEXT://h:2"}, "unique"),
                     ({"listeners": "PLAINTEXT://h"}, "port")]:
        with pytest.raises(ValueError, match=key):
            parse_listeners(bad, "127.0.0.1", 0)


def test_metadata_log_cuts_a_torn_tail_and_replays(tmp_path):
    store = SecurityStore(tmp_path)
    acl = binding(R.TOPIC, "t", "User:a", O.READ)
    store.write_now([{"type": "acl", "acl": acl.to_record()}])
    store.write_now([scram_record_from_password("a", "SCRAM-SHA-256", "pw")])
    log = MetadataLog(tmp_path)
    with open(log.path, "ab") as fh:
        fh.write(b'deadbeef {"type":"acl","ac')  # a crash mid-append
    again = SecurityStore(tmp_path)
    again.load()
    assert again.authorizer.acls == {acl}
    assert again.credential("a", "SCRAM-SHA-256") == store.credential("a", "SCRAM-SHA-256")
    assert log.path.read_bytes().endswith(b"\n")  # the torn line is gone


def test_inter_broker_client_properties():
    from kcoord.security.client import client_properties_from_config
    values = {"listeners": "PLAINTEXT://:1,INTERNAL://:2",
              "listener.security.protocol.map": "INTERNAL:SASL_SSL",
              "inter.broker.listener.name": "INTERNAL",
              "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
              "listener.name.internal.scram-sha-512.sasl.jaas.config":
                  'org.apache.kafka.common.security.scram.ScramLoginModule required '
                  'username="broker" password="pw";',
              "ssl.truststore.type": "PEM", "ssl.truststore.location": "/ca.pem"}
    props = client_properties_from_config(values)
    assert props["security.protocol"] == "SASL_SSL"
    assert props["sasl.mechanism"] == "SCRAM-SHA-512"
    assert 'username="broker"' in props["sasl.jaas.config"]
    assert props["ssl.truststore.location"] == "/ca.pem"
    values["security.inter.broker.protocol"] = "PLAINTEXT"
    del values["inter.broker.listener.name"]
    assert client_properties_from_config(values) == {"security.protocol": "PLAINTEXT"}


def test_pem_key_stores(pki, tmp_path):
    """KIP-651: file or inline PEM stores, encrypted PKCS#8 keys, and the
    start-up errors naming the key."""
    import ssl
    from tests.security.certs import pkcs8
    from kcoord.security.tls import server_context
    text = pki.server_keystore.read_text()
    chain = text[text.index("-----BEGIN CERTIFICATE-----"):]
    key = text[:text.index("-----BEGIN CERTIFICATE-----")]
    inline = {"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": chain,
              "ssl.keystore.key": key, "ssl.truststore.type": "PEM",
              "ssl.truststore.certificates": pki.ca_file.read_text(),
              "ssl.client.auth": "required"}
    ctx = server_context(inline, "SSL")
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    encrypted = pkcs8(key.encode(), b"kpw").decode()
    assert "ENCRYPTED PRIVATE KEY" in encrypted
    server_context({**inline, "ssl.keystore.key": encrypted, "ssl.key.password": "kpw"}, "SSL")
    from cryptography.hazmat.primitives import serialization
    pkcs1 = serialization.load_pem_private_key(key.encode(), None).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption()).decode()
    for bad, name in [({"ssl.keystore.key": pkcs1}, "ssl.keystore.key"),
                      ({"ssl.keystore.key": encrypted}, "ssl.key.password"),
                      ({"ssl.keystore.password": "x"}, "ssl.keystore.password"),
                      ({"ssl.keystore.location": str(pki.server_keystore)},
                       "ssl.keystore.location"),
                      ({"ssl.keystore.type": "PKCS12"}, "ssl.keystore.type"),
                      ({"ssl.enabled.protocols": "TLSv1.1"}, "ssl.enabled.protocols"),
                      ({"ssl.client.auth": "maybe"}, "ssl.client.auth")]:
        with pytest.raises(ValueError, match=name.replace(".", r"\.")):
            server_context({**inline, **bad}, "SSL")
