"""Kafka record batches, message format v2 (magic 2): build, decode, validate, patch.

Batch layout (big-endian), offsets from the start of the batch:

     0 baseOffset int64          12 partitionLeaderEpoch int32   16 magic int8
    17 crc uint32 (CRC-32C over byte 21 to the end)               21 attributes int16
    23 lastOffsetDelta int32     27 baseTimestamp int64          35 maxTimestamp int64
    43 producerId int64          51 producerEpoch int16          53 baseSequence int32
    57 recordsCount int32        61 records (compressed as a whole if attributes & 7)

Each record: length varint, attributes int8, timestampDelta varlong, offsetDelta
varint, key (varint length, -1 = null), value (same), header count varint, then
per header a key (varint length + UTF-8) and a value (varint length, -1 = null).
Varints are zigzag-encoded base-128, as in protobuf's sint32/sint64.

The CRC starts at attributes on purpose: the broker rewrites baseOffset and
partitionLeaderEpoch on every append without touching the CRC.
"""
import re
import struct
from typing import List, NamedTuple, Optional, Tuple

import crc32c as _crc32c

try:
    from mypy_extensions import i64
except ImportError:  # interpreted without the compiler installed: a plain int
    i64 = int  # type: ignore[misc]

from kcoord.protocol.compression import compress, decompress
from kcoord.protocol.errors import CorruptRecordError

LOG_OVERHEAD = 12  # baseOffset int64 + batchLength int32
MAGIC_V2 = 2

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_LOG_APPEND = 0x08
TRANSACTIONAL = 0x10
CONTROL = 0x20

# The v2 batch header, the one layout: (BatchHeader field, struct code) in
# order.  The header Struct, each field's offset and any partial reader
# (header_struct) derive from it.
BATCH_HEADER_FIELDS = (
    ("base_offset", "q"), ("batch_length", "i"), ("partition_leader_epoch", "i"),
    ("magic", "b"), ("crc", "I"), ("attributes", "h"), ("last_offset_delta", "i"),
    ("base_timestamp", "q"), ("max_timestamp", "q"), ("producer_id", "q"),
    ("producer_epoch", "h"), ("base_sequence", "i"), ("records_count", "i"),
)
BATCH_HEADER = struct.Struct(">" + "".join(code for _, code in BATCH_HEADER_FIELDS))
HEADER_SIZE = BATCH_HEADER.size


def _field_offsets() -> dict:
    out, at = {}, 0
    for name, code in BATCH_HEADER_FIELDS:
        out[name] = at
        at += struct.calcsize(">" + code)
    return out


FIELD_OFFSET = _field_offsets()
PARTITION_LEADER_EPOCH_OFFSET = FIELD_OFFSET["partition_leader_epoch"]
MAGIC_OFFSET = FIELD_OFFSET["magic"]
CRC_OFFSET = FIELD_OFFSET["crc"]
# The CRC covers the batch from attributes on (see the module docstring).
CRC_START = ATTRIBUTES_OFFSET = FIELD_OFFSET["attributes"]
MAX_TIMESTAMP_OFFSET = FIELD_OFFSET["max_timestamp"]
RECORDS_OFFSET = HEADER_SIZE
assert (HEADER_SIZE, PARTITION_LEADER_EPOCH_OFFSET, MAGIC_OFFSET, CRC_OFFSET, CRC_START,
        MAX_TIMESTAMP_OFFSET) == (61, 12, 16, 17, 21, 35), "the layout in the docstring"
# batchLength counts from partitionLeaderEpoch, so a batch with no records has this length.
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD


def header_struct(*names: str) -> struct.Struct:
    """A Struct reading only the named header fields (in layout order),
    skipping the others: a walk that needs five fields unpacks five."""
    unknown = set(names) - set(FIELD_OFFSET)
    if unknown:
        raise ValueError(f"not batch header fields: {sorted(unknown)}")
    fmt, skip = ">", 0
    for name, code in BATCH_HEADER_FIELDS:
        if name in names:
            fmt += (f"{skip}x" if skip else "") + code
            skip = 0
        else:
            skip += struct.calcsize(">" + code)
    return struct.Struct(fmt)


_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")

