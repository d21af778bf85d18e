"""records.read_records: the one walk of an uncompressed records section."""
import pytest

from kcoord.protocol.errors import CorruptRecordError
from kcoord.protocol.records import (HEADER_SIZE, LOG_OVERHEAD, build_batch, decode_batch,
                                     read_records)

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
