"""Client side of TLS and SASL, from Kafka client properties
(security.protocol, ssl.truststore.*, ssl.keystore.* for mTLS,
ssl.endpoint.identification.algorithm, sasl.mechanism, sasl.jaas.config
or sasl.username/sasl.password; OAUTHBEARER with Kafka's unsecured login
options in sasl.jaas.config: oauthbearer_login.py): for the operator CLI (--command-config)
and for kcoord's own connections to other nodes (inter-broker)."""
from __future__ import annotations

import socket

import scramp

from ..protocol.errors import Err
from .jaas import parse_jaas
from .tls import client_context

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
# sasl.mechanism.inter.broker.protocol when unset: Kafka's default is GSSAPI,
# which kcoord does not implement, so kcoord documents PLAIN as its default
DEFAULT_INTER_BROKER_MECHANISM = "PLAIN"


class SaslLoginError(Exception):
    pass


def client_properties_from_config(values: dict) -> dict[str, str]:
    """The client properties a node uses to reach another node's inter-broker
    listener: security.inter.broker.protocol / inter.broker.listener.name, the
    listener's ssl.* settings, and sasl.mechanism.inter.broker.protocol with
    the username/password of the listener's JAAS login."""
    from .listeners import listener_value, parse_listeners, inter_broker_listener
    lsn = inter_broker_listener(values, parse_listeners(values, "127.0.0.1", 0))
    props = {"security.protocol": lsn.protocol}
    for key in () if not lsn.tls else ("ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.certificates",
                "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.certificate.chain",
                "ssl.keystore.key", "ssl.key.password", "ssl.enabled.protocols",
                "ssl.endpoint.identification.algorithm"):
        v = listener_value(values, lsn.name, key)
        if v is not None:
            props[key] = str(v)
    if lsn.sasl:
        mech = str(values.get("sasl.mechanism.inter.broker.protocol")
                   or DEFAULT_INTER_BROKER_MECHANISM).upper()
        props["sasl.mechanism"] = mech
        jaas = listener_value(values, lsn.name, "sasl.jaas.config", mech)
        if jaas:
            props["sasl.jaas.config"] = str(jaas)
    return props


def connect(host: str, port: int, props: dict, timeout: float) -> socket.socket:
    """A connected socket, wrapped in TLS for SSL and SASL_SSL."""
    protocol = str(props.get("security.protocol", "PLAINTEXT")).upper()
    # the context first: a bad ssl.* setting fails before a socket is opened
    ctx = client_context(props) if protocol in ("SSL", "SASL_SSL") else None
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if ctx is not None:
        try:
            sock = ctx.wrap_socket(sock, server_hostname=host)
        except BaseException:
            sock.close()
            raise
    return sock


def credentials(props: dict) -> tuple[str, str]:
    user, password = props.get("sasl.username"), props.get("sasl.password")
    jaas = props.get("sasl.jaas.config")
    if jaas:
        _, options = parse_jaas("sasl.jaas.config", jaas)
        user, password = options.get("username", user), options.get("password", password)
    if not user or password is None:
        raise SaslLoginError("sasl.jaas.config (username=, password=) or sasl.username and "
                             "sasl.password are required for SASL")
    return user, password


def _oauthbearer_login(props: dict) -> tuple[str, bytes, str]:
    """(principal, client first message, how to say the token was refused)
    from sasl.jaas.config with Kafka's unsecured login options."""
    from . import oauthbearer_login as oauth
    for key in oauth.SECURED_LOGIN_KEYS:
        if props.get(key):
            raise SaslLoginError(f"{key}: OAUTHBEARER with a token endpoint / login callback "
                                 f"is not supported by this client (only Kafka's unsecured "
                                 f"login: sasl.jaas.config with unsecuredLogin* options)")
    jaas = props.get("sasl.jaas.config")
    if not jaas:
        raise SaslLoginError('sasl.jaas.config (OAuthBearerLoginModule required '
                             'unsecuredLoginStringClaim_sub="<principal>";) is required for '
                             'OAUTHBEARER')
    module, options = parse_jaas("sasl.jaas.config", jaas)
    try:
        token = oauth.unsecured_token(module, options)
    except oauth.OAuthLoginError as exc:
        raise SaslLoginError(str(exc)) from None
    return (oauth.principal_of(token, options),
            oauth.client_first_message(token, oauth.extensions(options)), token)


