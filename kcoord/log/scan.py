"""Walking the record batches of a segment file without loading it.

A segment can be a gigabyte, so we pread it in chunks and hand out batch
headers (and, for recovery, the batch bytes) one at a time.  Only headers are
parsed here; records are never decoded.
"""
from __future__ import annotations

import os
from typing import Iterator, NamedTuple

from kcoord.protocol.errors import CorruptRecordError
from kcoord.protocol.records import (HEADER_SIZE, LOG_OVERHEAD, MIN_BATCH_LENGTH, header_struct,
                                     read_batch_header)

from .errors import CorruptSegmentError

_BATCH_LENGTH = header_struct("batch_length")  # from the batch start


class FileBatch(NamedTuple):
    position: int   # where the batch starts in the file
    header: object  # records.BatchHeader
    buf: bytes      # a buffer holding the batch (whole if bodies=True)
    offset: int     # where the batch starts in buf


def pread_exact(fd: int, size: int, position: int) -> bytes:
    data = os.pread(fd, size, position)
    if len(data) != size:
        raise CorruptSegmentError(position, f"short read ({len(data)} of {size} bytes)")
    return data


def parse_header(buf, offset: int, position: int):
    """read_batch_header plus the sanity checks a log needs before it trusts
    batchLength to find the next batch."""
    try:
        header = read_batch_header(buf, offset)
    except CorruptRecordError as exc:
        raise CorruptSegmentError(position, f"malformed batch header ({exc})") from None
    if header.magic != 2:
        raise CorruptSegmentError(position, f"unsupported magic {header.magic}")
    if header.batch_length < MIN_BATCH_LENGTH:
        raise CorruptSegmentError(position, f"batch length {header.batch_length} too small")
    if header.last_offset_delta < 0:
        raise CorruptSegmentError(position, f"negative lastOffsetDelta {header.last_offset_delta}")
    return header


def file_batches(fd: int, start: int, end: int, *, bodies: bool,
                 chunk: int = 1 << 20) -> Iterator[FileBatch]:
    """Batches in fd[start:end], in order.

    With bodies=False only the header bytes are guaranteed to be in `buf`, so
    large batches are skipped over without being read.  Raises
    CorruptSegmentError at the first torn or malformed batch.
    """
    buf, buf_pos = b"", start  # buf holds file bytes [buf_pos, buf_pos + len(buf))
    pos = start
    while pos < end:
        remaining = end - pos
        if remaining < HEADER_SIZE:
            raise CorruptSegmentError(pos, f"partial batch header ({remaining} bytes)")
        off = pos - buf_pos
        if len(buf) - off < HEADER_SIZE:
            buf, buf_pos, off = pread_exact(fd, min(max(chunk, HEADER_SIZE), remaining), pos), pos, 0
        header = parse_header(buf, off, pos)
        size = LOG_OVERHEAD + header.batch_length
        if size > remaining:
            raise CorruptSegmentError(pos, f"partial batch ({remaining} of {size} bytes)")
        if bodies and len(buf) - off < size:
            buf, buf_pos, off = pread_exact(fd, min(max(chunk, size), remaining), pos), pos, 0
        yield FileBatch(pos, header, buf, off)
        pos += size


def segment_headers(path, start: int = 0):
    """(file position, BatchHeader) of each whole batch of a segment file
    from `start`, stopping quietly at the first torn or malformed one (where
    a recovery would cut the log): the readers' header walk over a log they
    do not own (the lag pipeline)."""
    with open(path, "rb") as fh:
        fd = fh.fileno()
        try:
            for batch in file_batches(fd, start, os.fstat(fd).st_size, bodies=False):
                yield batch.position, batch.header
        except CorruptSegmentError:
            return


def segment_data_end(path) -> int:
    """Where a segment file's whole batches end: its size, unless a
    preallocated zero tail (or a torn batch) follows them."""
    end = 0
    for position, header in segment_headers(path):
        end = position + LOG_OVERHEAD + header.batch_length
    return end


def whole_batches_prefix(buf) -> int:
    """Length of the longest prefix of buf made of whole batches.  Used on
    the read path over trusted data, so only batchLength is looked at."""
    end, n = 0, len(buf)
    while n - end >= HEADER_SIZE:
        size = LOG_OVERHEAD + _BATCH_LENGTH.unpack_from(buf, end)[0]
        if end + size > n:
            break
        end += size
    return end


def memory_batches(buf) -> list:
    """(position, header) of every batch in buf, which must be whole batches
    and nothing else (the input of an append)."""
    out, pos, n = [], 0, len(buf)
    while pos < n:
        if n - pos < HEADER_SIZE:
            raise CorruptSegmentError(pos, "partial batch header")
        header = parse_header(buf, pos, pos)
        size = LOG_OVERHEAD + header.batch_length
        if pos + size > n:
            raise CorruptSegmentError(pos, f"partial batch ({n - pos} of {size} bytes)")
        out.append((pos, header))
        pos += size
    return out
