"""Offset and group-admin APIs at the wire level, including bad input.

Each request is encoded with kcoord's own codecs (request_codec,
encode_request_header) and sent over a plain socket to a real
`kcoord serve` subprocess, so nothing here goes through a client library.
Error codes follow KAFKA_REFERENCE.md 1.6 and 1.8 (Kafka's OffsetMetadataManager,
GroupCoordinatorShard and KafkaApis).
"""
from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

import pytest

from kcoord.coordinator.offsets import OffsetValue, offset_record
from kcoord.coordinator.partitioner import partition_for
from kcoord.protocol.api import is_flexible, request_codec, response_codec
from kcoord.protocol.errors import Err
from kcoord.protocol.headers import (decode_response_header, encode_request_header,
                                     response_header_version)
from kcoord.protocol.records import build_batch
from kcoord.protocol.record_codec import encode_record
from tests.support import ServerProcess

OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 8, 9, 10
LIST_GROUPS, DESCRIBE_GROUPS, CREATE_TOPICS, DELETE_GROUPS, OFFSET_DELETE = 16, 15, 19, 42, 47


# --------------------------------------------------------------------- wire
class Wire:
    """A blocking Kafka connection; `send`/`recv` pipeline, `call` is one round trip."""

    def __init__(self, port: int, timeout: float = 30.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.corr = 0
        self.pending: dict[int, tuple[int, int]] = {}
        self.buf = bytearray()

    def close(self) -> None:
        self.sock.close()

    def send(self, key: int, version: int, body: dict) -> int:
        self.corr += 1
        flexible = is_flexible(key, version)
        encode, _ = request_codec(key, version)
        frame = encode_request_header(key, version, self.corr, "wire-test", flexible) + bytes(encode(body))
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        self.pending[self.corr] = (key, version)
        return self.corr

    def _frame(self) -> bytes:
        while True:
            if len(self.buf) >= 4:
                (n,) = struct.unpack_from(">i", self.buf)
                if len(self.buf) >= 4 + n:
                    frame = bytes(self.buf[4:4 + n])
                    del self.buf[:4 + n]
                    return frame
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk

    def recv(self) -> tuple[int, dict]:
        frame = self._frame()
        (corr,) = struct.unpack_from(">i", frame)
        key, version = self.pending.pop(corr)
        flexible = response_header_version(key, is_flexible(key, version)) == 1
        _, pos = decode_response_header(frame, flexible)
        _, decode = response_codec(key, version)
        msg, end = decode(frame, pos)
        assert end == len(frame), f"api {key} v{version}: {len(frame) - end} trailing bytes"
        return corr, msg

    def call(self, key: int, version: int, body: dict) -> dict:
        corr = self.send(key, version, body)
        got, msg = self.recv()
        assert got == corr
        return msg


# ------------------------------------------------------------------ helpers
def create_topic(w: Wire, name: str, partitions: int) -> None:
    resp = w.call(CREATE_TOPICS, 5, {"topics": [{"name": name, "num_partitions": partitions,
                                                 "replication_factor": 1}],
                                     "timeout_ms": 10000})
    assert resp["topics"][0]["error_code"] in (Err.NONE, Err.TOPIC_ALREADY_EXISTS), resp


def commit_body(group: str, topics: dict[str, list], generation: int = -1, member: str = "",
                retention: int = -1) -> dict:
    """topics: name -> [(partition, offset, metadata[, leader_epoch])]."""
    return {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": member,
            "group_instance_id": None, "retention_time_ms": retention,
            "topics": [{"name": name, "partitions": [
                {"partition_index": p[0], "committed_offset": p[1], "committed_metadata": p[2],
                 "committed_leader_epoch": p[3] if len(p) > 3 else -1} for p in parts]}
                for name, parts in topics.items()]}


def commit_errors(resp: dict) -> dict[tuple[str, int], int]:
    return {(t["name"], p["partition_index"]): p["error_code"]
            for t in resp["topics"] for p in t["partitions"]}


def commit(w: Wire, group: str, topics: dict[str, list], version: int = 8, **kw) -> dict:
    return commit_errors(w.call(OFFSET_COMMIT, version, commit_body(group, topics, **kw)))


def fetch(w: Wire, group: str, topics: dict[str, list[int]] | None,
          version: int = 8) -> tuple[int, dict[tuple[str, int], tuple]]:
    """(group error, {(topic, partition): (offset, leader_epoch, metadata, error)})."""
    tlist = None if topics is None else [{"name": t, "partition_indexes": ps}
                                         for t, ps in topics.items()]
    if version >= 8:
        resp = w.call(OFFSET_FETCH, version, {"groups": [
            {"group_id": group, "member_id": None, "member_epoch": -1, "topics": tlist}],
            "require_stable": False})
        (g,) = resp["groups"]
        code, out_topics = g["error_code"], g["topics"]
    else:
        resp = w.call(OFFSET_FETCH, version, {"group_id": group, "topics": tlist,
                                              "require_stable": False})
        code, out_topics = resp.get("error_code", 0), resp["topics"]
    return code, {(t["name"], p["partition_index"]):
                  (p["committed_offset"], p.get("committed_leader_epoch", -1), p["metadata"],
                   p["error_code"])
                  for t in out_topics for p in t["partitions"]}


def list_group_ids(w: Wire) -> dict[str, dict]:
    resp = w.call(LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})
    assert resp["error_code"] == 0, resp
    return {g["group_id"]: g for g in resp["groups"]}


