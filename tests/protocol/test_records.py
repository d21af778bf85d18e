"""Record batches v2 and compression: round trips, corruption, and byte-for-byte
agreement with kafka-python's independent implementation."""
import gzip
import os
import random
import struct
import zlib

import cramjam
import crc32c
import lz4.frame
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kafka.codec
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from kcoord.protocol import compression as comp
from kcoord.protocol import records as R
from kcoord.protocol.errors import CorruptRecordError, ProtocolError
from kcoord.protocol.records import (
    CONTROL,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_V2,
    TIMESTAMP_TYPE_LOG_APPEND,
    TRANSACTIONAL,
    BatchHeader,
    Record,
    assign_offsets,
    batch_crc_ok,
    build_batch,
    decode_all,
    decode_batch,
    iter_batches,
    read_batch_header,
    set_log_append_time,
    set_partition_leader_epoch,
    validate_batch,
)

CODECS = [0, 1, 2, 3, 4]
TS = 1_700_000_000_000


def fix_crc(batch: bytearray, pos: int = 0) -> bytearray:
    """Recompute a batch's CRC after a test has edited bytes it covers."""
    (length,) = struct.unpack_from(">i", batch, pos + 8)
    crc = crc32c.crc32c(bytes(batch[pos + 21:pos + 12 + length]))
    struct.pack_into(">I", batch, pos + 17, crc)
    return batch


def sample_records():
    return [
        (b"k1", b"v1", [], TS),
        (None, b"no key", [("h1", b"x"), ("h2", None), ("ünïcødé", b"")], TS + 5),
        (b"no value", None, [], TS - 3),  # timestamps need not be ordered
        (None, None, [], None),  # None timestamp = base timestamp
        (b"", b"", [("", b"")], TS + 1),
        (b"k" * 200, b"v" * 10_000, [("big", b"h" * 300)], TS + 100_000),
    ]


def expected(recs, base_offset=0, base_ts=None):
    if base_ts is None:
        base_ts = recs[0][3] if recs and recs[0][3] is not None else 0
    return [
        Record(base_offset + i, base_ts if ts is None else ts, k, v, list(h))
        for i, (k, v, h, ts) in enumerate(recs)
    ]