_crc = _crc32c.crc32c
_tuple_new = tuple.__new__


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL)

    @property
    def timestamp_type_log_append(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_LOG_APPEND)

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, LOG_OVERHEAD included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1


assert BatchHeader._fields == tuple(name for name, _ in BATCH_HEADER_FIELDS)


class Record(NamedTuple):
    offset: int
    timestamp: int
    key: Optional[bytes]
    value: Optional[bytes]
    headers: List[Tuple[str, Optional[bytes]]]


# ------------------------------------------------------------------ header


def read_batch_header(buf, pos: int = 0) -> BatchHeader:
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(f"record batch header truncated at {pos}")
    h = _tuple_new(BatchHeader, BATCH_HEADER.unpack_from(buf, pos))
    if h[3] != MAGIC_V2:
        raise CorruptRecordError(f"unsupported record batch magic {h[3]} at {pos}")
    if h[1] < MIN_BATCH_LENGTH:
        raise CorruptRecordError(f"record batch length {h[1]} too small at {pos}")
    return h


def batch_crc_ok(buf, pos: int, header: BatchHeader) -> bool:
    end = pos + LOG_OVERHEAD + header.batch_length
    if len(buf) < end:
        return False
    # memoryview: no copy of the (possibly large) batch just to checksum it.
    return _crc(memoryview(buf)[pos + CRC_START:end]) == header.crc


def iter_batches(buf, pos: int = 0):
    """Yield (pos, header) for each whole batch; stop quietly at a partial tail.

    A partial tail is what a crash mid-write or a size-limited fetch leaves,
    so it is not an error; a header that cannot be right is.
    """
    n = len(buf)
    unpack_len = _INT32.unpack_from
    while n - pos >= LOG_OVERHEAD:
        (length,) = unpack_len(buf, pos + 8)
        if length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"record batch length {length} too small at {pos}")
        if n - pos - LOG_OVERHEAD < length:
            return
        yield pos, read_batch_header(buf, pos)
        pos += LOG_OVERHEAD + length


def validate_batch(buf, pos: int = 0) -> BatchHeader:
    """Cheap checks for the Produce path: header, CRC, codec, record count. No decompression."""
    h = read_batch_header(buf, pos)
    if len(buf) - pos - LOG_OVERHEAD < h.batch_length:
        raise CorruptRecordError(f"record batch truncated at {pos}")
    if not batch_crc_ok(buf, pos, h):
        raise CorruptRecordError(f"record batch CRC mismatch at {pos}")
    if h.attributes & COMPRESSION_MASK > 4:
        raise CorruptRecordError(f"unknown compression codec {h.attributes & COMPRESSION_MASK}")
    count = h.records_count
    if count < 0 or (count > 0 and h.last_offset_delta != count - 1):
        raise CorruptRecordError(
            f"record count {count} inconsistent with last offset delta {h.last_offset_delta}")
    return h


# ----------------------------------------------------------- in-place edits


def assign_offsets(batch: bytearray, pos: int, base_offset: int) -> None:
    _INT64.pack_into(batch, pos, base_offset)


