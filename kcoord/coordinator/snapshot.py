"""A coordinator core's replayed state as bytes, and back (the snapshot's payload).

The whole core is pickled, so the snapshot carries everything a replay
builds (groups, members, offsets, pending transactional offsets, timer
deadlines) with nothing to keep in step by hand; the config (and the
objects it holds, such as the per-group overrides a manager keeps a
reference to) and the observer are the runtime's, not state, and are put
back on load.  The payload starts with a fingerprint of the code that
pickled it (this package's source and the Python version): a payload of
another kcoord version is refused (StaleSnapshot), never unpickled into
changed classes.  It is trusted as much as the log beside it (the node's
own data dir).  The committed offsets, the bulk of a shard's state, are
not pickled object by object: they follow the fingerprint as compact
columns (offset_table.py; a flag byte says which), and the pickle refers
to them by a persistent id.
"""
from __future__ import annotations

import dataclasses
import functools
import gc
import hashlib
import importlib.util
import io
import pickle
import sys
import types
from pathlib import Path

from .observer import NULL_OBSERVER
from .offset_table import decode_offsets, encode_offsets

_CONFIG = "config"
_OBSERVER = "observer"
_OFFSETS = "offsets"
_FINGERPRINT_SIZE = 32
# after the fingerprint: the offsets as a table (then the pickle refers to
# them), or pickled with the rest (a value the table's columns cannot hold)
_TABLE, _PICKLED = b"T", b"P"


class StaleSnapshot(ValueError):
    """The payload was written by other code (another kcoord or Python version)."""


@functools.cache
def code_fingerprint() -> bytes:
    """The digest of every module of this package and the Python version:
    the classes a payload's pickle names are these ones only if it matches."""
    digest = hashlib.sha256(f"{sys.version_info[:2]}".encode())
    # compiled (mypyc) classes and their .py twins may pickle differently
    shard = importlib.util.find_spec(__package__ + ".shard")
    digest.update(b"py" if shard and str(shard.origin).endswith(".py") else b"compiled")
    root = Path(__file__).parent
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.digest()


def _config_objects(config) -> dict[int, str]:
    """id -> name of every object the config holds (and of the attributes of
    those), which a core may keep a reference to: put back from the
    runtime's config on load rather than saved."""
    found = {id(config): _CONFIG}
    if not dataclasses.is_dataclass(config):
        return found
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if value is None or isinstance(value, (int, float, str, bytes, tuple)):
            continue
        found[id(value)] = f"{_CONFIG}.{f.name}"
        for attr, inner in getattr(value, "__dict__", {}).items():
            found.setdefault(id(inner), f"{_CONFIG}.{f.name}.{attr}")
    return found


class _StatePickler(pickle.Pickler):
    def __init__(self, buf, core, offsets) -> None:
        super().__init__(buf, protocol=5)
        self.config_objects = _config_objects(core.config)
        self.offsets = offsets  # written as a table before the pickle, or None

    def persistent_id(self, obj):
        if obj is NULL_OBSERVER:
            return _OBSERVER
        if obj is self.offsets and obj is not None:
            return _OFFSETS
        return self.config_objects.get(id(obj))

    def reducer_override(self, obj):
        """A bound method of a compiled (mypyc) class: its function has no
        __name__, so pickle's own reduction fails; found by name on the class."""
        if obj.__class__ is types.MethodType and not hasattr(obj.__func__, "__name__"):
            for klass in type(obj.__self__).__mro__:
                for name, value in vars(klass).items():
                    if value is obj.__func__:
                        return getattr, (obj.__self__, name)
        return NotImplemented


class _StateUnpickler(pickle.Unpickler):
    def __init__(self, buf, config, offsets) -> None:
        super().__init__(buf)
        self.config = config
        self.offsets = offsets

    def persistent_load(self, pid):
        if pid == _OBSERVER:
            return NULL_OBSERVER
        if pid == _OFFSETS and self.offsets is not None:
            return self.offsets
        if pid == _CONFIG or pid.startswith(_CONFIG + "."):
            obj = self.config
            for name in pid.split(".")[1:]:
                obj = getattr(obj, name)
            return obj
        raise pickle.UnpicklingError(f"unknown reference {pid!r}")


def encode_state(core) -> bytes:
    """The state of a core that has only replayed (no observer set)."""
    buf = io.BytesIO()
    buf.write(code_fingerprint())
    offsets = core.offsets.by_group
    try:
        table = encode_offsets(offsets)
    except (OverflowError, ValueError, TypeError):  # a value no column holds: pickled
        buf.write(_PICKLED)
        offsets = None
    else:
        buf.write(_TABLE + len(table).to_bytes(8, "little") + table)
    _StatePickler(buf, core, offsets).dump(core)
    return buf.getvalue()


def decode_state(payload: bytes, config):
    """The core encode_state saved, on the runtime's `config`; StaleSnapshot
    if other code wrote it; raises on anything malformed (the caller then
    replays the log)."""
    if payload[:_FINGERPRINT_SIZE] != code_fingerprint():
        raise StaleSnapshot("written by another kcoord version")
    collecting = gc.isenabled()
    gc.disable()  # the decode makes only live objects: collections would walk the heap for none
    try:
        return _decode(payload, config)
    finally:
        if collecting:
            gc.enable()


def _decode(payload: bytes, config):
    at = _FINGERPRINT_SIZE + 1
    offsets = None
    if payload[at - 1:at] == _TABLE:
        length = int.from_bytes(payload[at:at + 8], "little")
        at += 8
        offsets, used = decode_offsets(memoryview(payload)[at:at + length])
        if used != length:
            raise ValueError("offset table length disagrees")
        at += length
    elif payload[at - 1:at] != _PICKLED:
        raise ValueError("unknown snapshot payload kind")
    buf = io.BytesIO(payload)
    buf.seek(at)
    return _StateUnpickler(buf, config, offsets).load()
