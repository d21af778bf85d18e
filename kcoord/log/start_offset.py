"""A partition's log start offset checkpoint (DeleteRecords).

Kafka keeps every partition's log start offset in one
`log-start-offset-checkpoint` file per log dir; kcoord keeps one small file
in the partition's own directory, so it goes away with the partition.  It
is written before the new start is used (temp file, fsync, rename, fsync
of the directory): a crash leaves the old or the new offset, never a torn
one.  Segment deletion only ever follows a durable checkpoint.
"""
from __future__ import annotations

from pathlib import Path

from .checkpoint_file import write_checkpoint

CHECKPOINT = "log-start-offset"


def read_start_offset(partition_dir: Path) -> int:
    path = Path(partition_dir) / CHECKPOINT
    try:
        return int(path.read_text().strip() or 0)
    except FileNotFoundError:
        return 0


def write_start_offset(partition_dir: Path, offset: int) -> None:
    write_checkpoint(partition_dir, CHECKPOINT, f"{offset}\n")
