"""Log-end offsets of user topics: from a data dir, or from a running kcoord.

From a data dir, each partition's segments are walked header by header
(records are never decoded).  Every batch gives one observation: at its
max timestamp the log ended at `base offset + last offset delta + 1`.  The
observations form the partition's log-end history, which the lag and status
jobs read as "where was the log end at time t".  A long history is thinned
to at most one observation per `resolution_ms` (the last one in each
bucket), and the partition's final log end is always kept.

From a running server (ListOffsets with timestamp -1, "latest"), there is
one observation per partition, stamped with the time of the request.
"""
from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path

from kcoord.log.scan import segment_headers

from kcoord.protocol.internal_topics import OFFSETS_TOPIC

from .segments import segment_files

CATALOGUE_FILE = "kcoord-topics.json"
INTERNAL_TOPICS = {OFFSETS_TOPIC, "__transaction_state", "__share_group_state"}


def read_catalogue(data_dir) -> list[dict]:
    """[{name, id (hex), partitions}] from kcoord-topics.json; [] when absent."""
    path = Path(data_dir) / CATALOGUE_FILE
    try:
        doc = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return []
    return [t for t in doc.get("topics", []) if t.get("name") not in INTERNAL_TOPICS]


def topic_id_names(data_dir) -> dict[str, str]:
    """Kafka's topic id string (URL-safe base64) -> topic name, from the catalogue."""
    out = {}
    for t in read_catalogue(data_dir):
        try:
            raw = bytes.fromhex(t["id"])
        except (KeyError, ValueError):
            continue
        out[base64.urlsafe_b64encode(raw).decode().rstrip("=")] = t["name"]
    return out


def user_partitions(data_dir) -> list[tuple[str, int, Path]]:
    """(topic, partition, directory) of every user topic partition in the data dir.

    The catalogue names the topics when it exists (a directory of a deleted
    topic is ignored); otherwise every `<topic>-<n>` directory counts.
    """
    data_dir = Path(data_dir)
    cat = read_catalogue(data_dir)
    out = []
    if cat:
        for t in cat:
            for p in range(int(t["partitions"])):
                out.append((t["name"], p, data_dir / f"{t['name']}-{p}"))
        return out
    try:
        entries = list(os.scandir(data_dir))
    except FileNotFoundError:
        return []
    for entry in entries:
        name, _, num = entry.name.rpartition("-")
        if entry.is_dir() and name and num.isdigit() and name not in INTERNAL_TOPICS:
            out.append((name, int(num), Path(entry.path)))
    return sorted(out)


def partition_history(directory, resolution_ms: int = 1000):
    """[(log end offset, timestamp ms)] observations of one partition, in offset order.

    A torn or corrupt tail ends the walk (the log end is where the last whole
    batch ends, as a log recovery would leave it).  An empty partition gives
    one observation of 0 at time -1 so the partition is still known.
    """
    out: list[tuple[int, int]] = []
    directory = Path(directory)
    if not directory.is_dir():
        return [(0, -1)]
    for _, path in segment_files(directory):
        for _, h in segment_headers(path):
            end, ts = h.next_offset, h.max_timestamp
            if out and resolution_ms > 0 and ts // resolution_ms == out[-1][1] // resolution_ms \
                    and ts >= out[-1][1]:
                out[-1] = (end, ts)
            else:
                out.append((end, ts))
    return out or [(0, -1)]


# ------------------------------------------------------------ ListOffsets


def server_log_ends(bootstrap: str, topics: list[str] | None = None, timeout: float = 30.0,
                    client_properties: dict | None = None) -> list[tuple[str, int, int, int]]:
    """[(topic, partition, log end offset, now ms)] of every user topic partition,
    from a running kcoord, a kcoord cluster or Kafka (ListOffsets latest, asked of
    each partition's leader)."""
    from .wire import LATEST, Cluster
    cluster = Cluster(bootstrap, client_properties, timeout)
    try:
        cluster.refresh(topics)
        out = []
        now = int(time.time() * 1000)
        for name, t in sorted(cluster.topics.items()):
            if t["error_code"] or t["is_internal"] or name in INTERNAL_TOPICS:
                continue
            parts = sorted(p for p, (code, _, _) in t["partitions"].items() if code == 0)
            if not parts:
                continue
            for p, end in cluster.list_offsets(name, parts, LATEST).items():
                out.append((name, p, end, now))
        return sorted(out)
    finally:
        cluster.close()


def server_log_end_history(bootstrap: str, tps, times: list[int],
                           client_properties: dict | None = None, timeout: float = 30.0
                           ) -> dict[tuple[str, int], list[tuple[int, int]]]:
    """{(topic, partition): [(log end, t)]} at each of `times`, from a running
    server: ListOffsets for timestamp t + 1 gives the first offset written after
    t, which is where the log ended at t (the current end when nothing came later).
    Partitions the server does not know are left out."""
    from .wire import LATEST, Cluster, WireError
    by_topic: dict[str, list[int]] = {}
    for t, p in tps:
        by_topic.setdefault(t, []).append(p)
    cluster = Cluster(bootstrap, client_properties, timeout)
    out: dict = {}
    try:
        cluster.refresh(sorted(by_topic))
        for topic, parts in sorted(by_topic.items()):
            try:
                known = cluster.partitions(topic)
            except WireError:
                continue
            parts = sorted(p for p in parts if p in known)
            if not parts:
                continue
            latest = cluster.list_offsets(topic, parts, LATEST)
            for t in times:
                found = cluster.list_offsets(topic, parts, t + 1)
                for p in parts:
                    end = found.get(p, -1)
                    out.setdefault((topic, p), []).append((latest[p] if end < 0 else end, t))
        return out
    finally:
        cluster.close()
