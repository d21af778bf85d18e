"""The one request/response exchange of kcoord's own Kafka clients (the admin
tools, the pipeline's wire source, the follower fetchers, `kcoord cluster
status`, the inter-broker SASL login): a size-prefixed request with its
header, and the response matched by correlation id, with a blocking face
(a socket) and an asyncio face (streams)."""
from __future__ import annotations

import asyncio
import struct
from typing import Awaitable, Callable

from .api import APIS, request_codec, response_codec
from .headers import decode_response_header, encode_request_header
from .sock_io import recv_exact

API_VERSIONS = 18
_SIZE = struct.Struct(">i")


class OutOfOrder(ConnectionError):
    """A response whose correlation id is not the request's."""


def request_frame(api_key: int, version: int, correlation_id: int, client_id: str | None,
                  body: dict) -> bytes:
    """The request as it goes on the wire, size prefix included."""
    flexible = APIS[api_key].request.is_flexible(version)
    payload = (encode_request_header(api_key, version, correlation_id, client_id, flexible)
               + bytes(request_codec(api_key, version)[0](body)))
    return _SIZE.pack(len(payload)) + payload


def response_of(api_key: int, version: int, correlation_id: int, frame: bytes) -> dict:
    """The response body in `frame` (size prefix removed); OutOfOrder if it
    answers another request."""
    # ApiVersions answers with response header v0 whatever its version
    flexible = APIS[api_key].request.is_flexible(version) and api_key != API_VERSIONS
    got, pos = decode_response_header(frame, flexible)
    if got != correlation_id:
        raise OutOfOrder(f"correlation id {got}, expected {correlation_id}")
    return response_codec(api_key, version)[1](frame, pos)[0]


class BlockingExchange:
    """Requests one at a time over a connected socket.  OSError, or EOFError
    when the peer closes, from the socket; OutOfOrder."""

    def __init__(self, sock, client_id: str | None) -> None:
        self.sock = sock
        self.client_id = client_id
        self.correlation_id = 0

    def call(self, api_key: int, version: int, body: dict) -> dict:
        self.correlation_id += 1
        self.sock.sendall(request_frame(api_key, version, self.correlation_id, self.client_id,
                                        body))
        size, = _SIZE.unpack(recv_exact(self.sock, 4))
        frame = recv_exact(self.sock, max(size, 0))  # negative: the header decode reports it
        return response_of(api_key, version, self.correlation_id, frame)


Bound = Callable[[Awaitable, float], Awaitable]


class AsyncExchange:
    """Requests one at a time over asyncio streams; each answer's read
    bounded by `bound(awaitable, timeout)` (asyncio.wait_for unless given)."""

    def __init__(self, reader, writer, client_id: str | None, bound: Bound | None = None) -> None:
        self.reader, self.writer = reader, writer
        self.client_id = client_id
        self.bound = bound if bound is not None else asyncio.wait_for
        self.correlation_id = 0

    async def call(self, api_key: int, version: int, body: dict, timeout: float) -> dict:
        self.correlation_id += 1
        self.writer.write(request_frame(api_key, version, self.correlation_id, self.client_id,
                                        body))
        await self.writer.drain()
        # one bound over the whole answer (a task per bounded wait: a
        # follower's fetch rounds make one call each)
        frame = await self.bound(self._read_frame(), timeout)
        return response_of(api_key, version, self.correlation_id, frame)

    async def _read_frame(self) -> bytes:
        size, = _SIZE.unpack(await self.reader.readexactly(4))
        return await self.reader.readexactly(size)