def groups_in_distinct_shards(count: int, prefix: str, partitions: int = 50) -> list[str]:
    out, seen, i = [], set(), 0
    while len(out) < count:
        gid = f"{prefix}-{i}"
        shard = partition_for(gid, partitions)
        if shard not in seen:
            seen.add(shard)
            out.append(gid)
        i += 1
    return out


@pytest.fixture
def servers(tmp_path):
    """Factory: start `kcoord serve` with extra settings; all are stopped at the end."""
    started: list[ServerProcess] = []

    def make(settings: dict[str, str] | None = None, name: str = "data") -> ServerProcess:
        proc = ServerProcess(tmp_path / name, settings=settings)
        proc.start()
        started.append(proc)
        return proc

    yield make
    for proc in started:
        proc.stop()


@pytest.fixture
def srv(servers):
    return servers()


def with_topics(port: int) -> Wire:
    w = Wire(port)
    create_topic(w, "orders", 4)
    create_topic(w, "audit", 2)
    return w


@pytest.fixture(scope="module")
def shared_srv(tmp_path_factory):
    """One server for the tests that never restart it: each uses groups of its own."""
    with ServerProcess(tmp_path_factory.mktemp("offsets") / "data") as proc:
        with_topics(proc.port).close()
        yield proc


@pytest.fixture
def wire(shared_srv):
    w = Wire(shared_srv.port)
    yield w
    w.close()


@pytest.fixture
def own_wire(srv):
    """A connection to the test's own server (for the tests that restart it)."""
    w = with_topics(srv.port)
    yield w
    w.close()


# ======================================================= commit and fetch
@pytest.mark.parametrize("version", range(10))
def test_commit_then_fetch_every_version(wire, version):
    group = f"rt-v{version}"
    entries = [(0, 100 + version, f"meta-{version}", 7), (3, 5, "")]
    errors = commit(wire, group, {"orders": entries}, version=version)
    assert errors == {("orders", 0): 0, ("orders", 3): 0}
    fetch_version = min(version, 9)
    code, got = fetch(wire, group, {"orders": [0, 1, 3]}, version=fetch_version)
    assert code == 0
    epoch = 7 if version >= 6 and fetch_version >= 5 else -1
    assert got[("orders", 0)] == (100 + version, epoch, f"meta-{version}", 0)
    assert got[("orders", 1)] == (-1, -1, "", 0)  # never committed: -1, no error
    assert got[("orders", 3)][0] == 5


def test_null_metadata_is_stored_as_empty(wire):
    assert commit(wire, "nullmeta", {"orders": [(1, 9, None)]}) == {("orders", 1): 0}
    assert fetch(wire, "nullmeta", {"orders": [1]})[1][("orders", 1)] == (9, -1, "", 0)


