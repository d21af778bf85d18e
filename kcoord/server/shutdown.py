"""Closing the client connections when the server stops, before its state goes.

Every request a connection has read is answered before the connection is
closed; none is read after the stop begins.  Without this the logs and the
coordinator were closed under live connections: a request read in the last
moments ran against a closed log and its connection was closed as an
internal error, which a client sees as its broker dropping a request it had
in flight (kafkajs then forgets the broker: "No broker available").

A client whose request is still unread when the socket closes gets a reset
(the kernel's answer to unread data) and retries it elsewhere or later, as it
would after any failed connection.  Requests that do not finish within the
bound (a JoinGroup waiting for its rebalance) are dropped with their
connection, as Kafka drops them when it stops processing requests.
"""
from __future__ import annotations

import asyncio
import logging

log = logging.getLogger("kcoord.server")

DRAIN_S = 2.0   # how long answers to requests already read may take
POLL_S = 0.005


async def drain_connections(connections: set, timeout: float = DRAIN_S) -> None:
    """Stop reading on every connection, let the requests already read be
    answered (bounded by `timeout`), then close them all."""
    conns = list(connections)
    for conn in conns:
        conn.stop_reading()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not all(conn.answered for conn in conns) and loop.time() < deadline:
        await asyncio.sleep(POLL_S)
    unanswered = sum(1 for conn in conns if not conn.answered)
    for conn in conns:
        conn.shut()
    if unanswered:
        log.info("closed %d client connections, %d with requests still unanswered after %.1f s",
                 len(conns), unanswered, timeout)
    await asyncio.sleep(0)  # let the transports close before the state goes
