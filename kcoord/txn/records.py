"""__transaction_state records in Kafka's schemas (TransactionLogKey v0,
TransactionLogValue v0): each of key and value is an int16 version and a
non-flexible body.  A null value is a tombstone (the id expired)."""
from __future__ import annotations

import struct
from typing import NamedTuple

from ..protocol.errors import ProtocolError
from ..protocol.records import HEADER_SIZE, build_batch, encode_varint, seal_batch

# TransactionStatus (int8), Kafka's TransactionState ids
EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT = range(6)
STATE_NAMES = {EMPTY: "Empty", ONGOING: "Ongoing", PREPARE_COMMIT: "PrepareCommit",
               PREPARE_ABORT: "PrepareAbort", COMPLETE_COMMIT: "CompleteCommit",
               COMPLETE_ABORT: "CompleteAbort"}
ALL_STATE_NAMES = set(STATE_NAMES.values()) | {"Dead", "PrepareEpochFence"}

_H = struct.Struct(">h")
_I = struct.Struct(">i")
_HEAD = struct.Struct(">hqhib")  # version, producer id, epoch, timeout, status
_TAIL = struct.Struct(">qq")     # last update, start timestamp


class TxnValue(NamedTuple):
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: int
    # (topic, partition) pairs, sorted; None only for Empty (Kafka writes null then)
    partitions: tuple | None
    last_update_ms: int
    start_ms: int


class TxnRecord(NamedTuple):
    """One record of the log: which __transaction_state partition it goes
    to, its transactional id, and its value (None = tombstone)."""
    partition: int
    transactional_id: str
    value: TxnValue | None


def _string(s: str) -> bytes:
    b = s.encode()
    return _H.pack(len(b)) + b


# Caches of the parts of a record that repeat from one write of an id to
# the next (every transaction writes four records of the same id, and the
# middle two name the same partitions): the key by transactional id, the
# partitions section of the value by its (sorted) partitions.  Each is
# emptied when full, so neither outgrows CACHE_MAX entries.
CACHE_MAX = 4096
_KEYS: dict[str, bytes] = {}
_SECTIONS: dict[tuple, bytes] = {}
_NULL_SECTION = _I.pack(-1)


def encode_key(transactional_id: str) -> bytes:
    key = _KEYS.get(transactional_id)
    if key is None:
        if len(_KEYS) >= CACHE_MAX:
            _KEYS.clear()
        key = _KEYS[transactional_id] = b"\x00\x00" + _string(transactional_id)
    return key


def _partitions_section(partitions: tuple) -> bytes:
    """The value's topics array: partitions grouped by topic, topics in the
    order they first appear (the pairs are sorted, so each topic once)."""
    by_topic: dict[str, list[int]] = {}
    for topic, p in partitions:
        by_topic.setdefault(topic, []).append(p)
    out = [_I.pack(len(by_topic))]
    for topic, parts in by_topic.items():
        out.append(_string(topic) + _I.pack(len(parts)) + struct.pack(f">{len(parts)}i", *parts))
    return b"".join(out)


def encode_value(v: TxnValue | None) -> bytes | None:
    if v is None:
        return None
    partitions = v.partitions
    if partitions is None:
        section = _NULL_SECTION
    else:
        found = _SECTIONS.get(partitions)
        if found is None:
            if len(_SECTIONS) >= CACHE_MAX:
                _SECTIONS.clear()
            found = _SECTIONS[partitions] = _partitions_section(partitions)
        section = found
    return (_HEAD.pack(0, v.producer_id, v.producer_epoch, v.timeout_ms, v.state) + section
            + _TAIL.pack(v.last_update_ms, v.start_ms))


def one_record_batch(key: bytes, value: bytes | None, now: int) -> bytes:
    """The bytes build_batch gives [(key, value, [], now)] with base
    timestamp `now`, written directly: a record's attributes, timestamp
    delta and offset delta are all 0, it has no headers, and the header is
    one pack and one CRC (seal_batch)."""
    if value is None:
        body = b"\x00\x00\x00" + encode_varint(len(key)) + key + b"\x01\x00"
    else:
        body = (b"\x00\x00\x00" + encode_varint(len(key)) + key + encode_varint(len(value))
                + value + b"\x00")
    batch = bytearray(HEADER_SIZE)
    batch += encode_varint(len(body))
    batch += body
    seal_batch(batch, 0, 0, 1, now, now)
    return bytes(batch)


def partition_batches(records: list[TxnRecord], now: int) -> list[tuple[int, bytes]]:
    """The records as one batch per __transaction_state partition (in the
    order the partitions first appear), timestamped `now`: what the runtime
    appends for a handler's records (usually one record, one batch: then
    written by one_record_batch)."""
    if len(records) == 1:
        r = records[0]
        return [(r.partition, one_record_batch(encode_key(r.transactional_id),
                                               encode_value(r.value), now))]
    by_partition: dict[int, list] = {}
    for r in records:
        items = by_partition.get(r.partition)
        if items is None:
            items = by_partition[r.partition] = []
        items.append((encode_key(r.transactional_id), encode_value(r.value), [], now))
    return [(partition, build_batch(items, base_timestamp=now))
            for partition, items in by_partition.items()]


def decode_key(key: bytes) -> str | None:
    """The transactional id, or None for a key version kcoord does not know
    (Kafka skips those with a warning)."""
    try:
        version, = _H.unpack_from(key, 0)
        if version != 0:
            return None
        n, = _H.unpack_from(key, 2)
        if n < 0 or 4 + n != len(key):
            raise ProtocolError("bad TransactionLogKey")
        return bytes(key[4:4 + n]).decode()
    except (struct.error, UnicodeDecodeError) as exc:
        raise ProtocolError(f"bad TransactionLogKey: {exc}") from None


def decode_value(value: bytes | None) -> TxnValue | None:
    if value is None:
        return None
    try:
        version, pid, epoch, timeout, state = _HEAD.unpack_from(value, 0)
        if version not in (0, 1):
            raise ProtocolError(f"unknown TransactionLogValue version {version}")
        p = _HEAD.size
        if version == 1:
            raise ProtocolError("TransactionLogValue v1 (flexible) is not written by kcoord")
        count, = _I.unpack_from(value, p)
        p += 4
        parts = None
        if count >= 0:
            acc = []
            for _ in range(count):
                n, = _H.unpack_from(value, p)
                topic = bytes(value[p + 2:p + 2 + n]).decode()
                p += 2 + n
                k, = _I.unpack_from(value, p)
                p += 4
                acc += [(topic, i) for i in struct.unpack_from(f">{k}i", value, p)]
                p += 4 * k
            parts = tuple(sorted(acc))
        last, start = _TAIL.unpack_from(value, p)
        if p + _TAIL.size != len(value):
            raise ProtocolError("trailing bytes after TransactionLogValue")
        return TxnValue(pid, epoch, timeout, state, parts, last, start)
    except (struct.error, UnicodeDecodeError) as exc:
        raise ProtocolError(f"bad TransactionLogValue: {exc}") from None
