"""How a node reaches its peers in a cluster: the inter-broker listener
(inter.broker.listener.name, else the first listener of
security.inter.broker.protocol) and the client properties for it, checked
at start-up so a SASL/TLS inter-broker listener without what the client
side needs is a one-line error naming the key, not a fetcher that
silently never authenticates.

sasl.mechanism.inter.broker.protocol defaults to PLAIN here: Kafka's
default is GSSAPI, which kcoord does not implement."""
from __future__ import annotations

from .client import client_properties_from_config
from .jaas import parse_jaas
from .listeners import Listener, inter_broker_listener, parse_listeners
from .settings import enabled_mechanisms

CLIENT_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def inter_broker_properties(values: dict) -> tuple[Listener, dict[str, str]]:
    """(the inter-broker listener, the client properties to reach a peer's
    one); ValueError naming the key when the client side cannot log in."""
    lsn = inter_broker_listener(values, parse_listeners(values, "127.0.0.1", 0))
    props = client_properties_from_config(values)
    if lsn.sasl:
        mech = props["sasl.mechanism"].upper()
        if mech not in CLIENT_MECHANISMS:
            raise ValueError(f"sasl.mechanism.inter.broker.protocol: {mech} cannot be used "
                             f"between nodes (kcoord's client has "
                             f"{', '.join(CLIENT_MECHANISMS)}; the default is PLAIN)")
        if mech not in enabled_mechanisms(values, lsn.name):
            raise ValueError(f"sasl.mechanism.inter.broker.protocol: {mech} is not enabled "
                             f"on the inter-broker listener {lsn.name} "
                             f"(listener.name.{lsn.name.lower()}.sasl.enabled.mechanisms)")
        key = f"listener.name.{lsn.name.lower()}.{mech.lower()}.sasl.jaas.config"
        jaas = props.get("sasl.jaas.config")
        if not jaas:
            raise ValueError(f"{key}: not set; the inter-broker listener {lsn.name} uses "
                             f"SASL {mech}, and a node logs in to its peers with this "
                             f"login's username= and password=")
        _, options = parse_jaas(key, jaas)
        if not options.get("username") or options.get("password") is None:
            raise ValueError(f"{key}: username= and password= are required (the "
                             f"inter-broker login to peers on listener {lsn.name})")
    if lsn.tls:
        from .tls import client_context
        try:
            client_context(props)  # unreadable truststore/keystore: fail now, not per fetch
        except (OSError, ValueError) as exc:
            raise ValueError(f"listener {lsn.name} (inter-broker) client TLS: {exc}") from None
    return lsn, props
