"""The log batches a share fetch read, as the share partition acquires them.

The leader reads whole batches from the next fetch offset (as Fetch does),
cut at the high watermark or, under read_committed, at the last stable
offset; each batch becomes a FetchedBatch, marked aborted when it is data of
an aborted transaction (the log's aborted-transaction index: a batch of that
producer from the transaction's first offset up to its ABORT marker).  The
response's Records are the read batches that cover the acquired ranges.
"""
from __future__ import annotations

from typing import Iterable, NamedTuple

from ..protocol.records import iter_batches
from .partition import AcquiredRange, FetchedBatch


class Aborted(NamedTuple):
    """An aborted transaction: its producer, first offset and ABORT marker's offset."""
    producer_id: int
    first_offset: int
    last_offset: int


class ReadBatches(NamedTuple):
    batches: list[FetchedBatch]
    spans: list[tuple[int, int]]      # (start, end) of each batch in the data
    data: bytes


def read_batches(data: bytes, read_end: int, aborted: Iterable[Aborted] = ()) -> ReadBatches:
    """The whole batches of `data` that end below read_end, each marked
    aborted or not."""
    aborted = list(aborted)
    batches: list[FetchedBatch] = []
    spans: list[tuple[int, int]] = []
    for pos, h in iter_batches(data):
        if h.last_offset >= read_end:
            break
        is_aborted = bool(aborted) and h.is_transactional and not h.is_control and any(
            a.producer_id == h.producer_id and a.first_offset <= h.base_offset <= a.last_offset
            for a in aborted)
        batches.append(FetchedBatch(h.base_offset, h.last_offset, is_aborted))
        spans.append((pos, pos + h.size))
    return ReadBatches(batches, spans, data)


def records_for(read: ReadBatches, ranges: list[AcquiredRange]) -> bytes:
    """The read batches from the first to the last acquired offset (whole
    batches: records outside the ranges are the client's to skip)."""
    if not ranges:
        return b""
    first, last = ranges[0].first, ranges[-1].last
    start = end = None
    for b, (lo, hi) in zip(read.batches, read.spans, strict=True):
        if b.last < first:
            continue
        if b.base > last:
            break
        if start is None:
            start = lo
        end = hi
    if start is None:
        return b""
    return bytes(read.data[start:end])
