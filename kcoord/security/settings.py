"""Which security keys kcoord implements, and their start-up checks.

A security key kcoord does not implement is a start-up error naming the
key, never a warning followed by a weaker server (a `ssl.keystore.type=JKS`
or `sasl.enabled.mechanisms=GSSAPI` must not quietly serve plaintext).
"""
from __future__ import annotations

from .etcd_tls import KEYS as ETCD_TLS
from .listeners import PROTOCOLS, listener_value, parse_listeners

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
# the ZooKeeper-era class evaluates ACLs the same way; its ACLs live in kcoord's store too
AUTHORIZERS = (STANDARD_AUTHORIZER, "kafka.security.authorizer.AclAuthorizer")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")

# keys that take a listener.name.<l>. (and for SASL keys a mechanism) prefix
PER_LISTENER = {
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.certificate.chain",
    "ssl.keystore.key", "ssl.key.password", "ssl.keystore.password", "ssl.truststore.type",
    "ssl.truststore.location", "ssl.truststore.certificates", "ssl.truststore.password",
    "ssl.client.auth", "ssl.enabled.protocols", "ssl.protocol", "ssl.cipher.suites",
    "ssl.principal.mapping.rules", "ssl.endpoint.identification.algorithm",
    "sasl.enabled.mechanisms", "sasl.jaas.config", "connections.max.reauth.ms",
    "sasl.server.max.receive.size",
}
GLOBAL = {
    "listeners", "advertised.listeners", "listener.security.protocol.map",
    "inter.broker.listener.name", "security.inter.broker.protocol",
    "sasl.mechanism.inter.broker.protocol", "authorizer.class.name", "super.users",
    "allow.everyone.if.no.acl.found", "connection.failed.authentication.delay.ms",
}
# + a cluster node's TLS to etcd (etcd_tls.py), named after Kafka's zookeeper.ssl.*
IMPLEMENTED = PER_LISTENER | GLOBAL | ETCD_TLS
# anything under these names is a security setting: kcoord either implements it or refuses it
_SECURITY_PREFIXES = ("ssl.", "sasl.", "listener.name.", "security.", "authorizer.",
                      "principal.builder.", "delegation.token.", "super.users",
                      "allow.everyone.", "connections.max.reauth", "listeners",
                      "listener.security.", "inter.broker.listener", "ssl_", "sasl_",
                      "etcd.ssl.")


def is_security_key(key: str) -> bool:
    return key.startswith(_SECURITY_PREFIXES)


def _base_key(key: str) -> str:
    """listener.name.<l>[.<mech>].<key> -> <key>"""
    if not key.startswith("listener.name."):
        return key
    rest = key[len("listener.name."):].split(".", 1)
    if len(rest) < 2:
        return key
    tail = rest[1]
    for mech in MECHANISMS:
        if tail.lower().startswith(mech.lower() + "."):
            return tail[len(mech) + 1:]
    return tail


def _bool(key: str, raw) -> bool:
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise ValueError(f"{key}: expected true or false, got {raw!r}")
    return text == "true"


def check(values: dict, host: str, port: int) -> None:
    """Raise ValueError naming the key for anything kcoord cannot honour."""
    for key in list(values):
        if not is_security_key(key):
            continue
        base = _base_key(key)
        if base not in IMPLEMENTED:
            raise ValueError(f"{key}: security setting not implemented by kcoord "
                             f"(refusing to start rather than ignore it)")
        if key.startswith("listener.name.") and base not in PER_LISTENER:
            raise ValueError(f"{key}: {base} cannot be set per listener")
    listeners = parse_listeners(values, host, port)
    name = values.get("authorizer.class.name")
    if name and str(name).strip() not in AUTHORIZERS:
        raise ValueError(f"authorizer.class.name: {name} is not implemented; "
                         f"use {STANDARD_AUTHORIZER}")
    if values.get("allow.everyone.if.no.acl.found") is not None:
        _bool("allow.everyone.if.no.acl.found", values["allow.everyone.if.no.acl.found"])
    proto = values.get("security.inter.broker.protocol")
    if proto and str(proto).upper() not in PROTOCOLS:
        raise ValueError(f"security.inter.broker.protocol: {proto} is not one of "
                         f"{', '.join(PROTOCOLS)}")
    mech = values.get("sasl.mechanism.inter.broker.protocol")
    if mech and str(mech) not in MECHANISMS:
        raise ValueError(f"sasl.mechanism.inter.broker.protocol: {mech} is not implemented "
                         f"(kcoord has {', '.join(MECHANISMS)})")
    for lsn in listeners:
        if lsn.tls:
            from .tls import server_context
            server_context(values, lsn.name)  # raises ValueError naming the key
        if lsn.sasl:
            mechanisms = enabled_mechanisms(values, lsn.name)
            from .sasl_server import mechanism_settings
            for m in mechanisms:
                mechanism_settings(values, lsn.name, m)  # raises on a bad JAAS config
        reauth = listener_value(values, lsn.name, "connections.max.reauth.ms")
        if reauth is not None:
            try:
                if int(reauth) < 0:
                    raise ValueError
            except ValueError:
                raise ValueError(f"connections.max.reauth.ms: {reauth!r} is not a "
                                 f"non-negative number") from None
    if values.get("etcd.endpoints"):
        from .etcd_tls import etcd_tls
        etcd_tls(values)  # raises ValueError naming the key
        # a cluster node logs in to its peers' inter-broker listener: its client
        # side (mechanism, credentials, trust store) must be complete
        from .inter_broker import inter_broker_properties
        inter_broker_properties(values)


def enabled_mechanisms(values: dict, listener: str) -> list[str]:
    """sasl.enabled.mechanisms for a listener.  Kafka's default is GSSAPI,
    which kcoord does not implement: a SASL listener must name its mechanisms."""
    raw = listener_value(values, listener, "sasl.enabled.mechanisms")
    if raw is None:
        raise ValueError(f"sasl.enabled.mechanisms: not set for SASL listener {listener} "
                         f"(Kafka's default GSSAPI is not implemented; kcoord has "
                         f"{', '.join(MECHANISMS)})")
    mechs = [m.strip().upper() for m in str(raw).split(",") if m.strip()]
    bad = [m for m in mechs if m not in MECHANISMS]
    if bad or not mechs:
        raise ValueError(f"sasl.enabled.mechanisms: {', '.join(bad) or 'empty'} not "
                         f"implemented (kcoord has {', '.join(MECHANISMS)})")
    return mechs
