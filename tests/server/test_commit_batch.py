"""The group commit's batch builder (build_records_batch, with OffsetCommit
records encoded by precompiled structs) writes exactly the bytes of the
schema codecs and build_batch, and the log reads them back as written."""
from __future__ import annotations

from kcoord.coordinator.offsets import (OffsetStore, OffsetValue, commit_answer, commit_applied,
                                       commit_records, offset_record, offset_tombstone)
from kcoord.coordinator.result import Record
from kcoord.protocol.messages.coordinator_records import encode_record_key, encode_record_value
from kcoord.protocol.records import build_batch, decode_batch
from kcoord.protocol.coordinator_batch import (EncodedRecords, build_records_batch,
                                               encode_commit_records)
from kcoord.protocol.record_codec import encode_record, generic_commit
from kcoord.protocol.record_codec import decode_record

NOW = 1_700_000_000_123


def schema_encode(record: Record):
    return (encode_record_key(record.type, record.key),
            encode_record_value(record.type, record.value_version, record.value))


def sample_records() -> list[Record]:
    records = []
    for i in range(150):  # offset deltas and record lengths past one-byte varints
        group = "g" if i % 3 else "a-much-longer-group-id-" + "x" * (i % 70)
        records.append(offset_record(group, "topic", i, OffsetValue(
            10 * i, i % 5 - 1, "" if i % 4 else "meta\u00e9" * (i % 30), NOW - i, None)))
    records.append(offset_record("g", "t", 0, OffsetValue(5, -1, "m", NOW, NOW + 1000)))  # v1
    records.append(offset_tombstone("g", "t", 1))
    records.append(offset_tombstone("g", "t" * 100, 2))
    records.append(Record(2, {"group": "g"}, None))  # a group tombstone
    return records


def test_encode_record_matches_the_schema_codecs():
    for record in sample_records():
        assert encode_record(record) == schema_encode(record)
        assert encode_record(record) == schema_encode(record)  # key prefix cached


def test_batch_matches_build_batch_and_decodes_back():
    records = sample_records()
    expected = build_batch([(*schema_encode(r), [], NOW) for r in records])
    batch = build_records_batch(records, NOW)
    assert bytes(batch) == expected
    header, decoded = decode_batch(bytes(batch), 0)
    assert header.records_count == len(records)
    back = [decode_record(r.key, r.value) for r in decoded]
    assert [(r.type, r.key, r.value_version) for r in back] == [
        (r.type, r.key, r.value_version) for r in records]
    assert [schema_encode(r) for r in back] == [schema_encode(r) for r in records]


def test_single_record_batch():
    record = offset_record("g", "t", 3, OffsetValue(7, 2, "", NOW, None))
    assert bytes(build_records_batch([record], NOW)) == build_batch(
        [(*schema_encode(record), [], NOW)])


def test_commit_records_are_offset_records():
    topics = [{"name": "t", "partitions": [
        {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": 1,
         "committed_metadata": "x"},
        {"partition_index": 1, "committed_offset": 6, "committed_leader_epoch": -1,
         "committed_metadata": None},
        {"partition_index": 2, "committed_offset": 7, "committed_leader_epoch": -1,
         "committed_metadata": "y" * 11},
        {"partition_index": 9, "committed_offset": 8, "error_code": 3}]}]
    out, records = commit_records("g", topics, 0, NOW, None, 10)
    assert out == [{"name": "t", "partitions": [
        {"partition_index": 0, "error_code": 0}, {"partition_index": 1, "error_code": 0},
        {"partition_index": 2, "error_code": 12}, {"partition_index": 9, "error_code": 3}]}]
    assert records == [offset_record("g", "t", 0, OffsetValue(5, 1, "x", NOW, None)),
                       offset_record("g", "t", 1, OffsetValue(6, -1, "", NOW, None))]
    assert all(type(r) is Record for r in records)
    _, records = commit_records("g", topics[:1], 0, NOW, NOW + 60_000, 10)
    assert records[0] == offset_record("g", "t", 0, OffsetValue(5, 1, "x", NOW, NOW + 60_000))
    out, records = commit_records("g", topics, 22, NOW, None, 10)  # the group's error
    assert not records and [p["error_code"] for p in out[0]["partitions"]] == [22, 22, 22, 3]


def test_commit_applied_is_commit_records_then_their_replay():
    """The lean path: the same records (in the compact form), the same answer,
    and the group's offsets as the replay of commit_records' records leaves them."""
    topics = [{"name": "t", "partitions": [
        {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": 1,
         "committed_metadata": "x"},
        {"partition_index": 1, "committed_offset": 6, "committed_leader_epoch": -1,
         "committed_metadata": None},
        {"partition_index": 2, "committed_offset": 7, "committed_leader_epoch": -1,
         "committed_metadata": "y" * 11},
        {"partition_index": 1, "committed_offset": 9},  # repeated: the last one wins
        {"partition_index": 9, "committed_offset": 8, "error_code": 3}]},
        {"name": "u", "partitions": [{"partition_index": 4, "committed_offset": 1}]}]
    out, records = commit_records("g", topics, 0, NOW, None, 10)
    into = {(("old"), 0): OffsetValue(1, -1, "", 0, None)}
    codes, applied = commit_applied("g", topics, NOW, 10, into)
    assert [generic_commit(r) for r in applied] == records
    assert all(type(r) is tuple for r in applied)
    assert commit_answer(topics, codes) == out and codes == [0, 0, 12, 0, 3, 0]
    store = OffsetStore()
    store.by_group["g"] = {("old", 0): OffsetValue(1, -1, "", 0, None)}
    for r in records:
        store.replay(r.key, r.value, r.value_version)
    assert into == store.by_group["g"]
    plain = topics[1:]  # every partition taken: no codes, the answer all NONE
    codes, _ = commit_applied("g", plain, NOW, 10, {})
    assert codes is None and commit_answer(plain, None) == commit_records(
        "g", plain, 0, NOW, None, 10)[0]


