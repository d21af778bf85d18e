"""Share groups' state (KIP-932) from `__share_group_state`: one row per
share partition, replayed from its ShareSnapshot and ShareUpdate records
(no Spark here: a Spark task replays one log partition, as a share
partition's records all live on the partition its key hashes to).

Read from a data dir's segment files or over the Kafka protocol (Fetch from
each partition's leader, up to the high watermark).  The records are
decoded with the share coordinator's own codec and merged with its own
batch combiner (`share/records.py`, `share/batch_merge.py`: pure modules,
used rather than a second copy), so a row is what the share coordinator
would load.

Per share partition: the start offset and delivery complete count of the
last write; records of the stored window still to be delivered again
(`in_flight`: delivered at least once, not finished), acknowledged and
archived; the distinct offsets ever archived at the delivery-count limit
(kept across writes, as later writes prune them); and the last writes'
(timestamp, start offset, delivery complete count), from which the job
computes the share lag's trend.
"""
from __future__ import annotations

from pathlib import Path

from kcoord.protocol.errors import CorruptRecordError, ProtocolError
from kcoord.protocol.messages.share_state import SHARE_SNAPSHOT, SHARE_UPDATE
from kcoord.protocol.records import CONTROL, decode_batch, iter_batches
from kcoord.share.batch_merge import merge_batches
from kcoord.share.persister import StateBatch
from kcoord.share.records import decode_share_record

from .group_rows import uuid_str
from .segments import partition_dirs, segment_files

SHARE_STATE_TOPIC = "__share_group_state"
ACKNOWLEDGED, ARCHIVED = 2, 4
DEFAULT_DELIVERY_LIMIT = 5     # Kafka's group.share.delivery.count.limit
HISTORY = 20                   # the last writes kept per share partition

SHARE_STATE_FIELDS: list[tuple[str, str]] = [
    ("log_partition", "int"),
    ("group", "string"),
    ("topic_id", "string"),
    ("partition", "int"),
    ("state_epoch", "int"),
    ("leader_epoch", "int"),
    ("start_offset", "bigint"),
    ("delivery_complete_count", "int"),
    ("in_flight", "bigint"),
    ("acknowledged", "bigint"),
    ("archived", "bigint"),
    ("archived_at_limit", "bigint"),
    ("writes", "bigint"),
    ("last_write_ms", "bigint"),
    ("history", "array<struct<ts:bigint,start_offset:bigint,delivery_complete_count:int>>"),
    ("bad_records", "bigint"),
]


class _Key:
    """One share partition's replayed state."""
    __slots__ = ("state_epoch", "leader_epoch", "start", "complete", "batches", "limit_ranges",
                 "writes", "history")

    def __init__(self) -> None:
        self.state_epoch = self.leader_epoch = 0
        self.start = -1
        self.complete = -1
        self.batches: list[StateBatch] = []
        self.limit_ranges: list[tuple[int, int]] = []   # offsets archived at the limit
        self.writes = 0
        self.history: list[tuple[int, int, int]] = []


def _union(ranges: list[tuple[int, int]], first: int, last: int) -> list[tuple[int, int]]:
    """`ranges` (sorted, disjoint) with [first, last] added, touching ones joined."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(ranges + [(first, last)]):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


class ShareStateReplay:
    """Replays one __share_group_state partition's records, in log order."""

    def __init__(self, delivery_limit: int = DEFAULT_DELIVERY_LIMIT) -> None:
        self.limit = delivery_limit
        self.keys: dict[tuple, _Key] = {}
        self.bad = 0

    def add(self, timestamp: int, key: bytes | None, value: bytes | None) -> None:
        try:
            record = decode_share_record(key or b"", value)
        except (ProtocolError, CorruptRecordError, ValueError):
            self.bad += 1
            return
        if record is None:
            return                              # a newer writer's record type: skipped
        k = (record.key["group_id"], bytes(record.key["topic_id"]), record.key["partition"])
        v = record.value
        if v is None:
            if record.type == SHARE_SNAPSHOT:
                self.keys.pop(k, None)          # tombstone: the state was deleted
            return
        state = self.keys.get(k)
        if state is None:
            state = self.keys[k] = _Key()
        new = [StateBatch(b["first_offset"], b["last_offset"], b["delivery_state"],
                          b["delivery_count"]) for b in v["state_batches"]]
        if record.type == SHARE_SNAPSHOT:
            state.state_epoch = v["state_epoch"]
            state.start = v["start_offset"]
            state.batches = merge_batches([], new, state.start)
        elif record.type == SHARE_UPDATE:
            if v["start_offset"] != -1 or state.start == -1:
                state.start = v["start_offset"]
            state.batches = merge_batches(state.batches, new, state.start)
        if v["leader_epoch"] != -1:
            state.leader_epoch = v["leader_epoch"]
        state.complete = v["delivery_complete_count"]
        for b in new:
            if b.delivery_state == ARCHIVED and b.delivery_count >= self.limit:
                state.limit_ranges = _union(state.limit_ranges, b.first_offset, b.last_offset)
        state.writes += 1
        state.history = (state.history + [(timestamp, state.start, state.complete)])[-HISTORY:]

    def rows(self, log_partition: int) -> list[dict]:
        out = []
        for (group, topic_id, partition), s in sorted(self.keys.items()):
            counts = {ACKNOWLEDGED: 0, ARCHIVED: 0, "other": 0}
            for b in s.batches:
                kind = b.delivery_state if b.delivery_state in counts else "other"
                counts[kind] += b.last_offset - b.first_offset + 1
            out.append({
                "log_partition": log_partition, "group": group, "topic_id": uuid_str(topic_id),
                "partition": partition, "state_epoch": s.state_epoch,
                "leader_epoch": s.leader_epoch, "start_offset": s.start,
                "delivery_complete_count": s.complete, "in_flight": counts["other"],
                "acknowledged": counts[ACKNOWLEDGED], "archived": counts[ARCHIVED],
                "archived_at_limit": sum(b - a + 1 for a, b in s.limit_ranges),
                "writes": s.writes, "last_write_ms": s.history[-1][0] if s.history else None,
                "history": [{"ts": t, "start_offset": st, "delivery_complete_count": c}
                            for t, st, c in s.history],
                "bad_records": self.bad})
        return out


