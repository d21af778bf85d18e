"""kcoord's security metadata log: SCRAM credentials and ACLs, durable.

One append-only file in the data dir (`__kcoord_security/metadata.log`),
one record per line: a CRC-32 of the JSON, a space, the JSON.  Writes are
appended and fsynced before the change is applied or answered; loading
replays every record in order, so the state after a restart is the state
before it.  A torn last line (a crash mid-append) fails its CRC and is cut
off; a bad line before the end is corruption and stops the start.
Credentials are stored salted (salt, StoredKey, ServerKey, iterations),
never as passwords.
"""
from __future__ import annotations

import json
import os
import zlib
from pathlib import Path

DIR = "__kcoord_security"
FILE = "metadata.log"


class MetadataLogError(Exception):
    pass


def _line(record: dict) -> bytes:
    body = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
    return b"%08x %s\n" % (zlib.crc32(body), body)


class MetadataLog:
    def __init__(self, data_dir: Path) -> None:
        self.dir = Path(data_dir) / DIR
        self.path = self.dir / FILE

    def load(self) -> list[dict]:
        if not self.path.exists():
            return []
        data = self.path.read_bytes()
        records = []
        good = 0
        lines = data.split(b"\n")
        for i, raw in enumerate(lines):
            if not raw:
                if i != len(lines) - 1:
                    raise MetadataLogError(f"{self.path}: empty line {i + 1}")
                continue
            crc, _, body = raw.partition(b" ")
            ok = False
            try:
                ok = int(crc, 16) == zlib.crc32(body)
                record = json.loads(body) if ok else None
            except ValueError:
                ok = False
            last = i == len(lines) - 1 or (i == len(lines) - 2 and lines[-1] == b"")
            if not ok:
                if last:
                    break  # torn tail from a crash mid-append
                raise MetadataLogError(f"{self.path}: line {i + 1} is corrupt")
            records.append(record)
            good += len(raw) + 1
        if good < len(data):
            with open(self.path, "r+b") as fh:
                fh.truncate(good)
                fh.flush()
                os.fsync(fh.fileno())
        return records

    def append(self, records: list[dict]) -> None:
        """Append and fsync (blocking: call it from a worker thread when serving)."""
        fresh = not self.path.exists()
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.path, "ab") as fh:
            fh.write(b"".join(_line(r) for r in records))
            fh.flush()
            os.fsync(fh.fileno())
        if fresh:
            fd = os.open(self.dir, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
