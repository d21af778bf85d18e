"""The segment decoder without Spark: every record against kcoord's codec, and bad input."""
from __future__ import annotations

import struct

import pytest

from kcoord.pipeline import decode
from kcoord.pipeline.generate import generate
from kcoord.pipeline.logend import partition_history, user_partitions
from kcoord.protocol.messages.coordinator_records import encode_record_key, encode_record_value
from kcoord.protocol.records import build_batch

from . import reference as ref


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    data = tmp_path_factory.mktemp("decode") / "data"
    generate(data, groups=14, topics=2, partitions=3, commits=1500, log_partitions=3,
             partitions_per_group=2, segment_bytes=8 << 10, corrupt=True, seed=3)
    return data


def _rows(data):
    out = []
    for p, d in decode.partition_dirs(data):
        for rb in decode.read_partition(d, p):
            out.extend(rb.to_pylist())
    return out


def test_every_record_matches_the_codec(small):
    got = [r for r in _rows(small) if r["error"] is None]
    want, _ = ref.read_log(small)
    assert len(got) == len(want)
    key = lambda r: (r["log_partition"], r["offset"])  # noqa: E731
    got.sort(key=key)
    want.sort(key=key)
    types = set()
    for g, w in zip(got, want):
        assert key(g) == key(w)
        assert g["timestamp"] == w["timestamp"]
        assert g["producer_id"] == w["producer_id"]
        assert g["transactional"] == w["transactional"]
        if w["control"] is not None:
            assert g["control_type"] == w["control"] and g["record_type"] is None
            continue
        types.add(w["type"])
        assert g["record_type"] == w["type"]
        assert g["tombstone"] == (w["value"] is None)
        assert g["value_version"] == w["version"]
        assert g["group"] == w["key"].get("group", w["key"].get("group_id"))
        if w["type"] in (0, 1):
            assert (g["topic"], g["partition"]) == (w["key"]["topic"], w["key"]["partition"])
            if w["value"] is not None:
                v = w["value"]
                assert (g["committed_offset"], g["commit_timestamp"], g["metadata"]) == \
                    (v["offset"], v["commit_timestamp"], v["metadata"])
                assert g["leader_epoch"] == (v.get("leader_epoch", -1) if w["version"] >= 3 else -1)
                assert g["expire_timestamp"] == (v["expire_timestamp"] if w["version"] == 1 else None)
        elif w["type"] == 2 and w["value"] is not None:
            gm, v = g["group_metadata"], w["value"]
            assert (gm["generation"], gm["protocol"], gm["leader"], gm["protocol_type"]) == \
                (v["generation"], v["protocol"], v["leader"], v["protocol_type"])
            assert [m["member_id"] for m in gm["members"]] == [m["member_id"] for m in v["members"]]
            assert [m["assignment"] for m in gm["members"]] == [bytes(m["assignment"]) for m in v["members"]]
        elif w["type"] in (5, 7, 8):
            assert g["member_id"] == w["key"]["member_id"]
            if w["type"] == 8 and w["value"] is not None:
                assert g["consumer_group"]["member_epoch"] == w["value"]["member_epoch"]
        elif w["type"] == 3 and w["value"] is not None:
            assert g["consumer_group"]["epoch"] == w["value"]["epoch"]
    assert types == {0, 1, 2, 3, 4, 5, 6, 7, 8}


def test_bad_input_rows(small):
    errors = [r for r in _rows(small) if r["error"] is not None]
    _, bad = ref.read_log(small)
    kinds = {}
    for r in errors:
        kinds[r["error"]] = kinds.get(r["error"], 0) + 1
    assert kinds == bad == {"crc_mismatch": 1, "unknown_record_version": 1,
                            "unknown_record_type": 1, "truncated_tail": 1}
    by = {r["error"]: r for r in errors}
    assert by["unknown_record_version"]["value_version"] == 9
    assert by["unknown_record_version"]["record_type"] == 1
    assert by["unknown_record_type"]["record_type"] == 11
    assert "CRC" in by["crc_mismatch"]["error_detail"]


def _commit(group, offset, ts=1000, version=3):
    key = encode_record_key(1, {"group": group, "topic": "t", "partition": 0})
    value = encode_record_value(1, version, {"offset": offset, "leader_epoch": 1, "metadata": "",
                                             "commit_timestamp": ts, "expire_timestamp": -1})
    return key, value, [], ts


def _segment(tmp_path, batches):
    d = tmp_path / "__consumer_offsets-0"
    d.mkdir()
    path = d / ("0" * 20 + ".log")
    path.write_bytes(b"".join(batches))
    return path


def _read(path):
    out = []
    for rb in decode.read_segment(path, 0):
        out.extend(rb.to_pylist())
    return out


