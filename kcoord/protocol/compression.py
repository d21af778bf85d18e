"""Record-batch compression codecs (the low 3 bits of a v2 batch's attributes).

What each codec writes is chosen to match Kafka's Java producer, so batches we
write look like the ones Java clients write; the decoders also accept what
librdkafka, franz-go, kafka-python and friends write.

Every decode failure, whatever library raised it, leaves as CorruptRecordError:
callers must be able to treat "garbage from the network" as one error type.
The decoders also refuse input that claims to expand far beyond what its codec
can produce, so a few hostile bytes cannot make us allocate gigabytes up front.
"""
import struct
import threading
import zlib

import cramjam
import lz4.frame
import zstandard

from kcoord.protocol.errors import CorruptRecordError

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

# Java's GZIPOutputStream uses Deflater.DEFAULT_COMPRESSION, i.e. zlib level 6.
GZIP_LEVEL = 6
# zstd-jni's default, which is also what Kafka uses unless compression.zstd.level is set.
ZSTD_LEVEL = 3

# xerial snappy-java's SnappyOutputStream stream header: marker byte -126,
# "SNAPPY\0", then int32 version and int32 min-compatible version (both 1).
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
# SnappyOutputStream's default block size; each block is compressed on its own.
XERIAL_BLOCK = 32 * 1024

_INT32 = struct.Struct(">i")

# Upper bounds on how much each format can expand its input. Snappy's densest
# element is a 3-byte copy producing 64 bytes (~21x); LZ4 tops out near 255x.
# Generous margins: a false alarm would reject valid data.
# We only use these to reject absurd declared sizes before allocating.
_SNAPPY_MAX_RATIO = 32
_LZ4_MAX_RATIO = 300

# zstd compressor/decompressor contexts cost far more to create than a small
# batch costs to compress, but are not thread-safe: keep one per thread.
_tls = threading.local()


def _zstd_compressor():
    c = getattr(_tls, "zc", None)
    if c is None:
        c = _tls.zc = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    return c


def _zstd_decompressor():
    d = getattr(_tls, "zd", None)
    if d is None:
        d = _tls.zd = zstandard.ZstdDecompressor()
    return d


# ---------------------------------------------------------------- compress


def _gzip_compress(data):
    # wbits=31 gives a gzip wrapper with mtime 0, so output is deterministic.
    c = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


def _snappy_compress(data):
    # Java's producer writes xerial-framed snappy; match it (every client and
    # Kafka itself accept the framing, some older Java consumers need it).
    mv = memoryview(data)
    parts = [XERIAL_HEADER]
    pack = _INT32.pack
    compress_raw = cramjam.snappy.compress_raw
    for i in range(0, len(mv), XERIAL_BLOCK):
        block = bytes(compress_raw(mv[i:i + XERIAL_BLOCK]))
        parts.append(pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _lz4_compress(data):
    # Kafka's KafkaLZ4BlockOutputStream: 64 KB independent blocks, no block or
    # content checksum, no content size. Java's reader rejects linked blocks.
    return lz4.frame.compress(
        data,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        store_size=False,
    )


def _zstd_compress(data):
    return _zstd_compressor().compress(data)


_COMPRESSORS = {
    NONE: bytes,
    GZIP: _gzip_compress,
    SNAPPY: _snappy_compress,
    LZ4: _lz4_compress,
    ZSTD: _zstd_compress,
}


def compress(codec: int, data) -> bytes:
    """Compress `data` (any bytes-like) with `codec`; CorruptRecordError for an unknown codec."""
    fn = _COMPRESSORS.get(codec)
    if fn is None:
        raise CorruptRecordError(f"unknown compression codec {codec}")
    return fn(data)


# -------------------------------------------------------------- decompress


def _gzip_decompress(data):
    # Java's GZIPInputStream reads concatenated members, so we do too.
    out = []
    while True:
        d = zlib.decompressobj(31)
        out.append(d.decompress(data))
        if not d.eof:
            raise CorruptRecordError("truncated gzip stream")
        data = d.unused_data
        if not data:
            return b"".join(out)


def _snappy_raw(block):
    # The raw format starts with the uncompressed length; check it against
    # what the block could possibly hold before cramjam allocates that much.
    if cramjam.snappy.decompress_raw_len(block) > len(block) * _SNAPPY_MAX_RATIO + 64:
        raise CorruptRecordError("snappy block declares an impossible length")
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_decompress(data):
    data = bytes(data)
    if len(data) < 16 or data[:8] != XERIAL_MAGIC:
        return _snappy_raw(data)
    # xerial framing. Version/compat are not checked: some writers put them in
    # little-endian, and there has only ever been one block format anyway.
    out = []
    pos, end = 16, len(data)
    while pos < end:
        if end - pos < 4:
            raise CorruptRecordError("truncated xerial snappy block length")
        (n,) = _INT32.unpack_from(data, pos)
        pos += 4
        if n < 0 or n > end - pos:
            raise CorruptRecordError("xerial snappy block length out of range")
        out.append(_snappy_raw(data[pos:pos + n]))
        pos += n
    return b"".join(out)


def _lz4_decompress(data):
    out = []
    data = bytes(data)
    while True:
        size = lz4.frame.get_frame_info(data).get("content_size") or 0
        if size > len(data) * _LZ4_MAX_RATIO + 65536:
            raise CorruptRecordError("lz4 frame declares an impossible content size")
        d = lz4.frame.LZ4FrameDecompressor()
        out.append(d.decompress(data))
        if not d.eof:
            raise CorruptRecordError("truncated lz4 frame")
        data = d.unused_data
        if not data:
            return b"".join(out)


def _zstd_decompress(data):
    # A decompressobj streams into growing output, so it neither needs the
    # frame's content size (Java's streaming writer omits it) nor trusts it
    # for allocation. zstd-jni reads concatenated frames; loop to match.
    out = []
    dctx = _zstd_decompressor()
    while True:
        d = dctx.decompressobj()
        out.append(d.decompress(data))
        if not d.eof:
            raise CorruptRecordError("truncated zstd frame")
        data = d.unused_data
        if not data:
            return b"".join(out)


_DECOMPRESSORS = {
    NONE: bytes,
    GZIP: _gzip_decompress,
    SNAPPY: _snappy_decompress,
    LZ4: _lz4_decompress,
    ZSTD: _zstd_decompress,
}


def decompress(codec: int, data) -> bytes:
    """Decompress `data` (any bytes-like); every failure is CorruptRecordError."""
    fn = _DECOMPRESSORS.get(codec)
    if fn is None:
        raise CorruptRecordError(f"unknown compression codec {codec}")
    try:
        return fn(data)
    except CorruptRecordError:
        raise
    except MemoryError as e:
        raise CorruptRecordError(f"{CODEC_NAMES[codec]} data expands beyond available memory") from e
    except Exception as e:  # zlib.error, cramjam/lz4/zstd errors, RuntimeError, ValueError...
        raise CorruptRecordError(f"bad {CODEC_NAMES[codec]} data: {e}") from e
