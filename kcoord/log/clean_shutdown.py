"""The clean-shutdown marker of a data dir (Kafka's `.kafka_cleanshutdown`).

Written after a clean stop has flushed and closed every log of the data
dir; taken (removed, durably) at start before any log is opened, so before
anything can be appended.  A start that finds it may trust every active
segment as it trusts a sealed one (no CRC scan of its tail); a start
without it (a crash, a kill, a failed close) recovers every active segment.
"""
from __future__ import annotations

import os
from pathlib import Path

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def take_clean_shutdown_marker(data_dir: Path) -> bool:
    """Remove the marker; True if it was there.  The removal is fsynced
    before returning, so a crash after this call is never mistaken for a
    clean shutdown."""
    marker = Path(data_dir) / CLEAN_SHUTDOWN_FILE
    try:
        marker.unlink()
    except FileNotFoundError:
        return False
    _fsync_dir(marker.parent)
    return True


def write_clean_shutdown_marker(data_dir: Path) -> None:
    """Call only once every log of data_dir is flushed and closed."""
    marker = Path(data_dir) / CLEAN_SHUTDOWN_FILE
    fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    _fsync_dir(marker.parent)
