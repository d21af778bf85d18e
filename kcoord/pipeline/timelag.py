"""Exact time lag: how long the first record a group has not consumed has waited.

For a (topic, partition) with a committed offset below the log end, that
record is the one at the committed offset (or the first data record after
it: transaction markers are skipped); its timestamp comes from the user
partition itself, not from the commit history.  The time lag at `as_of` is
as_of minus that timestamp (0 when there is no lag).

Lookups are batched: from a server, one Fetch per leader carries up to
`PER_REQUEST` lagging partitions, each asking for a few KiB from the
committed offset (the batch holding it comes first), so a lagging partition
costs one small bounded read; a batch larger than that is fetched on its own.
From a data dir, each partition's batch headers are walked once into an
index, and the batch holding each offset is read with one pread.
"""
from __future__ import annotations

import bisect
from pathlib import Path

from kcoord.log.scan import segment_headers
from kcoord.protocol.records import CONTROL, TIMESTAMP_TYPE_LOG_APPEND, decode_batch, iter_batches

PART_BYTES = 16 << 10
PER_REQUEST = 500


def first_timestamp(data, offset: int) -> tuple[int | None, int | None]:
    """In whole batches `data`: (timestamp of the first data record at or after
    `offset`, None) or (None, the offset to look from next: nothing found)."""
    nxt = None
    for pos, h in iter_batches(data):
        last = h.base_offset + h.last_offset_delta
        nxt = last + 1
        if last < offset or h.attributes & CONTROL:
            continue
        _, records = decode_batch(data, pos, verify_crc=False)
        for r in records:
            if r.offset >= offset:
                return (h.max_timestamp if h.attributes & TIMESTAMP_TYPE_LOG_APPEND else r.timestamp), None
    return None, nxt


# ------------------------------------------------------------ over the wire


def wire_lookup(bootstrap: str, client_properties: dict | None = None):
    """-> lookup(wants: {(topic, partition, offset)}) -> {(topic, partition, offset): ts ms}."""
    def lookup(wants):
        from .wire import Cluster
        cluster = Cluster(bootstrap, client_properties)
        try:
            cluster.refresh(sorted({t for t, _, _ in wants}))
            return wire_first_timestamps(cluster, wants)
        finally:
            cluster.close()
    return lookup


def wire_first_timestamps(cluster, wants) -> dict:
    from .wire import OFFSET_OUT_OF_RANGE, WireError
    by_tp: dict[tuple[str, int], list[int]] = {}
    for t, p, off in wants:
        by_tp.setdefault((t, p), []).append(off)
    for offs in by_tp.values():
        offs.sort()
    found: dict = {}
    retry: list = []  # (topic, partition, wanted offset, offset to fetch from)
    depth = max((len(v) for v in by_tp.values()), default=0)
    for i in range(depth):  # a Fetch names a partition once: one offset per partition a round
        items = [(t, p, offs[i]) for (t, p), offs in by_tp.items() if i < len(offs)]
        by_leader: dict[int, list] = {}
        for t, p, off in items:
            try:
                _, leader, _ = cluster.partitions(t)[p]
            except (KeyError, WireError):  # a topic or partition gone since the commit
                continue
            by_leader.setdefault(leader, []).append((t, p, off))
        for leader, group in by_leader.items():
            for k in range(0, len(group), PER_REQUEST):
                chunk = group[k:k + PER_REQUEST]
                answers = cluster.fetch_many(leader, [(t, p, off) for t, p, off in chunk],
                                             PART_BYTES)
                for (t, p, off), (code, data, log_start) in zip(chunk, answers):
                    if code == OFFSET_OUT_OF_RANGE and log_start > off:
                        retry.append((t, p, off, log_start))  # removed: the oldest left
                        continue
                    if code:
                        continue
                    ts, nxt = first_timestamp(data, off)
                    if ts is not None:
                        found[(t, p, off)] = ts
                    else:
                        retry.append((t, p, off, off if nxt is None else max(nxt, off)))
    for t, p, off, start in retry:  # rare: a big batch, markers only, data removed
        at = start
        for _ in range(4):
            code, data, hw, log_start = cluster.fetch(t, p, at, 1 << 20)
            if code == OFFSET_OUT_OF_RANGE and log_start > at:
                at = log_start
                continue
            if code or not data:
                break
            ts, nxt = first_timestamp(data, at)
            if ts is not None:
                found[(t, p, off)] = ts
                break
            if nxt is None or nxt >= hw:
                break
            at = nxt
    return found


# -------------------------------------------------------------- a data dir


class _PartitionIndex:
    """Batch headers of one partition's segments: last offsets, files, positions."""

    def __init__(self, directory: Path) -> None:
        from .segments import segment_files
        self.lasts: list[int] = []
        self.where: list[tuple[str, int, int]] = []  # (path, position, size)
        for _, path in segment_files(directory):
            for pos, h in segment_headers(path):
                self.lasts.append(h.last_offset)
                self.where.append((str(path), pos, h.size))

    def first_timestamp(self, offset: int) -> int | None:
        i = bisect.bisect_left(self.lasts, offset)
        while i < len(self.lasts):
            path, pos, size = self.where[i]
            with open(path, "rb") as fh:
                fh.seek(pos)
                data = fh.read(size)
            ts, _ = first_timestamp(data, offset)
            if ts is not None:
                return ts
            i += 1  # a transaction marker: the next batch
        return None


def dir_lookup(data_dir):
    from .logend import user_partitions
    dirs = {(t, p): d for t, p, d in user_partitions(data_dir)}

    def lookup(wants):
        indexes: dict = {}
        found = {}
        for t, p, off in sorted(wants):
            d = dirs.get((t, p))
            if d is None or not Path(d).is_dir():
                continue
            index = indexes.get((t, p))
            if index is None:
                index = indexes[(t, p)] = _PartitionIndex(Path(d))
            ts = index.first_timestamp(off)
            if ts is not None:
                found[(t, p, off)] = ts
        return found
    return lookup
