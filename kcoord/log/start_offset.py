"""A partition's log start offset checkpoint (DeleteRecords).

Kafka keeps every partition's log start offset in one
`log-start-offset-checkpoint` file per log dir; kcoord keeps one small file
in the partition's own directory, so it goes away with the partition.  It
is written before the new start is used (temp file, fsync, rename, fsync
of the directory): a crash leaves the old or the new offset, never a torn
one.  Segment deletion only ever follows a durable checkpoint.
"""
from __future__ import annotations

import os
from pathlib import Path

CHECKPOINT = "log-start-offset"


def read_start_offset(partition_dir: Path) -> int:
    path = Path(partition_dir) / CHECKPOINT
    try:
        return int(path.read_text().strip() or 0)
    except FileNotFoundError:
        return 0


def write_start_offset(partition_dir: Path, offset: int) -> None:
    path = Path(partition_dir) / CHECKPOINT
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as fh:
        fh.write(f"{offset}\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fd = os.open(partition_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
