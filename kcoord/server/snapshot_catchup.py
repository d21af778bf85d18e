"""A new coordinator snapshot from the last one and the log after it.

The live core is never snapshotted: once loaded it is not replay state
(timers re-armed, sessions restarted, joins in flight).  Instead a separate
core is caught up: the last snapshot decoded (or a fresh core) and the log
records after it replayed, up to a batch boundary, then encoded and
written beside the log.  `catch_up` reads the segment files directly, so it
runs in a worker process while the shard serves (every N records), or in
the shard's process at a clean shutdown.
"""
from __future__ import annotations

import ctypes
import dataclasses
import logging
import mmap
import os
import signal
from pathlib import Path
from typing import NamedTuple

from ..coordinator.group_configs import GroupOverrides
from ..coordinator.shard import CoordinatorShard
from ..coordinator.snapshot import decode_state, encode_state
from ..protocol.records import LOG_OVERHEAD, iter_batches
from .shard_loader import CoreReplay, LogScan
from .shard_snapshot import SnapshotMark, read_snapshot_file, write_snapshot_file

log = logging.getLogger("kcoord.coordinator")


class Segment(NamedTuple):
    path: str
    base_offset: int
    size: int  # bytes to read: whole batches when it was taken


def segments_of(plog) -> list[Segment]:
    """The shard's segment files as a reader in another process sees them now."""
    return [Segment(str(path), base, size) for base, (path, size)
            in zip(plog.segment_base_offsets, plog.segment_files())]


def portable_config(config):
    """The core config without what only the server's process holds (an
    authorizer's callback, the live per-group overrides): replay needs neither."""
    return dataclasses.replace(config, topic_describable=None, group_overrides=GroupOverrides())


_PR_SET_PDEATHSIG = 1  # Linux prctl option


def die_with_parent(parent: int) -> None:
    """A catch-up worker's initializer: the worker is killed with the
    server (Linux's parent-death signal), so a server killed -9 leaves no
    worker writing a snapshot into a data dir another server has opened
    since (and maybe compacted below it)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # no prctl: catch_up still checks its parent before writing
    if os.getppid() != parent:  # the server died before the signal was asked for
        os._exit(0)


def catch_up(directory: str, segments: list[Segment], mark: SnapshotMark | None, upto: int,
             config, index: int, parent: int | None = None) -> tuple[SnapshotMark, int] | None:
    """Write the snapshot of the log up to the last batch boundary at or
    below `upto`, starting from the snapshot `mark` names (or from the log's
    start when there is none or it cannot be used).  -> (what the new one
    covers, records replayed), or None when there was nothing past `mark`
    (or when `parent`, the server that asked, is gone: nothing written)."""
    core, start = None, -1
    if mark is not None:
        payload = read_snapshot_file(Path(directory), mark)
        if payload is not None:
            try:
                core, start = decode_state(payload, config), mark.end
            except Exception as exc:  # another version's, or unreadable: from the start
                log.info("shard %d: snapshot catch-up starts from the log's start (%s)",
                         index, exc)
    if core is None:
        core = CoordinatorShard(index, config)
    sink = CoreReplay(core, index)
    scan = LogScan(sink)
    latest: dict = {}
    last: SnapshotMark | None = None
    for i, seg in enumerate(segments):
        following = segments[i + 1].base_offset if i + 1 < len(segments) else None
        if (following is not None and following <= start) or seg.base_offset >= upto \
                or seg.size <= 0:
            continue
        with open(seg.path, "rb") as fh, \
                mmap.mmap(fh.fileno(), seg.size, access=mmap.ACCESS_READ) as mm:
            first = stop = None
            for pos, header in iter_batches(mm):
                after = header.base_offset + header.last_offset_delta + 1
                if after <= start:
                    continue
                if after > upto:
                    break
                if first is None:
                    first = pos
                stop = pos + LOG_OVERHEAD + header.batch_length
                last = SnapshotMark(after, header.base_offset, header.crc)
            if first is not None:
                scan.scan_chunk(mm[first:stop], latest, 0)
    sink.latest(latest)
    if last is None or (parent is not None and os.getppid() != parent):
        return None
    write_snapshot_file(Path(directory), last, encode_state(core))
    return last, sink.records_loaded
