"""Classic group membership at the wire level against a real `kcoord serve`.

JoinGroup (11), SyncGroup (14), Heartbeat (12) and LeaveGroup (13) are
encoded with kcoord's own codecs over plain sockets, one socket per member,
so parked requests (a JoinGroup waiting for the rebalance, a follower's
SyncGroup waiting for the leader) are really parked.  Each error code of
KAFKA_REFERENCE.md 1.8 for these APIs is provoked; COORDINATOR_NOT_AVAILABLE
for a Dead group has no wire path in kcoord (groups are removed, not left
Dead) and is covered by the core tests.
"""
from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from kcoord.protocol.api import is_flexible, request_codec, response_codec
from kcoord.protocol.errors import Err
from kcoord.protocol.headers import (decode_response_header, encode_request_header,
                                     response_header_version)
from kcoord.protocol.messages.consumer_protocol import (decode_assignment, encode_assignment,
                                                        encode_subscription)
from tests.support import ServerProcess

JOIN, HEARTBEAT, LEAVE, SYNC, DESCRIBE = 11, 12, 13, 14, 15
SUB = encode_subscription({"topics": ["t"], "user_data": None, "owned_partitions": [],
                           "generation_id": -1, "rack_id": None})


class Conn:
    """One Kafka connection: `send` then `recv` (pipelined) or `call`."""

    def __init__(self, port: int, client_id: str = "wire", timeout: float = 20.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = client_id
        self.corr = 0
        self.pending: dict[int, tuple[int, int]] = {}
        self.buf = bytearray()

    def close(self) -> None:
        self.sock.close()

    def send(self, key: int, version: int, body: dict) -> None:
        self.corr += 1
        encode, _ = request_codec(key, version)
        frame = encode_request_header(key, version, self.corr, self.client_id,
                                      is_flexible(key, version)) + bytes(encode(body))
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        self.pending[self.corr] = (key, version)

    def ready(self, wait: float = 0.0) -> bool:
        """Whether a whole response frame has arrived (waiting up to `wait` s)."""
        deadline = time.monotonic() + wait
        while True:
            if len(self.buf) >= 4 and len(self.buf) >= 4 + struct.unpack_from(">i", self.buf)[0]:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(1 << 16)
            except socket.timeout:
                return False
            finally:
                self.sock.settimeout(20.0)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk

    def recv(self, timeout: float = 20.0) -> dict:
        assert self.ready(timeout), "no response in time"
        n, = struct.unpack_from(">i", self.buf)
        frame = bytes(self.buf[4:4 + n])
        del self.buf[:4 + n]
        corr, = struct.unpack_from(">i", frame)
        key, version = self.pending.pop(corr)
        flexible = response_header_version(key, is_flexible(key, version)) == 1
        _, pos = decode_response_header(frame, flexible)
        msg, end = response_codec(key, version)[1](frame, pos)
        assert end == len(frame)
        return msg

    def call(self, key: int, version: int, body: dict, timeout: float = 20.0) -> dict:
        self.send(key, version, body)
        return self.recv(timeout)

    # ------------------------------------------------------------ requests
    def join(self, group: str, member_id: str = "", *, version: int = 7, instance=None,
             session: int = 10000, rebalance: int = 30000, protocol_type: str = "consumer",
             protocols=None, send_only: bool = False):
        protocols = [("range", SUB)] if protocols is None else protocols
        body = {"group_id": group, "session_timeout_ms": session,
                "rebalance_timeout_ms": rebalance, "member_id": member_id,
                "group_instance_id": instance, "protocol_type": protocol_type,
                "protocols": [{"name": n, "metadata": m} for n, m in protocols],
                "reason": "test"}
        if send_only:
            self.send(JOIN, version, body)
            return None
        return self.call(JOIN, version, body)

    def sync(self, group: str, member_id: str, generation: int, *, version: int = 5,
             assignments=None, instance=None, protocol_type="consumer", protocol_name="range",
             send_only: bool = False):
        body = {"group_id": group, "generation_id": generation, "member_id": member_id,
                "group_instance_id": instance, "protocol_type": protocol_type,
                "protocol_name": protocol_name,
                "assignments": [{"member_id": m, "assignment": a}
                                for m, a in (assignments or {}).items()]}
        if send_only:
            self.send(SYNC, version, body)
            return None
        return self.call(SYNC, version, body)

    def heartbeat(self, group: str, member_id: str, generation: int, *, version: int = 4,
                  instance=None) -> int:
        return self.call(HEARTBEAT, version, {"group_id": group, "generation_id": generation,
                                              "member_id": member_id,
                                              "group_instance_id": instance})["error_code"]

    def leave(self, group: str, members, *, version: int = 5) -> dict:
        pairs = [(m, None) if isinstance(m, str) else m for m in members]
        body = {"group_id": group, "member_id": pairs[0][0] if version < 3 else "",
                "members": [{"member_id": m, "group_instance_id": i, "reason": "done"}
                            for m, i in pairs]}
        return self.call(LEAVE, version, body)


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory):
    """One server for the tests that need no fresh one (each uses its own group)."""
    # short sessions allowed, so expiry tests take a second, not six
    proc = ServerProcess(tmp_path_factory.mktemp("classic-wire"),
                         settings={"group.initial.rebalance.delay.ms": "0",
                                   "group.min.session.timeout.ms": "1000"})
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture
def g(request) -> str:
    """A group id of this test's own."""
    return "grp-" + request.node.name


