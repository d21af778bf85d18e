"""Consumer lag from the server's own state and logs.

Offset lag is kafka_exporter's: the partition's log end offset minus the
committed offset (not floored at the log start).  Time lag is exact: now
minus the timestamp of the first record not yet committed, read from the
partition's log (0 when the group is caught up).  Other exporters can only
interpolate it from sampled offsets.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..protocol.records import decode_batch
from ..coordinator import committed_offsets

TIMESTAMP_CACHE_MAX = 100_000


@dataclass(slots=True)
class PartitionLag:
    group: str
    topic: str
    partition: int
    committed: int
    log_start: int
    log_end: int
    lag: int
    lag_seconds: float | None  # None: the topic or partition is gone


class RecordTimes:
    """Timestamp of the record at an offset, with a bounded cache (a committed
    offset is asked for again at every scrape until the group moves on)."""

    def __init__(self) -> None:
        self._cache: dict[tuple, int | None] = {}

    def at(self, plog, topic: str, partition: int, offset: int) -> int | None:
        key = (topic, partition, offset, plog.log_start_offset)
        if key in self._cache:
            return self._cache[key]
        ts = _timestamp_at(plog, offset)
        if len(self._cache) >= TIMESTAMP_CACHE_MAX:
            self._cache.clear()
        self._cache[key] = ts
        return ts


def _timestamp_at(plog, offset: int) -> int | None:
    """Timestamp of the first record at or after `offset` (None if none is left)."""
    end = plog.log_end_offset
    while offset < end:
        try:
            data = plog.read(offset, 1, min_one=True)  # the one batch holding `offset`
        except Exception:  # out of range (retention moved the start meanwhile)
            return None
        if not data:
            return None
        pos = 0
        while pos < len(data):
            try:
                header, records = decode_batch(data, pos, verify_crc=False)
            except Exception:
                return None
            for rec in records:
                if rec.offset >= offset:
                    return rec.timestamp
            pos += header.size
            offset = max(offset, header.next_offset)
    return None


def group_lags(runtime, catalogue, now_ms: int, times: RecordTimes) -> list[PartitionLag]:
    """Every committed offset of every loaded shard (asked through the
    coordinator runtime's read path), with its lag."""
    out = []
    answers, _ = runtime.read_all(_committed)
    for offsets in answers:
        for group, topic, partition, committed in offsets:
            plog = catalogue.partition(topic, partition)
            if plog is None:
                out.append(PartitionLag(group, topic, partition, committed, -1, -1, -1, None))
                continue
            start, end = plog.log_start_offset, plog.log_end_offset
            lag = end - committed
            if committed >= end:
                seconds = 0.0
            else:
                ts = times.at(plog, topic, partition, max(committed, start))
                seconds = None if ts is None else max(0.0, (now_ms - ts) / 1000.0)
            out.append(PartitionLag(group, topic, partition, committed, start, end, lag,
                                    seconds))
    return out


def _committed(core, _now: int):
    return committed_offsets(core)
