"""The cluster id: Kafka's random base64 UUID, made when a data dir (or a
cluster's etcd prefix) is first formatted and kept from then on.

A single node keeps it in `<data-dir>/meta.properties` (Kafka's file and
key, `cluster.id`); a cluster node takes the one under its etcd prefix
(`<prefix>/cluster_id`, created by the first node to start) and records it
in its data dir the same way.  A data dir formatted for another cluster is
refused, as Kafka refuses it.
"""
from __future__ import annotations

import base64
import os
import uuid
from pathlib import Path

META = "meta.properties"


def new_cluster_id() -> str:
    """Kafka's Uuid.randomUuid().toString(): 16 random bytes, URL-safe base64
    without padding, never all zeros and never starting with '-'."""
    while True:
        raw = uuid.uuid4().bytes
        text = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        if raw != bytes(16) and not text.startswith("-"):
            return text


def read_meta(data_dir: Path) -> dict[str, str]:
    path = Path(data_dir) / META
    out: dict[str, str] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep and not key.lstrip().startswith("#"):
                out[key.strip()] = value.strip()
    return out


def write_meta(data_dir: Path, values: dict[str, str]) -> None:
    path = Path(data_dir) / META
    tmp = path.with_name(META + ".tmp")
    with open(tmp, "w") as fh:
        fh.write("#kcoord: written when this data dir was formatted\n")
        fh.writelines(f"{k}={v}\n" for k, v in values.items())
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


class InconsistentClusterId(ValueError):
    """A data dir formatted for another cluster (Kafka's
    InconsistentClusterIdException, with its wording)."""

    def __init__(self, data_dir: Path, expected: str, stored: str) -> None:
        super().__init__(f"Invalid cluster.id in: {Path(data_dir) / META}. Expected "
                         f"{expected}, but read {stored}")


def check_or_record(data_dir: Path, cluster_id: str, node_id: int) -> None:
    """Record cluster_id in a data dir not yet formatted; refuse one formatted
    for another cluster."""
    stored = read_meta(data_dir).get("cluster.id")
    if stored is None:
        write_meta(data_dir, {"cluster.id": cluster_id, "node.id": str(node_id), "version": "1"})
    elif stored != cluster_id:
        raise InconsistentClusterId(data_dir, cluster_id, stored)


def local_cluster_id(data_dir: Path, configured: str | None, node_id: int) -> str:
    """A single node's id: the data dir's, else the configured one (cluster.id
    set), else a new one, recorded on first use."""
    stored = read_meta(data_dir).get("cluster.id")
    if stored is not None and configured and configured != stored:
        raise InconsistentClusterId(data_dir, configured, stored)
    cluster_id = stored or configured or new_cluster_id()
    check_or_record(data_dir, cluster_id, node_id)
    return cluster_id
