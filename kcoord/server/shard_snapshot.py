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

from ..protocol.records import iter_batches

log = logging.getLogger("kcoord.coordinator")

FILE_NAME = "coordinator.snapshot"
_MAGIC = b"KCSNAP1\n"
_HEADER = struct.Struct(">qqIqI")  # end offset, last batch base, its CRC, payload length, payload CRC32


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


def write_snapshot(plog, end: int, payload: bytes) -> bool:
    """Write the state covering the log up to `end` (atomically: a temporary
    file renamed over the old one); False if the log has no batch ending there."""
    last = _last_batch(plog, end)
    if last is None:
        return False
    path = plog.path / FILE_NAME
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as fh:
        fh.write(_MAGIC + _HEADER.pack(end, last[0], last[1], len(payload), zlib.crc32(payload)))
        fh.write(payload)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return True


def read_snapshot(plog, index: int) -> tuple[int, bytes] | None:
    """(offset covered, payload) of the snapshot beside `plog` if it agrees
    with the log; None (with one log line when a file was there) if not."""
    path = plog.path / FILE_NAME
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    reason = None
    n = len(_MAGIC) + _HEADER.size
    if len(data) < n or not data.startswith(_MAGIC):
        reason = "not a snapshot file"
    else:
        end, base, crc, length, payload_crc = _HEADER.unpack_from(data, len(_MAGIC))
        payload = data[n:]
        if len(payload) != length or zlib.crc32(payload) != payload_crc:
            reason = "corrupt or truncated"
        elif end > plog.log_end_offset:
            reason = f"covers offset {end} beyond the log end {plog.log_end_offset}"
        elif _last_batch(plog, end) != (base, crc):
            reason = f"the log's batch ending at offset {end} is not the one it covered"
    if reason is not None:
        log.warning("shard %d: ignoring the coordinator snapshot (%s); replaying the whole log",
                    index, reason)
        return None
    return end, payload
