"""records.read_records: the one walk of an uncompressed records section, its
spans variant (read_record_spans) and its one-shape fast path (uniform_records)."""
import random

import pytest

from kcoord.protocol.errors import CorruptRecordError
from kcoord.protocol.records import (BATCH_HEADER, HEADER_SIZE, LOG_OVERHEAD, RECORDS_OFFSET,
                                     build_batch, decode_batch, header_struct, read_record_spans,
                                     read_records, uniform_records)

RECORDS = [(b"k", b"v" * 200, [], 1000), (None, None, [("h", b"x"), ("n", None)], 900),
           (b"key" * 50, b"", [], 1000 + 70_000)]


def _batch():
    return build_batch(RECORDS, base_offset=500)


def test_in_place_raw_deltas_match_decode_batch():
    buf = b"\xff" * 7 + _batch() + b"\xee" * 5  # the batch among other bytes
    pos = 7
    h, decoded = decode_batch(buf, pos)
    raw = read_records(buf, h.records_count, pos=pos + HEADER_SIZE,
                       end=pos + LOG_OVERHEAD + h.batch_length)
    assert [r.offset for r in raw] == [0, 1, 2]
    assert [r.timestamp for r in raw] == [0, -100, 70_000]
    assert [(r.key, r.value, r.headers) for r in raw] == \
        [(r.key, r.value, r.headers) for r in decoded]
    assert [r.offset for r in decoded] == [500, 501, 502]
    assert decoded[1].headers == [("h", b"x"), ("n", None)]


def test_log_append_gives_every_record_the_base():
    body = _batch()[HEADER_SIZE:]
    assert {r.timestamp for r in read_records(body, 3, 0, 42, 1)} == {42}


@pytest.mark.parametrize("count, body", [
    (2, None),              # a record left over
    (4, None),              # one record too many: truncated
    (10_000, None),         # a count the bytes cannot hold
])
def test_structure_that_does_not_add_up(count, body):
    body = _batch()[HEADER_SIZE:]
    with pytest.raises(CorruptRecordError):
        read_records(body, count)


def test_end_bounds_the_walk():
    body = _batch()[HEADER_SIZE:]
    with pytest.raises(CorruptRecordError):
        read_records(body, 3, end=len(body) - 1)


# --------------------------------------------- spans, one-shape fast path


def _slices(data, spans):
    return [(None if ks < 0 else data[ks:ke], None if vs < 0 else data[vs:ve])
            for ks, ke, vs, ve in spans]


def test_spans_point_at_what_read_records_copies():
    buf = b"\xff" * 7 + _batch() + b"\xee" * 5
    h, decoded = decode_batch(buf, 7)
    spans = read_record_spans(buf, h.records_count, 7 + HEADER_SIZE,
                              7 + LOG_OVERHEAD + h.batch_length)
    assert _slices(buf, spans) == [(r.key, r.value) for r in decoded]
    assert spans[1][:2] == (-1, -1) and spans[1][2:] == (-1, -1)  # null key and value


def _random_records(rnd, n):
    out = []
    for i in range(n):
        key = None if rnd.random() < 0.1 else rnd.randbytes(rnd.choice([0, 3, 30, 70, 300]))
        value = None if rnd.random() < 0.1 else rnd.randbytes(rnd.choice([0, 24, 63, 64, 9000]))
        headers = [] if rnd.random() < 0.8 else [("h" * rnd.randrange(3), rnd.randbytes(2)),
                                                  ("n", None)]
        out.append((key, value, headers, 1000 + rnd.choice([0, 1, 100, 70_000, -5]) * i))
    return out


@pytest.mark.parametrize("seed", range(8))
def test_spans_agree_with_read_records_on_good_and_broken_sections(seed):
    """read_record_spans takes exactly the sections read_records takes, and
    its spans point at the keys and values read_records gives."""
    rnd = random.Random(seed)
    n = rnd.choice([1, 2, 7, 70, 130])
    body = build_batch(_random_records(rnd, n))[HEADER_SIZE:]
    assert _slices(body, read_record_spans(body, n)) == \
        [(r.key, r.value) for r in read_records(body, n)]
    for _ in range(60):
        cut = rnd.randrange(len(body))
        mutated = rnd.choice([
            body[:cut] + bytes([rnd.randrange(256)]) + body[cut + 1:],   # a byte changed
            body[:cut] + bytes([rnd.randrange(256)]) + body[cut:],       # a byte inserted
            body[:cut] + body[cut + 1:],                                 # a byte removed
        ])
        count = rnd.choice([n, n, n, n - 1, n + 1])
        try:
            want = [(r.key, r.value) for r in read_records(mutated, count)]
        except CorruptRecordError:
            with pytest.raises(CorruptRecordError):
                read_record_spans(mutated, count)
        else:
            assert _slices(mutated, read_record_spans(mutated, count)) == want


def _commits(keys, value_len=24):
    return [(b"\x00\x01" + k, bytes(value_len), [], 1000 + i) for i, k in enumerate(keys)]


def test_one_shape_fast_path_takes_a_uniform_section():
    keys = [b"group-%03d" % i for i in range(100)]
    body = build_batch(_commits(keys))[HEADER_SIZE:]
    found = uniform_records(body, 100, 0, len(body), b"\x00\x01")
    assert found == [(k, bytes(24)) for k in keys]
    # the same bytes as read_records, the key prefix dropped
    assert [(b"\x00\x01" + k, v) for k, v in found] == \
        [(r.key, r.value) for r in read_records(body, 100)]


@pytest.mark.parametrize("records, count", [
    (_commits([b"aaaa", b"bbbbb", b"cccc"]), 3),   # a key of another length
    (_commits([b"aaaa", b"bbbb"]) + [(b"\x00\x02x", b"v" * 24, [], 1)], 3),  # another prefix
    (_commits([b"aaaa", b"bbbb"]), 3),              # fewer records than the count
    (_commits([b"aaaa", b"bbbb"]), 1),              # more
    ([(b"\x00\x01aaaa", None, [], 1)] * 2, 2),      # tombstones
    ([(b"\x00\x01aaaa", b"v" * 24, [("h", b"x")], 1)] * 2, 2),  # headers
])
def test_one_shape_fast_path_refuses_anything_else(records, count):
    body = build_batch(records)[HEADER_SIZE:]
    assert uniform_records(body, count, 0, len(body), b"\x00\x01") is None


def test_header_layout_is_named_once():
    assert BATCH_HEADER.size == HEADER_SIZE == RECORDS_OFFSET == 61
    assert header_struct("base_offset", "batch_length", "magic", "crc",
                         "last_offset_delta").format == ">qi4xbI2xi"
    batch = build_batch(RECORDS, base_offset=9)
    h = decode_batch(batch)[0]
    assert header_struct("crc", "records_count").unpack_from(batch) == (h.crc, 3)
    with pytest.raises(ValueError):
        header_struct("length")
