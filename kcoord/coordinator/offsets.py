"""Committed offsets of one shard (OffsetMetadataManager.java).

State changes through `replay`; handlers build OffsetCommit records
(type 1) and tombstones, and answer from the replayed state.  A consumer's
plain commit (commit_applied) makes its change itself and hands the runtime
compact commit records (protocol/record_codec.py), replayed only when the
log is loaded.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

from ..protocol.commit_request import FlatTopic
from ..protocol.errors import Err
from ..protocol.messages.coordinator_records import OFFSET_COMMIT  # (type 0 is the legacy one)
from .result import Record
from .compiled import mypyc_attr



class OffsetValue(NamedTuple):
    """A committed offset as the store holds it (immutable: replay replaces it).
    A NamedTuple so that replay builds it with tuple.__new__, no Python call."""
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int | None


def offset_record(group: str, topic: str, partition: int, value: OffsetValue) -> Record:
    """Kafka writes value v3, or v1 when an expire timestamp is set (v2-4 retention)."""
    if value.expire_timestamp is not None:
        body = {"offset": value.offset, "metadata": value.metadata,
                "commit_timestamp": value.commit_timestamp,
                "expire_timestamp": value.expire_timestamp}
        version = 1
    else:
        body = {"offset": value.offset, "leader_epoch": value.leader_epoch,
                "metadata": value.metadata, "commit_timestamp": value.commit_timestamp}
        version = 3
    return Record(OFFSET_COMMIT, {"group": group, "topic": topic, "partition": partition},
                  body, version)


_new_tuple = tuple.__new__  # Record(...) without NamedTuple's Python-level __new__


def commit_records(group: str, topics: list[dict], error: int, now: int,
                   expire: int | None, metadata_max: int) -> tuple[list[dict], list[Record]]:
    """OffsetCommit's answer per topic and the records of the partitions it
    takes (the hot path of a commit: the same records offset_record builds).

    A partition keeps an error code set by the runtime (unknown partitions);
    the others get `error`, or OFFSET_METADATA_TOO_LARGE when the metadata
    has more than `metadata_max` UTF-16 code units (as Java's String.length)."""
    records: list[Record] = []
    add = records.append
    new, record_type = _new_tuple, Record
    too_large = Err.OFFSET_METADATA_TOO_LARGE
    out = []
    for t in topics:
        name = t["name"]
        parts: list[dict] = []
        part = parts.append
        for p in t["partitions"]:
            index = p["partition_index"]
            code = p.get("error_code")  # set by the runtime for unknown partitions
            if code is None:
                code = error
            if code == 0:
                meta = p.get("committed_metadata") or ""
                # a string of n characters has n..2n UTF-16 code units
                if 2 * len(meta) > metadata_max and \
                        len(meta.encode("utf-16-le")) // 2 > metadata_max:
                    code = too_large
                elif expire is None:
                    add(new(record_type, (
                        OFFSET_COMMIT, {"group": group, "topic": name, "partition": index},
                        {"offset": p["committed_offset"],
                         "leader_epoch": p.get("committed_leader_epoch", -1),
                         "metadata": meta, "commit_timestamp": now}, 3)))
                else:
                    add(offset_record(group, name, index, OffsetValue(
                        p["committed_offset"], p.get("committed_leader_epoch", -1), meta, now,
                        expire)))
            part({"partition_index": index, "error_code": code})
        out.append({"name": name, "partitions": parts})
    return out, records


def commit_applied(group: str, topics: list[dict], now: int, metadata_max: int,
                   into: dict[tuple[str, int], OffsetValue]) -> tuple[list[int] | None, list]:
    """commit_records for a commit with no group error, no expire timestamp
    and no pending transactional offsets (what a consumer's commit is),
    with the records' change made at once: each taken partition's value is
    put in `into` (the group's offsets) and its record is the compact
    (group, topic, partition, value) tuple (record_codec.py: no key and
    value dicts), which the runtime appends without replaying (the replay of
    ten records was a seventh of a commit's server instructions, bench
    instr_split), as an AppliedRecord.
    -> (the error code of each partition in request order, or None when
    every one is NONE: the answer is then all NONE and cacheable; records)."""
    # (compiled: typed dicts and lists take mypyc's direct dict and list
    # calls; a bound method kept in a local, as `add = records.append`, is
    # a generic call there, slower than the method)
    records: list = []
    new, value_type = _new_tuple, OffsetValue
    codes: list[int] = []
    taken = True
    for t in topics:
        name: str = t["name"]
        partitions: list[dict] = t["partitions"]
        for p in partitions:
            code: Any = p.get("error_code")  # set by the runtime for unknown partitions
            if code is None or code == 0:
                meta: str = p.get("committed_metadata") or ""
                # a string of n characters has n..2n UTF-16 code units
                if 2 * len(meta) > metadata_max and \
                        len(meta.encode("utf-16-le")) // 2 > metadata_max:
                    code = Err.OFFSET_METADATA_TOO_LARGE
                else:
                    index = p["partition_index"]
                    value = into[(name, index)] = new(value_type, (
                        p["committed_offset"], p.get("committed_leader_epoch", -1), meta, now,
                        None))
                    records.append((group, name, index, value))
                    code = 0
            if code:
                taken = False
            codes.append(code)
    return (None if taken else codes), records


def commit_taken(group: str, topics: list[FlatTopic], now: int,
                 into: dict[tuple[str, int], OffsetValue]) -> list:
    """commit_applied of a flat request (protocol/commit_request.py) whose
    every partition is taken (the caller found each known, its metadata
    within bounds and the commit a consumer's plain one): the same values
    put in `into`, the same compact records."""
    records: list = []
    new, value_type = _new_tuple, OffsetValue
    # (compiled: the ints are passed on as the objects they are, the
    # timestamp boxed once for all: no int object made per partition)
    stamp: object = now
    for name, partitions in topics:
        for p in partitions:
            index = p[0]
            value = into[(name, index)] = new(value_type, (p[1], p[2], p[3] or "", stamp, None))
            records.append((group, name, index, value))
    return records


def commit_answer(topics: list[dict], codes: list[int] | None) -> list[dict]:
    """OffsetCommit's answer per topic from commit_applied's codes (None: all NONE)."""
    out = []
    i = 0
    for t in topics:
        parts = []
        for p in t["partitions"]:
            parts.append({"partition_index": p["partition_index"],
                          "error_code": 0 if codes is None else codes[i]})
            i += 1
        out.append({"name": t["name"], "partitions": parts})
    return out


def offset_tombstone(group: str, topic: str, partition: int) -> Record:
    return Record(OFFSET_COMMIT, {"group": group, "topic": topic, "partition": partition}, None)


# pickled with the core (snapshot.py) and patched by tests: an ordinary class, its methods compiled
@mypyc_attr(native_class=False)
class OffsetStore:
    def __init__(self) -> None:
        self.by_group: dict[str, dict[tuple[str, int], OffsetValue]] = {}

    # -------------------------------------------------------------- replay
    def replay(self, key: dict, value: dict | None, version: int) -> None:
        group = key["group"]
        tp = (key["topic"], key["partition"])
        if value is None:
            offsets = self.by_group.get(group)
            if offsets is not None:
                offsets.pop(tp, None)
                if not offsets:
                    del self.by_group[group]
            return
        offsets = self.by_group.get(group)
        if offsets is None:
            offsets = self.by_group[group] = {}
        if version == 3:  # what kcoord and Kafka write
            offsets[tp] = _new_tuple(OffsetValue, (
                value["offset"], value.get("leader_epoch", -1), value["metadata"] or "",
                value["commit_timestamp"], None))
            return
        expire = value.get("expire_timestamp", -1) if version == 1 else -1
        offsets[tp] = OffsetValue(
            value["offset"], value.get("leader_epoch", -1) if version >= 3 else -1,
            value["metadata"] or "", value["commit_timestamp"],
            None if expire is None or expire < 0 else expire)

    # --------------------------------------------------------------- reads
    def group_offsets(self, group: str) -> dict[tuple[str, int], OffsetValue]:
        return self.by_group.get(group, {})

    def has_offsets(self, group: str) -> bool:
        return bool(self.by_group.get(group))

    def fetch(self, group: str, topics: list[dict] | None) -> list[dict]:
        """OffsetFetch's topics list; topics None means every committed partition."""
        offsets = self.by_group.get(group, {})
        if topics is None:
            by_topic: dict[str, list[int]] = {}
            for (topic, partition) in offsets:
                by_topic.setdefault(topic, []).append(partition)
            topics = [{"name": t, "partition_indexes": sorted(ps)} for t, ps in sorted(by_topic.items())]
        out = []
        for t in topics:
            parts = []
            for p in t["partition_indexes"]:
                v = offsets.get((t["name"], p))
                if v is None:
                    parts.append({"partition_index": p, "committed_offset": -1,
                                  "committed_leader_epoch": -1, "metadata": "",
                                  "error_code": Err.NONE})
                else:
                    parts.append({"partition_index": p, "committed_offset": v.offset,
                                  "committed_leader_epoch": v.leader_epoch,
                                  "metadata": v.metadata, "error_code": Err.NONE})
            out.append({"name": t["name"], "partitions": parts})
        return out

    def expired(self, group: str, now_ms: int, retention_ms: int, base_ms: int | None,
                subscribed: set[str] | None) -> list[tuple[str, int]]:
        """Partitions whose offsets expire now (OffsetExpirationConditionImpl).

        base_ms None means "use each offset's commit timestamp"."""
        out = []
        for (topic, partition), v in self.by_group.get(group, {}).items():
            if subscribed and topic in subscribed:
                continue
            if v.expire_timestamp is not None:
                if now_ms >= v.expire_timestamp:
                    out.append((topic, partition))
            elif now_ms - (v.commit_timestamp if base_ms is None else base_ms) >= retention_ms:
                out.append((topic, partition))
        return out

    def snapshot(self) -> dict:
        return {g: {tp: (v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp)
                    for tp, v in offs.items()}
                for g, offs in self.by_group.items() if offs}


def delete_offsets(group_id: str, topics: list[dict], subscribed: Callable[[str], bool],
                   committed) -> tuple[dict, list[Record]]:
    """OffsetDelete's answer and tombstones: a partition already refused
    keeps its error, one of a topic the group subscribes to is refused with
    GROUP_SUBSCRIBED_TO_TOPIC, the others are deleted (NONE also when
    nothing was committed)."""
    records: list[Record] = []
    out = []
    for t in topics:
        parts = []
        for p in t["partitions"]:
            code = p.get("error_code")
            if code is None:
                if subscribed(t["name"]):
                    code = Err.GROUP_SUBSCRIBED_TO_TOPIC
                else:
                    code = Err.NONE
                    if (t["name"], p["partition_index"]) in committed:
                        records.append(offset_tombstone(group_id, t["name"], p["partition_index"]))
            parts.append({"partition_index": p["partition_index"], "error_code": code})
        out.append({"name": t["name"], "partitions": parts})
    return {"error_code": Err.NONE, "throttle_time_ms": 0, "topics": out}, records
