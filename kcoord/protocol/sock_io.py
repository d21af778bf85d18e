"""Blocking socket reads shared by kcoord's own Kafka clients (admin tools,
lag pipeline)."""
from __future__ import annotations

import socket


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """Exactly n bytes; EOFError when the peer closes first."""
    out = bytearray(n)
    view = memoryview(out)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if not k:
            raise EOFError("connection closed by the broker")
        got += k
    return bytes(out)
