"""Request dispatch by API key: the table of what kcoord serves."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..protocol.api import APIS

# A handler returns a response dict, an awaitable of one, or NO_RESPONSE
# (Produce with acks=0 is the only request Kafka never answers).
NO_RESPONSE = None


@dataclass(slots=True)
class RequestContext:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str


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

    def register(self, key: int, handler: Handler, min_version: int | None = None,
                 max_version: int | None = None, *, pure: bool = False) -> None:
        api = APIS[key]
        lo = api.min_version if min_version is None else min_version
        hi = api.max_version if max_version is None else max_version
        self.handlers[key] = (handler, lo, hi)
        if pure:
            self.pure.add(key)
        else:
            self.pure.discard(key)
        # tells caches of api_versions() and connections' repeat memos to refresh
        self.handlers_version = object()

    def api_versions(self) -> list[dict]:
        """The ApiVersions list: only APIs with a handler are advertised."""
        return [{"api_key": k, "min_version": lo, "max_version": hi}
                for k, (_, lo, hi) in sorted(self.handlers.items()) if k not in self.hidden]
