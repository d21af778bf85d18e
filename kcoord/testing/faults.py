"""Fault injection and the request log, at the request dispatch seam.

`Tap.install(dispatcher)` wraps each handler of a server's table once (only
kcoord.testing does: `kcoord serve` keeps its handlers untouched).  A wrapped
handler logs the request and, only when a fault is installed for its API,
looks for one that matches (a dict lookup otherwise).  Anchors: franz-go's
kfake ControlKey / AddFault, librdkafka's rdkafka_mock.h push_request_errors,
RTT and broker down/up."""
from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..protocol.api import APIS, error_response
from .answers import answer_error, api_key, error_code, groups_of, partitions_of


@dataclass
class RequestRecord:
    """One request a node read: api name, version, client id, node, time
    (wall seconds) and the error code of its answer (None until answered)."""
    api: str
    version: int
    client_id: str | None
    node: int
    time: float
    key: int = field(repr=False)
    request: dict = field(repr=False)
    fault: str | None = None  # the kind of fault that took it, if one did
    _response: Any = field(default=None, repr=False)
    answered: bool = False

    @property
    def error_code(self) -> int | None:
        if not self.answered:
            return None
        return answer_error(self.key, self.version, self._response)

    def answer(self, response) -> None:
        self._response = response
        self.answered = True

    def __str__(self) -> str:
        code = self.error_code
        return (f"{self.time:.3f} node {self.node} {self.client_id or '-'} {self.api} "
                f"v{self.version} -> {'pending' if code is None else code}"
                + (f" [{self.fault}]" if self.fault else ""))


class ParkedRequest:
    """A request a park fault holds: `release()` lets it through."""

    def __init__(self, record: RequestRecord, loop, future) -> None:
        self.record = record
        self.request = record.request
        self.client_id = record.client_id
        self._loop = loop
        self._future = future

    @property
    def released(self) -> bool:
        return self._future.done()

    def release(self) -> None:
        def go() -> None:
            if not self._future.done():
                self._future.set_result(None)
        self._loop.call_soon_threadsafe(go)

    def __repr__(self) -> str:
        return f"<parked {self.record.api} from {self.client_id}>"


class Fault:
    """One installed fault; the handle the faults API returns."""

    def __init__(self, registry: "Faults", kind: str, api, count: int | None, *,
                 error=None, ms: float = 0, group=None, topic=None, partition=None,
                 node=None, client_id=None) -> None:
        self._registry = registry
        self.kind = kind
        self.key = api_key(api)
        self.api = APIS[self.key].name
        self.count = count
        self.error = None if error is None else error_code(error)
        self.ms = ms
        self.group, self.topic, self.partition = group, topic, partition
        self.node, self.client_id = node, client_id
        self.fired = 0
        self.parked: list[ParkedRequest] = []
        self.removed = False
        self._changed = threading.Condition()

    def matches(self, ctx, req: dict, node: int) -> bool:
        if self.node is not None and node != self.node:
            return False
        if self.client_id is not None and ctx.client_id != self.client_id:
            return False
        if self.group is not None and self.group not in groups_of(self.key, req):
            return False
        if self.topic is not None or self.partition is not None:
            named = partitions_of(req)
            if self.topic is not None and not any(t == self.topic for t, _ in named):
                return False
            if self.partition is not None and not any(
                    p == self.partition and (self.topic is None or t == self.topic)
                    for t, p in named):
                return False
        return True

    @property
    def exhausted(self) -> bool:
        return self.count is not None and self.fired >= self.count

    def remove(self) -> None:
        """Uninstall; parked requests are let through."""
        self._registry.remove(self)
        self.release()

    def release(self, n: int | None = None) -> None:
        """(park) Let the parked requests through, oldest first (n: only
        that many); later matching requests are parked until remove()."""
        waiting = [p for p in self.parked if not p.released]
        for p in waiting[:n] if n is not None else waiting:
            p.release()

    def wait_parked(self, n: int = 1, timeout: float = 10.0) -> list[ParkedRequest]:
        """(park) Until at least n requests are parked: -> the parked ones."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while len(self.parked) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{len(self.parked)} {self.api} requests parked, "
                                       f"{n} expected within {timeout}s")
                self._changed.wait(left)
            return list(self.parked)

    def _parked(self, p: ParkedRequest) -> None:
        with self._changed:
            self.parked.append(p)
            self._changed.notify_all()

    def __repr__(self) -> str:
        return f"<{self.kind} {self.api} fired={self.fired} count={self.count}>"


class Faults:
    """kafka.faults: every fault of a server (all its nodes)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # api key -> its faults, in installation order; an API without faults
        # has no entry, so a wrapped handler tests one dict lookup
        self.by_key: dict[int, list[Fault]] = {}
        self.caps = None  # set by the server: cap_versions's applier

    def _add(self, fault: Fault) -> Fault:
        with self._lock:
            self.by_key.setdefault(fault.key, []).append(fault)
        return fault

    def remove(self, fault: Fault) -> None:
        with self._lock:
            fault.removed = True
            faults = self.by_key.get(fault.key)
            if faults and fault in faults:
                faults.remove(fault)
                if not faults:
                    del self.by_key[fault.key]

    def take(self, key: int, ctx, req: dict, node: int) -> Fault | None:
        """The first installed fault matching the request, counted as fired."""
        with self._lock:
            for fault in self.by_key.get(key, ()):
                if not fault.exhausted and fault.matches(ctx, req, node):
                    fault.fired += 1
                    return fault
        return None

    # --------------------------------------------------------------- the API
    def fail(self, api, error, count: int | None = 1, **where) -> Fault:
        """Answer the next `count` matching requests with `error` (None: all)."""
        return self._add(Fault(self, "fail", api, count, error=error, **where))

    def disconnect(self, api, count: int | None = 1, **where) -> Fault:
        """Close the connection of the next `count` matching requests, unanswered."""
        return self._add(Fault(self, "disconnect", api, count, **where))

    def delay(self, api, ms: float, count: int | None = None, **where) -> Fault:
        """Hold matching requests `ms` before they are handled."""
        return self._add(Fault(self, "delay", api, count, ms=ms, **where))

    def park(self, api, count: int | None = None, **where) -> Fault:
        """Hold matching requests until the handle's release() (or
        ParkedRequest.release(), to choose the order)."""
        return self._add(Fault(self, "park", api, count, **where))

    def cap_versions(self, caps: dict) -> None:
        """Serve at most these versions ({"Fetch": 11}); None: neither
        advertised nor served (an older broker).  Until reset()."""
        self.caps({api_key(a): v for a, v in caps.items()})

    def reset(self) -> None:
        """Remove every fault (parked requests go through) and every cap."""
        with self._lock:
            faults = [f for fs in self.by_key.values() for f in fs]
        for fault in faults:
            fault.remove()
        if self.caps is not None:
            self.caps(None)

    @property
    def installed(self) -> list[Fault]:
        with self._lock:
            return [f for fs in self.by_key.values() for f in fs]


