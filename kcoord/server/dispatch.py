"""Request dispatch by API key: the table of what kcoord serves.

A handler is registered beside its definition: `@serves("JoinGroup")` on a
method, and `Dispatcher.register_handlers(obj)` enters every marked method
of `obj` in the table (so `grep JoinGroup` finds where it is served)."""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from ..protocol.api import APIS, serves  # noqa: F401 (serves: the handlers' marker)

# A handler returns a response dict (or its encoded body as bytes), a Reply
# or another awaitable of one, or NO_RESPONSE (Produce with acks=0 is the
# only request Kafka never answers).
NO_RESPONSE = None

log = logging.getLogger("kcoord.dispatch")


class Reply:
    """A response that a handler completes later, lighter than an asyncio
    future: set_result / set_exception run the done callbacks at once, on
    the caller's (the loop's) thread, instead of one loop callback each, so
    the group commit releases a round's answers in one pass.  Awaitable (an
    asyncio future that mirrors it is made on demand); never cancelled."""
    __slots__ = ("_done", "_result", "_exception", "_first", "_callbacks")

    def __init__(self) -> None:
        self._done = False
        self._result: Any = None
        self._exception: BaseException | None = None
        # The first done callback, then a list of any others (None until a
        # second comes): nearly every Reply has exactly one (its connection's
        # answer slot), and a list per request is one more object kept alive
        # until the request's round is durable, then freed cold.
        self._first: Any = None
        self._callbacks: Any = None

    def done(self) -> bool:
        return self._done

    def cancelled(self) -> bool:
        return False

    def result(self):
        if not self._done:
            raise asyncio.InvalidStateError("result is not set")
        if self._exception is not None:
            raise self._exception
        return self._result

    def exception(self) -> BaseException | None:
        if not self._done:
            raise asyncio.InvalidStateError("exception is not set")
        return self._exception

    def add_done_callback(self, fn: Callable[["Reply"], Any]) -> None:
        if self._done:
            fn(self)
        elif self._first is None:
            self._first = fn
        elif self._callbacks is None:
            self._callbacks = [fn]
        else:
            self._callbacks.append(fn)

    def set_result(self, value) -> None:
        if self._done:
            raise asyncio.InvalidStateError("already done")
        self._result = value
        self._finish()

    def set_exception(self, exc: BaseException) -> None:
        if self._done:
            raise asyncio.InvalidStateError("already done")
        self._exception = exc
        self._finish()

    def cancel(self) -> bool:
        """Not cancellable as such: fails with CancelledError (what a
        cancelled task of the response would give)."""
        if self._done:
            return False
        self.set_exception(asyncio.CancelledError())
        return True

    def then(self, fn: Callable[[Any], Any]) -> "Reply":
        """A Reply of fn(this one's result) (an exception passes through)."""
        out = Reply()

        def done(reply: "Reply") -> None:
            if reply._exception is not None:
                out.set_exception(reply._exception)
            else:
                out.set_result(fn(reply._result))

        self.add_done_callback(done)
        return out

    def _finish(self) -> None:
        self._done = True
        first, self._first = self._first, None
        if first is None:
            return
        try:
            first(self)
        except Exception:  # one listener's failure must not stop the others
            log.exception("reply callback %r failed", first)
        callbacks, self._callbacks = self._callbacks, None
        if callbacks is not None:
            for fn in callbacks:
                try:
                    fn(self)
                except Exception:
                    log.exception("reply callback %r failed", fn)

    def __await__(self):
        if self._done:
            return self.result()
        fut = asyncio.get_running_loop().create_future()

        def mirror(reply: "Reply") -> None:
            if not fut.done():
                if reply._exception is not None:
                    fut.set_exception(reply._exception)
                else:
                    fut.set_result(reply._result)

        self.add_done_callback(mirror)
        return (yield from fut)


