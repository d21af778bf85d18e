"""ShareFetch and ShareAcknowledge against a real kcoord process, over the
wire with kcoord's codec: advertised versions, a share session, AcquiredRecords
with the records' bytes, ACCEPT / RELEASE / REJECT, redelivery with delivery
count 2, records released when a member's connection closes, and after a
SIGKILL and restart the acknowledged records never come back while the
unacknowledged ones do."""
import time

import pytest

from kcoord.protocol.records import build_batch, decode_batch, iter_batches
from kcoord.share.partition import ACCEPT, RELEASE, REJECT
from tests.clients.wire import WireClient, create_topic, metadata, produce
from tests.support import ServerProcess

pytestmark = pytest.mark.clients

SHARE_FETCH, SHARE_ACK, INIT_STATE = 78, 79, 83


@pytest.fixture
def server(tmp_path):
    proc = ServerProcess(tmp_path / "data", {"group.initial.rebalance.delay.ms": "0"})
    proc.start()
    yield proc
    proc.kill()


def share_fetch(client, member, epoch, tid, acks=(), max_wait=0, version=1):
    return client.request(SHARE_FETCH, version, {
        "group_id": "g", "member_id": member, "share_session_epoch": epoch,
        "max_wait_ms": max_wait, "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 500,
        "batch_size": 500,
        "topics": [{"topic_id": tid, "partitions": [{"partition_index": 0,
                                                     "acknowledgement_batches": list(acks)}]}],
        "forgotten_topics_data": []})


def initialize(client, tid, start: int = 0) -> int:
    """InitializeShareGroupState (the group coordinator's job) at `start`,
    retried while the share coordinator loads."""
    deadline = time.monotonic() + 30
    while True:
        r = client.request(INIT_STATE, 0, {"group_id": "g", "topics": [
            {"topic_id": tid, "partitions": [{"partition": 0, "state_epoch": 0,
                                              "start_offset": start}]}]})
        code = r["results"][0]["partitions"][0]["error_code"]
        if code not in (14, 15) or time.monotonic() > deadline:
            return code
        time.sleep(0.05)


def acquired(resp):
    return [(r["first_offset"], r["last_offset"], r["delivery_count"])
            for t in resp["responses"] for p in t["partitions"] for r in p["acquired_records"]]


def ack(first, last, kind):
    return {"first_offset": first, "last_offset": last, "acknowledge_types": [kind]}


def values(records: bytes):
    out = []
    for pos, _ in iter_batches(records):
        _, recs = decode_batch(records, pos)
        out += [(r.offset, r.value) for r in recs]
    return out


def test_share_fetch_over_the_wire(server):
    with WireClient(server.port) as admin:
        apis = {a["api_key"]: a for a in admin.api_versions()["api_keys"]}
        assert (apis[78]["min_version"], apis[78]["max_version"]) == (1, 2)
        assert (apis[79]["min_version"], apis[79]["max_version"]) == (1, 2)
        assert create_topic(admin, "orders")["error_code"] == 0
        [topic] = metadata(admin, ["orders"])["topics"]
        tid = topic["topic_id"]
        assert initialize(admin, tid) == 0
        batch = build_batch([(None, b"r%d" % i, [], None) for i in range(5)])
        assert produce(admin, "orders", 0, batch)["error_code"] == 0

    m1 = WireClient(server.port)
    r = share_fetch(m1, "m1", 0, tid)
    assert r["error_code"] == 0 and r["acquisition_lock_timeout_ms"] == 30000
    assert acquired(r) == [(0, 4, 1)]
    records = r["responses"][0]["partitions"][0]["records"]
    assert values(records) == [(i, b"r%d" % i) for i in range(5)]
    r = m1.request(SHARE_ACK, 1, {"group_id": "g", "member_id": "m1", "share_session_epoch": 1,
                                  "topics": [{"topic_id": tid, "partitions": [{
                                      "partition_index": 0, "acknowledgement_batches": [
                                          ack(0, 1, ACCEPT), ack(2, 2, RELEASE),
                                          ack(3, 3, REJECT)]}]}]})
    assert r["error_code"] == 0 and r["responses"][0]["partitions"][0]["error_code"] == 0
    r = share_fetch(m1, "m1", 2, tid, acks=[ack(3, 3, ACCEPT)])    # rejected already
    assert r["responses"][0]["partitions"][0]["acknowledge_error_code"] == 121
    assert acquired(r) == [(2, 2, 2)]                    # released: delivered again, count 2
    assert share_fetch(m1, "m1", 2, tid)["error_code"] == 123      # epoch already used

    with WireClient(server.port) as m2:
        r = share_fetch(m2, "m2", 0, tid)
        assert acquired(r) == []                         # m1 holds 2 and 4
        m1.close()                                       # its session ends: released
        r = share_fetch(m2, "m2", 1, tid, max_wait=10_000)
        assert acquired(r) == [(2, 2, 3), (4, 4, 2)]

    server.kill()                                        # m2's records are not persisted
    server.start()
    with WireClient(server.port) as m3:
        assert share_fetch(m3, "m2", 2, tid)["error_code"] == 122     # sessions are gone
        r = share_fetch(m3, "m3", 0, tid)
        got = acquired(r)
        offsets = {o for first, last, _ in got for o in range(first, last + 1)}
        assert offsets == {2, 4}                         # 0, 1 accepted and 3 rejected: never


def test_group_configs_reach_the_leader(server):
    """A group's share.auto.offset.reset, share.record.lock.duration.ms and
    share.isolation.level (IncrementalAlterConfigs on the GROUP) are what its
    share partitions use."""
    with WireClient(server.port) as c:
        assert create_topic(c, "configured")["error_code"] == 0
        [topic] = metadata(c, ["configured"])["topics"]
        tid = topic["topic_id"]
        r = c.request(44, 1, {"resources": [{
            "resource_type": 32, "resource_name": "g", "configs": [
                {"name": "share.auto.offset.reset", "config_operation": 0, "value": "earliest"},
                {"name": "share.record.lock.duration.ms", "config_operation": 0,
                 "value": "45000"},
                {"name": "share.isolation.level", "config_operation": 0,
                 "value": "read_committed"}]}], "validate_only": False})
        assert r["responses"][0]["error_code"] == 0, r
        batch = build_batch([(None, b"early%d" % i, [], None) for i in range(3)])
        assert produce(c, "configured", 0, batch)["error_code"] == 0   # before any fetch
        assert initialize(c, tid, start=-1) == 0                        # start not decided
        r = share_fetch(c, "m1", 0, tid)
        assert r["acquisition_lock_timeout_ms"] == 45000
        assert acquired(r) == [(0, 2, 1)]                                # earliest, not latest
