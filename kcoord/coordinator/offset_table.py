"""A shard's committed offsets (OffsetStore.by_group) as compact columns, and
back: the bulk of a coordinator snapshot (snapshot.py), which pickling
object by object made the cost of every snapshot load and write.

Layout (little-endian): magic and version, the counts of strings, groups
and entries, then columns: each string's UTF-8 length and the strings
(group ids, topics, metadata; each once), per group its id and entry
count, per entry its topic, partition, offset, leader epoch, metadata,
commit timestamp and expire timestamp (-1: none).  Entries are in the
table's own order, groups in theirs, so the decoded dicts iterate as the
saved ones.  The snapshot file's CRC covers it; a table with a value no
column holds (an int beyond its width, a negative expire timestamp) is
refused by encode (OverflowError, ValueError) for the caller to pickle.
"""
from __future__ import annotations

import struct
import sys
from array import array
from itertools import repeat

from .offsets import OffsetValue

MAGIC = b"KCOT\x01"
_COUNTS = struct.Struct("<III")
_NO_EXPIRE = -1
# (array code, column) in the order written
_COLUMNS = (("I", "topic"), ("i", "partition"), ("q", "offset"), ("i", "leader_epoch"),
            ("I", "metadata"), ("q", "commit_timestamp"), ("q", "expire_timestamp"))
_tuple_new = tuple.__new__


def _column_bytes(code: str, values) -> bytes:
    col = array(code, values)
    if sys.byteorder == "big":
        col.byteswap()
    return col.tobytes()


def encode_offsets(by_group: dict) -> bytes:
    """by_group (group -> {(topic, partition): OffsetValue}) as bytes."""
    index: dict[str, int] = {}
    intern = index.setdefault
    groups, counts = [], []
    cols: dict[str, list] = {name: [] for _, name in _COLUMNS}
    topic, partition, offset, epoch = (cols["topic"], cols["partition"], cols["offset"],
                                       cols["leader_epoch"])
    metadata, committed, expire = cols["metadata"], cols["commit_timestamp"], \
        cols["expire_timestamp"]
    for group, table in by_group.items():
        groups.append(intern(group, len(index)))
        counts.append(len(table))
        for (t, p), v in table.items():
            topic.append(intern(t, len(index)))
            partition.append(p)
            offset.append(v[0])
            epoch.append(v[1])
            metadata.append(intern(v[2], len(index)))
            committed.append(v[3])
            if v[4] is None:
                expire.append(_NO_EXPIRE)
            elif v[4] < 0:
                raise ValueError(f"expire timestamp {v[4]} has no column value")
            else:
                expire.append(v[4])
    encoded = [s.encode("utf-8", "surrogatepass") for s in index]
    parts = [MAGIC, _COUNTS.pack(len(encoded), len(groups), len(topic)),
             _column_bytes("I", map(len, encoded)), b"".join(encoded),
             _column_bytes("I", groups), _column_bytes("I", counts)]
    parts += [_column_bytes(code, cols[name]) for code, name in _COLUMNS]
    return b"".join(parts)


class _Reader:
    def __init__(self, data) -> None:
        self.data = memoryview(data)
        self.pos = 0

    def take(self, n: int) -> memoryview:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError("offset table truncated")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def column(self, code: str, n: int) -> array:
        col = array(code)
        col.frombytes(self.take(n * col.itemsize))
        if sys.byteorder == "big":
            col.byteswap()
        return col


def decode_offsets(data) -> tuple[dict, int]:
    """-> (by_group, bytes read) from the start of data; ValueError (or
    IndexError) for a table that is not one."""
    r = _Reader(data)
    if bytes(r.take(len(MAGIC))) != MAGIC:
        raise ValueError("not an offset table of this version")
    nstrings, ngroups, n = _COUNTS.unpack(r.take(_COUNTS.size))
    lengths = r.column("I", nstrings)
    blob = bytes(r.take(sum(lengths)))
    strings, at = [], 0
    for size in lengths:
        strings.append(blob[at:at + size].decode("utf-8", "surrogatepass"))
        at += size
    group_ids, counts = r.column("I", ngroups), r.column("I", ngroups)
    if sum(counts) != n:
        raise ValueError("offset table counts disagree")
    cols = {name: r.column(code, n) for code, name in _COLUMNS}
    name = strings.__getitem__
    keys = list(zip(map(name, cols["topic"]), cols["partition"]))
    expire = cols["expire_timestamp"]
    expires = repeat(None) if not n or max(expire) == _NO_EXPIRE else \
        [None if e == _NO_EXPIRE else e for e in expire]
    values = list(map(_tuple_new, repeat(OffsetValue), zip(
        cols["offset"], cols["leader_epoch"], map(name, cols["metadata"]),
        cols["commit_timestamp"], expires)))
    by_group: dict = {}
    at = 0
    for g, count in zip(group_ids, counts):
        by_group[strings[g]] = dict(zip(keys[at:at + count], values[at:at + count]))
        at += count
    return by_group, r.pos