class RequestContext:
    """Who sent a request and how.  A plain class, not a dataclass: compiled,
    a dataclass's __init__ stays interpreted (about 3,000 instructions a request)."""
    __slots__ = ("api_key", "api_version", "correlation_id", "client_id", "client_host",
                 "principal", "listener", "connection")

    def __init__(self, api_key: int, api_version: int, correlation_id: int,
                 client_id: str | None, client_host: str,
                 principal: str = "User:ANONYMOUS",  # Kafka's principal string, Type:Name
                 listener: str = "PLAINTEXT",
                 connection: Any = None) -> None:  # share sessions end when it closes
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.client_host = client_host
        self.principal = principal
        self.listener = listener
        self.connection = connection

    def __repr__(self) -> str:
        return (f"RequestContext(api_key={self.api_key}, api_version={self.api_version}, "
                f"correlation_id={self.correlation_id}, client_id={self.client_id!r}, "
                f"principal={self.principal!r})")


Handler = Callable[[RequestContext, dict], Any]


class Dispatcher:
    def __init__(self) -> None:
        self.handlers: dict[int, tuple[Handler, int, int]] = {}
        self.hidden: set[int] = set()  # served (with an error) but not advertised
        # APIs whose handler answers with pre-encoded bytes that depend only on
        # the request's bytes (ApiVersions): a connection may answer a repeat of
        # the same request bytes with the same body without decoding it again.
        self.pure: set[int] = set()
        self.handlers_version = object()
        # handler calls so far (network.py counts them): lets a handler tell
        # whether any other request was handed out since its last call
        self.calls = 0
        # wraps each handler as it is registered (kcoord.security.checks:
        # authorization when an authorizer is configured)
        self.guard: Callable[[int, Handler], Handler] | None = None
        # observe.events.ServerMetrics when the HTTP endpoint is on: network.py
        # reports each request's API and seconds to its request_done
        self.metrics: Any = None
        # called with a connection when it closes (share sessions release records)
        self.on_connection_closed: list[Callable[[Any], None]] = []
        # api key -> (lowest version, highest version, flat decoder, its handler):
        # a request the flat decoder takes (not None) goes to its handler, not
        # the dict handler (register_flat)
        self.flat: dict[int, tuple[int, int, Callable[[Any, int], Any], Handler]] = {}

    def register(self, key: int, handler: Handler, min_version: int | None = None,
                 max_version: int | None = None, *, pure: bool = False,
                 hidden: bool = False) -> None:
        """The one way into the table; handler classes reach it through
        register_handlers (their @serves methods), never directly."""
        api = APIS[key]
        lo = api.min_version if min_version is None else min_version
        hi = api.max_version if max_version is None else max_version
        if self.guard is not None:
            handler = self.guard(key, handler)
        self.handlers[key] = (handler, lo, hi)
        self.flat.pop(key, None)  # it served the handler replaced
        if pure:
            self.pure.add(key)
        else:
            self.pure.discard(key)
        if hidden:
            self.hidden.add(key)
        else:
            self.hidden.discard(key)
        # tells caches of api_versions() and connections' repeat memos to refresh
        self.handlers_version = object()

    def register_flat(self, key: int, lo: int, hi: int, decode: Callable[[Any, int], Any],
                      handler: Handler) -> None:
        """A second decoder for versions lo-hi of an API already registered:
        decode(frame, body position) gives another form of the request, or
        None to leave it to the API's codec and handler; `handler` serves
        that form (server/hot_ops.py: OffsetCommit as flat tuples).  Not
        with a guard: its checks read the codec's dict."""
        if self.guard is None:
            self.flat[key] = (lo, hi, decode, handler)

    def register_handlers(self, obj) -> None:
        """Register every method of `obj` marked with @serves."""
        for name in dir(type(obj)):
            marked = getattr(getattr(type(obj), name), "serves", None)
            if marked is not None:
                key, lo, hi, pure, hidden = marked
                self.register(key, getattr(obj, name), lo, hi, pure=pure, hidden=hidden)

    def api_versions(self) -> list[dict]:
        """The ApiVersions list: only APIs with a handler are advertised."""
        return [{"api_key": k, "min_version": lo, "max_version": hi}
                for k, (_, lo, hi) in sorted(self.handlers.items()) if k not in self.hidden]