# ------------------------------------------------------------ compression


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("size", [0, 1, 100, 32 * 1024, 32 * 1024 + 1, 200_000])
def test_compression_round_trip(codec, size):
    rnd = random.Random(size)
    # half compressible text, half noise, so both paths inside the codecs run
    data = (b"kafka record " * (size // 26 + 1))[: size // 2] + rnd.randbytes(size - size // 2)
    packed = comp.compress(codec, data)
    assert comp.decompress(codec, packed) == data
    assert comp.decompress(codec, memoryview(packed)) == data
    assert comp.decompress(codec, bytearray(packed)) == data


def test_compress_is_deterministic():
    data = os.urandom(1000) * 50
    for codec in CODECS:
        assert comp.compress(codec, data) == comp.compress(codec, data)


def test_unknown_codec():
    for codec in (5, 6, 7, -1):
        with pytest.raises(CorruptRecordError):
            comp.compress(codec, b"x")
        with pytest.raises(CorruptRecordError):
            comp.decompress(codec, b"x")


def test_snappy_writes_xerial_framing_like_java():
    data = b"abcdefgh" * 10_000  # 80 KB -> 3 blocks of at most 32 KB
    packed = comp.compress(2, data)
    assert packed[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    pos, out = 16, b""
    while pos < len(packed):
        (n,) = struct.unpack_from(">i", packed, pos)
        block = bytes(cramjam.snappy.decompress_raw(packed[pos + 4:pos + 4 + n]))
        assert len(block) <= 32 * 1024
        out += block
        pos += 4 + n
    assert out == data


def xerial_frame(data, block=32 * 1024, version=struct.pack(">ii", 1, 1)):
    out = b"\x82SNAPPY\x00" + version
    for i in range(0, len(data), block):
        raw = bytes(cramjam.snappy.compress_raw(data[i:i + block]))
        out += struct.pack(">i", len(raw)) + raw
    return out


@pytest.mark.parametrize("block", [1, 7, 1000, 32 * 1024, 100_000])
def test_snappy_decodes_xerial_we_frame_ourselves(block):
    data = os.urandom(3000) + b"z" * 50_000
    assert comp.decompress(2, xerial_frame(data, block)) == data
    # redpanda once wrote version/compat little-endian; the framing is what counts
    assert comp.decompress(2, xerial_frame(data, block, struct.pack("<ii", 1, 1))) == data


def test_snappy_decodes_raw_like_librdkafka():
    data = b"hello snappy " * 1000
    assert comp.decompress(2, bytes(cramjam.snappy.compress_raw(data))) == data
    assert comp.decompress(2, bytes(cramjam.snappy.compress_raw(b""))) == b""


def test_snappy_xerial_bad_block_lengths():
    good = xerial_frame(b"x" * 1000)
    for bad in (good[:-1], good + b"\x00\x00", good[:16] + struct.pack(">i", -5) + good[20:],
                good[:16] + struct.pack(">i", 10**6) + good[20:]):
        with pytest.raises(CorruptRecordError):
            comp.decompress(2, bad)


def test_snappy_rejects_impossible_declared_length():
    # raw snappy starts with the uncompressed length: claim ~4 GB in 5 bytes
    with pytest.raises(CorruptRecordError):
        comp.decompress(2, b"\xff\xff\xff\xff\x0f" + b"\x00" * 20)


def test_zstd_frame_without_content_size():
    data = os.urandom(500) * 400
    cobj = zstandard.ZstdCompressor().compressobj()  # streaming: no content size, like zstd-jni
    packed = cobj.compress(data) + cobj.flush()
    assert zstandard.get_frame_parameters(packed).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert comp.decompress(4, packed) == data


def test_zstd_concatenated_frames_and_huge_claims():
    a, b = b"first " * 100, b"second " * 100
    assert comp.decompress(4, comp.compress(4, a) + comp.compress(4, b)) == a + b
    # header claiming a 1 TB frame must fail cleanly, not allocate
    hdr = b"\x28\xb5\x2f\xfd\xe0" + struct.pack("<Q", 1 << 40)
    with pytest.raises(CorruptRecordError):
        comp.decompress(4, hdr + b"\x01\x00\x00")


def test_gzip_multi_member_and_foreign_writers():
    a, b = b"alpha " * 100, b"beta " * 100
    assert comp.decompress(1, gzip.compress(a, mtime=123) + gzip.compress(b)) == a + b
    assert comp.decompress(1, kafka.codec.gzip_encode(a)) == a


def test_lz4_matches_kafka_java_frame_settings():
    packed = comp.compress(3, b"x" * 100_000)
    flg, bd = packed[4], packed[5]
    assert flg >> 6 == 1  # version 01
    assert flg & 0x20  # independent blocks (Java's reader refuses linked ones)
    assert not flg & 0x1C  # no block checksum, no content size, no content checksum
    assert (bd >> 4) & 7 == 4  # 64 KB maximum block size


def test_lz4_decodes_other_frame_flavours():
    data = os.urandom(100) * 2000
    for kw in ({}, {"store_size": True, "content_checksum": True},
               {"block_linked": True, "block_size": lz4.frame.BLOCKSIZE_MAX4MB}):
        assert comp.decompress(3, lz4.frame.compress(data, **kw)) == data
    assert comp.decompress(3, lz4.frame.compress(b"ab") + lz4.frame.compress(b"cd")) == b"abcd"


def test_lz4_rejects_impossible_content_size():
    frame = bytearray(lz4.frame.compress(b"hi", store_size=True))
    struct.pack_into("<Q", frame, 6, 1 << 50)  # content size field after FLG, BD
    with pytest.raises(CorruptRecordError):
        comp.decompress(3, bytes(frame))


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_decompress_garbage_and_truncation(codec):
    packed = comp.compress(codec, b"some data " * 500)
    cases = [b"", b"\x00" * 3, os.urandom(64), packed[: len(packed) // 2], packed[:-1]]
    for bad in cases:
        if codec == 2 and bad == b"\x00" * 3:
            continue  # a zero byte is a valid raw snappy encoding of b""; trailing bytes fail below
        with pytest.raises(CorruptRecordError):
            comp.decompress(codec, bad)


# ------------------------------------------------------------ batches


def test_constants_and_header_struct():
    assert (LOG_OVERHEAD, HEADER_SIZE, MAGIC_V2) == (12, 61, 2)
    assert (R.COMPRESSION_MASK, TIMESTAMP_TYPE_LOG_APPEND, TRANSACTIONAL, CONTROL) == (7, 8, 0x10, 0x20)
    assert R.BATCH_HEADER.size == HEADER_SIZE


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_every_codec(codec):
    recs = sample_records()
    batch = build_batch(recs, base_offset=1000, compression=codec)
    assert isinstance(batch, bytes)
    h, out = decode_batch(batch)
    assert out == expected(recs, 1000)
    assert isinstance(h, BatchHeader)
    assert h.compression == codec
    assert h.base_offset == 1000 and h.magic == 2
    assert h.records_count == len(recs) and h.last_offset_delta == len(recs) - 1
    assert h.base_timestamp == TS and h.max_timestamp == TS + 100_000
    assert h.batch_length == len(batch) - LOG_OVERHEAD and h.size == len(batch)
    assert h.last_offset == 1000 + len(recs) - 1 and h.next_offset == 1000 + len(recs)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.partition_leader_epoch) == (-1, -1, -1, -1)
    assert validate_batch(batch) == h
    assert batch_crc_ok(batch, 0, h)
    for view in (bytearray(batch), memoryview(batch)):
        assert decode_batch(view) == (h, out)
    if codec:
        assert len(batch) < len(build_batch(recs))


def test_round_trip_with_producer_state_and_flags():
    recs = [(b"k", b"v", [], 5)]
    batch = build_batch(recs, producer_id=4242, producer_epoch=7, base_sequence=99, transactional=True,
                        partition_leader_epoch=3, base_timestamp=2)
    h, out = decode_batch(batch)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.partition_leader_epoch) == (4242, 7, 99, 3)
    assert h.is_transactional and not h.is_control and not h.timestamp_type_log_append
    assert h.base_timestamp == 2 and h.max_timestamp == 5 and out[0].timestamp == 5


def test_control_batch_decodes_like_others():
    # COMMIT marker: key = version 0, type 1; value = version 0, coordinator epoch 0
    key = struct.pack(">hh", 0, 1)
    value = struct.pack(">hi", 0, 0)
    batch = build_batch([(key, value, [], TS)], control=True, transactional=True, producer_id=1, producer_epoch=0)
    h, out = decode_batch(batch)
    assert h.is_control and h.attributes & CONTROL and h.attributes & TRANSACTIONAL
    assert out == [Record(0, TS, key, value, [])]
    ours = list(DefaultRecordBatch(bytearray(batch)))
    assert ours[0].commit and ours[0].type == 1


def test_empty_batch():
    batch = build_batch([], base_timestamp=77)
    h, out = decode_batch(batch)
    assert out == [] and h.records_count == 0 and h.batch_length == HEADER_SIZE - LOG_OVERHEAD
    assert h.base_timestamp == h.max_timestamp == 77
    validate_batch(batch)


def test_varint_boundaries():
    # sizes and deltas on both sides of the 1/2/3-byte varint boundaries
    sizes = [0, 63, 64, 8191, 8192, 1 << 20]
    recs = [(b"k" * s, b"v" * s, [("h" * min(s, 100), b"x" * s)], TS + d)
            for s in sizes for d in (-(1 << 40), -8193, -65, -64, 0, 63, 64, 8192, 1 << 40)]
    recs += [(None, b"", [], TS + i) for i in range(9000)]  # offset deltas past 8191
    out = decode_batch(build_batch(recs, base_timestamp=TS))[1]
    assert out == expected(recs, 0, TS)


def test_explicit_base_timestamp_and_none_timestamps():
    recs = [(b"a", b"1", [], None), (b"b", b"2", [], 50), (b"c", b"3", [], None)]
    h, out = decode_batch(build_batch(recs, base_timestamp=100))
    assert [r.timestamp for r in out] == [100, 50, 100]
    assert h.base_timestamp == 100 and h.max_timestamp == 100
    h, out = decode_batch(build_batch([(b"a", b"1", [], None)]))
    assert h.base_timestamp == 0 and out[0].timestamp == 0


def test_timestamp_type_log_append_at_build():
    batch = build_batch([(b"a", b"1", [], 10), (b"b", b"2", [], 20)], timestamp_type_log_append=True)
    h, out = decode_batch(batch)
    assert h.timestamp_type_log_append
    assert [r.timestamp for r in out] == [20, 20]  # all records report maxTimestamp


def test_in_place_patches_keep_crc_valid():
    batch = bytearray(build_batch(sample_records(), compression=4))
    assign_offsets(batch, 0, 123456789)
    set_partition_leader_epoch(batch, 0, 17)
    h = validate_batch(batch)
    assert h.base_offset == 123456789 and h.partition_leader_epoch == 17
    assert [r.offset for r in decode_batch(batch)[1]] == list(range(123456789, 123456789 + 6))

    set_log_append_time(batch, 0, TS + 999)
    h, out = decode_batch(batch)
    assert h.timestamp_type_log_append and h.max_timestamp == TS + 999
    assert h.base_timestamp == TS  # Kafka leaves the create-time base in place
    assert all(r.timestamp == TS + 999 for r in out)
    assert h.compression == 4  # other attribute bits untouched


def test_in_place_patches_at_nonzero_position():
    a = build_batch([(b"a", b"1", [], 1)])
    b = build_batch([(b"b", b"2", [], 2)], compression=1)
    buf = bytearray(a + b)
    assign_offsets(buf, len(a), 50)
    set_log_append_time(buf, len(a), 9)
    set_partition_leader_epoch(buf, len(a), 4)
    assert decode_all(buf) == [Record(0, 1, b"a", b"1", []), Record(50, 9, b"b", b"2", [])]
    assert read_batch_header(buf, len(a)).partition_leader_epoch == 4
    assert bytes(buf[: len(a)]) == a


def test_iter_batches_and_decode_all():
    batches = [build_batch([(b"k%d" % i, b"v", [], TS + i)] * (i + 1), base_offset=10 * i, compression=i % 5)
               for i in range(7)]
    buf = b"".join(batches)
    got = list(iter_batches(buf))
    positions = [sum(map(len, batches[:i])) for i in range(7)]
    assert [p for p, _ in got] == positions
    assert [h.base_offset for _, h in got] == [10 * i for i in range(7)]
    all_recs = decode_all(buf)
    assert len(all_recs) == sum(range(1, 8))
    assert all_recs[0] == Record(0, TS, b"k0", b"v", [])
    # a partial tail at every possible cut is dropped quietly
    for cut in range(positions[-1], len(buf)):
        assert [p for p, _ in iter_batches(buf[:cut])] == positions[:-1]
    assert list(iter_batches(buf, positions[3])) == got[3:]


def test_iter_batches_raises_on_malformed_header():
    good = build_batch([(b"k", b"v", [], 1)])
    bad_len = bytearray(good)
    struct.pack_into(">i", bad_len, 8, 10)
    bad_magic = bytearray(good)
    bad_magic[16] = 1
    for bad in (bad_len, bad_magic):
        with pytest.raises(CorruptRecordError):
            list(iter_batches(good + bytes(bad)))


def test_read_batch_header_errors():
    good = build_batch([(b"k", b"v", [], 1)])
    with pytest.raises(CorruptRecordError):
        read_batch_header(good[:HEADER_SIZE - 1])
    with pytest.raises(CorruptRecordError):
        read_batch_header(good, 1)
    for magic in (0, 1, 3):
        bad = bytearray(good)
        bad[16] = magic
        with pytest.raises(CorruptRecordError):
            read_batch_header(bad)
    bad = bytearray(good)
    struct.pack_into(">i", bad, 8, HEADER_SIZE - LOG_OVERHEAD - 1)
    with pytest.raises(CorruptRecordError):
        read_batch_header(bad)
    # headers parse from any buffer type at any offset
    buf = b"\x00" * 5 + good
    for view in (buf, bytearray(buf), memoryview(buf)):
        assert read_batch_header(view, 5) == read_batch_header(good)


@pytest.mark.parametrize("codec", CODECS)
def test_crc_failure(codec):
    batch = build_batch(sample_records(), compression=codec)
    for i in (21, 22, 30, 60, 61, len(batch) // 2, len(batch) - 1):
        bad = bytearray(batch)
        bad[i] ^= 0x40
        h = read_batch_header(bad)
        assert not batch_crc_ok(bad, 0, h)
        with pytest.raises(CorruptRecordError, match="CRC"):
            decode_batch(bad)
        with pytest.raises(CorruptRecordError):
            validate_batch(bad)
    # baseOffset and partitionLeaderEpoch are outside the CRC
    ok = bytearray(batch)
    ok[3] ^= 1
    ok[13] ^= 1
    validate_batch(ok)


@pytest.mark.parametrize("codec", CODECS)
def test_every_truncation_raises(codec):
    batch = build_batch(sample_records()[:3], compression=codec)
    for cut in range(len(batch)):
        with pytest.raises(CorruptRecordError):
            decode_batch(batch[:cut])
        with pytest.raises(CorruptRecordError):
            validate_batch(batch[:cut])


def test_validate_batch_count_checks():
    batch = bytearray(build_batch([(b"k", b"v", [], 1)] * 3))
    for count, last_delta in ((2, 2), (4, 2), (-1, 2), (3, 3)):
        bad = bytearray(batch)
        struct.pack_into(">i", bad, 57, count)
        struct.pack_into(">i", bad, 23, last_delta)
        with pytest.raises(CorruptRecordError):
            validate_batch(fix_crc(bad))
    bad = bytearray(batch)
    struct.pack_into(">h", bad, 21, 6)  # codec 6 does not exist
    with pytest.raises(CorruptRecordError):
        validate_batch(fix_crc(bad))


def raw_batch(records_bytes: bytes, count: int, codec: int = 0) -> bytearray:
    """A batch around hand-made record bytes, CRC correct."""
    body = comp.compress(codec, records_bytes) if codec else records_bytes
    out = bytearray(HEADER_SIZE) + body
    R.BATCH_HEADER.pack_into(out, 0, 0, len(out) - 12, -1, 2, 0, codec, max(count - 1, 0), 0, 0, -1, -1, -1, count)
    return fix_crc(out)


def record_bytes(*fields: bytes) -> bytes:
    body = b"".join(fields)
    return R.encode_varint(len(body)) + body


@pytest.mark.parametrize("codec", [0, 4])
def test_malformed_records(codec):
    ok = record_bytes(b"\x00", b"\x00", b"\x00", b"\x02k", b"\x02v", b"\x00")
    assert decode_batch(raw_batch(ok, 1, codec))[1] == [Record(0, 0, b"k", b"v", [])]
    cases = {
        "count too high": (ok, 2),
        "count too low / trailing bytes": (ok + ok, 1),
        "negative count": (ok, -1),
        "key overruns": (record_bytes(b"\x00", b"\x00", b"\x00", b"\x10k", b"\x02v", b"\x00"), 1),
        "key length -2": (record_bytes(b"\x00", b"\x00", b"\x00", b"\x03", b"\x02v", b"\x00"), 1),
        "value length -3": (record_bytes(b"\x00", b"\x00", b"\x00", b"\x01", b"\x05", b"\x00"), 1),
        "record length too long": (b"\x20" + ok[1:], 1),
        "record length too short": (b"\x08" + ok[1:], 1),
        "negative record length": (b"\x03" + ok[1:], 1),
        "varint never ends": (b"\x0c\x00" + b"\xff" * 11, 1),
        "5-byte varint overflow": (record_bytes(b"\x00", b"\x00", b"\xff\xff\xff\xff\x7f", b"\x01\x01\x00"), 1),
        "10-byte varlong overflow": (record_bytes(b"\x00", b"\xff" * 9 + b"\x7f", b"\x00\x01\x01\x00"), 1),
        "header count huge": (record_bytes(b"\x00", b"\x00", b"\x00", b"\x01\x01", b"\xfe\xff\xff\xff\x07"), 1),
        "negative header count": (record_bytes(b"\x00", b"\x00", b"\x00", b"\x01\x01", b"\x03"), 1),
        "null header key": (record_bytes(b"\x00", b"\x00", b"\x00", b"\x01\x01", b"\x02", b"\x01\x01"), 1),
        "header key not utf-8": (record_bytes(b"\x00", b"\x00", b"\x00", b"\x01\x01", b"\x02", b"\x02\xff\x01"), 1),
        "header value overruns": (record_bytes(b"\x00", b"\x00", b"\x00", b"\x01\x01", b"\x02", b"\x02h\x40"), 1),
        "truncated mid-record": (ok[:-2], 1),
    }
    for name, (data, count) in cases.items():
        with pytest.raises(CorruptRecordError):
            decode_batch(raw_batch(data, count, codec))
            pytest.fail(name)


def test_max_width_varints_accepted():
    # 5-byte varint -2**31 and 10-byte varlong -2**63 are legal
    rec = record_bytes(b"\x00", R.encode_varint(-(2**63)), R.encode_varint(-(2**31)), b"\x01\x01\x00")
    assert len(R.encode_varint(-(2**63))) == 10 and len(R.encode_varint(-(2**31))) == 5
    out = decode_batch(raw_batch(rec, 1))[1]
    assert out == [Record(-(2**31), -(2**63), None, None, [])]


def test_corrupt_record_error_is_protocol_error():
    assert issubclass(CorruptRecordError, ProtocolError)


# ------------------------------------------------------ kafka-python interop


class _CramjamSnappy:
    """python-snappy's compress/decompress API, for kafka-python's snappy path."""

    @staticmethod
    def compress(data):
        return bytes(cramjam.snappy.compress_raw(data))

    @staticmethod
    def decompress(data):
        return bytes(cramjam.snappy.decompress_raw(data))


@pytest.fixture
def kp_snappy(monkeypatch):
    if kafka.codec.snappy is None:
        monkeypatch.setattr(kafka.codec, "snappy", _CramjamSnappy)


def concrete_ts(recs):
    """kafka-python reads a None timestamp as "now"; pin them for comparisons."""
    return [(k, v, h, TS if ts is None else ts) for k, v, h, ts in recs]


def kp_build(recs, codec=0, transactional=False, producer_id=-1, producer_epoch=-1, base_sequence=-1):
    b = DefaultRecordBatchBuilder(2, codec, transactional, producer_id, producer_epoch, base_sequence, 1 << 30)
    for i, (k, v, h, ts) in enumerate(recs):
        assert b.append(i, ts, k, v, h) is not None
    return bytes(b.build())


def compressible_records():
    # kafka-python falls back to no compression when it does not pay; make sure it pays
    return [(b"key-%d" % (i % 7), b"payload " * 40, [("trace", b"abc")] if i % 3 else [], TS + i * 3)
            for i in range(300)]


def test_byte_equal_to_kafka_python_uncompressed():
    for recs in (concrete_ts(sample_records()), compressible_records(), [(b"x", None, [], 0)]):
        assert build_batch(recs, partition_leader_epoch=0) == kp_build(recs)
    recs = concrete_ts(sample_records())
    assert build_batch(recs, partition_leader_epoch=0, transactional=True, producer_id=9, producer_epoch=1,
                       base_sequence=100) == kp_build(recs, 0, True, 9, 1, 100)


@pytest.mark.parametrize("codec", [2, 4])
def test_byte_equal_to_kafka_python_compressed(codec, kp_snappy):
    # snappy: both write xerial with 32 KB blocks; zstd: both level 3 one-shot frames
    recs = compressible_records()
    assert build_batch(recs, partition_leader_epoch=0, compression=codec) == kp_build(recs, codec)


@pytest.mark.parametrize("codec", CODECS)
def test_decode_kafka_python_batches(codec, kp_snappy):
    for recs, pays in ((concrete_ts(sample_records()), False), (compressible_records(), True)):
        kp = kp_build(recs, codec)
        h, out = decode_batch(kp)
        assert out == expected(recs)
        validate_batch(kp)
        if pays:
            assert h.compression == codec


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_decodes_ours(codec, kp_snappy):
    recs = sample_records()
    batch = DefaultRecordBatch(bytearray(build_batch(recs, compression=codec, base_offset=40)))
    assert batch.validate_crc()
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch]
    assert got == [tuple(r) for r in expected(recs, 40)]


# ------------------------------------------------------------- properties

keys = st.none() | st.binary(max_size=300)
header_lists = st.lists(st.tuples(st.text(max_size=20), st.none() | st.binary(max_size=50)), max_size=4)
timestamps = st.none() | st.integers(min_value=-(2**50), max_value=2**50)
record_lists = st.lists(st.tuples(keys, keys, header_lists, timestamps), max_size=30)


@settings(max_examples=300, deadline=None)
@given(recs=record_lists, codec=st.sampled_from(CODECS), base_offset=st.integers(0, 2**62))
def test_round_trip_property(recs, codec, base_offset):
    batch = build_batch(recs, compression=codec, base_offset=base_offset)
    validate_batch(batch)
    assert decode_batch(batch)[1] == expected(recs, base_offset)


def _seed_batches():
    recs = sample_records()[:4]
    return [build_batch(recs, compression=c) for c in CODECS] + [build_batch([], base_timestamp=1)]


SEEDS = _seed_batches()


@st.composite
def mutated_batches(draw):
    batch = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["flip", "set", "cut", "insert", "delete"]))
        if not batch:
            break
        i = draw(st.integers(0, len(batch) - 1))
        if kind == "flip":
            batch[i] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set":
            batch[i] = draw(st.integers(0, 255))
        elif kind == "cut":
            del batch[i:]
        elif kind == "insert":
            batch[i:i] = draw(st.binary(min_size=1, max_size=8))
        else:
            del batch[i:i + draw(st.integers(1, 8))]
    if draw(st.booleans()) and len(batch) >= HEADER_SIZE:
        # keep the header's length honest and the CRC right, so the record
        # and decompression code sees the damage instead of the CRC check
        struct.pack_into(">i", batch, 8, len(batch) - LOG_OVERHEAD)
        fix_crc(batch)
    return bytes(batch)


def _decode_only_protocol_errors(data, verify_crc):
    try:
        h, out = decode_batch(data, verify_crc=verify_crc)
    except CorruptRecordError:
        return
    assert isinstance(h, BatchHeader) and isinstance(out, list)


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=400) | mutated_batches(), verify_crc=st.booleans())
def test_decode_garbage_raises_only_corrupt_record_error(data, verify_crc):
    _decode_only_protocol_errors(data, verify_crc)
    try:
        validate_batch(data)
    except CorruptRecordError:
        pass
    try:
        list(iter_batches(data))
    except CorruptRecordError:
        pass


@settings(max_examples=3000, deadline=None)
@given(codec=st.sampled_from([1, 2, 3, 4]), data=st.binary(max_size=300))
def test_decompress_garbage_raises_only_corrupt_record_error(codec, data):
    try:
        comp.decompress(codec, data)
    except CorruptRecordError:
        pass


@settings(max_examples=3000, deadline=None)
@given(data=st.data(), codec=st.sampled_from([1, 2, 3, 4]))
def test_decompress_mutated_raises_only_corrupt_record_error(data, codec):
    packed = bytearray(comp.compress(codec, b"record payload " * 40 + bytes(range(256))))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(packed) - 1))
        packed[i] = data.draw(st.integers(0, 255))
    try:
        comp.decompress(codec, bytes(packed))
    except CorruptRecordError:
        pass
