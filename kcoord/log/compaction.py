"""Log compaction (cleanup.policy=compact) for keyed logs like __consumer_offsets.

Keeps the latest record of every key; a tombstone (null value) is kept
until it is older than delete_retention_ms, so readers that were behind
still see the delete.  Only sealed segments are rewritten; records keep
their offsets (runs of consecutive offsets become one batch each).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from ..protocol.records import build_batch, decode_batch, iter_batches
from .partition_log import PartitionLog

log = logging.getLogger(__name__)

READ_CHUNK = 4 << 20


@dataclass
class CompactionStats:
    segments_rewritten: int = 0
    records_removed: int = 0
    bytes_before: int = 0
    bytes_after: int = 0


def _records(plog: PartitionLog, start: int, end: int):
    """(header, record) for every record with offset in [start, end)."""
    offset = start
    while offset < end:
        chunk = plog.read(offset, READ_CHUNK)
        if not chunk:
            return
        for pos, header in iter_batches(chunk):
            next_offset = header.base_offset + header.last_offset_delta + 1
            if next_offset <= offset:
                continue
            if header.base_offset >= end:
                return
            offset = next_offset
            _, records = decode_batch(chunk, pos)
            for rec in records:
                yield header, rec


def compact(plog: PartitionLog, now_ms: int, delete_retention_ms: int) -> CompactionStats:
    stats = CompactionStats()
    sealed = plog.sealed_segments()
    if not sealed:
        return stats
    latest: dict[bytes | None, int] = {}
    for _, rec in _records(plog, plog.log_start_offset, plog.log_end_offset):
        latest[rec.key] = rec.offset
    bases = [s.base_offset for s in sealed] + [plog.active.base_offset]
    for i, seg in enumerate(sealed):
        kept = []
        removed = 0
        for header, rec in _records(plog, max(bases[i], plog.log_start_offset), bases[i + 1]):
            if header.is_control:
                removed += 1  # kcoord writes no transactions; markers carry nothing to keep
            elif rec.key is not None and latest.get(rec.key) != rec.offset:
                removed += 1
            elif rec.value is None and now_ms - rec.timestamp >= delete_retention_ms:
                removed += 1
            else:
                kept.append(rec)
        if not removed:
            continue
        out = bytearray()
        run: list = []
        for rec in kept:
            if run and rec.offset != run[-1].offset + 1:
                out += build_batch([(r.key, r.value, r.headers, r.timestamp) for r in run],
                                   base_offset=run[0].offset)
                run = []
            run.append(rec)
        if run:
            out += build_batch([(r.key, r.value, r.headers, r.timestamp) for r in run],
                               base_offset=run[0].offset)
        stats.bytes_before += seg.size
        plog.replace_sealed(seg.base_offset, bytes(out))
        stats.bytes_after += len(out)
        stats.segments_rewritten += 1
        stats.records_removed += removed
    if stats.segments_rewritten:
        log.info("%s: compacted %d segments, removed %d records (%d -> %d bytes)", plog.path,
                 stats.segments_rewritten, stats.records_removed, stats.bytes_before,
                 stats.bytes_after)
    return stats
