"""Final reads after every fault healed, over kcoord's own codec: a
partition's whole log from its leader, and a group's committed offsets."""
from __future__ import annotations

import time

from kcoord.protocol.records import decode_batch, iter_batches

from .wire import FIND_COORDINATOR, OFFSET_FETCH, connect, leaders, metadata_of

FETCH = 1


def read_log(addrs: dict, topic: str, partitions: int, timeout: float = 60.0,
             epochs: dict | None = None) -> dict[int, dict[int, str]]:
    """partition -> offset -> value, every record up to the high watermark
    (and into `epochs`, when given: partition -> offset -> producer epoch)."""
    out: dict[int, dict[int, str]] = {}
    for p in range(partitions):
        deadline = time.monotonic() + timeout
        while True:
            try:
                out[p] = _read_partition(addrs, topic, p, {} if epochs is None else epochs.setdefault(p, {}))
                break
            except (OSError, ConnectionError, KeyError, AssertionError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
    return out


def _read_partition(addrs, topic, p, epochs: dict) -> dict[int, str]:
    leader = leaders(metadata_of(addrs[min(addrs)], [topic]), topic).get(p, -1)
    if leader not in addrs:
        raise KeyError(f"{topic}-{p} has no leader")
    values: dict[int, str] = {}
    offset = 0
    with connect(addrs[leader], timeout=30) as c:
        while True:
            r = c.request(FETCH, 12, {
                "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 8 << 20,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": topic, "topic_id": bytes(16), "partitions": [{
                    "partition": p, "fetch_offset": offset, "partition_max_bytes": 8 << 20,
                    "log_start_offset": -1}]}],
                "forgotten_topics_data": [], "rack_id": ""})
            part = r["responses"][0]["partitions"][0]
            assert part["error_code"] == 0, part["error_code"]
            end = part["high_watermark"]
            data = part["records"] or b""
            got = False
            for pos, header in iter_batches(data):
                _, records = decode_batch(data, pos)
                for rec in records:
                    if rec.offset < end and rec.value is not None and not header.is_control:
                        values[rec.offset] = bytes(rec.value).decode()
                        epochs[rec.offset] = header.producer_epoch
                offset = max(offset, header.base_offset + header.last_offset_delta + 1)
                got = True
            if not got or offset >= end:
                return values


def committed_offsets(addrs: dict, group: str, topic: str, partitions: int,
                      timeout: float = 60.0) -> dict[int, int]:
    """partition -> committed offset (-1: none), asked of the group's coordinator."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with connect(addrs[min(addrs)]) as c:
                f = c.request(FIND_COORDINATOR, 3, {"key": group, "key_type": 0})
            if f["error_code"] == 0 and f["node_id"] in addrs:
                with connect(addrs[f["node_id"]]) as c:
                    r = c.request(OFFSET_FETCH, 7, {
                        "group_id": group, "require_stable": True,
                        "topics": [{"name": topic, "partition_indexes": list(range(partitions))}]})
                parts = [p for t in r["topics"] for p in t["partitions"]]
                if not r["error_code"] and all(p["error_code"] == 0 for p in parts):
                    return {p["partition_index"]: p["committed_offset"] for p in parts}
        except (OSError, ConnectionError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"no committed offsets of {group}")
        time.sleep(0.3)
