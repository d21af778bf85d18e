"""The Produce request decoder gives records as a view of the request frame
(codegen.RECORD_VIEWS), not a copy, whether the frame is bytes or the
bytearray the network reads a large frame into; every other records field
stays bytes."""
from __future__ import annotations

from kcoord.protocol.api import request_codec, response_codec


def test_produce_records_decode_as_views_of_the_frame_and_other_records_as_bytes():
    batch = b"\x00" * 61 + b"payload" * 100
    for version in (3, 9):
        enc, dec = request_codec(0, version)
        frame = bytes(enc({"transactional_id": None, "acks": -1, "timeout_ms": 1000,
                           "topic_data": [{"name": "t", "partition_data": [
                               {"index": 0, "records": batch}]}]}))
        for buf in (frame, bytearray(frame)):
            req, _ = dec(buf)
            records = req["topic_data"][0]["partition_data"][0]["records"]
            assert isinstance(records, memoryview) and records.obj is buf
            assert records == batch
    encode, decode = response_codec(1, 13)
    part = {"partition_index": 0, "error_code": 0, "high_watermark": 10,
            "last_stable_offset": 10, "log_start_offset": 0, "aborted_transactions": None,
            "preferred_read_replica": -1, "records": batch}
    resp, _ = decode(bytes(encode({"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
                                   "responses": [{"topic": "t", "topic_id": b"\x01" * 16,
                                                  "partitions": [part]}]})))
    assert resp["responses"][0]["partitions"][0]["records"].__class__ is bytes
