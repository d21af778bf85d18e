"""A coordinator core's replayed state as bytes, and back (the snapshot's payload).

The whole core is pickled, so the snapshot carries everything a replay
builds (groups, members, offsets, pending transactional offsets, timer
deadlines) with nothing to keep in step by hand; the config and the
observer are the runtime's, not state, and are put back on load.  The
payload is trusted as much as the log beside it (the node's own data dir).
"""
from __future__ import annotations

import io
import pickle

from .observer import NULL_OBSERVER

_CONFIG = "config"
_OBSERVER = "observer"


class _StatePickler(pickle.Pickler):
    def __init__(self, buf, core) -> None:
        super().__init__(buf, protocol=5)
        self.config = core.config

    def persistent_id(self, obj):
        if obj is self.config:
            return _CONFIG
        if obj is NULL_OBSERVER:
            return _OBSERVER
        return None


class _StateUnpickler(pickle.Unpickler):
    def __init__(self, buf, config) -> None:
        super().__init__(buf)
        self.config = config

    def persistent_load(self, pid):
        if pid == _CONFIG:
            return self.config
        if pid == _OBSERVER:
            return NULL_OBSERVER
        raise pickle.UnpicklingError(f"unknown reference {pid!r}")


def encode_state(core) -> bytes:
    """The state of a core that has only replayed (no observer set)."""
    buf = io.BytesIO()
    _StatePickler(buf, core).dump(core)
    return buf.getvalue()


def decode_state(payload: bytes, config):
    """The core encode_state saved, on the runtime's `config`; raises on
    anything malformed (the caller then replays the log)."""
    return _StateUnpickler(io.BytesIO(payload), config).load()
