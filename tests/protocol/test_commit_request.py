"""OffsetCommit v8-v9 decoded flat (kcoord/protocol/commit_request.py): the
same request as the generated codec's, or None where the codec must judge."""
from __future__ import annotations

import random

import pytest

from kcoord.protocol.api import API_KEYS, request_codec
from kcoord.protocol.commit_request import FLAT_VERSIONS, commit_dict, decode_flat
from kcoord.protocol.errors import ProtocolError

OFFSET_COMMIT = API_KEYS["OffsetCommit"]


def random_request(rnd: random.Random) -> dict:
    return {
        "group_id": rnd.choice(["g", "", "gr\u00e9", "x" * 200]),
        "generation_id_or_member_epoch": rnd.choice([-1, 0, 5, -2**31, 2**31 - 1]),
        "member_id": rnd.choice(["", "m1"]), "group_instance_id": rnd.choice([None, "", "i"]),
        "retention_time_ms": -1,
        "topics": [{"name": rnd.choice(["t", "topic-\u00fc", "y" * 300]), "partitions": [
            {"partition_index": rnd.choice([0, 1, -1, 2**31 - 1, -2**31]),
             "committed_offset": rnd.choice([0, 5, -1, 2**63 - 1, -2**63, 2**32, 2**31, -2**31 - 1]),
             "committed_leader_epoch": rnd.choice([-1, 0, 7, -2**31]), "commit_timestamp": -1,
             "committed_metadata": rnd.choice([None, "", "meta", "z" * 200])}
            for _ in range(rnd.randrange(0, 12))]} for _ in range(rnd.randrange(0, 4))]}


@pytest.mark.parametrize("version", FLAT_VERSIONS)
def test_flat_is_the_codecs_request(version):
    """Every field's edge values, long strings (two-byte lengths), empty and
    null arrays' neighbours: commit_dict(flat) equals the codec's dict; a
    truncated request is either refused (None) or what the codec reads too."""
    encode, decode = request_codec(OFFSET_COMMIT, version)
    rnd = random.Random(version)
    for _ in range(150):
        buf = bytes(encode(random_request(rnd), bytearray()))
        flat = decode_flat(buf, 0)
        assert flat is not None
        assert commit_dict(flat) == decode(buf, 0)[0]
        for cut in [*range(0, len(buf), 1 + len(buf) // 50), *range(max(0, len(buf) - 30), len(buf))]:
            part = decode_flat(buf[:cut], 0)
            if part is not None:
                assert commit_dict(part) == decode(buf[:cut], 0)[0]


def test_what_the_flat_decoder_leaves_to_the_codec():
    encode, decode = request_codec(OFFSET_COMMIT, 9)
    req = {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
           "group_instance_id": None, "retention_time_ms": -1,
           "topics": [{"name": "t", "partitions": [
               {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                "commit_timestamp": -1, "committed_metadata": ""}]}]}
    buf = bytes(encode(req, bytearray()))
    assert buf.startswith(b"\x02g")
    assert decode_flat(buf, 0) is not None
    # a tagged field (tag 5, one byte) at the end: the codec skips it
    tagged = buf[:-1] + b"\x01\x05\x01\x07"
    assert decode_flat(tagged, 0) is None and decode(tagged, 0)[0] == decode(buf, 0)[0]
    assert decode_flat(bytearray(buf), 0) is None  # not bytes
    # a null group id, a null topic name or partitions array, bad UTF-8: the codec's errors
    for bad in (b"\x00" + buf[2:],
                buf.replace(b"\x02t", b"\x00t"),
                buf.replace(b"\x02t\x02", b"\x02t\x00"),
                buf.replace(b"\x02t", b"\x02\xff")):
        assert decode_flat(bad, 0) is None
        with pytest.raises(ProtocolError):
            decode(bad, 0)


def test_the_all_none_answer_of_flat_commits():
    """hot_ops.flat_body: the encoded all-NONE answer of every shape, its
    recent-shape shortcut never serving another shape's bytes."""
    from kcoord.protocol.api import response_codec
    from kcoord.server.hot_ops import flat_body
    rnd = random.Random(5)
    bodies: dict = {}
    for _ in range(300):
        version = rnd.choice(FLAT_VERSIONS)
        topics = [(rnd.choice(["t", "u"]), [(i, 1, -1, "") for i in rnd.choice(
            [[0, 1, 2], [2, 1, 0], [0, 1, 3], [5], [6], []])]) for _ in range(rnd.choice([1, 1, 2]))]
        answer = {"throttle_time_ms": 0, "topics": [
            {"name": name, "partitions": [{"partition_index": p[0], "error_code": 0} for p in parts]}
            for name, parts in topics]}
        got = flat_body(version, topics, bodies)
        if len(topics) == 1:
            assert got == bytes(response_codec(OFFSET_COMMIT, version)[0](answer, bytearray()))
        else:
            assert got == answer


def test_a_failed_flat_commit_answers_as_the_dict_path():
    """hot_ops.FlatCommitError, which keeps the commit's all-NONE answer
    rather than its request: the error answer of the request's every
    partition, as GroupHandlers.commit_error gives it from the codec's dict."""
    from kcoord.server.group_handlers import GroupHandlers
    from kcoord.server.hot_ops import FlatCommitError, flat_body
    rnd = random.Random(11)
    bodies: dict = {}
    for _ in range(150):
        version = rnd.choice(FLAT_VERSIONS)
        encode, _ = request_codec(OFFSET_COMMIT, version)
        flat = decode_flat(bytes(encode(random_request(rnd), bytearray())), 0)
        assert flat is not None
        error = FlatCommitError(version, flat_body(version, flat[4], bodies))
        for code in (15, 16):  # COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
            assert error(code) == GroupHandlers.commit_error(commit_dict(flat), version, code)
