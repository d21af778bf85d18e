"""The TLS listener's memory-BIO layer, in-process with a real TLS 1.3
client over memory BIOs: megabytes of application data written in records
of many sizes and fed in ciphertext pieces of many sizes reach the inner
protocol exactly, in order; the inner protocol's answer reaches the client.
"""
from __future__ import annotations

import asyncio
import random
import ssl

from kcoord.security.tls_transport import TlsServerProtocol


class RawTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.sent = bytearray()
        self.closed = False

    def write(self, data) -> None:
        self.sent += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 4242) if name == "peername" else default


class Inner(asyncio.Protocol):
    def __init__(self) -> None:
        self.received = bytearray()
        self.transport = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data) -> None:
        self.received += data


def _pump(tls: TlsServerProtocol, raw: RawTransport, client_out: ssl.MemoryBIO,
          client_in: ssl.MemoryBIO, rng: random.Random) -> None:
    """Client ciphertext to the server in random pieces; server's back."""
    data = client_out.read()
    pos = 0
    while pos < len(data):
        step = rng.choice([1, 5, 300, 16_389, 70_000, 262_144])
        tls.data_received(data[pos:pos + step])
        pos += step
    client_in.write(bytes(raw.sent))
    raw.sent.clear()


def test_large_application_data_arrives_exactly(pki):
    rng = random.Random(7)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(str(pki.server_keystore))
    client_ctx = ssl.create_default_context(cafile=str(pki.ca_file))
    inner, raw = Inner(), RawTransport()
    tls = TlsServerProtocol(server_ctx, inner, "SSL")
    tls.connection_made(raw)
    c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname="localhost")
    for _ in range(10):
        try:
            client.do_handshake()
            break
        except ssl.SSLWantReadError:
            _pump(tls, raw, c_out, c_in, rng)
    _pump(tls, raw, c_out, c_in, rng)  # the client's Finished
    assert tls.handshaken and inner.transport is not None

    sent = bytearray()
    for _ in range(60):
        chunk = rng.randbytes(rng.choice([1, 100, 1800, 16_384, 16_385, 200_000]))
        sent += chunk
        client.write(chunk)
        if rng.random() < 0.3:
            _pump(tls, raw, c_out, c_in, rng)
    _pump(tls, raw, c_out, c_in, rng)
    assert inner.received == sent and len(sent) > 1_000_000

    inner.transport.write(b"answer" * 10_000)
    _pump(tls, raw, c_out, c_in, rng)
    got = bytearray()
    while True:
        try:
            got += client.read(1 << 20)
        except ssl.SSLWantReadError:
            break
    assert got == b"answer" * 10_000