def set_partition_leader_epoch(batch: bytearray, pos: int, epoch: int) -> None:
    _INT32.pack_into(batch, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_log_append_time(batch: bytearray, pos: int, ts: int) -> None:
    """Mark the batch LogAppendTime with time `ts`, as Kafka's broker does in place.

    Like Kafka (DefaultRecordBatch.setMaxTimestamp), only the type bit and
    maxTimestamp change: readers give every record maxTimestamp under
    LogAppendTime, and baseTimestamp keeps the producer's create times.
    """
    (attrs,) = _INT16.unpack_from(batch, pos + ATTRIBUTES_OFFSET)
    _INT16.pack_into(batch, pos + ATTRIBUTES_OFFSET, attrs | TIMESTAMP_TYPE_LOG_APPEND)
    _INT64.pack_into(batch, pos + MAX_TIMESTAMP_OFFSET, ts)
    (length,) = _INT32.unpack_from(batch, pos + 8)
    end = pos + LOG_OVERHEAD + length
    _UINT32.pack_into(batch, pos + CRC_OFFSET, _crc(memoryview(batch)[pos + CRC_START:end]))


def records_timestamp_range(buf, pos: int, h: BatchHeader) -> tuple[int, int]:
    """-> (min, max) of the record timestamps of the batch at buf[pos:]
    (header h), (-1, -1) for a batch with no records: Kafka's LogValidator
    checks each record's timestamp and computes the max on every append.
    Only the length prefix and the timestamp delta of each record are read
    (compressed batches are decompressed first); a walk that does not end
    exactly at the end of the records is corruption."""
    data, at, end = records_section(buf, pos, h, verify_crc=False)
    if data.__class__ is not bytes:
        # a Produce's records arrive as a view of the request frame: one copy
        # of the section lets the walk below read native bytes (compiled, the
        # view's generic indexing costs more than this copy; a compiled
        # `bytes` parameter takes no bytearray)
        data, at, end = bytes(memoryview(data)[at:end]), 0, end - at
    low64, high64, after = _delta_range(data, at, end, h[12])
    if after == end:
        return (-1, -1) if h[12] <= 0 else (h[7] + low64, h[7] + high64)
    # a varint longer than two bytes, or a malformed record: the general walk
    # (which also names what is wrong)
    return _delta_range_general(data, at, end, h)


def _delta_range(data: bytes, at: i64, end: i64, count: i64) -> tuple[i64, i64, i64]:
    """The fast walk of records_timestamp_range: -> (min delta, max delta,
    position after the last record), or position -1 as soon as a record's
    length or timestamp delta takes more than two bytes or a record does not
    fit (the general walk then decides).  Typed so that compiled, every byte
    is a native read."""
    low: i64 = 0
    high: i64 = 0
    i: i64 = 0
    while i < count:
        if at + 3 > end:
            return 0, 0, -1
        z: i64 = data[at]
        if z < 0x80:
            start = at + 1
        else:
            c: i64 = data[at + 1]
            if c >= 0x80:
                return 0, 0, -1
            z = (z & 0x7F) | (c << 7)
            start = at + 2
        length = (z >> 1) ^ -(z & 1)
        if length < 3 or start + length > end:
            return 0, 0, -1
        t: i64 = data[start + 1]  # after the record's attributes byte
        if t >= 0x80:
            d: i64 = data[start + 2]
            if d >= 0x80:
                return 0, 0, -1
            t = (t & 0x7F) | (d << 7)
        delta = (t >> 1) ^ -(t & 1)
        if i == 0:
            low = high = delta
        elif delta > high:
            high = delta
        elif delta < low:
            low = delta
        at = start + length
        i += 1
    return low, high, at


def _delta_range_general(data, at: int, end: int, h: BatchHeader) -> tuple[int, int]:
    """records_timestamp_range's walk for any record (varints of any length)."""
    zz1 = ZIGZAG1
    slow = _read_varint_slow
    low = high = None
    try:
        for _ in range(h[12]):
            b = data[at]
            if b < 0x80:  # varints inline: one and two bytes are the common cases
                start, length = at + 1, zz1[b]
            elif (c := data[at + 1]) < 0x80:
                z = (b & 0x7F) | (c << 7)
                start, length = at + 2, (z >> 1) ^ -(z & 1)
            else:
                length, start = slow(data, at, 32)
            b = data[start + 1]  # after the record's attributes byte
            if b < 0x80:
                delta = zz1[b]
            elif (c := data[start + 2]) < 0x80:
                z = (b & 0x7F) | (c << 7)
                delta = (z >> 1) ^ -(z & 1)
            else:
                delta = slow(data, start + 1, 64)[0]
            if high is None:
                low = high = delta
            elif delta > high:
                high = delta
            elif delta < low:
                low = delta
            if length < 3:
                raise CorruptRecordError(f"record length {length} out of range")
            at = start + length
    except IndexError:
        raise CorruptRecordError("record truncated") from None
    if at != end:
        raise CorruptRecordError(f"records do not fill the batch ({end - at} bytes differ)")
    if high is None or low is None:
        return -1, -1
    return h[7] + low, h[7] + high


def rewrite_max_timestamp(batch: bytearray, pos: int, h: BatchHeader, ts: int) -> None:
    """Set the batch's maxTimestamp to ts and reseal its CRC, in place: Kafka's
    DefaultRecordBatch.setMaxTimestamp, which the validator calls when the
    producer's header disagrees with its records."""
    _INT64.pack_into(batch, pos + MAX_TIMESTAMP_OFFSET, ts)
    _UINT32.pack_into(batch, pos + CRC_OFFSET,
                      _crc(memoryview(batch)[pos + CRC_START:pos + LOG_OVERHEAD + h[1]]))


# ----------------------------------------------------------------- varints

# Encoded bytes for every zigzag value that fits in one byte (-64..63): lengths,
# offset deltas, null markers and header counts nearly always land here.
_VARINT_1 = [bytes((z,)) for z in range(128)]


def encode_varint(n: int) -> bytes:
    """A signed value as a zigzag varint (record fields of batch format v2)."""
    z = (n << 1) ^ (n >> 63)
    if z < 0x80:
        return _VARINT_1[z]
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _read_varint_slow(data, pos: int, bits: int):
    """Varint of any length at pos -> (value, new pos); bits is 32 (varint) or 64 (varlong)."""
    z = 0
    shift = 0
    while True:
        b = data[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > bits:  # 5 bytes for a varint, 10 for a varlong, as Kafka allows
            raise CorruptRecordError("varint too long")
    # The last byte can carry more bits than the type holds; no correct
    # writer sets them, so treat them as corruption.
    if z >> bits:
        raise CorruptRecordError("varint overflows its type")
    return (z >> 1) ^ -(z & 1), pos


# Zigzag decoding of every one-byte varint, precomputed (the one table: the
# loader and the pipeline decoder read one-byte varints through it too).
ZIGZAG1 = tuple((z >> 1) ^ -(z & 1) for z in range(128))


def read_varint(data, pos: int) -> tuple[int, int]:
    """A zigzag varint of any length at pos -> (value, position after it);
    CorruptRecordError if it is too long, IndexError if the data ends first."""
    return _read_varint_slow(data, pos, 32)


def read_varlong(data, pos: int) -> tuple[int, int]:
    """read_varint for a 64-bit field (a record's timestamp delta): up to 10 bytes."""
    return _read_varint_slow(data, pos, 64)


# ------------------------------------------------------------------- build


def build_batch(
    records,
    *,
    base_offset: int = 0,
    compression: int = 0,
    base_timestamp: Optional[int] = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    partition_leader_epoch: int = -1,
    timestamp_type_log_append: bool = False,
) -> bytes:
    """Encode (key, value, headers, timestamp) tuples as one v2 batch, offset deltas 0..n-1.

    A record timestamp of None means base_timestamp; a base_timestamp of None
    means the first record's timestamp (or 0). Header keys are str, values
    bytes or None.
    """
    if base_timestamp is None:
        base_timestamp = 0
        if records and records[0][3] is not None:
            base_timestamp = records[0][3]
    max_ts = None
    body = bytearray()
    rec = bytearray()  # one record's bytes after its length prefix, reused
    varint = encode_varint
    v1 = _VARINT_1
    # Small non-negative n encodes as the single byte 2n: that covers most
    # lengths and offset deltas without a function call.
    for delta, (key, value, headers, ts) in enumerate(records):
        if ts is None:
            ts = base_timestamp
        if max_ts is None or ts > max_ts:
            max_ts = ts
        rec.clear()
        rec.append(0)  # record attributes: unused
        d = ts - base_timestamp
        rec += v1[d << 1] if 0 <= d < 64 else varint(d)
        rec += v1[delta << 1] if delta < 64 else varint(delta)
        if key is None:
            rec.append(1)  # zigzag(-1): null
        else:
            n = len(key)
            rec += v1[n << 1] if n < 64 else varint(n)
            rec += key
        if value is None:
            rec.append(1)
        else:
            n = len(value)
            rec += v1[n << 1] if n < 64 else varint(n)
            rec += value
        if headers:
            rec += varint(len(headers))
            for hk, hv in headers:
                hk = hk.encode("utf-8")
                rec += varint(len(hk))
                rec += hk
                if hv is None:
                    rec.append(1)
                else:
                    rec += varint(len(hv))
                    rec += hv
        else:
            rec.append(0)
        n = len(rec)
        body += v1[n << 1] if n < 64 else varint(n)
        body += rec
    count = len(records)
    if max_ts is None:  # empty batch: Kafka writes the same time in both fields
        max_ts = base_timestamp

    payload = compress(compression, body) if compression else body
    attributes = compression & COMPRESSION_MASK
    if timestamp_type_log_append:
        attributes |= TIMESTAMP_TYPE_LOG_APPEND
    if transactional:
        attributes |= TRANSACTIONAL
    if control:
        attributes |= CONTROL

    out = bytearray(HEADER_SIZE)
    out += payload
    seal_batch(out, base_offset, attributes, count, base_timestamp, max_ts,
               partition_leader_epoch, producer_id, producer_epoch, base_sequence)
    return bytes(out)


def seal_batch(buf: bytearray, base_offset: int, attributes: int, count: int, base_ts: int,
               max_ts: int, partition_leader_epoch: int = -1, producer_id: int = -1,
               producer_epoch: int = -1, base_sequence: int = -1) -> None:
    """Write the v2 header and its CRC into the first HEADER_SIZE bytes of
    buf, whose rest is the batch's (possibly compressed) records."""
    BATCH_HEADER.pack_into(
        buf, 0,
        base_offset, len(buf) - LOG_OVERHEAD, partition_leader_epoch, MAGIC_V2, 0,
        attributes, max(count - 1, 0), base_ts, max_ts,
        producer_id, producer_epoch, base_sequence, count,
    )
    _UINT32.pack_into(buf, CRC_OFFSET, _crc(memoryview(buf)[CRC_START:]))


# ------------------------------------------------------------------ decode


def decode_batch(buf, pos: int = 0, *, verify_crc: bool = True):
    """-> (BatchHeader, [Record]); CorruptRecordError on anything malformed."""
    h = read_batch_header(buf, pos)
    data, start, end = records_section(buf, pos, h, verify_crc=verify_crc)
    if data.__class__ is not bytes:
        # bytes, not a memoryview: indexing and slicing bytes is the fastest
        # way to walk varints and yields the key/value objects directly.
        data = bytes(memoryview(data)[start:end])
        start, end = 0, len(data)
    base_ts = h[8] if h[5] & TIMESTAMP_TYPE_LOG_APPEND else h[7]
    return h, read_records(data, h[12], h[0], base_ts, h[5] & TIMESTAMP_TYPE_LOG_APPEND,
                           start, end)


def read_records(data, count: int, base_offset: int = 0, base_ts: int = 0,
                 log_append: int = 0, pos: int = 0, end: int | None = None) -> list:
    """The one walk of an uncompressed records section: data[pos:end] (end
    None: the end of data) holding `count` records -> [Record], each with
    offset base_offset + offsetDelta and timestamp base_ts + timestampDelta
    (base_ts for every record when log_append is set: under LogAppendTime
    every record's timestamp is the batch's maxTimestamp).  With the bases
    left at 0 a Record carries the raw deltas.  Works in place on any
    indexable buffer (keys and values are slices of its type); bytes is
    the fastest.  CorruptRecordError for anything malformed, including a
    record length prefix that disagrees with its fields and bytes left over.
    read_record_spans is the same walk giving positions instead of copies.
    """
    dlen = len(data) if end is None else end
    # Every record takes at least 7 bytes; reject absurd counts before looping.
    if count < 0 or count * 7 > dlen - pos:
        raise CorruptRecordError(f"record count {count} impossible for {dlen - pos} bytes")
    zz1 = ZIGZAG1
    slow = _read_varint_slow
    new = _tuple_new
    rec_cls = Record
    out: list[Record] = []
    append = out.append
    # Varints are read inline: one byte is the common case (small lengths and
    # deltas), two bytes the next (values up to 8 KB, deltas up to 8191);
    # only longer ones pay for a function call.
    try:
        for _ in range(count):
            b = data[pos]
            if b < 0x80:
                length = zz1[b]
                pos += 1
            elif (c := data[pos + 1]) < 0x80:
                z = (b & 0x7F) | (c << 7)
                length = (z >> 1) ^ -(z & 1)
                pos += 2
            else:
                length, pos = slow(data, pos, 32)
            rec_end = pos + length
            if length < 0 or rec_end > dlen:
                raise CorruptRecordError(f"record length {length} out of range")
            pos += 1  # record attributes: unused in v2

            b = data[pos]
            if b < 0x80:
                ts_delta = zz1[b]
                pos += 1
            elif (c := data[pos + 1]) < 0x80:
                z = (b & 0x7F) | (c << 7)
                ts_delta = (z >> 1) ^ -(z & 1)
                pos += 2
            else:
                ts_delta, pos = slow(data, pos, 64)

            b = data[pos]
            if b < 0x80:
                off_delta = zz1[b]
                pos += 1
            elif (c := data[pos + 1]) < 0x80:
                z = (b & 0x7F) | (c << 7)
                off_delta = (z >> 1) ^ -(z & 1)
                pos += 2
            else:
                off_delta, pos = slow(data, pos, 32)

            b = data[pos]
            if b < 0x80:
                n = zz1[b]
                pos += 1
            elif (c := data[pos + 1]) < 0x80:
                z = (b & 0x7F) | (c << 7)
                n = (z >> 1) ^ -(z & 1)
                pos += 2
            else:
                n, pos = slow(data, pos, 32)
            if n < 0:
                if n != -1:
                    raise CorruptRecordError(f"record key length {n}")
                key = None
            else:
                if pos + n > rec_end:
                    raise CorruptRecordError("record key overruns the record")
                key = data[pos:pos + n]
                pos += n

            b = data[pos]
            if b < 0x80:
                n = zz1[b]
                pos += 1
            elif (c := data[pos + 1]) < 0x80:
                z = (b & 0x7F) | (c << 7)
                n = (z >> 1) ^ -(z & 1)
                pos += 2
            else:
                n, pos = slow(data, pos, 32)
            if n < 0:
                if n != -1:
                    raise CorruptRecordError(f"record value length {n}")
                value = None
            else:
                if pos + n > rec_end:
                    raise CorruptRecordError("record value overruns the record")
                value = data[pos:pos + n]
                pos += n

            b = data[pos]
            if b < 0x80:
                nh = zz1[b]
                pos += 1
            elif (c := data[pos + 1]) < 0x80:
                z = (b & 0x7F) | (c << 7)
                nh = (z >> 1) ^ -(z & 1)
                pos += 2
            else:
                nh, pos = slow(data, pos, 32)
            if nh:
                headers, pos = _read_headers(data, pos, rec_end, nh)
            else:
                headers = []

            # Kafka insists each record's length prefix is exact.
            if pos != rec_end:
                raise CorruptRecordError(
                    f"record length says {length} bytes, fields take {length + pos - rec_end}")
            append(new(rec_cls, (
                base_offset + off_delta,
                base_ts if log_append else base_ts + ts_delta,
                key, value, headers)))
    except IndexError:
        raise CorruptRecordError("record truncated") from None
    if pos != dlen:
        raise CorruptRecordError(f"{dlen - pos} bytes left over after {count} records")
    return out


def read_record_spans(data, count: int, pos: int = 0, end: int | None = None) -> list:
    """read_records' walk, giving positions instead of copies: -> for each
    record (key start, key end, value start, value end) in data, -1 for
    both ends of a null key or value.  Nothing is copied; the caller slices
    what it keeps (the shard loader keeps a key without its type, and only
    the latest value of a key).  The same checks as read_records (varint
    lengths, every field inside its record, each record's length prefix
    exact, the records filling data[pos:end]); the deltas are checked but
    not decoded and headers checked but not returned."""
    dlen = len(data) if end is None else end
    if count < 0 or count * 7 > dlen - pos:
        raise CorruptRecordError(f"record count {count} impossible for {dlen - pos} bytes")
    zz1 = ZIGZAG1
    slow = _read_varint_slow
    out: list = []
    append = out.append
    try:
        for _ in range(count):
            b = data[pos]
            if b < 0x80:
                length = zz1[b]
                pos += 1
            elif (c := data[pos + 1]) < 0x80:
                z = (b & 0x7F) | (c << 7)
                length = (z >> 1) ^ -(z & 1)
                pos += 2
            else:
                length, pos = slow(data, pos, 32)
            rec_end = pos + length
            if length < 0 or rec_end > dlen:
                raise CorruptRecordError(f"record length {length} out of range")
            # attributes (unused in v2), then the timestamp and offset deltas,
            # skipped (one or two bytes each inline)
            if data[pos + 1] < 0x80:
                pos += 2
            elif data[pos + 2] < 0x80:
                pos += 3
            else:
                _, pos = slow(data, pos + 1, 64)
            if data[pos] < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                pos += 2
            else:
                _, pos = slow(data, pos, 32)

            b = data[pos]
            if b < 0x80:
                n = zz1[b]
                pos += 1
            elif (c := data[pos + 1]) < 0x80:
                z = (b & 0x7F) | (c << 7)
                n = (z >> 1) ^ -(z & 1)
                pos += 2
            else:
                n, pos = slow(data, pos, 32)
            if n < 0:
                if n != -1:
                    raise CorruptRecordError(f"record key length {n}")
                ks = ke = -1
            else:
                ks = pos
                pos = ke = pos + n

            b = data[pos]
            if b < 0x80:
                n = zz1[b]
                pos += 1
            elif (c := data[pos + 1]) < 0x80:
                z = (b & 0x7F) | (c << 7)
                n = (z >> 1) ^ -(z & 1)
                pos += 2
            else:
                n, pos = slow(data, pos, 32)
            if n < 0:
                if n != -1:
                    raise CorruptRecordError(f"record value length {n}")
                vs = ve = -1
            else:
                vs = pos
                pos = ve = pos + n

            # No headers, and the length prefix exact: one byte, 0, ends the
            # record.  (pos only moves forward, so a key or value overrunning
            # the record fails this check too, before its span is kept.)
            if data[pos] or pos + 1 != rec_end:
                _check_headers(data, pos, rec_end, length)
            append((ks, ke, vs, ve))
            pos = rec_end
    except IndexError:
        raise CorruptRecordError("record truncated") from None
    if pos != dlen:
        raise CorruptRecordError(f"{dlen - pos} bytes left over after {count} records")
    return out


def _check_headers(data, pos: int, rec_end: int, length: int) -> None:
    """read_records' checks of a record's headers, from its header count at
    pos, and of its length prefix: CorruptRecordError unless they hold."""
    nh, pos = _read_varint_slow(data, pos, 32)
    if nh:
        _, pos = _read_headers(data, pos, rec_end, nh)
    if pos != rec_end:
        raise CorruptRecordError(
            f"record length says {length} bytes, fields take {length + pos - rec_end}")


def _read_headers(data, pos: int, rec_end: int, nh: int):
    """A record's nh headers from pos -> ([(key str, value bytes or None)],
    position after them); each inside the record, keys UTF-8."""
    # Each header takes at least 2 bytes.
    if nh < 0 or nh * 2 > rec_end - pos:
        raise CorruptRecordError(f"record header count {nh} out of range")
    slow = _read_varint_slow
    headers = []
    for _ in range(nh):
        n, pos = slow(data, pos, 32)
        if n < 0 or pos + n > rec_end:
            raise CorruptRecordError(f"record header key length {n} out of range")
        try:
            hk = bytes(data[pos:pos + n]).decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptRecordError("record header key is not UTF-8") from None
        pos += n
        n, pos = slow(data, pos, 32)
        if n < 0:
            if n != -1:
                raise CorruptRecordError(f"record header value length {n}")
            hv = None
        else:
            if pos + n > rec_end:
                raise CorruptRecordError("record header value overruns the record")
            hv = data[pos:pos + n]
            pos += n
        headers.append((hk, hv))
    return headers, pos


# ------------------------------------------------------- one-shape sections

# The records of a group commit's batch mostly share one shape: keys of one
# length, values of one length, no headers.  Such a section is matched
# whole by a regular expression built for its shape, which runs in C (the
# fast path of the walk above: about 3x the walk's rate in the loader,
# bench/record_reader.py).  The pattern is "one record, or the rest":
# findall gives a (key, value) pair
# per record and stops at the end of the section when every record
# matches, or gives one (b"", b"") for the rest from the first record that
# does not (never a record's: its key group is never empty).  Timestamp
# and offset deltas of one or two bytes are covered.
_ONE = rb"[\x00-\x7f]"               # a one-byte varint
_TWO = rb"[\x80-\xff][\x00-\x7f]"    # a two-byte varint
_MAX_SHAPES = 256
_SHAPES: dict = {}   # (key length, value length, key prefix) -> pattern
_LAST: dict = {}     # key prefix -> the pattern that last matched (runs of batches share one)
_THE_REST = (b"", b"")


def _shape_pattern(k: int, v: int, prefix: bytes):
    """The pattern for records with a k-byte key starting with prefix and a
    v-byte value; None for a shape it cannot take (or too many shapes)."""
    shape = (k, v, prefix)
    if shape in _SHAPES:
        return _SHAPES[shape]
    if len(_SHAPES) >= _MAX_SHAPES or k <= len(prefix) or v < 0:
        return None
    vk, vv = encode_varint(k), encode_varint(v)
    base = 1 + len(vk) + k + len(vv) + v + 1  # attributes .. header count, without the deltas
    head = (rb"(?:" + re.escape(encode_varint(base + 2)) + rb"\x00" + _ONE + _ONE
            + rb"|" + re.escape(encode_varint(base + 3)) + rb"\x00(?:" + _ONE + _TWO + rb"|"
            + _TWO + _ONE + rb")"
            + rb"|" + re.escape(encode_varint(base + 4)) + rb"\x00" + _TWO + _TWO + rb")")
    key = re.escape(vk) + re.escape(prefix) + rb"(.{%d})" % (k - len(prefix))
    record = head + key + re.escape(vv) + rb"(.{%d})\x00" % v
    pattern = _SHAPES[shape] = re.compile(record + rb"|.+", re.S)
    return pattern


def _first_shape(data, pos: int) -> tuple[int, int]:
    """(key length, value length) of the record at pos."""
    _, pos = read_varint(data, pos)        # record length
    _, pos = read_varlong(data, pos + 1)   # after attributes: timestamp delta
    _, pos = read_varint(data, pos)        # offset delta
    k, pos = read_varint(data, pos)
    v, _ = read_varint(data, pos + max(k, 0))
    return k, v


def uniform_records(data, count: int, pos: int, end: int, key_prefix: bytes = b""):
    """The fast path for a section data[pos:end] of `count` records of one
    shape (keys of one length starting with key_prefix, non-null values of
    one length, no headers, deltas of one or two bytes): -> [(key without
    key_prefix, value)] in order, or None if the section is anything else,
    which read_records then walks (and reports if malformed).  Taken only
    when every record's length prefix agrees with its fields and the
    records fill the section exactly, as read_records requires."""
    if count <= 0:
        return None
    last = _LAST.get(key_prefix)
    if last is not None:
        found = last.findall(data, pos, end)
        if len(found) == count and found[-1] != _THE_REST:
            return found
    try:
        k, v = _first_shape(data, pos)
    except (IndexError, CorruptRecordError):
        return None
    pattern = _SHAPES.get((k, v, key_prefix)) or _shape_pattern(k, v, key_prefix)
    if pattern is None or pattern is last:
        return None
    found = pattern.findall(data, pos, end)
    if len(found) != count or found[-1] == _THE_REST:
        return None
    _LAST[key_prefix] = pattern
    return found


def records_section(buf, pos: int, h: BatchHeader, *, verify_crc: bool = True):
    """-> (data, start, end): where the records of the batch at buf[pos:]
    (header h) lie, in buf itself when uncompressed, else in its
    decompressed body; CorruptRecordError for a short batch or a bad CRC."""
    end = pos + LOG_OVERHEAD + h[1]
    if len(buf) < end:
        raise CorruptRecordError(f"record batch truncated at {pos}")
    if verify_crc and _crc(memoryview(buf)[pos + CRC_START:end]) != h[4]:
        raise CorruptRecordError(f"record batch CRC mismatch at {pos}")
    codec = h[5] & COMPRESSION_MASK
    if codec:
        data = decompress(codec, memoryview(buf)[pos + RECORDS_OFFSET:end])
        return data, 0, len(data)
    return buf, pos + RECORDS_OFFSET, end


def decode_all(buf) -> list:
    """Every record of every whole batch in buf (control batches included), in order."""
    out = []
    for pos, _ in iter_batches(buf):
        out.extend(decode_batch(buf, pos)[1])
    return out