@pytest.fixture
def conns(request):
    port = request.getfixturevalue("server" if "server" in request.fixturenames
                                   else "shared_server").port
    opened: list[Conn] = []

    def new(client_id: str = "wire") -> Conn:
        conn = Conn(port, client_id)
        opened.append(conn)
        return conn

    yield new
    for conn in opened:
        conn.close()


def wait_parked(conn: Conn, group: str, member_id: str, timeout: float = 10.0) -> None:
    """Wait until the server has the member's JoinGroup parked (sent on another
    connection, it may otherwise be read after the next request)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        described = conn.call(DESCRIBE, 5, {"groups": [group],
                                            "include_authorized_operations": False})
        state = described["groups"][0]["group_state"]
        members = [m["member_id"] for m in described["groups"][0]["members"]]
        if state == "PreparingRebalance" and member_id in members:
            return
        time.sleep(0.01)
    raise AssertionError(f"{member_id} not parked in {group}")


def park_join(conn: Conn, observer: Conn, group: str, member_id: str, **kw) -> None:
    conn.join(group, member_id, send_only=True, **kw)
    wait_parked(observer, group, member_id)


def assign(partitions) -> bytes:
    return encode_assignment({"assigned_partitions": [{"topic": "t", "partitions": partitions}],
                              "user_data": None})


def member_id_for(conn: Conn, group: str, **kw) -> str:
    reply = conn.join(group, **kw)
    assert reply["error_code"] == Err.MEMBER_ID_REQUIRED, reply
    return reply["member_id"]


def form_group(conns, group: str, n: int, **kw):
    """n members on their own connections join and sync, as clients do: a member
    whose generation is overtaken (heartbeat REBALANCE_IN_PROGRESS) joins again.
    Returns (conns, ids, generation)."""
    cs = [conns(f"client{i}") for i in range(n)]
    ids = [member_id_for(c, group, **kw) for c in cs]
    # The first member joins first, so it leads: its join is read before the
    # others are sent (they may then come in the same generation or the next).
    cs[0].join(group, ids[0], send_only=True, **kw)
    deadline = time.monotonic() + 30
    while n > 1 and not cs[0].ready(0.02):
        assert time.monotonic() < deadline
        described = cs[-1].call(DESCRIBE, 5, {"groups": [group],
                                              "include_authorized_operations": False})
        if ids[0] in [m["member_id"] for m in described["groups"][0]["members"]]:
            break
    for c, m in zip(cs[1:], ids[1:]):
        c.join(group, m, send_only=True, **kw)
    outstanding = set(range(n))
    replies: dict[int, dict] = {}
    while True:
        assert time.monotonic() < deadline, replies
        for i in sorted(outstanding):
            if cs[i].ready(0.02):
                replies[i] = cs[i].recv()
                assert replies[i]["error_code"] == 0, replies[i]
                outstanding.discard(i)
        rejoin = [i for i in sorted(replies) if i not in outstanding and
                  cs[i].heartbeat(group, ids[i], replies[i]["generation_id"]) ==
                  Err.REBALANCE_IN_PROGRESS]
        for i in rejoin:
            cs[i].join(group, ids[i], send_only=True, **kw)
            outstanding.add(i)
        if not outstanding and not rejoin:
            break
    generation = replies[0]["generation_id"]
    leader = replies[0]["leader"]
    assert all(r["generation_id"] == generation and r["leader"] == leader for r in replies.values())
    for c, m in zip(cs, ids):
        if m != leader:
            c.sync(group, m, generation, send_only=True)
    lc = cs[ids.index(leader)]
    lr = lc.sync(group, leader, generation, assignments={m: assign([i]) for i, m in enumerate(ids)})
    assert lr["error_code"] == 0
    for c, m in zip(cs, ids):
        if m != leader:
            r = c.recv()
            assert r["error_code"] == 0 and r["assignment"] == assign([ids.index(m)])
    return cs, ids, generation


# ====================================================================== happy path
def test_join_sync_heartbeat_leave(conns, g):
    c = conns("app")
    reply = c.join(g)
    assert reply["error_code"] == Err.MEMBER_ID_REQUIRED
    member = reply["member_id"]
    assert member.startswith("app-") and len(member) == len("app-") + 36
    reply = c.join(g, member)
    assert reply["error_code"] == 0 and reply["generation_id"] == 1
    assert reply["leader"] == member and reply["protocol_type"] == "consumer"
    assert reply["protocol_name"] == "range"
    assert [(m["member_id"], m["metadata"]) for m in reply["members"]] == [(member, SUB)]
    reply = c.sync(g, member, 1, assignments={member: assign([0, 1])})
    assert reply["error_code"] == 0 and reply["assignment"] == assign([0, 1])
    assert reply["protocol_name"] == "range"
    assert c.heartbeat(g, member, 1) == 0
    described = c.call(DESCRIBE, 5, {"groups": [g], "include_authorized_operations": False})
    group = described["groups"][0]
    assert group["group_state"] == "Stable" and group["protocol_data"] == "range"
    assert group["members"][0]["client_id"] == "app"
    assert group["members"][0]["client_host"] == "/127.0.0.1"
    assert group["members"][0]["member_assignment"] == assign([0, 1])
    reply = c.leave(g, [member])
    assert reply["members"][0]["error_code"] == 0
    described = c.call(DESCRIBE, 5, {"groups": [g], "include_authorized_operations": False})
    assert described["groups"][0]["group_state"] == "Empty"


@pytest.mark.parametrize("join_v", range(10))
def test_every_join_version(conns, join_v, g):
    """JoinGroup v0-9 with the matching SyncGroup/Heartbeat/LeaveGroup versions."""
    sync_v, hb_v, leave_v = min(join_v, 5), min(join_v, 4), min(join_v, 5)
    c = conns("v")
    member = ""
    if join_v >= 4:
        member = member_id_for(c, g, version=join_v)
    reply = c.join(g, member, version=join_v)
    assert reply["error_code"] == 0, reply
    member = reply["member_id"]
    assert reply["protocol_name"] == "range"
    if join_v >= 7:
        assert reply["protocol_type"] == "consumer"
    reply = c.sync(g, member, reply["generation_id"], version=sync_v,
                   assignments={member: assign([0])})
    assert reply["error_code"] == 0 and reply["assignment"] == assign([0])
    assert c.heartbeat(g, member, 1, version=hb_v) == 0
    reply = c.leave(g, [member], version=leave_v)
    assert reply["error_code"] == 0
    if leave_v >= 3:
        assert reply["members"] == [{"member_id": member, "group_instance_id": None,
                                     "error_code": 0}]


def test_error_responses_keep_the_version_shapes(conns, g):
    c = conns()
    r = c.join("", version=6)  # v6: ProtocolName not nullable yet -> ""
    assert r["error_code"] == Err.INVALID_GROUP_ID and r["protocol_name"] == ""
    r = c.join("", version=7)  # v7+: null
    assert r["error_code"] == Err.INVALID_GROUP_ID and r["protocol_name"] is None
    assert r["generation_id"] == -1 and r["leader"] == ""


# ======================================================================= JoinGroup
def test_join_errors(conns, g):
    c = conns()
    assert c.join("")["error_code"] == Err.INVALID_GROUP_ID
    assert c.join(g, session=999)["error_code"] == Err.INVALID_SESSION_TIMEOUT
    assert c.join(g, session=1800001)["error_code"] == Err.INVALID_SESSION_TIMEOUT
    assert c.join("nope", "someone")["error_code"] == Err.UNKNOWN_MEMBER_ID
    assert c.join(g, protocols=[])["error_code"] == Err.INCONSISTENT_GROUP_PROTOCOL
    assert c.join(g, protocol_type="")["error_code"] == Err.INCONSISTENT_GROUP_PROTOCOL
    member = member_id_for(c, g)
    assert member.startswith("wire-")
    reply = c.join(g, member)
    assert reply["error_code"] == 0
    other = conns("other")
    assert other.join(g, protocol_type="connect")["error_code"] == Err.INCONSISTENT_GROUP_PROTOCOL
    reply = other.join(g, protocols=[("roundrobin", SUB)])
    assert reply["error_code"] == Err.INCONSISTENT_GROUP_PROTOCOL
    assert other.join(g, "made-up-id")["error_code"] == Err.UNKNOWN_MEMBER_ID


def test_join_fenced_instance(conns, g):
    c = conns("static")
    reply = c.join(g, version=5, instance="inst-1")
    assert reply["error_code"] == 0
    member = reply["member_id"]
    assert member.startswith("inst-1-")
    reply = c.join(g, "not-the-current-id", version=5, instance="inst-1")
    assert reply["error_code"] == Err.FENCED_INSTANCE_ID
    reply = c.join(g, member, version=5, instance="unknown-instance")
    assert reply["error_code"] == Err.UNKNOWN_MEMBER_ID


def test_join_group_max_size(tmp_path):
    server = ServerProcess(tmp_path / "data", settings={
        "group.initial.rebalance.delay.ms": "0", "group.max.size": "1"}).start()
    try:
        a, b = Conn(server.port, "a"), Conn(server.port, "b")
        member = member_id_for(a, "g")
        assert a.join("g", member)["error_code"] == 0
        reply = b.join("g")
        assert reply["error_code"] == Err.GROUP_MAX_SIZE_REACHED and reply["member_id"] == ""
        a.close()
        b.close()
    finally:
        server.stop()


def test_parked_join_holds_nothing_else_up(conns, g):
    """A JoinGroup waits for the others; meanwhile other connections and groups go on."""
    cs, ids, generation = form_group(conns, g, 2)
    newcomer = conns("new")
    member = member_id_for(newcomer, g)
    park_join(newcomer, cs[0], g, member)  # parks: the others must rejoin
    assert not newcomer.ready(0.1)
    bystander = conns("bystander")
    start = time.monotonic()
    assert bystander.join("other-group")["error_code"] == Err.MEMBER_ID_REQUIRED
    assert cs[0].heartbeat(g, ids[0], generation) == Err.REBALANCE_IN_PROGRESS
    assert time.monotonic() - start < 2
    for c, m in zip(cs, ids):
        c.join(g, m, send_only=True)
    replies = [c.recv() for c in cs] + [newcomer.recv()]
    assert {r["generation_id"] for r in replies} == {generation + 1}
    leader = [r for r in replies if r["members"]]
    assert len(leader) == 1 and len(leader[0]["members"]) == 3


def test_rebalance_timeout_removes_members_that_did_not_rejoin(conns, g):
    cs, ids, generation = form_group(conns, g, 2, session=10000, rebalance=1000)
    cs[0].join(g, ids[0], send_only=True, session=10000, rebalance=1000)
    reply = cs[0].recv(timeout=20)  # completes at the rebalance timeout without ids[1]
    assert reply["generation_id"] == generation + 1
    assert [m["member_id"] for m in reply["members"]] == [ids[0]]


# ======================================================================= SyncGroup
def test_sync_errors(conns, g):
    c = conns()
    assert c.sync("", "m", 1)["error_code"] == Err.INVALID_GROUP_ID
    assert c.sync("nope", "m", 1)["error_code"] == Err.UNKNOWN_MEMBER_ID
    member_id_for(c, "empty")  # the group exists, Empty
    assert c.sync("empty", "m", 0)["error_code"] == Err.UNKNOWN_MEMBER_ID
    cs, ids, generation = form_group(conns, g, 2)
    c = cs[1]
    assert c.sync(g, "stranger", generation)["error_code"] == Err.UNKNOWN_MEMBER_ID
    assert c.sync(g, ids[1], generation + 1)["error_code"] == Err.ILLEGAL_GENERATION
    assert c.sync(g, ids[1], generation, protocol_type=None)["error_code"] == \
        Err.INCONSISTENT_GROUP_PROTOCOL  # v5 requires both
    assert c.sync(g, ids[1], generation, protocol_name="roundrobin")["error_code"] == \
        Err.INCONSISTENT_GROUP_PROTOCOL
    assert c.sync(g, ids[1], generation, version=4, protocol_type=None,
                  protocol_name=None)["error_code"] == 0
    newcomer = conns("new")
    park_join(newcomer, c, g, member_id_for(newcomer, g))
    assert c.sync(g, ids[1], generation)["error_code"] == Err.REBALANCE_IN_PROGRESS


def test_sync_fenced_instance(conns, g):
    c = conns("static")
    reply = c.join(g, version=5, instance="i1")
    member, generation = reply["member_id"], reply["generation_id"]
    assert c.sync(g, "old-id", generation, instance="i1")["error_code"] == Err.FENCED_INSTANCE_ID
    reply = c.sync(g, member, generation, instance="i1", assignments={member: assign([0])})
    assert reply["error_code"] == 0


def test_follower_sync_waits_for_the_leader(conns, g):
    cs, ids, generation = form_group(conns, g, 2)
    park_join(cs[0], cs[1], g, ids[0])  # the leader rejoins: a new generation
    assert cs[1].heartbeat(g, ids[1], generation) == Err.REBALANCE_IN_PROGRESS
    cs[1].join(g, ids[1], send_only=True)
    leader, follower = cs[0].recv(), cs[1].recv()
    assert leader["generation_id"] == follower["generation_id"] == generation + 1
    assert leader["leader"] == ids[0] and len(leader["members"]) == 2
    cs[1].sync(g, ids[1], generation + 1, send_only=True)
    assert not cs[1].ready(0.3)  # parked until the leader's assignment is stored
    reply = cs[0].sync(g, ids[0], generation + 1, assignments={ids[1]: assign([3])})
    assert reply["error_code"] == 0 and reply["assignment"] == b""  # absent: empty bytes
    assert cs[1].recv()["assignment"] == assign([3])


# ======================================================================= Heartbeat
def test_heartbeat_errors(conns, g):
    c = conns()
    assert c.heartbeat("", "m", 0) == Err.INVALID_GROUP_ID
    assert c.heartbeat("nope", "m", 0) == Err.UNKNOWN_MEMBER_ID
    cs, ids, generation = form_group(conns, g, 2)
    assert cs[0].heartbeat(g, ids[0], generation) == 0
    assert cs[0].heartbeat(g, "stranger", generation) == Err.UNKNOWN_MEMBER_ID
    assert cs[0].heartbeat(g, ids[0], generation - 1) == Err.ILLEGAL_GENERATION
    newcomer = conns("new")
    park_join(newcomer, cs[0], g, member_id_for(newcomer, g))
    assert cs[0].heartbeat(g, ids[0], generation) == Err.REBALANCE_IN_PROGRESS
    assert cs[1].heartbeat(g, ids[1], generation, version=0) == Err.REBALANCE_IN_PROGRESS


def test_heartbeat_fenced_instance(conns, g):
    c = conns("static")
    reply = c.join(g, version=5, instance="i1")
    member, generation = reply["member_id"], reply["generation_id"]
    c.sync(g, member, generation, instance="i1", assignments={member: assign([0])})
    assert c.heartbeat(g, member, generation, instance="i1") == 0
    # a restarted instance replaces the member id; the old one is fenced
    other = conns("static-restarted")
    reply = other.join(g, version=5, instance="i1")
    assert reply["error_code"] == 0 and reply["generation_id"] == generation
    assert reply["member_id"] != member
    assert c.heartbeat(g, member, generation, instance="i1") == Err.FENCED_INSTANCE_ID
    assert c.heartbeat(g, member, generation, instance="nobody") == Err.UNKNOWN_MEMBER_ID
    reply = other.sync(g, reply["member_id"], generation, instance="i1")
    assert reply["assignment"] == assign([0])  # inherited: no rebalance


def test_session_expiry_rebalances(conns, g):
    cs, ids, generation = form_group(conns, g, 2, session=2000)
    deadline = time.monotonic() + 15
    code = 0
    while time.monotonic() < deadline:  # ids[1] stays silent
        code = cs[0].heartbeat(g, ids[0], generation)
        if code == Err.REBALANCE_IN_PROGRESS:
            break
        cs[0].ready(0.1)
    assert code == Err.REBALANCE_IN_PROGRESS
    reply = cs[0].join(g, ids[0], session=2000)
    assert reply["generation_id"] == generation + 1
    assert [m["member_id"] for m in reply["members"]] == [ids[0]]


# ====================================================================== LeaveGroup
def test_leave_errors(conns, g):
    c = conns()
    assert c.leave("", ["m"])["error_code"] == Err.INVALID_GROUP_ID
    reply = c.leave("nope", ["a", ("b", "i")])
    assert reply["error_code"] == 0
    assert [m["error_code"] for m in reply["members"]] == [Err.UNKNOWN_MEMBER_ID] * 2
    assert c.leave("nope", ["a"], version=0)["error_code"] == Err.UNKNOWN_MEMBER_ID
    s = conns("static")
    reply = s.join(g, version=5, instance="i1")
    member = reply["member_id"]
    s.sync(g, member, reply["generation_id"], instance="i1", assignments={member: b""})
    reply = c.leave(g, ["stranger", ("wrong-id", "i1"), ("", "nobody")], version=3)
    assert [(m["member_id"], m["group_instance_id"], m["error_code"]) for m in reply["members"]] \
        == [("stranger", None, Err.UNKNOWN_MEMBER_ID), ("wrong-id", "i1", Err.FENCED_INSTANCE_ID),
            ("", "nobody", Err.UNKNOWN_MEMBER_ID)]
    assert c.leave(g, ["stranger"], version=2)["error_code"] == Err.UNKNOWN_MEMBER_ID


def test_leave_of_several_members_with_reasons_rebalances_at_once(conns, g):
    cs, ids, generation = form_group(conns, g, 3)
    reply = cs[1].leave(g, [ids[1], ids[2]], version=5)
    assert [m["error_code"] for m in reply["members"]] == [0, 0]
    assert cs[0].heartbeat(g, ids[0], generation) == Err.REBALANCE_IN_PROGRESS
    reply = cs[0].join(g, ids[0])
    assert reply["generation_id"] == generation + 1 and len(reply["members"]) == 1


def test_leave_v0_single_member(conns, g):
    cs, ids, generation = form_group(conns, g, 1)
    assert cs[0].leave(g, [ids[0]], version=0)["error_code"] == 0
    described = cs[0].call(DESCRIBE, 0, {"groups": [g]})
    assert described["groups"][0]["group_state"] == "Empty"


def test_parked_join_of_a_leaving_member_is_answered(conns, g):
    cs, ids, generation = form_group(conns, g, 2)
    other = conns("admin")
    park_join(cs[0], other, g, ids[0])  # the leader rejoins: waits for ids[1]
    assert other.leave(g, [ids[0]])["members"][0]["error_code"] == 0
    assert cs[0].recv()["error_code"] == Err.UNKNOWN_MEMBER_ID


# ========================================================================= restart
def test_group_survives_a_restart(server, conns, g):
    cs, ids, generation = form_group(conns, g, 2)
    for c in cs:
        c.close()
    server.restart()
    c = Conn(server.port, "after")
    try:
        deadline = time.monotonic() + 20
        while True:  # the shard may still be loading (Heartbeat then answers 0 blindly)
            described = c.call(DESCRIBE, 5, {"groups": [g], "include_authorized_operations": False})
            if described["groups"][0]["error_code"] == 0 or time.monotonic() > deadline:
                break
        group = described["groups"][0]
        assert group["group_state"] == "Stable" and group["protocol_data"] == "range"
        assert [m["member_id"] for m in group["members"]] == ids
        assert [m["member_assignment"] for m in group["members"]] == [assign([0]), assign([1])]
        assert c.heartbeat(g, ids[0], generation) == 0
        reply = c.sync(g, ids[1], generation)
        assert reply["error_code"] == 0 and reply["assignment"] == assign([1])
    finally:
        c.close()


# ==================================================================== real client
def test_three_kafka_python_consumers_share_a_topic(server):
    """Quick sanity with a real client (the full acceptance suite is tests/clients/)."""
    kafka = pytest.importorskip("kafka")
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    admin.create_topics([NewTopic("six", 6, 1)])
    admin.close()
    assignments: dict[int, list[int]] = {}
    stop = threading.Event()

    def run(i: int) -> None:
        consumer = kafka.KafkaConsumer(
            "six", bootstrap_servers=server.bootstrap, group_id="sanity", client_id=f"c{i}",
            heartbeat_interval_ms=300, session_timeout_ms=6000, auto_offset_reset="earliest")
        try:
            # the topic's partitions known before the first join: kafka-python 3.0.12
            # loses the second, metadata-started rebalance a join without them leads
            # to when poll()'s timeout ends mid JoinGroup/SyncGroup (examples/orders_app)
            consumer.partitions_for_topic("six")
            while not stop.is_set():
                consumer.poll(1000)
                assignments[i] = sorted(tp.partition for tp in consumer.assignment())
        finally:
            consumer.close()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            snapshot = dict(assignments)
            owned = sorted(p for ps in snapshot.values() for p in ps)
            if len(snapshot) == 3 and all(snapshot.values()) and owned == list(range(6)):
                break
            time.sleep(0.1)
        assert len(snapshot) == 3 and all(snapshot.values()), snapshot
        assert owned == list(range(6)), snapshot
    finally:
        stop.set()
        for t in threads:
            t.join(30)