def _add_bytes(replay: ShareStateReplay, data: bytes, stop: int | None = None) -> int | None:
    """Feed the whole batches of `data` (below offset `stop`) -> the offset after
    the last one, None if there was none; a bad batch ends the read."""
    nxt = None
    try:
        for pos, h in iter_batches(data):
            if stop is not None and h.base_offset >= stop:
                return None if nxt is None else stop
            _, records = decode_batch(data, pos, verify_crc=True)
            nxt = h.base_offset + h.last_offset_delta + 1
            if h.attributes & CONTROL:       # a control batch: no share-state record
                continue
            for rec in records:
                replay.add(rec.timestamp, rec.key, rec.value)
    except CorruptRecordError:
        replay.bad += 1
        return None
    return nxt


def replay_dir(partition_dir, log_partition: int,
               delivery_limit: int = DEFAULT_DELIVERY_LIMIT) -> list[dict]:
    """The rows of one __share_group_state-<p> directory of a data dir."""
    replay = ShareStateReplay(delivery_limit)
    for _, path in segment_files(partition_dir):
        _add_bytes(replay, Path(path).read_bytes())
    return replay.rows(log_partition)


def replay_wire(cluster, log_partition: int, delivery_limit: int = DEFAULT_DELIVERY_LIMIT,
                fetch_bytes: int = 8 << 20) -> list[dict]:
    """The rows of one __share_group_state partition read with Fetch from its
    leader, from the log start to the high watermark."""
    from .wire import EARLIEST, LATEST
    replay = ShareStateReplay(delivery_limit)
    offset = cluster.list_offsets(SHARE_STATE_TOPIC, [log_partition], EARLIEST)[log_partition]
    end = cluster.list_offsets(SHARE_STATE_TOPIC, [log_partition], LATEST)[log_partition]
    size = fetch_bytes
    while offset < end:
        code, data, _, _ = cluster.fetch(SHARE_STATE_TOPIC, log_partition, offset, size)
        if code or not data:
            replay.bad += 1
            break
        nxt = _add_bytes(replay, data, end)
        if nxt is None or nxt <= offset:
            if size >= 256 << 20:
                replay.bad += 1
                break
            size *= 4                        # a batch larger than asked for
            continue
        offset = nxt
    return replay.rows(log_partition)


def share_state_partitions(data_dir=None, bootstrap: str | None = None,
                           client_properties: dict | None = None) -> list[int]:
    """The __share_group_state partitions to read (none: no share state yet)."""
    if bootstrap is None:
        return [p for p, _ in partition_dirs(data_dir, SHARE_STATE_TOPIC)]
    from .wire import Cluster
    cluster = Cluster(bootstrap, client_properties)
    try:
        cluster.refresh([SHARE_STATE_TOPIC])
        try:
            return sorted(cluster.partitions(SHARE_STATE_TOPIC))
        except Exception:    # the topic does not exist yet: no share group ever fetched
            return []
    finally:
        cluster.close()


def read_partition(log_partition: int, data_dir=None, bootstrap: str | None = None,
                   client_properties: dict | None = None,
                   delivery_limit: int = DEFAULT_DELIVERY_LIMIT) -> list[dict]:
    """One partition's rows, from the data dir or over the wire (a Spark task's work)."""
    if bootstrap is None:
        path = Path(data_dir) / f"{SHARE_STATE_TOPIC}-{log_partition}"
        return replay_dir(path, log_partition, delivery_limit)
    from .wire import Cluster
    cluster = Cluster(bootstrap, client_properties)
    try:
        cluster.refresh([SHARE_STATE_TOPIC])
        return replay_wire(cluster, log_partition, delivery_limit)
    finally:
        cluster.close()
