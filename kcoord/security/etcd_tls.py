"""A cluster node's TLS to etcd, with names after Kafka's zookeeper.ssl.*
family (Kafka's TLS client settings for its ZooKeeper control plane):

    etcd.ssl.client.enable        true: TLS to etcd (endpoints written https://
                                  turn it on too)
    etcd.ssl.truststore.location  PEM file of the CA certificates etcd's certificate
                                  must chain to (unset: the system's roots)
    etcd.ssl.truststore.type      PEM (the only type)
    etcd.ssl.keystore.location    PEM file with this node's private key and certificate
                                  chain, for an etcd started with --client-cert-auth
    etcd.ssl.keystore.type        PEM (the only type)
    etcd.ssl.keystore.password    the password of an ENCRYPTED PRIVATE KEY
    etcd.ssl.endpoint.identification.algorithm
                                  HTTPS (the only value: etcd's certificate must
                                  name the endpoint's host, as gRPC checks it)

Any other etcd.ssl.* key, a store key while TLS is off, or endpoints that
disagree with etcd.ssl.client.enable is a start-up error naming the key
(settings.py): a node never talks plaintext to etcd it was told to reach
over TLS."""
from __future__ import annotations

from dataclasses import dataclass

from .tls import pem_blocks, read_pem, split_keystore

ENABLE = "etcd.ssl.client.enable"
TRUSTSTORE = "etcd.ssl.truststore.location"
KEYSTORE = "etcd.ssl.keystore.location"
KEYS = {ENABLE, TRUSTSTORE, "etcd.ssl.truststore.type", KEYSTORE, "etcd.ssl.keystore.type",
        "etcd.ssl.keystore.password", "etcd.ssl.endpoint.identification.algorithm"}

@dataclass(frozen=True)
class EtcdTls:
    ca: bytes | None      # PEM roots (None: the system's)
    key: bytes | None     # unencrypted PKCS#8 PEM, with chain: the client certificate
    chain: bytes | None

    def grpc_credentials(self):
        import grpc
        return grpc.ssl_channel_credentials(root_certificates=self.ca, private_key=self.key,
                                            certificate_chain=self.chain)


def _get(values: dict, key: str) -> str | None:
    value = values.get(key)
    return None if value is None or str(value).strip() == "" else str(value).strip()


def _schemes(values: dict) -> set[str]:
    endpoints = values.get("etcd.endpoints") or []
    if isinstance(endpoints, str):
        endpoints = endpoints.split(",")
    return {e.strip().split("://", 1)[0].lower() if "://" in e else "" for e in endpoints
            if e.strip()}


def etcd_tls(values: dict) -> EtcdTls | None:
    """The TLS settings for etcd (None: plaintext); ValueError naming the key."""
    for key in ("etcd.ssl.truststore.type", "etcd.ssl.keystore.type"):
        kind = _get(values, key)
        if kind is not None and kind.upper() != "PEM":
            raise ValueError(f"{key}: {kind} not implemented (PEM only)")
    algorithm = _get(values, "etcd.ssl.endpoint.identification.algorithm")
    if algorithm is not None and algorithm.upper() != "HTTPS":
        raise ValueError("etcd.ssl.endpoint.identification.algorithm: only HTTPS (etcd's "
                         "certificate names its host) is implemented")
    schemes = _schemes(values)
    if schemes - {"", "http", "https"}:
        raise ValueError(f"etcd.endpoints: scheme {sorted(schemes - {'', 'http', 'https'})[0]}"
                         f":// is not http:// or https://")
    if "https" in schemes and "http" in schemes:
        raise ValueError("etcd.endpoints: mixes http:// and https:// endpoints")
    raw = _get(values, ENABLE)
    if raw is not None and raw.lower() not in ("true", "false"):
        raise ValueError(f"{ENABLE}: expected true or false, got {raw!r}")
    enabled = raw.lower() == "true" if raw is not None else "https" in schemes
    if enabled and "http" in schemes:
        raise ValueError(f"etcd.endpoints: http:// while {ENABLE}=true (write https:// or "
                         f"host:port)")
    if not enabled:
        if "https" in schemes:
            raise ValueError(f"{ENABLE}: false, but etcd.endpoints says https://")
        for key in sorted(KEYS - {ENABLE}):
            if _get(values, key) is not None:
                raise ValueError(f"{key}: set, but TLS to etcd is off (set {ENABLE}=true)")
        return None
    ca = None
    if _get(values, TRUSTSTORE):
        text = read_pem(TRUSTSTORE, _get(values, TRUSTSTORE))
        certs = [b for label, b in pem_blocks(text) if label == "CERTIFICATE"]
        if not certs:
            raise ValueError(f"{TRUSTSTORE}: no certificate in {_get(values, TRUSTSTORE)}")
        ca = ("\n".join(certs) + "\n").encode()
    key = chain = None
    password = _get(values, "etcd.ssl.keystore.password")
    if _get(values, KEYSTORE):
        key, chain = _keystore(read_pem(KEYSTORE, _get(values, KEYSTORE)), password)
    elif password is not None:
        raise ValueError(f"etcd.ssl.keystore.password: set without {KEYSTORE}")
    return EtcdTls(ca, key, chain)


def _keystore(text: str, password: str | None) -> tuple[bytes, bytes]:
    """(unencrypted PKCS#8 key, certificate chain) from a PEM key store."""
    from cryptography.hazmat.primitives import serialization
    certs, label, pem = split_keystore(text, KEYSTORE)
    if label == "ENCRYPTED PRIVATE KEY" and password is None:
        raise ValueError("etcd.ssl.keystore.password: required for an ENCRYPTED PRIVATE KEY")
    try:
        key = serialization.load_pem_private_key(
            pem.encode(), password.encode() if label == "ENCRYPTED PRIVATE KEY" else None)
    except (ValueError, TypeError) as exc:
        source = "etcd.ssl.keystore.password" if label == "ENCRYPTED PRIVATE KEY" else KEYSTORE
        raise ValueError(f"{source}: cannot load the private key: {exc}") from None
    plain = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption())
    return plain, ("\n".join(certs) + "\n").encode()
