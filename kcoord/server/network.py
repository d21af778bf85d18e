"""The Kafka wire: length-prefixed frames over asyncio.Protocol.

Every complete frame of a read is handled at once, responses leave in
request order per connection, and everything ready after a read goes out
in one transport.write.  A frame that is too large, does not parse, names
an unknown API or an unsupported version closes only its connection.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import struct
from collections import deque

from ..protocol.api import APIS, request_codec, response_codec
from ..protocol.errors import Err, ProtocolError
from ..protocol.headers import encode_response_header, peek_request_header, skip_header_tags
from .dispatch import NO_RESPONSE, Dispatcher, RequestContext

log = logging.getLogger("kcoord.network")

_SIZE = struct.Struct(">i")
API_VERSIONS = 18
MAX_PENDING = 1024  # responses queued per connection before reading pauses


class _Slot:
    """A response position in a connection's ordered output queue."""
    __slots__ = ("data", "done")

    def __init__(self) -> None:
        self.data = b""
        self.done = False


class KafkaConnection(asyncio.Protocol):
    def __init__(self, dispatcher: Dispatcher, max_request_bytes: int) -> None:
        self.dispatcher = dispatcher
        self.max_request_bytes = max_request_bytes
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.pending: deque[_Slot] = deque()
        self.peer = "?"
        self.host = ""
        self.closed = False
        self.reading_paused = False
        self.writing_paused = False

    # ------------------------------------------------------------ transport
    def connection_made(self, transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        if peer:
            self.host = peer[0]
            self.peer = f"{peer[0]}:{peer[1]}"

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.pending.clear()

    def pause_writing(self) -> None:
        self.writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self.writing_paused = False
        self._update_reading()

    def _update_reading(self) -> None:
        if self.closed:
            return
        want_pause = self.writing_paused or len(self.pending) >= MAX_PENDING
        if want_pause != self.reading_paused:
            self.reading_paused = want_pause
            if want_pause:
                self.transport.pause_reading()
            else:
                self.transport.resume_reading()

    def close(self, reason: str) -> None:
        if not self.closed:
            log.warning("closing connection %s: %s", self.peer, reason)
            # answer the requests before the bad one that are already done,
            # as Kafka would have before reading the bad frame
            self.flush()
            self.closed = True
            self.pending.clear()
            self.transport.close()

    # --------------------------------------------------------------- frames
    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        buf = self.buffer
        if buf:
            buf += data
            # Wait for a whole frame before copying, so a large request that
            # arrives in many reads is not copied over and over.
            if len(buf) < 4:
                return
            size, = _SIZE.unpack_from(buf, 0)
            if 0 <= size <= self.max_request_bytes and len(buf) < 4 + size:
                return
            data = bytes(buf)
            buf.clear()
        pos = 0
        end = len(data)
        limit = self.max_request_bytes
        while end - pos >= 4:
            size, = _SIZE.unpack_from(data, pos)
            if size < 0 or size > limit:
                self.close(f"frame size {size} outside 0..{limit} (socket.request.max.bytes)")
                return
            if end - pos - 4 < size:
                break
            frame = data[pos + 4:pos + 4 + size]
            pos += 4 + size
            self.handle_frame(frame)
            if self.closed:
                return
        if pos < end:
            buf += data[pos:]
        self.flush()

    def handle_frame(self, frame: bytes) -> None:
        try:
            key, version, correlation_id, client_id, pos = peek_request_header(frame)
        except ProtocolError as exc:
            self.close(f"malformed request header: {exc}")
            return
        entry = self.dispatcher.handlers.get(key)
        if entry is None:
            self.close(f"unsupported API key {key}")
            return
        handler, lo, hi = entry
        if not lo <= version <= hi:
            if key == API_VERSIONS:
                self._unsupported_api_versions(correlation_id)
            else:
                self.close(f"unsupported version {version} of API {key}")
            return
        flexible = APIS[key].request.is_flexible(version)
        try:
            if flexible:
                pos = skip_header_tags(frame, pos)
            request, _ = request_codec(key, version)[1](frame, pos)
        except ProtocolError as exc:
            self.close(f"malformed {APIS[key].name} v{version} request: {exc}")
            return
        ctx = RequestContext(key, version, correlation_id, client_id, self.host)
        try:
            result = handler(ctx, request)
        except Exception:
            log.exception("handler for %s v%d failed", APIS[key].name, version)
            self.close("internal error")
            return
        if result is NO_RESPONSE:
            return
        slot = _Slot()
        self.pending.append(slot)
        if isinstance(result, dict):
            self._fill(slot, ctx, flexible, result)
            return
        if inspect.isawaitable(result):
            fut = asyncio.ensure_future(result)
            fut.add_done_callback(lambda f: self._complete(slot, ctx, flexible, f))
            self._update_reading()
            return
        log.error("handler for %s returned %r", APIS[key].name, type(result))
        self.close("internal error")

    def _fill(self, slot: _Slot, ctx: RequestContext, flexible: bool, response: dict) -> None:
        body = response_codec(ctx.api_key, ctx.api_version)[0](response)
        header = encode_response_header(ctx.correlation_id,
                                        flexible and ctx.api_key != API_VERSIONS)
        slot.data = _SIZE.pack(len(header) + len(body)) + header + body
        slot.done = True

    def _complete(self, slot: _Slot, ctx: RequestContext, flexible: bool, fut) -> None:
        if self.closed:
            return
        if fut.cancelled():
            self.close("request cancelled")
            return
        exc = fut.exception()
        if exc is not None:
            log.error("handler for API %d v%d failed", ctx.api_key, ctx.api_version,
                      exc_info=exc)
            self.close("internal error")
            return
        self._fill(slot, ctx, flexible, fut.result())
        self.flush()

    def flush(self) -> None:
        pending = self.pending
        if not pending or not pending[0].done or self.closed:
            return
        out = []
        while pending and pending[0].done:
            out.append(pending.popleft().data)
        self.transport.write(b"".join(out) if len(out) > 1 else out[0])
        self._update_reading()

    def _unsupported_api_versions(self, correlation_id: int) -> None:
        """KIP-511: answer an unknown ApiVersions version in the v0 format."""
        body = response_codec(API_VERSIONS, 0)[0]({
            "error_code": Err.UNSUPPORTED_VERSION,
            "api_keys": self.dispatcher.api_versions(),
        })
        header = encode_response_header(correlation_id, False)
        slot = _Slot()
        slot.data = _SIZE.pack(len(header) + len(body)) + header + body
        slot.done = True
        self.pending.append(slot)
