"""The coordinator snapshot file beside a shard's log: written, and read back
only when it agrees with the log (the log stays the truth).

Layout: magic, header (offset covered, the base offset and CRC of the
batch ending there, payload length and CRC32), payload (coordinator/
snapshot.py).  Any disagreement (a log cut below the offset, a corrupt or
truncated file, a snapshot of another log) gives None and one log line.
"""
from __future__ import annotations

import logging
import os
import struct
import zlib
from pathlib import Path
from typing import NamedTuple

from ..protocol.records import iter_batches

log = logging.getLogger("kcoord.coordinator")

FILE_NAME = "coordinator.snapshot"
_TMP_GLOB = "coordinator.*.tmp"  # a write's temporary file, named after the writer's pid
_MAGIC = b"KCSNAP1\n"
_HEADER = struct.Struct(">qqIqI")  # end offset, last batch base, its CRC, payload length, payload CRC32


class SnapshotMark(NamedTuple):
    """What a snapshot covers: the log up to `end`, whose last batch is the
    one at `base` with `crc`."""
    end: int
    base: int
    crc: int


def _last_batch(plog, end: int) -> tuple[int, int] | None:
    """(base offset, CRC) of the batch whose last offset is end - 1, if the log has it."""
    if end <= plog.log_start_offset or end > plog.log_end_offset:
        return None
    chunk = plog.read(end - 1, 1, min_one=True)
    for _pos, header in iter_batches(chunk):
        if header.base_offset + header.last_offset_delta == end - 1:
            return header.base_offset, header.crc
        return None
    return None


def mark_of(plog, end: int) -> SnapshotMark | None:
    """What a snapshot of the log up to `end` covers; None if no batch ends there."""
    last = _last_batch(plog, end)
    return None if last is None else SnapshotMark(end, *last)


def write_snapshot(plog, end: int, payload: bytes) -> SnapshotMark | None:
    """Write the state covering the log up to `end` (atomically: a temporary
    file renamed over the old one); None if the log has no batch ending there."""
    mark = mark_of(plog, end)
    if mark is not None:
        write_snapshot_file(plog.path, mark, payload)
    return mark


def remove_temporaries(directory: Path) -> int:
    """Remove the temporary files of snapshot writes a crash cut short
    (call before this server starts any): -> how many."""
    removed = 0
    for path in Path(directory).glob(_TMP_GLOB):
        path.unlink(missing_ok=True)
        removed += 1
    return removed


def write_snapshot_file(directory: Path, mark: SnapshotMark, payload: bytes) -> None:
    """The file for `mark` and `payload` in `directory`, fsynced, then renamed
    over the old one (a reader never sees half a file)."""
    path = Path(directory) / FILE_NAME
    tmp = path.with_suffix(f".{os.getpid()}.tmp")  # matches _TMP_GLOB
    with open(tmp, "wb") as fh:
        fh.write(_MAGIC + _HEADER.pack(mark.end, mark.base, mark.crc, len(payload),
                                       zlib.crc32(payload)))
        fh.write(payload)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fd = os.open(directory, os.O_RDONLY)
    try:  # the rename itself survives a crash
        os.fsync(fd)
    finally:
        os.close(fd)


def _parse(data: bytes) -> tuple[SnapshotMark | None, bytes, str | None]:
    """(mark, payload, None), or (None, b"", why not) for a file that is not
    a whole snapshot."""
    n = len(_MAGIC) + _HEADER.size
    if len(data) < n or not data.startswith(_MAGIC):
        return None, b"", "not a snapshot file"
    end, base, crc, length, payload_crc = _HEADER.unpack_from(data, len(_MAGIC))
    payload = data[n:]
    if len(payload) != length or zlib.crc32(payload) != payload_crc:
        return None, b"", "corrupt or truncated"
    return SnapshotMark(end, base, crc), payload, None


def snapshot_mark(directory: Path) -> SnapshotMark | None:
    """What the whole snapshot file in `directory` covers, if there is one."""
    try:
        data = (Path(directory) / FILE_NAME).read_bytes()
    except FileNotFoundError:
        return None
    return _parse(data)[0]


def read_snapshot_file(directory: Path, mark: SnapshotMark) -> bytes | None:
    """The payload of the snapshot in `directory` if it is whole and is the
    one `mark` names (checked against the log when it was read or written)."""
    try:
        data = (Path(directory) / FILE_NAME).read_bytes()
    except FileNotFoundError:
        return None
    found, payload, _ = _parse(data)
    return payload if found == mark else None


def read_snapshot(plog, index: int) -> tuple[SnapshotMark, bytes] | None:
    """(what it covers, payload) of the snapshot beside `plog` if it agrees
    with the log; None (with one log line when a file was there) if not."""
    path = plog.path / FILE_NAME
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    mark, payload, reason = _parse(data)
    if mark is not None:
        if mark.end > plog.log_end_offset:
            reason = f"covers offset {mark.end} beyond the log end {plog.log_end_offset}"
        elif _last_batch(plog, mark.end) != (mark.base, mark.crc):
            reason = f"the log's batch ending at offset {mark.end} is not the one it covered"
    if reason is not None:
        log.warning("shard %d: ignoring the coordinator snapshot (%s); replaying the whole log",
                    index, reason)
        return None
    assert mark is not None
    return mark, payload
