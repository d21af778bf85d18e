"""Kafka's listener configuration: `listeners`, `advertised.listeners`,
`listener.security.protocol.map` and per-listener overrides
(`listener.name.<name>.<key>`)."""
from __future__ import annotations

from dataclasses import dataclass

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass
class Listener:
    name: str          # as configured, upper case (PLAINTEXT, SASL_SSL, INTERNAL ...)
    protocol: str      # one of PROTOCOLS
    host: str
    port: int          # 0 until bound when configured as 0
    advertised_host: str = ""
    advertised_port: int = -1  # -1: the bound port
    # where host and port were configured, for start-up errors ("--listen"
    # for the default listener, else the `listeners` key)
    source: str = "listeners"

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def advertised(self) -> tuple[str, int]:
        host = self.advertised_host or self.host
        port = self.port if self.advertised_port in (-1, 0) else self.advertised_port
        return host, port


def _split_endpoint(key: str, item: str) -> tuple[str, str, int]:
    name, sep, rest = item.strip().partition("://")
    if not sep or not name:
        raise ValueError(f"{key}: {item!r} is not NAME://host:port")
    host, colon, port = rest.rpartition(":")
    if not colon:
        raise ValueError(f"{key}: {item!r} has no port")
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"{key}: {item!r} has a port that is not a number") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"{key}: port {number} out of range")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return name.upper(), host, number


def protocol_map(values: dict) -> dict[str, str]:
    """listener.security.protocol.map; each protocol maps to itself by default."""
    out = {p: p for p in PROTOCOLS}
    spec = values.get("listener.security.protocol.map") or ""
    for pair in str(spec).split(","):
        if not pair.strip():
            continue
        name, sep, proto = pair.partition(":")
        proto = proto.strip().upper()
        if not sep or proto not in PROTOCOLS:
            raise ValueError(f"listener.security.protocol.map: {pair.strip()!r}: expected "
                             f"NAME:PROTOCOL with PROTOCOL one of {', '.join(PROTOCOLS)}")
        out[name.strip().upper()] = proto
    return out


def parse_listeners(values: dict, default_host: str, default_port: int) -> list[Listener]:
    """The listeners to bind.  Without `listeners`, one PLAINTEXT listener on
    --listen's host and port."""
    spec = str(values.get("listeners") or "").strip()
    protocols = protocol_map(values)
    if not spec:
        listeners = [Listener("PLAINTEXT", "PLAINTEXT", default_host, default_port,
                              source="--listen")]
    else:
        listeners = []
        for item in spec.split(","):
            if not item.strip():
                continue
            name, host, port = _split_endpoint("listeners", item)
            if name not in protocols:
                raise ValueError(f"listeners: listener {name} has no security protocol in "
                                 f"listener.security.protocol.map")
            listeners.append(Listener(name, protocols[name], host or default_host, port))
        names = [lsn.name for lsn in listeners]
        if len(set(names)) != len(names):
            raise ValueError(f"listeners: listener names must be unique: {spec}")
        ports = [lsn.port for lsn in listeners if lsn.port]
        if len(set(ports)) != len(ports):
            raise ValueError(f"listeners: ports must be unique: {spec}")
    advertised = str(values.get("advertised.listeners") or "").strip()
    if advertised:
        by_name = {lsn.name: lsn for lsn in listeners}
        for item in advertised.split(","):
            if not item.strip():
                continue
            if "://" not in item and len(listeners) == 1:
                # kcoord's earlier host:port form, for the single listener
                item = f"{listeners[0].name}://{item.strip()}"
            name, host, port = _split_endpoint("advertised.listeners", item)
            if name not in by_name:
                raise ValueError(f"advertised.listeners: {name} is not one of the listeners")
            by_name[name].advertised_host = host
            by_name[name].advertised_port = port
    inter = values.get("inter.broker.listener.name")
    if inter and str(inter).upper() not in {lsn.name for lsn in listeners}:
        raise ValueError(f"inter.broker.listener.name: {inter} is not one of the listeners")
    return listeners


def inter_broker_listener(values: dict, listeners: list[Listener]) -> Listener:
    """The listener brokers use between themselves: inter.broker.listener.name,
    else the first listener of security.inter.broker.protocol (PLAINTEXT)."""
    name = values.get("inter.broker.listener.name")
    if name:
        return next(lsn for lsn in listeners if lsn.name == str(name).upper())
    proto = str(values.get("security.inter.broker.protocol") or "PLAINTEXT").upper()
    for lsn in listeners:
        if lsn.protocol == proto:
            return lsn
    raise ValueError(f"security.inter.broker.protocol: no listener uses {proto}")


def listener_value(values: dict, listener: str, key: str, mechanism: str | None = None):
    """A setting as Kafka resolves it for one listener: the
    listener.name.<listener>[.<mechanism>].<key> override, then <key>."""
    prefix = f"listener.name.{listener.lower()}."
    if mechanism is not None:
        v = values.get(f"{prefix}{mechanism.lower()}.{key}")
        if v is not None:
            return v
    v = values.get(prefix + key)
    if v is not None:
        return v
    return values.get(key)