def test_garbage_batch_length_ends_the_segment_and_is_counted(tmp_path):
    good = build_batch([_commit("g", 5)], base_offset=0)
    bad = bytearray(build_batch([_commit("g", 6)], base_offset=1))
    struct.pack_into(">i", bad, 8, 3)  # batch length 3: cannot be a batch
    path = _segment(tmp_path, [good, bytes(bad), build_batch([_commit("g", 7)], base_offset=2)])
    rows = _read(path)
    assert [r["committed_offset"] for r in rows if r["error"] is None] == [5]
    errs = [r for r in rows if r["error"]]
    assert len(errs) == 1 and errs[0]["error"] == "corrupt_batch"
    assert "not read" in errs[0]["error_detail"]


def test_bad_magic_and_malformed_records_are_counted(tmp_path):
    b1 = bytearray(build_batch([_commit("g", 5)], base_offset=0))
    b1[16] = 1  # magic 1
    path = _segment(tmp_path, [bytes(b1)])
    assert [r["error"] for r in _read(path)] == ["corrupt_batch"]

    # a record whose length prefix overruns the batch, with a valid CRC
    body = build_batch([_commit("g", 5), _commit("g", 6)], base_offset=0)
    broken = bytearray(body)
    broken[61] = 0x7E  # first record's length: 63, longer than it is
    import crc32c
    struct.pack_into(">I", broken, 17, crc32c.crc32c(bytes(broken[21:])))
    (tmp_path / "x").mkdir()
    p2 = tmp_path / "x" / ("0" * 20 + ".log")
    p2.write_bytes(bytes(broken) + build_batch([_commit("g", 9)], base_offset=2))
    rows = _read(p2)
    assert [r["error"] for r in rows] == ["corrupt_batch", None]
    assert rows[1]["committed_offset"] == 9


def test_compressed_batches_and_undecodable_values(tmp_path):
    batches = [build_batch([_commit("g", i, version=v) for i, v in ((1, 3), (2, 4), (3, 0))],
                           base_offset=0, compression=c) for c in (1,)]
    key = encode_record_key(1, {"group": "g", "topic": "t", "partition": 0})
    batches.append(build_batch([(key, b"\x00\x03\x00", [], 5)], base_offset=3))  # truncated v3
    batches.append(build_batch([(b"\x00", b"\x00\x00", [], 5)], base_offset=4))  # 1-byte key
    rows = _read(_segment(tmp_path, batches))
    assert [r["committed_offset"] for r in rows[:3]] == [1, 2, 3]
    assert [r["value_version"] for r in rows[:3]] == [3, 4, 0]
    assert [r["error"] for r in rows[3:]] == ["undecodable_value", "undecodable_key"]


def test_offset_range_reads_whole_batches_only(tmp_path):
    batches = [build_batch([_commit("g", 10 * i + j) for j in range(3)], base_offset=3 * i)
               for i in range(4)]
    path = _segment(tmp_path, batches)
    assert decode.segment_end(path) == (12, sum(len(b) for b in batches))
    rows = []
    for rb in decode.read_segment(path, 0, min_offset=3, max_offset=8):
        rows.extend(rb.to_pylist())
    assert [r["offset"] for r in rows] == [3, 4, 5, 6, 7, 8]


def test_log_end_history_from_the_data_dir(small):
    ends = ref.LogEnds(small)
    tps = user_partitions(small)
    assert len(tps) == 6
    for topic, p, d in tps:
        hist = partition_history(d, resolution_ms=0)
        assert hist[-1][0] == ends.current[(topic, p)]
        assert [e for e, _ in hist] == sorted(e for e, _ in hist)
        # thinning keeps the last observation of each window and the final log end
        thin = partition_history(d, resolution_ms=600_000)
        assert thin[-1] == hist[-1] and len(thin) < len(hist)


def test_projection_raw_group_values_and_type_filter(small):
    from kcoord.pipeline.decode import RecordBatchBuilder
    from kcoord.protocol.messages.coordinator_records import decode_record_value
    cols = ["offset", "record_type", "group", "raw_value"]
    rows = []
    for p, d in decode.partition_dirs(small):
        builder = RecordBatchBuilder(columns=cols, record_types=frozenset(range(2, 9)))
        for _, path in decode.segment_files(d):
            for rb in decode.read_segment(path, p, builder):
                assert rb.schema.names == cols
                rows.extend(rb.to_pylist())
    want, _ = ref.read_log(small)
    groups = [w for w in want if w.get("type") in range(2, 9)]
    assert len(rows) == len(groups) > 10
    assert {r["record_type"] for r in rows} == set(range(2, 9))
    for r in rows:
        if r["raw_value"] is not None:  # the codec reads the bytes back
            decode_record_value(r["record_type"], r["raw_value"])
    assert sum(r["raw_value"] is None for r in rows) == sum(w["value"] is None for w in groups)
