"""Durable whole-file rewrite for a partition's small checkpoint files.

Temp file, fsync, rename, fsync of the directory: a crash leaves the old
or the new contents, never a torn file.
"""
from __future__ import annotations

import os
from pathlib import Path


def write_checkpoint(partition_dir: Path, name: str, text: str) -> None:
    path = Path(partition_dir) / name
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fd = os.open(partition_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
