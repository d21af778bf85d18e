"""Merging a share partition's state batches (Kafka's PersisterStateBatchCombiner).

A share partition's durable state is a sorted list of non-overlapping
StateBatch runs.  A write brings new runs; for every offset they cover the
newest run wins, offsets below the start offset are dropped, and touching
runs with the same state and delivery count are joined.  (Kafka's combiner
lets the run with the higher (delivery count, state) win an overlap; a
record's count and state only grow, so in every history a leader writes the
two agree, and "newest wins" also keeps a leader's own correction.)
"""
from __future__ import annotations

from bisect import bisect_left

from .persister import StateBatch


def overlay(batches: list[StateBatch], new: StateBatch) -> list[StateBatch]:
    """`batches` (sorted, non-overlapping) with `new` written over them."""
    first, last = new.first_offset, new.last_offset
    out: list[StateBatch] = []
    placed = False
    for b in batches:
        if b.last_offset < first:
            out.append(b)
            continue
        if b.first_offset > last:
            if not placed:
                out.append(new)
                placed = True
            out.append(b)
            continue
        # overlaps: keep what sticks out on either side
        if b.first_offset < first:
            out.append(StateBatch(b.first_offset, first - 1, b.delivery_state, b.delivery_count))
        if not placed:
            out.append(new)
            placed = True
        if b.last_offset > last:
            out.append(StateBatch(last + 1, b.last_offset, b.delivery_state, b.delivery_count))
    if not placed:
        out.append(new)
    return out


def prune(batches: list[StateBatch], start_offset: int) -> list[StateBatch]:
    """Drop offsets below `start_offset` (-1: keep everything)."""
    if start_offset < 0 or not batches or batches[0].first_offset >= start_offset:
        return batches
    i = bisect_left([b.last_offset for b in batches], start_offset)
    kept = batches[i:]
    if kept and kept[0].first_offset < start_offset:
        b = kept[0]
        kept[0] = StateBatch(start_offset, b.last_offset, b.delivery_state, b.delivery_count)
    return kept


def coalesce(batches: list[StateBatch]) -> list[StateBatch]:
    """Join touching runs of the same state and delivery count."""
    out: list[StateBatch] = []
    for b in batches:
        if out:
            p = out[-1]
            if (p.last_offset + 1 == b.first_offset and p.delivery_state == b.delivery_state
                    and p.delivery_count == b.delivery_count):
                out[-1] = StateBatch(p.first_offset, b.last_offset, p.delivery_state,
                                     p.delivery_count)
                continue
        out.append(b)
    return out


def merge_batches(current: list[StateBatch], new: list[StateBatch],
                  start_offset: int) -> list[StateBatch]:
    """`current` with `new` written over it in order (later runs win), pruned
    below `start_offset`, touching equal runs joined.  Runs with
    last < first are ignored."""
    merged = list(current)
    for b in new:
        if b.last_offset >= b.first_offset:
            merged = overlay(merged, b)
    return coalesce(prune(merged, start_offset))
