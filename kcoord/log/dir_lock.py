"""An exclusive lock on a data dir (Kafka's `<log.dir>/.lock`): one process
at a time opens its logs.  An advisory flock on `<data-dir>/.lock`, held for
the life of the process (the kernel drops it when the process dies, also
on kill -9); the file holds the holder's pid, for the error message."""
from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_FILE = ".lock"


class DataDirLocked(Exception):
    """Another process holds the data dir; the message is one line."""


class DataDirLock:
    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, data_dir: Path) -> "DataDirLock":
        path = Path(data_dir) / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            finally:
                os.close(fd)
            raise DataDirLocked(f"data dir {Path(data_dir).resolve()} is in use by another "
                                f"kcoord process (pid {holder}; lock {path})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(path, fd)

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
