"""records_timestamp_range, the per-record walk of every produced batch: its
fast path (one- and two-byte varints, native bytes) answers as decoding every
record does, for bytes, bytearrays and views of a larger frame, with lengths
and timestamp deltas of every varint size; what does not parse is corruption."""
from __future__ import annotations

import random

import pytest

from kcoord.protocol.errors import CorruptRecordError
from kcoord.protocol.records import (LOG_OVERHEAD, build_batch, decode_batch, read_batch_header,
                                     records_timestamp_range)

BASE = 1_700_000_000_000


def _expected(data) -> tuple[int, int]:
    stamps = [r.timestamp for r in decode_batch(data, 0)[1]]
    return (min(stamps), max(stamps)) if stamps else (-1, -1)


def _forms(data: bytes):
    """The batch as bytes, bytearray and a view inside a larger frame (as a
    Produce request's records arrive): -> (buffer, position) pairs."""
    frame = b"\x07" * 33 + data + b"\x09" * 5
    return [(data, 0), (bytearray(data), 0), (memoryview(data), 0),
            (memoryview(frame)[33:33 + len(data)], 0), (memoryview(frame), 33)]


@pytest.mark.parametrize("seed", range(40))
def test_the_walk_answers_as_a_full_decode(seed):
    rng = random.Random(seed)
    # deltas of 1, 2, 3 and more varint bytes, negative ones; values of
    # 1-byte, 2-byte and 3-byte lengths
    spread = rng.choice([50, 8_000, 1_000_000, 10**12])
    size = rng.choice([0, 10, 500, 9_000, 20_000])
    records = [(b"k", b"v" * rng.randint(0, size), [],
                BASE + rng.randint(-spread, spread)) for _ in range(rng.randint(1, 30))]
    data = build_batch(records, base_timestamp=BASE)
    for buf, pos in _forms(data):
        assert records_timestamp_range(buf, pos, read_batch_header(buf, pos)) == _expected(data)


def test_one_long_record_among_short_ones_takes_the_general_walk():
    records = [(b"k", b"v" * 100, [], BASE + i) for i in range(5)]
    records.insert(3, (b"k", b"x" * 10_000, [], BASE - 99_999))  # 3-byte length and delta
    data = build_batch(records, base_timestamp=BASE)
    for buf, pos in _forms(data):
        assert records_timestamp_range(buf, pos, read_batch_header(buf, pos)) == (BASE - 99_999,
                                                                                  BASE + 4)


@pytest.mark.parametrize("cut", [1, 2, 50])
def test_records_that_do_not_fill_the_batch_are_corrupt(cut):
    data = build_batch([(b"k", b"v" * 300, [], BASE + i) for i in range(4)])
    header = read_batch_header(data)
    # the header claims one record more, or the batch is shorter than its records
    more = header._replace(records_count=header.records_count + 1)
    shorter = header._replace(batch_length=header.batch_length - cut)
    for buf, pos in _forms(data):
        with pytest.raises(CorruptRecordError):
            records_timestamp_range(buf, pos, more)
        with pytest.raises(CorruptRecordError):
            records_timestamp_range(memoryview(bytes(buf))[:LOG_OVERHEAD + shorter.batch_length
                                                           + pos], pos, shorter)


def test_a_record_length_below_three_is_corrupt():
    data = bytearray(build_batch([(None, None, [], BASE)] * 2))
    data[61] = 2 * 2  # the first record's length varint: 2
    with pytest.raises(CorruptRecordError):
        records_timestamp_range(bytes(data), 0, read_batch_header(data))