class Tap:
    """One node's wrapped handler table: its requests go to `log`, its faults
    come from `faults`."""

    def __init__(self, dispatcher, node: int, faults: Faults, log) -> None:
        self.dispatcher = dispatcher
        self.node = node
        self.faults = faults
        self.log = log
        self.original: dict[int, tuple] = {}

    def install(self) -> None:
        d = self.dispatcher
        # a flat decoder's handler would serve its requests past the table:
        # every request goes through the wrapped handlers, so the log sees it
        # and a fault can answer it
        d.flat.clear()
        self.original = dict(d.handlers)
        for key, (handler, lo, hi) in self.original.items():
            d.handlers[key] = (self._wrap(key, handler), lo, hi)
        d.handlers_version = object()
        self.wrapped = dict(d.handlers)

    def cap(self, caps: dict | None) -> None:
        """Apply version caps to the wrapped table (None: none); on the loop."""
        d = self.dispatcher
        table = dict(self.wrapped)
        for key, cap in (caps or {}).items():
            if key not in table:
                continue
            if cap is None:
                del table[key]
            else:
                handler, lo, hi = table[key]
                if cap < lo:
                    del table[key]
                else:
                    table[key] = (handler, lo, min(hi, cap))
        d.handlers.clear()
        d.handlers.update(table)
        d.handlers_version = object()

    def _wrap(self, key: int, handler):
        by_key = self.faults.by_key
        log = self.log
        node = self.node
        name = APIS[key].name

        def tapped(ctx, req):
            record = RequestRecord(name, ctx.api_version, ctx.client_id, node, time.time(),
                                   key, req)
            log.append(record)
            if key in by_key:
                fault = self.faults.take(key, ctx, req, node)
                if fault is not None:
                    record.fault = fault.kind
                    return self._apply(fault, record, handler, ctx, req)
            return _watched(record, handler(ctx, req))
        tapped.__wrapped__ = handler
        return tapped

    def _apply(self, fault: Fault, record: RequestRecord, handler, ctx, req):
        if fault.kind == "fail":
            answer = error_response(record.key, ctx.api_version, req, fault.error)
            record.answer(answer)
            return answer
        if fault.kind == "disconnect":
            record.answer(None)
            raise ConnectionAbortedError(f"fault: disconnect on {record.api}")
        return self._held(fault, record, handler, ctx, req)

    async def _held(self, fault: Fault, record: RequestRecord, handler, ctx, req):
        if fault.kind == "delay":
            await asyncio.sleep(fault.ms / 1000.0)
        else:  # park
            loop = asyncio.get_running_loop()
            future = loop.create_future()
            fault._parked(ParkedRequest(record, loop, future))
            if fault.removed:
                future.set_result(None)
            await future
        result = handler(ctx, req)
        if result is not None and not isinstance(result, (dict, bytes)):
            result = await result
        record.answer(result)
        return result


def _watched(record: RequestRecord, result):
    """The handler's result, its answer noted in the record when it comes."""
    if result is None or result.__class__ is dict or result.__class__ is bytes:
        record.answer(result)
        return result
    if hasattr(result, "add_done_callback"):
        result.add_done_callback(
            lambda r: record.answer(r.result() if not r.cancelled() and r.exception() is None
                                    else None))
        return result
    return _answer_later(record, result)


async def _answer_later(record: RequestRecord, coro):
    result = await coro
    record.answer(result)
    return result
