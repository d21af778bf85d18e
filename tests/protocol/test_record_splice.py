"""Large records left out of an encoded response frame (record_splice):
the buffers, written in order, are exactly the frame encoded in one piece."""
from __future__ import annotations

import struct

from kcoord.protocol.api import response_codec
from kcoord.protocol.record_splice import SPLICE_MIN, encode_collecting


def _fetch_response(records: list[bytes]) -> dict:
    parts = [{"partition_index": i, "error_code": 0, "high_watermark": 10,
              "last_stable_offset": 10, "log_start_offset": 0, "aborted_transactions": None,
              "preferred_read_replica": -1, "records": r} for i, r in enumerate(records)]
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
            "responses": [{"topic": "t", "topic_id": b"\x01" * 16, "partitions": parts}]}


def _whole(pieces) -> bytes:
    return b"".join(bytes(p) for p in pieces) if isinstance(pieces, list) else bytes(pieces)


def test_large_records_are_left_out_and_joined_back_equal_the_plain_frame():
    big = bytes(range(256)) * (SPLICE_MIN // 256 + 3)
    records = [big, b"small", b"", big[:SPLICE_MIN]]
    for version in (4, 11, 12, 13):
        encode = response_codec(1, version)[0]
        plain = encode(_fetch_response(records), bytearray(8))
        struct.pack_into(">i", plain, 0, len(plain) - 4)
        pieces = encode_collecting(encode, _fetch_response(records), bytearray(8))
        assert isinstance(pieces, list), version
        # the two large record sets go out as the very objects the log gave
        assert sum(1 for p in pieces if p is big) == 1
        assert len([p for p in pieces if len(p) >= SPLICE_MIN]) == 2
        assert _whole(pieces) == bytes(plain), version


def test_small_records_stay_in_one_frame():
    encode = response_codec(1, 13)[0]
    data = encode_collecting(encode, _fetch_response([b"x" * (SPLICE_MIN - 1)]), bytearray(8))
    assert isinstance(data, bytearray)


def test_an_encoding_retried_leniently_notes_its_records_once():
    # a response missing a field fails the strict encoder midway; the lenient
    # retry must not leave the first attempt's notes behind
    encode = response_codec(1, 13)[0]
    big = b"r" * SPLICE_MIN
    response = _fetch_response([big, big])
    del response["responses"][0]["partitions"][1]["preferred_read_replica"]
    complete = _fetch_response([big, big])
    plain = encode(complete, bytearray(8))
    struct.pack_into(">i", plain, 0, len(plain) - 4)
    pieces = encode_collecting(encode, response, bytearray(8))
    assert len([p for p in pieces if p is big]) == 2
    assert _whole(pieces) == bytes(plain)
    # nothing is left for the next frame
    assert isinstance(encode_collecting(encode, {**_fetch_response([b""])}, bytearray(8)),
                      bytearray)


def test_produce_records_decode_as_views_of_the_frame_and_other_records_as_bytes():
    from kcoord.protocol.api import request_codec
    batch = b"\x00" * 61 + b"payload" * 100
    for version in (3, 9):
        enc, dec = request_codec(0, version)
        frame = bytes(enc({"transactional_id": None, "acks": -1, "timeout_ms": 1000,
                           "topic_data": [{"name": "t", "partition_data": [
                               {"index": 0, "records": batch}]}]}))
        req, _ = dec(frame)
        records = req["topic_data"][0]["partition_data"][0]["records"]
        assert isinstance(records, memoryview) and records.obj is frame
        assert records == batch
    encode = response_codec(1, 13)[0]
    _, decode = response_codec(1, 13)
    resp, _ = decode(bytes(encode(_fetch_response([batch]))))
    assert resp["responses"][0]["partitions"][0]["records"].__class__ is bytes
