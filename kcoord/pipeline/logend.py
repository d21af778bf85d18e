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
import socket
import struct
import time
from pathlib import Path

from kcoord.protocol.api import APIS, request_codec, response_codec
from kcoord.protocol.headers import decode_response_header, encode_request_header
from kcoord.protocol.records import HEADER_SIZE, LOG_OVERHEAD, MAGIC_V2

from .decode import OFFSETS_TOPIC, segment_files

CATALOGUE_FILE = "kcoord-topics.json"
_HEADER = struct.Struct(">qiibIhiqqqhii")
_MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD


def read_catalogue(data_dir) -> list[dict]:
    """[{name, id (hex), partitions}] from kcoord-topics.json; [] when absent."""
    path = Path(data_dir) / CATALOGUE_FILE
    try:
        doc = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return []
    return [t for t in doc.get("topics", []) if t.get("name") != OFFSETS_TOPIC]


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
        if entry.is_dir() and name and num.isdigit() and name != OFFSETS_TOPIC:
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
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            pos = 0
            while size - pos >= HEADER_SIZE:
                fh.seek(pos)
                h = _HEADER.unpack(fh.read(HEADER_SIZE))
                if h[1] < _MIN_BATCH_LENGTH or h[3] != MAGIC_V2 or pos + LOG_OVERHEAD + h[1] > size:
                    break
                end, ts = h[0] + h[6] + 1, h[8]
                if out and resolution_ms > 0 and ts // resolution_ms == out[-1][1] // resolution_ms \
                        and ts >= out[-1][1]:
                    out[-1] = (end, ts)
                else:
                    out.append((end, ts))
                pos += LOG_OVERHEAD + h[1]
    return out or [(0, -1)]


# ------------------------------------------------------------ ListOffsets

_SIZE = struct.Struct(">i")


class _Conn:
    def __init__(self, bootstrap: str, timeout: float = 30.0) -> None:
        host, _, port = bootstrap.rpartition(":")
        self.sock = socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout)
        self.corr = 0

    def call(self, api_key: int, version: int, body: dict) -> dict:
        self.corr += 1
        flexible = APIS[api_key].request.is_flexible(version)
        header = encode_request_header(api_key, version, self.corr, "kcoord-pipeline", flexible)
        payload = header + bytes(request_codec(api_key, version)[0](body))
        self.sock.sendall(_SIZE.pack(len(payload)) + payload)
        size, = _SIZE.unpack(self._recv(4))
        frame = self._recv(size)
        corr, pos = decode_response_header(frame, flexible)
        if corr != self.corr:
            raise ConnectionError(f"correlation id {corr}, expected {self.corr}")
        return response_codec(api_key, version)[1](frame, pos)[0]

    def _recv(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("connection closed")
            out += chunk
        return bytes(out)

    def close(self) -> None:
        self.sock.close()


def server_log_ends(bootstrap: str, topics: list[str] | None = None,
                    timeout: float = 30.0) -> list[tuple[str, int, int, int]]:
    """[(topic, partition, log end offset, now ms)] from a running kcoord (or Kafka)."""
    conn = _Conn(bootstrap, timeout)
    try:
        meta = conn.call(3, 9, {"topics": None if topics is None else
                                [{"name": t} for t in topics],
                                "allow_auto_topic_creation": False,
                                "include_topic_authorized_operations": False})
        request = []
        for t in meta["topics"]:
            if t["error_code"] or t["is_internal"] or t["name"] == OFFSETS_TOPIC:
                continue
            request.append({"name": t["name"], "partitions": [
                {"partition_index": p["partition_index"], "current_leader_epoch": -1,
                 "timestamp": -1} for p in t["partitions"]]})
        now = int(time.time() * 1000)
        if not request:
            return []
        resp = conn.call(2, 6, {"replica_id": -1, "isolation_level": 0, "topics": request})
        out = []
        for t in resp["topics"]:
            for p in t["partitions"]:
                if p["error_code"] == 0:
                    out.append((t["name"], p["partition_index"], p["offset"], now))
        return sorted(out)
    finally:
        conn.close()