def test_fetch_all_topics_with_null_topics(wire):
    commit(wire, "all", {"orders": [(0, 1, "a"), (2, 3, "b")], "audit": [(1, 4, "c")]})
    for version in (2, 7, 8, 9):
        code, got = fetch(wire, "all", None, version=version)
        assert code == 0
        assert {tp: v[0] for tp, v in got.items()} == {
            ("orders", 0): 1, ("orders", 2): 3, ("audit", 1): 4}, version
    # an unknown group fetched "all" answers an empty list, not an error
    assert fetch(wire, "never-seen", None) == (0, {})


# =================================================== metadata size limit
def test_metadata_too_large_fails_only_that_partition(wire):
    commit(wire, "meta", {"orders": [(1, 10, "old")]})
    errors = commit(wire, "meta", {"orders": [(0, 11, "x" * 4096), (1, 12, "y" * 4097),
                                              (2, 13, "ok")],
                                   "audit": [(0, 14, None)]})
    assert errors == {("orders", 0): 0, ("orders", 1): Err.OFFSET_METADATA_TOO_LARGE,
                      ("orders", 2): 0, ("audit", 0): 0}
    _, got = fetch(wire, "meta", {"orders": [0, 1, 2], "audit": [0]})
    assert got[("orders", 0)][:3] == (11, -1, "x" * 4096)
    assert got[("orders", 1)][:3] == (10, -1, "old")  # the rejected commit changed nothing
    assert got[("orders", 2)][0] == 13
    assert got[("audit", 0)][0] == 14


def test_metadata_limit_follows_config(servers):
    srv = servers({"offset.metadata.max.bytes": "10"})
    w = Wire(srv.port)
    create_topic(w, "orders", 2)
    errors = commit(w, "small", {"orders": [(0, 1, "a" * 10), (1, 2, "a" * 11)]})
    assert errors == {("orders", 0): 0, ("orders", 1): Err.OFFSET_METADATA_TOO_LARGE}


def test_metadata_limit_counts_characters_as_kafka_does(servers):
    """Kafka checks `metadata.length() > offset.metadata.max.bytes` on the Java
    String (OffsetMetadataManager.isMetadataInvalid): UTF-16 code units, not
    UTF-8 bytes.  10 x 'é' is 10 units (20 UTF-8 bytes) and fits a limit of 10."""
    srv = servers({"offset.metadata.max.bytes": "10"})
    w = Wire(srv.port)
    create_topic(w, "orders", 3)
    errors = commit(w, "utf", {"orders": [(0, 1, "é" * 10), (1, 2, "é" * 11),
                                          (2, 3, "\U0001F600" * 6)]})  # 6 emoji = 12 units
    assert errors == {("orders", 0): 0, ("orders", 1): Err.OFFSET_METADATA_TOO_LARGE,
                      ("orders", 2): Err.OFFSET_METADATA_TOO_LARGE}


# ============================================ unknown topics and partitions
def test_unknown_topic_or_partition(wire):
    errors = commit(wire, "unk", {"orders": [(0, 1, ""), (4, 1, ""), (-1, 1, "")],
                                  "no-such-topic": [(0, 1, "")]})
    assert errors == {("orders", 0): 0, ("orders", 4): Err.UNKNOWN_TOPIC_OR_PARTITION,
                      ("orders", -1): Err.UNKNOWN_TOPIC_OR_PARTITION,
                      ("no-such-topic", 0): Err.UNKNOWN_TOPIC_OR_PARTITION}
    _, got = fetch(wire, "unk", None)
    assert set(got) == {("orders", 0)}
    for version in (1, 5, 9):
        errors = commit(wire, "unk", {"no-such-topic": [(0, 1, "")]}, version=version)
        assert errors == {("no-such-topic", 0): Err.UNKNOWN_TOPIC_OR_PARTITION}
    resp = wire.call(OFFSET_DELETE, 0, {"group_id": "unk", "topics": [
        {"name": "no-such-topic", "partitions": [{"partition_index": 0}]},
        {"name": "orders", "partitions": [{"partition_index": 9}]}]})
    assert resp["error_code"] == 0
    assert commit_errors(resp) == {("no-such-topic", 0): Err.UNKNOWN_TOPIC_OR_PARTITION,
                                   ("orders", 9): Err.UNKNOWN_TOPIC_OR_PARTITION}


