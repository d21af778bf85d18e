"""Certificates made in the test run (trustme + cryptography), written as
Kafka PEM key stores (KIP-651: PKCS#8 key and chain in one file)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import trustme
from cryptography.hazmat.primitives import serialization


def pkcs8(key_pem: bytes, password: bytes | None = None) -> bytes:
    key = serialization.load_pem_private_key(key_pem, None)
    enc = (serialization.BestAvailableEncryption(password) if password
           else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc)


@dataclass
class Pki:
    dir: Path
    ca_file: Path            # PEM trust store (the CA)
    server_keystore: Path    # PEM key store: PKCS#8 key + chain
    client_cert: Path        # mTLS client (CN=alice,OU=Eng,O=Kcoord)
    client_key: Path         # PKCS#8
    client_keystore: Path


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost", common_name="broker")
    client = ca.issue_cert("alice@example.com", common_name="alice",
                           organization_name="Kcoord", organization_unit_name="Eng")
    ca_file = directory / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    chain = b"".join(b.bytes() for b in server.cert_chain_pems)
    server_ks = directory / "server.keystore.pem"
    server_ks.write_bytes(pkcs8(server.private_key_pem.bytes()) + chain)
    client_cert = directory / "client.pem"
    client_cert.write_bytes(b"".join(b.bytes() for b in client.cert_chain_pems))
    client_key = directory / "client.key"
    client_key.write_bytes(pkcs8(client.private_key_pem.bytes()))
    client_ks = directory / "client.keystore.pem"
    client_ks.write_bytes(client_key.read_bytes() + client_cert.read_bytes())
    return Pki(directory, ca_file, server_ks, client_cert, client_key, client_ks)
