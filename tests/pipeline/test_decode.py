"""The segment decoder without Spark: every record against kcoord's codec, and bad input."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from kcoord.pipeline import decode, key_table, segments
from kcoord.pipeline.generate import UNKNOWN_RECORD_TYPE, generate
from kcoord.pipeline.logend import partition_history, user_partitions
from kcoord.protocol.messages.coordinator_records import encode_record_key, encode_record_value
from kcoord.protocol.records import build_batch, encode_varint

from . import reference as ref


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    data = tmp_path_factory.mktemp("decode") / "data"
    generate(data, groups=14, topics=2, partitions=3, commits=1500, log_partitions=3,
             partitions_per_group=2, segment_bytes=8 << 10, corrupt=True, seed=3)
    return data


def _rows(data):
    out = []
    for p, d in segments.partition_dirs(data):
        for rb in segments.read_partition(d, p):
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
    assert by["unknown_record_type"]["record_type"] == UNKNOWN_RECORD_TYPE
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
    for rb in segments.read_segment(path, 0):
        out.extend(rb.to_pylist())
    return out


def test_a_preallocated_zero_tail_ends_the_segment_quietly(tmp_path):
    # a live server's active segment: zeros written ahead of its data
    batches = [build_batch([_commit("g", i)], base_offset=i) for i in range(3)]
    rows = _read(_segment(tmp_path, batches + [bytes(70_000)]))
    assert [r["committed_offset"] for r in rows] == [0, 1, 2]
    assert not [r for r in rows if r["error"]]


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
    assert segments.segment_end(path) == (12, sum(len(b) for b in batches))
    rows = []
    for rb in segments.read_segment(path, 0, min_offset=3, max_offset=8):
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
    for p, d in segments.partition_dirs(small):
        builder = RecordBatchBuilder(columns=cols, record_types=frozenset(range(2, 9)))
        for _, path in segments.segment_files(d):
            for rb in segments.read_segment(path, p, builder):
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


# ------------------------------------------- column-wise parse against the per-record loop


def _rec(key, value, ts_delta=0, off_delta=0, headers=b"\x00") -> bytes:
    body = b"\x00" + encode_varint(ts_delta) + encode_varint(off_delta)
    body += encode_varint(-1) if key is None else encode_varint(len(key)) + key
    body += encode_varint(-1) if value is None else encode_varint(len(value)) + value
    body += headers
    return encode_varint(len(body)) + body


def _raw_batch(recs, base_offset, *, count=None, last_delta=None, ts=1000, attrs=0, pid=-1):
    """A v2 batch around hand-made records (any deltas, headers, varint sizes)."""
    import crc32c
    count = len(recs) if count is None else count
    last_delta = len(recs) - 1 if last_delta is None else last_delta
    rest = struct.pack(">hiqqqhii", attrs, last_delta, ts, ts + 50, pid, 0 if pid >= 0 else -1,
                       -1, count) + b"".join(recs)
    return struct.pack(">qiibI", base_offset, 9 + len(rest), -1, 2, crc32c.crc32c(rest)) + rest


def _ckey(group, topic="t", partition=0, rtype=1):
    return encode_record_key(rtype, {"group": group, "topic": topic, "partition": partition})


def _cval(offset, version=3, metadata="", ts=1000):
    return encode_record_value(1, version, {"offset": offset, "leader_epoch": 7,
                                            "metadata": metadata, "commit_timestamp": ts,
                                            "expire_timestamp": ts + 5})


def _odd_batches() -> list[bytes]:
    """Batches the column-wise parse takes, and every kind it must hand back."""
    out, off = [], 0

    def add(batch, n):
        nonlocal off
        out.append(batch)
        off += n

    for g in range(6):  # plain commits, several groups and partitions
        add(build_batch([(_ckey(f"g{g}", "topic-a", p), _cval(100 * g + p), [], 1000 + g)
                         for p in range(10)], base_offset=off), 10)
    # v3 and v4 with empty metadata are both 24 bytes; v0-v2 and metadata are not
    add(build_batch([(_ckey("g0", "topic-a", p), _cval(5, v), [], 1100) for p, v in
                     enumerate((3, 4, 3, 4))], base_offset=off), 4)
    add(build_batch([(_ckey("g1", "topic-a", p), _cval(6, v, md), [], 1100) for p, (v, md) in
                     enumerate(((0, ""), (1, ""), (2, ""), (3, "x"), (4, "meta")))],
                    base_offset=off), 5)
    # tombstones among values, key type 0, timestamps that differ inside a batch
    add(build_batch([(_ckey("g2", "topic-a", 0), None, [], 1200),
                     (_ckey("g2", "topic-a", 1), _cval(9), [], 1201),
                     (_ckey("g2", "topic-a", 2, rtype=0), _cval(9), [], 1350),
                     (_ckey("g2", "topic-a", 3), None, [], 1199)], base_offset=off), 4)
    # log-append time, transactional with its marker
    add(build_batch([(_ckey("g3"), _cval(1), [], 1400)] * 3, base_offset=off,
                    timestamp_type_log_append=True), 3)
    add(build_batch([(_ckey("g4", "tx", p), _cval(p), [], 1500) for p in range(3)],
                    base_offset=off, producer_id=77, transactional=True), 3)
    add(build_batch([(struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 0), [], 1501)],
                    base_offset=off, producer_id=77, transactional=True, control=True), 1)
    # offset deltas with gaps (compaction), a timestamp delta of three varint bytes
    add(_raw_batch([_rec(_ckey("gap"), _cval(1), 0, 0), _rec(_ckey("gap", "u"), _cval(2), 5, 3),
                    _rec(_ckey("gap", "v"), _cval(3), 200000, 7)], off, last_delta=7), 8)
    # long keys: two-byte length varints, past the key table (> 256 bytes), three-byte varints
    for n in (100, 300, 9000):
        add(build_batch([(_ckey("L" * n, "topic-a", p), _cval(p), [], 1600) for p in range(3)],
                        base_offset=off), 3)
    # a group record, an unknown record type, an unknown value version, in commit batches
    gm = encode_record_value(2, 3, {"protocol_type": "consumer", "generation": 1,
                                    "protocol": "range", "leader": "m",
                                    "current_state_timestamp": 1, "members": []})
    add(build_batch([(_ckey("g0"), _cval(1), [], 1700),
                     (encode_record_key(2, {"group": "g0"}), gm, [], 1700)],
                    base_offset=off), 2)
    add(build_batch([(_ckey("g0"), _cval(2), [], 1701),
                     (struct.pack(">h", 999) + b"\x00\x01x", b"\x00\x00", [], 1701)],
                    base_offset=off), 2)
    bad_version = bytearray(_cval(3))
    struct.pack_into(">h", bad_version, 0, 9)
    add(build_batch([(_ckey("g0"), _cval(3), [], 1702), (_ckey("g0", "t", 1), bytes(bad_version),
                                                          [], 1702)], base_offset=off), 2)
    # record headers, a null key, more records than the column-wise parse takes
    add(build_batch([(_ckey("g1"), _cval(4), [("h", b"v")], 1800)], base_offset=off), 1)
    add(_raw_batch([_rec(_ckey("g1"), _cval(5)), _rec(None, _cval(6), off_delta=1)], off), 2)
    add(build_batch([(_ckey("g1", "many", p), _cval(p), [], 1900) for p in range(70)],
                    base_offset=off), 70)
    # bad CRC, compressed, a record overrunning its batch, a count that does not fit
    crc_bad = bytearray(build_batch([(_ckey("g2"), _cval(1), [], 2000)], base_offset=off))
    crc_bad[-1] ^= 1
    add(bytes(crc_bad), 1)
    add(build_batch([(_ckey("g2", "z", p), _cval(p), [], 2001) for p in range(4)],
                    base_offset=off, compression=1), 4)
    add(_raw_batch([_rec(_ckey("g3"), _cval(1))[:-1] + b"\x02" + b"\x00",
                    _rec(_ckey("g3", "u"), _cval(2), off_delta=1)], off), 2)
    add(_raw_batch([_rec(_ckey("g3"), _cval(1)), _rec(_ckey("g3", "u"), _cval(2), off_delta=1)],
                   off, count=3), 2)
    add(_raw_batch([_rec(_ckey("g3"), _cval(1)), _rec(_ckey("g3", "u"), _cval(2), off_delta=1)],
                   off, count=1), 2)  # bytes left over
    for g in range(3):  # and plain commits again after all that
        add(build_batch([(_ckey(f"g{g}", "topic-b", p), _cval(p), [], 2100) for p in range(10)],
                        base_offset=off), 10)
    return out


def _both_ways(paths, monkeypatch, **kw):
    """Rows of the column-wise parse and of the per-record loop over the same segments."""
    calls = {"plain": 0}
    plain = decode.RecordBatchBuilder._plain_batch

    def counting(self, *a):
        calls["plain"] += 1
        return plain(self, *a)

    monkeypatch.setattr(decode.RecordBatchBuilder, "_plain_batch", counting)
    out = []
    for vectorized in (True, False):
        calls["plain"] = 0
        rows = []
        for p, path in paths:
            builder = decode.RecordBatchBuilder(vectorized=vectorized)
            for rb in segments.read_segment(path, p, builder, **kw):
                rows.extend(rb.to_pylist())
        out.append((rows, calls["plain"]))
    (fast, fast_plain), (slow, slow_plain) = out
    return fast, slow, fast_plain, slow_plain


@pytest.mark.parametrize("chunk_bytes", [segments.DEFAULT_CHUNK_BYTES, 700])
def test_column_wise_parse_equals_the_per_record_loop(tmp_path, monkeypatch, chunk_bytes):
    path = _segment(tmp_path, _odd_batches())
    fast, slow, fast_plain, slow_plain = _both_ways([(0, path)], monkeypatch,
                                                    chunk_bytes=chunk_bytes)
    assert fast == slow
    assert fast_plain < slow_plain  # the column-wise parse took some batches itself
    errors = sorted(r["error"] for r in fast if r["error"])
    assert errors == ["corrupt_batch"] * 3 + ["crc_mismatch", "undecodable_key",
                      "unknown_record_type", "unknown_record_version"]
    assert {r["value_version"] for r in fast if r["record_type"] in (0, 1)} \
        == {0, 1, 2, 3, 4, 9, None}
    gap = [(r["offset"], r["timestamp"]) for r in fast if r["group"] == "gap"]
    assert [(o - gap[0][0], t) for o, t in gap] == [(0, 1000), (3, 1005), (7, 201000)]


def test_column_wise_parse_on_a_generated_log_and_offset_ranges(small, tmp_path, monkeypatch):
    paths = [(p, seg) for p, d in segments.partition_dirs(small) for _, seg in segments.segment_files(d)]
    fast, slow, fast_plain, slow_plain = _both_ways(paths, monkeypatch)
    assert fast == slow and fast_plain < slow_plain
    path = _segment(tmp_path, _odd_batches())
    for lo, hi in ((0, 40), (45, 80), (61, 200)):
        fast, slow, _, _ = _both_ways([(0, path)], monkeypatch, min_offset=lo, max_offset=hi)
        assert fast == slow and fast


def test_key_table_collision_is_a_miss():
    buf = b"\x0aabcdefghij" + b"\x0azyxwvutsrq" + bytes(16)
    table = key_table.KeyTable()
    kpos, klen = np.array([0, 11]), np.array([11, 11])
    h, words, usable = table.words_of(buf, kpos, klen)
    assert usable.all() and h[0] != h[1]
    table.add(h[:1], words[:1], klen[:1], np.array([5]))
    assert table.lookup(h, words, klen, usable).tolist() == [5, -1]
    forged = h.copy()
    forged[1] = h[0]  # same hash, other bytes: still not key 5
    assert table.lookup(forged, words, klen, usable).tolist() == [5, -1]