# ========================================================= empty group id
@pytest.mark.parametrize("version", [0, 1, 2, 5, 7, 8, 9])
def test_empty_group_id_offset_commit(wire, version):
    errors = commit(wire, "", {"orders": [(0, 1, ""), (1, 1, "")]}, version=version)
    assert errors == {("orders", 0): Err.INVALID_GROUP_ID, ("orders", 1): Err.INVALID_GROUP_ID}


def test_empty_group_id_offset_fetch(wire):
    # v0-1 have no top-level error code: every partition carries it
    for version in (0, 1):
        code, got = fetch(wire, "", {"orders": [0, 1]}, version=version)
        assert {tp: v[3] for tp, v in got.items()} == {
            ("orders", 0): Err.INVALID_GROUP_ID, ("orders", 1): Err.INVALID_GROUP_ID}
    for version in (2, 5, 7):
        code, _ = fetch(wire, "", {"orders": [0]}, version=version)
        assert code == Err.INVALID_GROUP_ID, version
    # v8+: per group, the other groups of the request are answered normally
    commit(wire, "fine", {"orders": [(0, 42, "")]})
    resp = wire.call(OFFSET_FETCH, 8, {"groups": [
        {"group_id": "", "topics": [{"name": "orders", "partition_indexes": [0]}]},
        {"group_id": "fine", "topics": [{"name": "orders", "partition_indexes": [0]}]}]})
    by_group = {g["group_id"]: g for g in resp["groups"]}
    assert by_group[""]["error_code"] == Err.INVALID_GROUP_ID
    assert by_group["fine"]["error_code"] == 0
    assert by_group["fine"]["topics"][0]["partitions"][0]["committed_offset"] == 42


def test_empty_group_id_offset_delete_and_delete_groups(wire):
    resp = wire.call(OFFSET_DELETE, 0, {"group_id": "", "topics": [
        {"name": "orders", "partitions": [{"partition_index": 0}]}]})
    assert resp["error_code"] == Err.INVALID_GROUP_ID
    resp = wire.call(DELETE_GROUPS, 2, {"groups_names": [""]})
    assert resp["results"] == [{"group_id": "", "error_code": Err.INVALID_GROUP_ID}]


# ====================================================== generation checks
def test_commit_with_generation_on_unknown_group(wire):
    body = dict(generation=5, member="member-1")
    assert commit(wire, "ghost", {"orders": [(0, 1, "")]}, version=9, **body) == {
        ("orders", 0): Err.GROUP_ID_NOT_FOUND}
    for version in range(1, 9):
        assert commit(wire, "ghost", {"orders": [(0, 1, "")]}, version=version, **body) == {
            ("orders", 0): Err.ILLEGAL_GENERATION}, version
    # generation 0 counts as ">= 0" too
    assert commit(wire, "ghost", {"orders": [(0, 1, "")]}, version=8, generation=0,
                  member="m") == {("orders", 0): Err.ILLEGAL_GENERATION}
    # nothing was written, no group was created
    assert fetch(wire, "ghost", None) == (0, {})
    assert "ghost" not in list_group_ids(wire)


def test_commit_with_generation_on_existing_simple_group(wire):
    """An existing group with no members (CLG.validateOffsetCommit): generation
    -1 commits whatever the member id; generation >= 0 names a member that does
    not exist: UNKNOWN_MEMBER_ID."""
    commit(wire, "simple-gen", {"orders": [(0, 1, "")]})
    for version in (1, 5, 8, 9):
        assert commit(wire, "simple-gen", {"orders": [(0, 2, "")]}, version=version,
                      generation=3, member="m-1") == {("orders", 0): Err.UNKNOWN_MEMBER_ID}, version
    assert commit(wire, "simple-gen", {"orders": [(0, 3, "")]}, version=8, generation=-1,
                  member="someone") == {("orders", 0): 0}
    assert fetch(wire, "simple-gen", {"orders": [0]})[1][("orders", 0)][0] == 3