def compact_records() -> list[tuple]:
    """Compact commit records of several groups and topics, with and without metadata."""
    out = []
    for i in range(150):
        group = "g" if i % 3 else "a-much-longer-group-id-" + "x" * (i % 70)
        topic = "topic" if i % 5 else "t\u00e9" * (i % 40)
        out.append((group, topic, i, OffsetValue(10 * i, i % 5 - 1,
                                                 "" if i % 4 else "meta\u00e9" * (i % 30),
                                                 NOW - i, None)))
    return out


def test_compact_records_pack_to_the_generic_bytes():
    """A batch of compact commit records is byte for byte the batch of the same
    records in the generic form, alone or mixed with other records, and
    decodes back to them."""
    compact = compact_records()
    generic = [generic_commit(r) for r in compact]
    assert bytes(build_records_batch(compact, NOW)) == build_batch(
        [(*schema_encode(r), [], NOW) for r in generic])
    mixed = sample_records()[:20] + compact + sample_records()[150:]
    assert bytes(build_records_batch(mixed, NOW)) == bytes(build_records_batch(
        [generic_commit(r) if type(r) is tuple else r for r in mixed], NOW))
    _, decoded = decode_batch(bytes(build_records_batch(compact, NOW)), 0)
    back = [decode_record(r.key, r.value) for r in decoded]
    assert [(r.type, r.key, r.value_version) for r in back] == [
        (r.type, r.key, r.value_version) for r in generic]
    assert [schema_encode(r) for r in back] == [schema_encode(r) for r in generic]
    for record in compact[:10]:
        assert encode_record(record) == schema_encode(generic_commit(record))


def test_records_encoded_when_queued_are_the_batch_of_the_records():
    """Commits' compact records encoded as they are queued
    (encode_commit_records, at the batch's record count then) and batched
    with records queued as they are give the very bytes of the batch of all
    the records; what the compact packing does not take is refused whole."""
    import random
    rng = random.Random(7)
    compact = [r for r in compact_records() if not r[3][2]]  # the plain ones
    records = sample_records()[:40] + compact + sample_records()[150:]
    whole = bytes(build_records_batch(records, NOW))
    for _ in range(20):
        items, count, i = [], 0, 0
        while i < len(records):
            n = rng.randint(1, 12)
            part = records[i:i + n]
            encoded = encode_commit_records(part, count)
            if encoded is None:
                assert any(type(r) is not tuple or r[3][2] for r in part)
                items += part
            else:
                assert encoded.count == len(part) and encoded.first_delta == count
                items.append(encoded)
            count += len(part)
            i += n
        assert any(item.__class__ is EncodedRecords for item in items)
        assert bytes(build_records_batch(items, NOW)) == whole
    with_metadata = [r for r in compact_records() if r[3][2]][:3]
    assert encode_commit_records(compact[:3] + with_metadata, 0) is None
    assert encode_commit_records(compact[:3], 16_382) is None  # deltas past two-byte varints
    # a queue that miscounted fails the append, never writes wrong deltas
    try:
        build_records_batch([compact[0], encode_commit_records(compact[1:3], 0)], NOW)
    except ValueError:
        pass
    else:
        raise AssertionError("records encoded at another delta were batched")


def test_compact_record_replays_as_its_generic_form():
    from kcoord.coordinator.shard import CoordinatorShard
    one, other = CoordinatorShard(0), CoordinatorShard(0)
    for record in compact_records():
        one.replay(record)
        other.replay(generic_commit(record))
    assert one.offsets.by_group == other.offsets.by_group and set(one.groups) == set(other.groups)


def test_replay_all_is_replay_of_each_record():
    from kcoord.coordinator.shard import CoordinatorShard, group_tombstone
    from kcoord.coordinator.share_group import group_epoch_record
    records = sample_records()
    # a commit under a share group's name makes no simple group beside it
    records += [group_epoch_record("s", 1, 0), offset_record("s", "x", 0, OffsetValue(3, -1, "", NOW, None)),
                offset_tombstone("g", "topic", 3), group_tombstone("g"),
                offset_record("g", "topic", 4, OffsetValue(1, 2, "", NOW, None)),
                offset_record("h", "x", 0, OffsetValue(9, -1, "m", NOW, NOW + 5))]
    one, many = CoordinatorShard(0), CoordinatorShard(0)
    for record in records:
        one.replay(record)
    for i in range(0, len(records), 7):  # in several calls, as rounds would
        many.replay_all(records[i:i + 7])
    assert many.snapshot() == one.snapshot()
    assert many.offsets.by_group == one.offsets.by_group
    assert set(many.groups) == set(one.groups) and "s" not in many.groups
    assert set(many.share.groups) == set(one.share.groups) == {"s"}
    one.replay_txn_offsets(7, 0, [offset_record("s", "x", 1, OffsetValue(4, -1, "", NOW, None))])
    assert "s" not in one.groups  # nor do a transaction's pending offsets