def _login(props: dict):
    """The client side of a SASL login as a generator: it yields (api key,
    version, body) requests and is sent each response; returns the user.
    One exchange for the blocking and the asyncio drivers below."""
    mechanism = str(props.get("sasl.mechanism", "GSSAPI")).upper()
    if mechanism == "OAUTHBEARER":
        user, first, _ = _oauthbearer_login(props)
    elif mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        user, password = credentials(props)
    else:
        raise SaslLoginError(f"sasl.mechanism {mechanism} is not supported by this client "
                             f"(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER)")
    resp = yield SASL_HANDSHAKE, 1, {"mechanism": mechanism}
    if resp["error_code"] != Err.NONE:
        raise SaslLoginError(f"SASL mechanism {mechanism} not enabled on the broker "
                             f"(it offers {', '.join(resp['mechanisms'])})")

    def check(r) -> bytes:
        if r["error_code"] != Err.NONE:
            raise SaslLoginError(f"SASL authentication failed: {r['error_message']}")
        return r["auth_bytes"]

    if mechanism == "PLAIN":
        check((yield SASL_AUTHENTICATE, 1, {"auth_bytes": f"\0{user}\0{password}".encode()}))
    elif mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        c = scramp.ScramClient([mechanism], user, password)
        first = check((yield SASL_AUTHENTICATE, 1,
                       {"auth_bytes": c.get_client_first().encode()}))
        c.set_server_first(first.decode())
        final = check((yield SASL_AUTHENTICATE, 1,
                       {"auth_bytes": c.get_client_final().encode()}))
        c.set_server_final(final.decode())  # checks the server's signature
    else:  # OAUTHBEARER (RFC 7628)
        challenge = check((yield SASL_AUTHENTICATE, 1, {"auth_bytes": first}))
        if challenge:
            # the token was refused: the server's JSON error, acknowledged with
            # 0x01, is then answered with SASL_AUTHENTICATION_FAILED
            final = yield SASL_AUTHENTICATE, 1, {"auth_bytes": b"\x01"}
            raise SaslLoginError(f"SASL authentication failed: OAUTHBEARER token refused: "
                                 f"{final['error_message'] or challenge.decode(errors='replace')}")
    return user


def sasl_login(send, props: dict) -> str:
    """Authenticate with SaslHandshake v1 + SaslAuthenticate; `send(key, version,
    body) -> response dict` is the caller's blocking request function.
    Returns the principal name."""
    steps = _login(props)
    try:
        request = next(steps)
        while True:
            request = steps.send(send(*request))
    except StopIteration as done:
        return done.value


async def open_connection(host: str, port: int, props: dict, timeout: float,
                          client_id: str = "kcoord-inter-broker"):
    """asyncio streams to another node, secured as the client properties say
    (TLS for SSL/SASL_SSL, then ApiVersions and the SASL login for SASL_*):
    what a follower fetcher or other inter-broker client opens instead of
    asyncio.open_connection.  Build `props` with client_properties_from_config."""
    import asyncio

    from ..protocol.client import AsyncExchange

    protocol = str(props.get("security.protocol", "PLAINTEXT")).upper()
    ctx = client_context(props) if protocol in ("SSL", "SASL_SSL") else None
    reader, writer = await asyncio.wait_for(asyncio.open_connection(
        host, port, ssl=ctx, server_hostname=host if ctx is not None else None), timeout)
    if protocol.startswith("SASL_"):
        exchange = AsyncExchange(reader, writer, client_id)

        async def call(key, version, body):
            return await exchange.call(key, version, body, timeout)

        await call(18, 3, {"client_software_name": "kcoord", "client_software_version": "1"})
        try:
            await _async_sasl_login(call, props)
        except BaseException:
            writer.close()
            raise
    return reader, writer


async def _async_sasl_login(call, props: dict) -> str:
    steps = _login(props)
    try:
        request = next(steps)
        while True:
            request = steps.send(await call(*request))
    except StopIteration as done:
        return done.value