def test_unknown_topics_are_answered_before_the_group_is_checked(wire):
    """KafkaApis.handleOffsetCommitRequest answers unknown topics and partitions
    with UNKNOWN_TOPIC_OR_PARTITION itself and hands only the rest to the group
    coordinator, so a bad group id never hides an unknown topic."""
    errors = commit(wire, "", {"orders": [(0, 1, "")], "no-such-topic": [(0, 1, "")]})
    assert errors == {("orders", 0): Err.INVALID_GROUP_ID,
                      ("no-such-topic", 0): Err.UNKNOWN_TOPIC_OR_PARTITION}


def test_pipelined_commit_then_fetch_sees_the_commit(wire):
    """Requests on one connection are answered in order, and a fetch behind a
    commit answers from the state that commit made durable."""
    for i in range(50):
        wire.send(OFFSET_COMMIT, 8, commit_body("pipe", {"orders": [(0, i, f"m{i}")]}))
        wire.send(OFFSET_FETCH, 8, {"groups": [{"group_id": "pipe", "topics": [
            {"name": "orders", "partition_indexes": [0]}]}]})
    last_commit = None
    for i in range(100):
        corr, msg = wire.recv()
        if i % 2 == 0:
            assert commit_errors(msg) == {("orders", 0): 0}
            last_commit = i // 2
        else:
            part = msg["groups"][0]["topics"][0]["partitions"][0]
            assert (part["committed_offset"], part["metadata"]) == (last_commit, f"m{last_commit}")


# ======================================================= FindCoordinator
@pytest.mark.parametrize("version", range(7))
def test_find_coordinator_every_version(shared_srv, wire, version):
    srv = shared_srv
    if version >= 4:
        resp = wire.call(FIND_COORDINATOR, version, {"key_type": 0,
                                                     "coordinator_keys": ["g-a", "g-b", "g-c"]})
        assert [c["key"] for c in resp["coordinators"]] == ["g-a", "g-b", "g-c"]
        for c in resp["coordinators"]:
            assert (c["error_code"], c["node_id"], c["host"], c["port"]) == (
                0, 0, "127.0.0.1", srv.port)
        resp = wire.call(FIND_COORDINATOR, version, {"key_type": 1,
                                                     "coordinator_keys": ["txn-1"]})
        (c,) = resp["coordinators"]  # transactions: this process is the coordinator
        assert (c["key"], c["error_code"], c["node_id"], c["port"]) == ("txn-1", 0, 0, srv.port)
        resp = wire.call(FIND_COORDINATOR, version, {"key_type": 2,
                                                     "coordinator_keys": ["share-1"]})
        (c,) = resp["coordinators"]  # share coordinator keys: v6 and "group:topicId:partition"
        assert c["key"] == "share-1" and c["error_code"] == Err.INVALID_REQUEST
    else:
        resp = wire.call(FIND_COORDINATOR, version, {"key": "g-a", "key_type": 0})
        assert (resp["error_code"], resp["node_id"], resp["host"], resp["port"]) == (
            0, 0, "127.0.0.1", srv.port)
        if version >= 1:
            resp = wire.call(FIND_COORDINATOR, version, {"key": "txn-1", "key_type": 1})
            assert (resp["error_code"], resp["port"]) == (0, srv.port)
            resp = wire.call(FIND_COORDINATOR, version, {"key": "share-1", "key_type": 2})
            assert resp["error_code"] == Err.INVALID_REQUEST  # key type 2 needs v6


