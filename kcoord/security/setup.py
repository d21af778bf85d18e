"""Everything security the server needs, built once from the config:
the listeners with their TLS contexts and SASL settings, the metadata
store (SCRAM credentials, ACLs) and the authorizer."""
from __future__ import annotations

import logging
from pathlib import Path

from .acl import Authorizer
from .listeners import Listener, listener_value, parse_listeners
from .sasl_server import SaslGate, SaslListenerConfig
from .settings import AUTHORIZERS, enabled_mechanisms
from .store import SecurityStore
from .tls import NoMatchingRule, PrincipalMapper, server_context, subject_dn
from .tls_transport import TlsServerProtocol

log = logging.getLogger("kcoord.security")

ANONYMOUS = "User:ANONYMOUS"


class SecuritySetup:
    def __init__(self, values: dict, host: str, port: int, data_dir: Path) -> None:
        self.values = values
        self.listeners: list[Listener] = parse_listeners(values, host, port)
        name = str(values.get("authorizer.class.name") or "").strip()
        authorizer = None
        if name in AUTHORIZERS:
            supers = [s.strip() for s in str(values.get("super.users") or "").split(";")
                      if s.strip()]
            everyone = str(values.get("allow.everyone.if.no.acl.found") or "false").lower()
            authorizer = Authorizer(supers, everyone == "true")
        self.store = SecurityStore(data_dir, authorizer)
        self.authorizer: Authorizer | None = authorizer
        self.tls = {lsn.name: server_context(values, lsn.name) for lsn in self.listeners if lsn.tls}
        self.sasl = {lsn.name: SaslListenerConfig.build(
                        values, lsn.name, enabled_mechanisms(values, lsn.name), self.store)
                     for lsn in self.listeners if lsn.sasl}
        self.mappers = {lsn.name: PrincipalMapper.parse(
                            str(listener_value(values, lsn.name, "ssl.principal.mapping.rules")
                                or "DEFAULT"))
                        for lsn in self.listeners if lsn.protocol == "SSL"}

    checks = None

    def use_catalogue(self, catalogue) -> None:
        """Topic ids -> names for the checks of APIs that name topics by id."""
        if self.checks is not None:
            def name(topic_id):
                topic = catalogue.by_id.get(topic_id)
                return None if topic is None else topic.name
            self.checks.topic_name = name

    def use_coordinator_config(self, core_config) -> None:
        """With an authorizer, regex subscriptions resolve only to topics the
        heartbeat's principal may DESCRIBE (Kafka 4.0)."""
        if self.checks is not None:
            core_config.topic_describable = self.checks.topic_describable

    def load(self) -> None:
        if self.values.get("etcd.endpoints"):
            # a cluster's credentials and ACLs are etcd's (kcoord/cluster/security_sync.py)
            if self.store.log.load():
                log.warning("%s is not used in a cluster (credentials and ACLs live in etcd): "
                            "re-create them there", self.store.log.path)
            return
        self.store.load()

    def install(self, dispatcher) -> None:
        """Security APIs, and authorization around every handler registered
        from now on when an authorizer is configured."""
        from .admin_handlers import SecurityAdmin
        if self.authorizer is not None:
            from .checks import Checks
            self.checks = Checks(self.authorizer)
            dispatcher.guard = self.checks.guard
        dispatcher.register_handlers(SecurityAdmin(self.store, self.authorizer is not None))

    def protocol_factory(self, listener: Listener, make_connection):
        """A protocol factory for create_server: make_connection(listener name,
        gate, tls principal function) -> the Kafka connection protocol."""
        sasl = self.sasl.get(listener.name)
        mapper = self.mappers.get(listener.name)
        ctx = self.tls.get(listener.name)

        def tls_principal(peercert) -> str:
            if not peercert:
                return ANONYMOUS
            return "User:" + mapper.map(subject_dn(peercert))

        def factory():
            conn = make_connection(listener.name, SaslGate(sasl) if sasl else None,
                                   tls_principal if mapper is not None else None)
            return TlsServerProtocol(ctx, conn, listener.name) if ctx is not None else conn
        return factory


__all__ = ["SecuritySetup", "NoMatchingRule", "ANONYMOUS"]
