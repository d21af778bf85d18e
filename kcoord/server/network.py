"""The Kafka wire: length-prefixed frames over asyncio.BufferedProtocol.

Every complete frame of a read is handled at once, responses leave in
request order per connection, and everything ready after a read goes out
in one transport.write.  The event loop reads straight into the
connection's own buffer (get_buffer / buffer_updated): small frames are
copied out of it once, as bytes; a large frame (a Produce of 1 MB batches)
gets a buffer of its own that the socket reads fill directly, handed to the
handler without any user-space copy.  The TLS layer still hands over
decrypted bytearrays through data_received, which keeps the older path
(a frame split across reads is kept as its pieces and joined once when
whole).  Hot path: the codecs and flexibility of each
(api, version) are looked up once per process, a connection's client id
is decoded once, and a response finished while nothing is waiting ahead of
it goes straight to the read's output list (no queue slot).  A repeat of
the last request of a pure API (ApiVersions: dispatcher.pure), the same
bytes but the correlation id, is answered from a per-connection memo before
any header decode.  A frame that is too large, does not parse, names
an unknown API or an unsupported version closes only its connection.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import struct
import sys
from collections import deque
from functools import partial
from time import perf_counter
from typing import Any

from ..log import step_trace
from ..protocol.api import APIS, request_codec, response_codec
from ..protocol.errors import Err, ProtocolError
from ..protocol.headers import encode_response_header, peek_request_header, skip_header_tags
from ..security import audit
from .dispatch import NO_RESPONSE, Dispatcher, Reply, RequestContext

log = logging.getLogger("kcoord.network")

_SIZE = struct.Struct(">i")
_SIZE_CORR = struct.Struct(">ii")  # frame size, then the response header's correlation id
_HEADER = struct.Struct(">hhih")   # request header: api key, version, correlation id, client id length
API_VERSIONS = 18
MAX_PENDING = 1024  # responses queued per connection before reading pauses
# The read buffer of a connection (allocated on its first read), and the
# length (size field included) above which a frame reads into a buffer of its
# own: a partial frame at most LARGE_FRAME long is moved to the front of the
# read buffer, so the next read always has >= READ_BUFFER - LARGE_FRAME of room.
READ_BUFFER = 64 * 1024
LARGE_FRAME = 32 * 1024
_FUTURE = asyncio.Future  # what loop.create_future() returns (asyncio's and uvloop's loops)


class _Slot:
    """A response position in a connection's ordered output queue; for a
    response still being worked on (a Reply, a future, a task) also the
    done callback that frames it into the queue (KafkaConnection._complete).
    It keeps only what the answer's frame needs, not the RequestContext,
    and is the callback itself: no partial, argument tuple and bound method
    per request, all of which an OffsetCommit kept alive until its round was
    durable and then freed cold (a cost in cache misses, not instructions)."""
    __slots__ = ("data", "done", "conn", "correlation_id", "tagged_header", "encode",
                 "api_key", "api_version", "client_id")

    def __init__(self, conn: Any = None, correlation_id: int = 0, tagged_header: bool = False,
                 encode: Any = None, api_key: int = 0, api_version: int = 0,
                 client_id: str | None = None) -> None:
        self.data: Any = b""  # bytes or a bytearray frame (compiled: no check either way)
        self.done = False
        self.conn: Any = conn  # the KafkaConnection whose queue this is
        self.correlation_id = correlation_id
        self.tagged_header = tagged_header
        self.encode: Any = encode
        self.api_key = api_key
        self.api_version = api_version
        self.client_id = client_id

    def __call__(self, fut: Any) -> None:
        self.conn._complete(self, fut)


# (api key, version) -> (request is flexible, response header has tags,
#                        request decoder, response encoder)
_ROUTES: dict[tuple[int, int], tuple[bool, bool, Any, Any]] = {}


def _route(key: int, version: int) -> tuple[bool, bool, Any, Any]:
    route = _ROUTES.get((key, version))
    if route is None:
        flexible = APIS[key].request.is_flexible(version)
        route = (flexible, flexible and key != API_VERSIONS,
                 request_codec(key, version)[1], response_codec(key, version)[0])
        _ROUTES[(key, version)] = route
    return route


TIMING_MASK = 15  # requests whose dispatcher.calls & TIMING_MASK == 0 are timed: 1 in 16


def _timed(metrics, key: int, started: float, _fut) -> None:
    metrics.request_done(key, perf_counter() - started)


async def _timed_coroutine(coro, metrics, key: int, started: float):
    try:
        return await coro
    finally:
        metrics.request_done(key, perf_counter() - started)


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(self, dispatcher: Dispatcher, max_request_bytes: int,
                 listener: str = "PLAINTEXT", gate=None, tls_principal=None,
                 registry: set | None = None) -> None:
        self.dispatcher = dispatcher
        # the server's open connections (a set), so a shutdown can drain them
        self.registry = registry
        self.draining = False
        # security (kcoord/security): the listener, the principal requests run
        # as, a SASL gate that sees every frame first (SASL listeners), and how
        # an SSL listener turns the client certificate into a principal
        self.listener = listener
        self.principal = "User:ANONYMOUS"
        self.gate = gate
        self.tls_principal = tls_principal
        self.max_request_bytes = max_request_bytes
        self.transport: Any = None  # asyncio.Transport (or a test's stand-in)
        # A frame begun in an earlier read: its pieces, how many bytes they
        # hold, and how many the frame needs (4 + size; 4 while the size
        # itself is incomplete).  Joined once, when complete: a 1 MB request
        # arriving in many reads is copied once, not regrown and re-sliced.
        self.parts: list = []
        self.have = 0
        self.need = 0
        # The buffered read path (get_buffer / buffer_updated): the read
        # buffer and its view, the bytes of it not yet handled (a partial
        # frame, at the front), and a large frame being filled by the reads
        # (its own buffer, its view, the bytes read so far).  After a large
        # frame the next read takes only the next size field, so a following
        # large frame is not read (and copied) through the read buffer.
        self.rbuf = bytearray()  # empty until the first read
        self.rview: Any = None
        self.rlen = 0
        self.large: bytearray | None = None
        self.large_view: Any = None
        self.large_have = 0
        self.after_large = False
        # The last large frame's buffer, reused for the next one once nothing
        # else holds it (no request, no view of its records: its reference
        # count is back to the one it has as this attribute, measured here
        # by the same code, so compiled and interpreted alike): a new one
        # would be zero-filled first, one more pass over every produced byte.
        self.spare = bytearray()
        self.spare_sole = self._spare_refs()
        self.pending: deque[_Slot] = deque()
        self.out: list[Any] = []  # responses ready (bytes, bytearray), nothing pending ahead
        self.client_id_raw: bytes | None = None  # the last client id seen, raw and decoded
        self.client_id: str | None = None
        self.peer = "?"
        self.host = ""
        self.closed = False
        self.reading_paused = False
        self.writing_paused = False
        # The last request of a pure API (dispatcher.pure) that was answered:
        # (frame size, api key + version bytes, bytes after the correlation
        # id, dispatcher.handlers_version, response size field bytes, body)
        self.memo: Any = None

    # ------------------------------------------------------------ transport
    def connection_made(self, transport) -> None:
        self.transport = transport
        if self.registry is not None:
            self.registry.add(self)
        peer = transport.get_extra_info("peername")
        if peer:
            self.host = peer[0]
            self.peer = f"{peer[0]}:{peer[1]}"
        if self.tls_principal is not None:
            try:
                self.principal = self.tls_principal(transport.get_extra_info("peercert"))
            except Exception as exc:  # NoMatchingRule: authentication fails
                audit.failed_authentication(self.host, self.listener, f"SSL principal: {exc}")
                self.close(f"TLS principal: {exc}")

    def connection_lost(self, _exc) -> None:
        self.closed = True
        if self.registry is not None:
            self.registry.discard(self)
        for listener in self.dispatcher.on_connection_closed:
            try:
                listener(self)
            except Exception:  # one listener's failure must not stop the close
                log.exception("connection close listener %r failed", listener)
        self.pending.clear()
        self.out.clear()

    def pause_writing(self) -> None:
        self.writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self.writing_paused = False
        self._update_reading()

    def _update_reading(self) -> None:
        if self.closed or self.draining:
            return
        want_pause = self.writing_paused or len(self.pending) >= MAX_PENDING
        if want_pause != self.reading_paused:
            self.reading_paused = want_pause
            if want_pause:
                self.transport.pause_reading()
            else:
                self.transport.resume_reading()

    # ------------------------------------------------- shutdown (shutdown.py)
    def stop_reading(self) -> None:
        """Read no further request; the ones already read are still answered."""
        self.draining = True
        if not self.closed and not self.reading_paused:
            self.reading_paused = True
            self.transport.pause_reading()

    @property
    def answered(self) -> bool:
        """Every request read has been answered and written to the socket."""
        return self.closed or (not self.pending and not self.out
                               and not self.transport.get_write_buffer_size())

    def shut(self) -> None:
        """Close without answering what is left (its client sees the close)."""
        if not self.closed:
            self.closed = True
            self.pending.clear()
            self.out.clear()
            self.transport.close()

    def close(self, reason: str) -> None:
        if not self.closed:
            log.warning("closing connection %s: %s", self.peer, reason)
            # answer the requests before the bad one that are already done,
            # as Kafka would have before reading the bad frame
            self.flush()
            self.closed = True
            self.pending.clear()
            self.out.clear()
            self.transport.close()

    # ------------------------------------------------- frames (socket reads)
    def get_buffer(self, _sizehint: int) -> Any:
        """Where the event loop's next socket read goes: the rest of a large
        frame, else the free end of the read buffer."""
        if self.large is not None:
            return self.large_view[self.large_have:]
        rlen = self.rlen
        if rlen == 0:
            rbuf = self.rbuf
            if not rbuf:
                rbuf = self.rbuf = bytearray(READ_BUFFER)
                self.rview = memoryview(rbuf)
            if self.after_large:
                return self.rview[:4]  # just the next frame's size
            return rbuf
        return self.rview[rlen:]

    def buffer_updated(self, nbytes: int) -> None:
        if self.closed:
            return
        large = self.large
        if large is not None:
            have = self.large_have + nbytes
            if have < len(large):
                self.large_have = have
                return
            # whole: the handler gets the buffer itself (never written again)
            self.large = self.large_view = None
            self.after_large = True
            self.handle_frame(large)
            if not self.closed:
                self.flush()
            return
        self.after_large = False
        end = self.rlen + nbytes
        rbuf = self.rbuf
        rview = self.rview
        pos = self._frames(rbuf, rview, 0, end)
        if pos < 0:
            return
        rest = end - pos
        if rest >= 4:
            size = _SIZE.unpack_from(rbuf, pos)[0]
            if size + 4 > LARGE_FRAME:
                # the frame's own buffer; what arrived of it is copied once
                large = self.large = self._large_buffer(size)
                self.large_view = memoryview(large)
                large[:rest - 4] = rview[pos + 4:end]
                self.large_have = rest - 4
                rest = 0
        if rest and pos:
            rbuf[:rest] = rview[pos:end]
        self.rlen = rest
        self.flush()

    def _spare_refs(self) -> int:
        return sys.getrefcount(self.spare)

    def _large_buffer(self, size: int) -> bytearray:
        """A buffer of size bytes for a large frame: the spare when nothing
        but this connection holds it (its bytes are overwritten by the
        reads), else a new one, which becomes the spare."""
        # counted before anything here takes a reference of its own
        if self._spare_refs() == self.spare_sole and self.spare:
            spare = self.spare
            have = len(spare)
            if size <= have:
                del spare[size:]  # shrinks in place (the allocation stays)
            else:
                spare += bytes(size - have)
            return spare
        spare = self.spare = bytearray(size)
        return spare

    # ---------------------------------------- frames (the TLS layer's reads)
    def data_received(self, data) -> None:
        """data: bytes, or a bytearray the caller hands over (the TLS layer
        decrypts into one)."""
        if self.closed:
            return
        pos = 0
        parts = self.parts
        if parts:
            parts.append(data)
            self.have += len(data)
            if self.have < self.need:
                return
            if self.need == 4:  # the size was split: rare, join and start over
                data = b"".join(parts)
                parts.clear()
            else:
                # the frame without its size, then the rest of this read
                pos = len(data) - (self.have - self.need)
                parts[0] = memoryview(parts[0])[4:]
                parts[-1] = memoryview(data)[:pos]
                frame = b"".join(parts)
                parts.clear()
                self.handle_frame(frame)
                if self.closed:
                    return
        end = len(data)
        # a bytearray's frames are copied out as bytes (handlers keep them)
        pos = self._frames(data, None if data.__class__ is bytes else memoryview(data), pos, end)
        if pos < 0:
            return
        if pos < end:  # a frame begun: kept, not copied, until it is whole
            parts.append(memoryview(data)[pos:] if pos else data)
            self.have = end - pos
            self.need = 4 + _SIZE.unpack_from(data, pos)[0] if end - pos >= 4 else 4
        self.flush()

    def _frames(self, data: Any, view: Any, pos: int, end: int) -> int:
        """Handle every complete frame of data[pos:end] (view: a memoryview
        of data when it is not bytes, its frames are copied out as bytes);
        -> where the first incomplete frame begins, or -1 once the
        connection is closed (a bad frame)."""
        limit = self.max_request_bytes
        out = self.out.append
        # The memo answers only while no response is pending ahead and the
        # handlers are the ones it was made with; both change only in
        # handle_frame, after which it is looked at again.
        memo = self.memo
        if memo is not None and (self.pending or memo[3] is not self.dispatcher.handlers_version):
            memo = None
        msize = memo[0] if memo is not None else -1
        while end - pos >= 4:
            size, = _SIZE.unpack_from(data, pos)
            if size < 0 or size > limit:
                self.close(f"frame size {size} outside 0..{limit} (socket.request.max.bytes)")
                return -1
            if end - pos - 4 < size:
                break
            if (size == msize and data.startswith(memo[1], pos + 4)
                    and data.startswith(memo[2], pos + 12)):
                # The very bytes (but the correlation id) of the last pure
                # request, which decoded and was answered: the same answer.
                out(memo[4])                    # frame size
                out(data[pos + 8:pos + 12])     # correlation id
                out(memo[5])                    # body
                pos += 4 + size
                continue
            frame = (data[pos + 4:pos + 4 + size] if view is None
                     else bytes(view[pos + 4:pos + 4 + size]))
            pos += 4 + size
            self.handle_frame(frame)
            if self.closed:
                return -1
            memo = self.memo
            if memo is not None and (self.pending
                                     or memo[3] is not self.dispatcher.handlers_version):
                memo = None
            msize = memo[0] if memo is not None else -1
        return pos

    def peek_header(self, frame: bytes | bytearray) -> tuple[int, int, int, str | None, int]:
        """(api key, version, correlation id, client id, position after the
        client id), decoding the client id only when it changes."""
        try:
            key, version, correlation_id, n = _HEADER.unpack_from(frame, 0)
        except struct.error:
            raise ProtocolError("request header truncated") from None
        if n >= 0:
            end = 10 + n
            raw = frame[10:end]
            if raw == self.client_id_raw and len(raw) == n:
                return key, version, correlation_id, self.client_id, end
            key, version, correlation_id, client_id, pos = peek_request_header(frame)
            # bytes(): a large frame is a bytearray (bytes(a bytes) is no copy)
            self.client_id_raw, self.client_id = bytes(raw), client_id
            return key, version, correlation_id, client_id, pos
        return peek_request_header(frame)

    def handle_frame(self, frame: bytes | bytearray) -> None:
        """One request frame without its size field: bytes, or a large
        frame's own bytearray (never written again once handed over)."""
        gate = self.gate
        if gate is not None and gate.intercept(self, frame):
            return
        try:
            key, version, correlation_id, client_id, pos = self.peek_header(frame)
        except ProtocolError as exc:
            self.close(f"malformed request header: {exc}")
            return
        dispatcher = self.dispatcher
        entry = dispatcher.handlers.get(key)
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
        route = _ROUTES.get((key, version))
        if route is None:
            route = _route(key, version)
        flexible, tagged_header, decode, encode = route  # (typed: unpacked without an iterator)
        try:
            if flexible:
                pos = skip_header_tags(frame, pos)
            request: Any = None
            flat = dispatcher.flat.get(key)
            if flat is not None and flat[0] <= version <= flat[1]:
                # another form of the request (Dispatcher.register_flat), or
                # None: the codec's dict (and its errors) as for any request
                request = flat[2](frame, pos)
                if request is not None:
                    handler = flat[3]
            if request is None:
                request, _ = decode(frame, pos)
        except ProtocolError as exc:
            self.close(f"malformed {APIS[key].name} v{version} request: {exc}")
            return
        ctx = RequestContext(key, version, correlation_id, client_id, self.host,
                             self.principal, self.listener, self)
        dispatcher.calls += 1
        if step_trace.enabled:
            step_trace.event("req", key, correlation_id, client_id)
        # metrics (observe.events.ServerMetrics, None when off): every request
        # counted per API, one in TIMING_SAMPLE timed from here to its answer
        metrics = dispatcher.metrics
        timed = False
        started = 0.0
        if metrics is not None:
            metrics.request_counts[key] += 1
            if not dispatcher.calls & TIMING_MASK:
                timed = True
                started = perf_counter()
        try:
            result = handler(ctx, request)
        except ConnectionAbortedError as exc:  # a check that closes, as Kafka does (acks=0)
            self.close(str(exc))
            return
        except Exception:
            log.exception("handler for %s v%d failed", APIS[key].name, version)
            self.close("internal error")
            return
        if timed:
            if result is NO_RESPONSE or result.__class__ is dict or result.__class__ is bytes:
                metrics.request_done(key, perf_counter() - started)
            elif hasattr(result, "add_done_callback"):
                result.add_done_callback(partial(_timed, metrics, key, started))
            else:  # a coroutine: timed once its task is done (below)
                result = _timed_coroutine(result, metrics, key, started)
        if result is NO_RESPONSE:
            return
        if result.__class__ is dict or result.__class__ is bytes:
            if step_trace.enabled:
                step_trace.event("ans", key, correlation_id, client_id)
            data: Any = self._frame(encode, correlation_id, tagged_header, result)
            if (result.__class__ is bytes and key in self.dispatcher.pure and not tagged_header
                    and (gate is None or gate.authenticated)):
                self.memo = (len(frame), frame[:4], frame[8:], self.dispatcher.handlers_version,
                             _SIZE.pack(len(result) + 4), result)
            if self.pending:  # behind a response still being worked on
                slot = _Slot()
                slot.data = data
                slot.done = True
                self.pending.append(slot)
            else:
                self.out.append(data)
            return
        slot = _Slot(self, correlation_id, tagged_header, encode, key, version, client_id)
        pending = self.pending
        pending.append(slot)
        if result.__class__ is Reply or result.__class__ is _FUTURE:
            # The hot case (OffsetCommit's Reply) or a plain future: completed
            # straight into its slot (the slot is the callback), no task and
            # no lookups when it is done.
            result.add_done_callback(slot)
            if len(pending) >= MAX_PENDING:
                self._update_reading()
            return
        if isinstance(result, dict):
            self._fill(slot, ctx, result)
            return
        if inspect.isawaitable(result):
            fut = asyncio.ensure_future(result)
            fut.add_done_callback(slot)
            if len(pending) >= MAX_PENDING:
                self._update_reading()
            return
        log.error("handler for %s returned %r", APIS[key].name, type(result))
        self.close("internal error")

    @staticmethod
    def _frame(encode, correlation_id: int, tagged_header: bool, response) -> bytearray:
        """Size, response header (v1 adds an empty tag section) and body,
        encoded into one buffer (a large Fetch body is not copied again)."""
        frame = bytearray(9 if tagged_header else 8)
        if response.__class__ is bytes:  # a body the handler encoded once and cached
            frame += response
        else:
            frame = encode(response, frame)
        _SIZE_CORR.pack_into(frame, 0, len(frame) - 4, correlation_id)
        return frame

    def _fill(self, slot: _Slot, ctx: RequestContext, response: dict) -> None:
        _, tagged_header, _, encode = _route(ctx.api_key, ctx.api_version)
        slot.data = self._frame(encode, ctx.correlation_id, tagged_header, response)
        slot.done = True

    def _complete(self, slot: _Slot, fut: Any) -> None:
        """The response of slot's request is done (fut: a Reply, a future or
        a task): its frame takes the slot's place in the queue."""
        if self.closed:
            return
        if isinstance(fut, Reply):  # never cancelled (compiled: its own methods called directly)
            exc = fut.exception()
        elif fut.cancelled():
            self.close("request cancelled")
            return
        else:
            exc = fut.exception()
        if exc is not None:
            log.error("handler for API %d v%d failed", slot.api_key, slot.api_version,
                      exc_info=exc)
            self.close("internal error")
            return
        slot.data = self._frame(slot.encode, slot.correlation_id, slot.tagged_header,
                                fut.result())
        if step_trace.enabled:
            step_trace.event("ans", slot.api_key, slot.correlation_id, slot.client_id)
        slot.done = True
        # Only an answer at the head of the queue lets anything out.
        if self.pending[0] is slot:
            self.flush()

    def flush(self) -> None:
        if self.closed:
            return
        out = self.out
        pending = self.pending
        while pending and pending[0].done:
            out.append(pending.popleft().data)
        if not out:
            return
        self.transport.write(b"".join(out) if len(out) > 1 else out[0])
        out.clear()
        if self.reading_paused:  # pending only shrank: nothing new to pause for
            self._update_reading()

    # ------------------------------------------- for the SASL gate (security)
    def respond(self, key: int, version: int, correlation_id: int, response: dict) -> None:
        _, tagged_header, _, encode = _ROUTES.get((key, version)) or _route(key, version)
        self.send_raw(self._frame(encode, correlation_id, tagged_header, response))

    def send_raw(self, data: bytes | bytearray) -> None:
        if self.pending:
            slot = _Slot()
            slot.data = data
            slot.done = True
            self.pending.append(slot)
        else:
            self.out.append(data)

    def set_principal(self, principal: str) -> None:
        self.principal = principal

    def fail(self, reason: str, delay_s: float) -> None:
        """Authentication failed: send what is queued, close after delay_s
        (Kafka's connection.failed.authentication.delay.ms)."""
        self.flush()
        if delay_s > 0:
            asyncio.get_running_loop().call_later(delay_s, self.close, reason)
        else:
            self.close(reason)

    def _unsupported_api_versions(self, correlation_id: int) -> None:
        """KIP-511: answer an unknown ApiVersions version in the v0 format."""
        body = response_codec(API_VERSIONS, 0)[0]({
            "error_code": Err.UNSUPPORTED_VERSION,
            "api_keys": self.dispatcher.api_versions(),
        })
        header = encode_response_header(correlation_id, False)
        self.send_raw(_SIZE.pack(len(header) + len(body)) + header + body)