def test_find_coordinator_batched_empty_key_list(wire):
    resp = wire.call(FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": []})
    assert resp["coordinators"] == []


# ============================================ OffsetFetch v8: many groups
def test_offset_fetch_v8_multi_group(wire):
    g1, g2, g3, g4 = groups_in_distinct_shards(4, "multi")
    commit(wire, g1, {"orders": [(0, 10, "g1-0"), (1, 11, "g1-1")]})
    commit(wire, g2, {"orders": [(0, 20, "g2-0")], "audit": [(1, 21, "g2-a1")]})
    for version in (8, 9):
        req = {"groups": [
            {"group_id": g1, "member_id": None, "member_epoch": -1,
             "topics": [{"name": "orders", "partition_indexes": [0, 1, 2]}]},
            {"group_id": g2, "member_id": None, "member_epoch": -1, "topics": None},
            {"group_id": g3, "member_id": None, "member_epoch": -1,
             "topics": [{"name": "orders", "partition_indexes": [0]}]},
            {"group_id": g4, "member_id": None, "member_epoch": -1, "topics": None},
        ], "require_stable": True}
        resp = wire.call(OFFSET_FETCH, version, req)
        assert [g["group_id"] for g in resp["groups"]] == [g1, g2, g3, g4]
        by = {g["group_id"]: {(t["name"], p["partition_index"]):
                              (p["committed_offset"], p["metadata"], p["error_code"])
                              for t in g["topics"] for p in t["partitions"]}
              for g in resp["groups"]}
        assert all(g["error_code"] == 0 for g in resp["groups"])
        assert by[g1] == {("orders", 0): (10, "g1-0", 0), ("orders", 1): (11, "g1-1", 0),
                          ("orders", 2): (-1, "", 0)}
        assert by[g2] == {("orders", 0): (20, "g2-0", 0), ("audit", 1): (21, "g2-a1", 0)}
        assert by[g3] == {("orders", 0): (-1, "", 0)}  # unknown group: -1 per partition
        assert by[g4] == {}  # unknown group, all topics: empty


# =========================================================== OffsetDelete
def test_offset_delete_unknown_group(wire):
    resp = wire.call(OFFSET_DELETE, 0, {"group_id": "nobody", "topics": [
        {"name": "orders", "partitions": [{"partition_index": 0}]}]})
    assert resp["error_code"] == Err.GROUP_ID_NOT_FOUND


def test_offset_delete_on_simple_group(srv, own_wire):
    wire = own_wire
    commit(wire, "simple", {"orders": [(0, 5, "a"), (1, 6, "b")], "audit": [(0, 7, "c")]})
    resp = wire.call(OFFSET_DELETE, 0, {"group_id": "simple", "topics": [
        {"name": "orders", "partitions": [{"partition_index": 0}, {"partition_index": 2}]}]})
    assert resp["error_code"] == 0
    # deleting a partition with no committed offset is not an error
    assert commit_errors(resp) == {("orders", 0): 0, ("orders", 2): 0}
    expected = {("orders", 1): (6, -1, "b", 0), ("audit", 0): (7, -1, "c", 0)}
    assert fetch(wire, "simple", None) == (0, expected)
    assert fetch(wire, "simple", {"orders": [0]})[1] == {("orders", 0): (-1, -1, "", 0)}
    wire.close()
    srv.restart()
    w = Wire(srv.port)
    assert fetch(w, "simple", None) == (0, expected)


# =========================================================== DeleteGroups
def test_delete_groups_removes_offsets(srv, own_wire):
    wire = own_wire
    gone, kept = groups_in_distinct_shards(2, "del")
    commit(wire, gone, {"orders": [(0, 1, "x"), (1, 2, "y")]})
    commit(wire, kept, {"orders": [(0, 3, "z")]})
    assert {gone, kept} <= set(list_group_ids(wire))
    resp = wire.call(DELETE_GROUPS, 2, {"groups_names": [gone, "nobody"]})
    assert {r["group_id"]: r["error_code"] for r in resp["results"]} == {
        gone: 0, "nobody": Err.GROUP_ID_NOT_FOUND}

    def check(w: Wire) -> None:
        assert fetch(w, gone, None) == (0, {})
        assert fetch(w, gone, {"orders": [0, 1]})[1] == {
            ("orders", 0): (-1, -1, "", 0), ("orders", 1): (-1, -1, "", 0)}
        groups = list_group_ids(w)
        assert gone not in groups and kept in groups
        assert fetch(w, kept, None)[1] == {("orders", 0): (3, -1, "z", 0)}
        again = w.call(DELETE_GROUPS, 1, {"groups_names": [gone]})
        assert again["results"] == [{"group_id": gone, "error_code": Err.GROUP_ID_NOT_FOUND}]

    check(wire)
    wire.close()
    srv.restart()
    w = Wire(srv.port)
    check(w)
    # the group can be created again by a new commit
    assert commit(w, gone, {"orders": [(0, 99, "again")]}) == {("orders", 0): 0}
    assert fetch(w, gone, None)[1] == {("orders", 0): (99, -1, "again", 0)}


def test_simple_group_is_listed_and_described(wire):
    commit(wire, "listed", {"orders": [(0, 1, "")]})
    for version in range(6):
        resp = wire.call(LIST_GROUPS, version, {"states_filter": [], "types_filter": []})
        assert resp["error_code"] == 0
        entry = {g["group_id"]: g for g in resp["groups"]}["listed"]
        assert entry["protocol_type"] == ""
        if version >= 4:
            assert entry["group_state"] == "Empty"
        if version >= 5:
            assert entry["group_type"] == "classic"
    resp = wire.call(LIST_GROUPS, 4, {"states_filter": ["Stable"]})
    assert "listed" not in {g["group_id"] for g in resp["groups"]}
    resp = wire.call(DESCRIBE_GROUPS, 5, {"groups": ["listed"], "include_authorized_operations": False})
    (g,) = resp["groups"]
    assert (g["error_code"], g["group_state"], g["protocol_type"], g["members"]) == (0, "Empty", "", [])


# ============================================================ retention
def test_retention_time_expires_offsets_and_group(servers):
    srv = servers({"offsets.retention.check.interval.ms": "100"})
    w = Wire(srv.port)
    create_topic(w, "orders", 2)
    for version in (2, 3, 4):
        group = f"short-lived-v{version}"
        assert commit(w, group, {"orders": [(0, 5, "tmp"), (1, 6, "")]}, version=version,
                      retention=1) == {("orders", 0): 0, ("orders", 1): 0}
    # RetentionTimeMs -1 means the broker default (a week): these stay
    assert commit(w, "long-lived", {"orders": [(0, 8, "keep")]}, version=2,
                  retention=-1) == {("orders", 0): 0}
    # a partially expiring group keeps the rest and itself
    commit(w, "mixed", {"orders": [(0, 1, "")]}, version=3, retention=1)
    commit(w, "mixed", {"orders": [(1, 2, "")]}, version=3, retention=-1)

    short = {f"short-lived-v{v}" for v in (2, 3, 4)}
    deadline = time.monotonic() + 15
    # "mixed" partition 0 was committed last: wait for its expiry too
    while short & set(list_group_ids(w)) or ("orders", 0) in fetch(w, "mixed", None)[1]:
        assert time.monotonic() < deadline, "offsets with RetentionTimeMs=1 never expired"
        time.sleep(0.1)

    def check(w: Wire) -> None:
        groups = list_group_ids(w)
        assert not short & set(groups)
        assert {"long-lived", "mixed"} <= set(groups)
        for group in short:
            assert fetch(w, group, None) == (0, {})
            assert fetch(w, group, {"orders": [0]})[1] == {("orders", 0): (-1, -1, "", 0)}
        assert fetch(w, "long-lived", None)[1] == {("orders", 0): (8, -1, "keep", 0)}
        assert fetch(w, "mixed", None)[1] == {("orders", 1): (2, -1, "", 0)}

    check(w)
    w.close()
    srv.restart()
    check(Wire(srv.port))


# ================================================== COORDINATOR_LOAD_IN_PROGRESS
def _append_big_offsets_log(path: Path, batches: int, final_offset: int) -> None:
    """Append `batches` x 100 commit records (4000-byte metadata) for group
    'loading' plus one final commit, straight into the partition log."""
    from kcoord.log import PartitionLog
    now = int(time.time() * 1000)
    key, value = encode_record(offset_record("loading", "orders", 0,
                                             OffsetValue(7, -1, "m" * 4000, now, None)))
    batch = build_batch([(key, value, [], now)] * 100, base_timestamp=now)
    last_key, last_value = encode_record(offset_record(
        "loading", "orders", 0, OffsetValue(final_offset, -1, "final", now, None)))
    plog = PartitionLog(path)
    try:
        for _ in range(batches):
            plog.append(batch)  # append patches the base offset; the CRC does not cover it
        plog.append(build_batch([(last_key, last_value, [], now)], base_timestamp=now))
        plog.flush()
    finally:
        plog.close()


def test_load_in_progress_while_shard_loads(servers, tmp_path):
    """A request for a group whose shard is still replaying its log gets
    COORDINATOR_LOAD_IN_PROGRESS (14); once loaded, the replayed state answers.

    The log is generated directly (about 40 MB per 100 batches, large records so
    the loader yields to the network often).  If loading is so fast that no
    request ever lands inside the window, the log is made bigger and we retry."""
    settings = {"offsets.topic.num.partitions": "1"}
    srv = servers(settings, name="load")
    w = Wire(srv.port)
    create_topic(w, "orders", 1)
    w.close()
    srv.stop()

    seen: dict[int, set[int]] = {}
    final = 0
    for attempt, batches in enumerate((100, 300, 1200)):
        final = 10_000 + attempt
        _append_big_offsets_log(srv.data_dir / "__consumer_offsets-0", batches, final)
        srv.start()
        w = Wire(srv.port, timeout=120)
        seen = {OFFSET_COMMIT: set(), OFFSET_FETCH: set(), DESCRIBE_GROUPS: set(),
                LIST_GROUPS: set()}
        deadline = time.monotonic() + 120
        while True:
            # pipeline one of each, then read all answers
            w.send(OFFSET_FETCH, 8, {"groups": [{"group_id": "loading", "topics": [
                {"name": "orders", "partition_indexes": [0]}]}], "require_stable": False})
            w.send(OFFSET_COMMIT, 8, commit_body("other", {"orders": [(0, 1, "")]}))
            w.send(DESCRIBE_GROUPS, 5, {"groups": ["loading"]})
            w.send(LIST_GROUPS, 4, {})
            answers = [w.recv()[1] for _ in range(4)]
            fetch_code = answers[0]["groups"][0]["error_code"]
            commit_code = answers[1]["topics"][0]["partitions"][0]["error_code"]
            seen[OFFSET_FETCH].add(fetch_code)
            seen[OFFSET_COMMIT].add(commit_code)
            seen[DESCRIBE_GROUPS].add(answers[2]["groups"][0]["error_code"])
            seen[LIST_GROUPS].add(answers[3]["error_code"])
            if fetch_code == 0 and commit_code == 0:
                break
            assert fetch_code in (0, Err.COORDINATOR_LOAD_IN_PROGRESS), answers[0]
            assert commit_code in (0, Err.COORDINATOR_LOAD_IN_PROGRESS), answers[1]
            assert time.monotonic() < deadline, "the shard never finished loading"
        # after loading, the replayed log answers
        assert fetch(w, "loading", {"orders": [0]})[1] == {("orders", 0): (final, -1, "final", 0)}
        w.close()
        if all(Err.COORDINATOR_LOAD_IN_PROGRESS in codes for codes in seen.values()):
            break
        srv.stop()
    assert Err.COORDINATOR_LOAD_IN_PROGRESS in seen[OFFSET_FETCH], seen
    assert Err.COORDINATOR_LOAD_IN_PROGRESS in seen[OFFSET_COMMIT], seen
    assert Err.COORDINATOR_LOAD_IN_PROGRESS in seen[DESCRIBE_GROUPS], seen
    assert Err.COORDINATOR_LOAD_IN_PROGRESS in seen[LIST_GROUPS], seen
