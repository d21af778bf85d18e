"""Timestamps of the steps of a replicated write, for measuring where a
transaction spends its time (bench/cluster_transactions.py reads them).

Off unless the logger `kcoord.trace` is at DEBUG (set at run time through
the BROKER_LOGGER config resource, as `kafka-configs --entity-type
broker-loggers` does); off, a call costs one level check, and the
per-request check of the network layer one module attribute (`enabled`,
re-read by `refresh()` whenever a level is set).  One line per
event: `<event> <unix time, s> <fields...>`.  Events: `req`/`ans` (a
request in and its answer out: api key, correlation id, client id), `sync`
(a write asks to be made durable: id, logs), `flushed` (fsynced here: id),
`replicated` (the high watermark passed it: id), and a follower's fetch
round `fetch-sent`, `fetch-answer`, `fetch-appended` (logs), `fetch-flushed`
(leader id each).
"""
from __future__ import annotations

import itertools
import logging
import time

_log = logging.getLogger("kcoord.trace")
_ids = itertools.count(1)
DEBUG = logging.DEBUG


enabled = False  # the level at the last refresh(): the per-request check is one load


def on() -> bool:
    """Whether the trace is on now (off the per-request path: asks the logger)."""
    return _log.isEnabledFor(DEBUG)


def refresh() -> None:
    """Re-read whether `kcoord.trace` is at DEBUG (after a logger's level changed)."""
    global enabled
    enabled = _log.isEnabledFor(DEBUG)


def event(name: str, *fields) -> None:
    if _log.isEnabledFor(DEBUG):
        _log.debug("%s %.6f %s", name, time.time(), " ".join(str(f) for f in fields))


def sync_started(logs) -> int:
    """A write asks for `logs` to be made durable: the id tying its `sync`,
    `flushed` and `replicated` events together (0 when tracing is off)."""
    if not _log.isEnabledFor(DEBUG):
        return 0
    trace_id = next(_ids)
    event("sync", trace_id, names(logs))
    return trace_id


def write_event(name: str, trace_id: int) -> None:
    """`flushed` or `replicated` of the write `trace_id` (0: not traced)."""
    if trace_id:
        event(name, trace_id)


def names(logs) -> str:
    """The logs' directory names (topic-partition), comma separated."""
    return ",".join(plog.path.name for plog in logs)
