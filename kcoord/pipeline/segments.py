"""__consumer_offsets segment files on disk: finding a data dir's partitions
and their segments, and walking a segment file in chunks into Arrow batches
(decode.py's RecordBatchBuilder does the decoding)."""
from __future__ import annotations

import os
import re
import struct
from pathlib import Path


from kcoord.log.scan import segment_headers
from kcoord.protocol.internal_topics import OFFSETS_TOPIC
from kcoord.protocol.records import (BATCH_HEADER, HEADER_SIZE, LOG_OVERHEAD, MIN_BATCH_LENGTH)

from .decode import DEFAULT_BATCH_ROWS, RecordBatchBuilder

SEGMENT_RE = re.compile(r"^(\d{20})\.log$")
DEFAULT_CHUNK_BYTES = 8 << 20


def partition_dirs(data_dir, topic: str = OFFSETS_TOPIC) -> list[tuple[int, Path]]:
    """(partition, directory) of every partition of `topic` in data_dir, by partition."""
    out = []
    prefix = topic + "-"
    try:
        entries = list(os.scandir(data_dir))
    except FileNotFoundError:
        return []
    for entry in entries:
        name = entry.name
        if entry.is_dir() and name.startswith(prefix) and name[len(prefix):].isdigit():
            out.append((int(name[len(prefix):]), Path(entry.path)))
    return sorted(out)


def segment_files(partition_dir) -> list[tuple[int, Path]]:
    """(base offset, path) of each segment file, in offset order."""
    out = []
    for entry in os.scandir(partition_dir):
        m = SEGMENT_RE.match(entry.name)
        if m and entry.is_file():
            out.append((int(m.group(1)), Path(entry.path)))
    return sorted(out)


def read_segment(path, log_partition: int, builder: RecordBatchBuilder | None = None, *,
                 start_position: int = 0, min_offset: int = -1, max_offset: int = 1 << 62,
                 verify_crc: bool = True, chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                 batch_rows: int = DEFAULT_BATCH_ROWS):
    """Yield Arrow RecordBatches of the records in one segment file.

    Records with offsets outside [min_offset, max_offset] are left out
    (streaming reads a range); batches wholly past max_offset end the walk.
    """
    path = Path(path)
    base = int(path.stem)
    if builder is None:
        builder = RecordBatchBuilder()
    builder.log_partition = log_partition
    builder.segment = base
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        fpos = start_position      # file position of buf[0]
        fh.seek(fpos)
        buf = b""
        pos = 0
        while True:
            left = size - fpos - pos  # bytes from pos to the end of the file
            if left <= 0:
                break
            avail = len(buf) - pos
            need = HEADER_SIZE
            if avail >= LOG_OVERHEAD:
                length = _peek_len(buf, pos)
                if length == 0 and _zero_header(buf, pos):
                    break  # a live log's preallocated zeros (kcoord/log/preallocate.py)
                if length < MIN_BATCH_LENGTH:
                    builder.add_error("corrupt_batch",
                                      f"{path.name}: batch length {length} at file position "
                                      f"{fpos + pos}; {left} bytes not read")
                    break
                if LOG_OVERHEAD + length > left:
                    builder.add_error("truncated_tail",
                                      f"{path.name}: partial batch of {left} bytes at file "
                                      f"position {fpos + pos} (batch length {length})")
                    break
                need = max(need, LOG_OVERHEAD + length)
            if avail < need:
                more = fh.read(max(chunk_bytes, need - avail))
                if not more:
                    builder.add_error("truncated_tail",
                                      f"{path.name}: {left} bytes of a partial batch at "
                                      f"file position {fpos + pos}")
                    break
                buf = buf[pos:] + more
                fpos += pos
                pos = 0
                continue
            pos, why = builder.add_chunk(buf, pos, verify_crc, min_offset, max_offset)
            if why == "done":
                break
            if why == "corrupt":
                if _zero_header(buf, pos):
                    break  # a live log's preallocated zeros
                h = BATCH_HEADER.unpack_from(buf, pos)
                builder.add_error("corrupt_batch",
                                  f"{path.name}: bad batch header (length {h[1]}, magic {h[3]}, "
                                  f"last offset delta {h[6]}) at file position {fpos + pos}; "
                                  f"{size - fpos - pos} bytes not read", offset=h[0])
                break
            if len(builder) >= batch_rows:
                out = builder.flush()
                if out is not None:
                    yield out
    out = builder.flush()
    if out is not None:
        yield out


def _zero_header(buf, pos: int) -> bool:
    """Are the batch header bytes at pos all zero (not a batch: the end of
    the written data in a preallocated segment)?"""
    return len(buf) - pos >= LOG_OVERHEAD and not any(buf[pos:pos + LOG_OVERHEAD])


def _peek_len(buf, pos: int) -> int:
    if len(buf) - pos < LOG_OVERHEAD:
        return 0
    return struct.unpack_from(">i", buf, pos + 8)[0]


def segment_end(path, start_position: int = 0, start_offset: int | None = None):
    """Walk batch headers only: -> (next offset, file position after the last whole batch)."""
    next_offset = start_offset if start_offset is not None else int(Path(path).stem)
    end = start_position
    for pos, h in segment_headers(path, start_position):
        next_offset, end = h.next_offset, pos + h.size
    return next_offset, end


def read_partition(partition_dir, log_partition: int, **kw):
    """Every segment of one partition, in order."""
    builder = RecordBatchBuilder(kw.pop("topic_names", None))
    for _, path in segment_files(partition_dir):
        yield from read_segment(path, log_partition, builder, **kw)
