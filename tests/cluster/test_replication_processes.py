"""Replication between real kcoord processes (3 nodes + etcd on loopback):
followers hold the leader's bytes, and acks=-1 waits for the in-sync
followers (with min.insync.replicas=3 a stopped follower turns the answer
into NOT_ENOUGH_REPLICAS_AFTER_APPEND instead of an acknowledgement)."""
import os
import signal

import pytest

from kcoord.log.scan import segment_data_end
from kcoord.protocol.errors import Err
from kcoord.protocol.records import build_batch
from tests.clients.wire import WireClient, decode_response, encode_request, fetch, produce
from tests.cluster.support import Cluster, wait_until

TOPIC = "replicated"


@pytest.fixture
def cluster(etcd, tmp_path):
    c = Cluster(etcd, tmp_path, settings={"replica.fetch.wait.max.ms": "100",
                                          "replica.lag.time.max.ms": "4000"}).start()
    yield c
    for node in c.nodes.values():   # a SIGSTOPped node must be able to die
        if node.proc and node.proc.poll() is None:
            os.kill(node.proc.pid, signal.SIGCONT)
    c.stop()


def partition_state(cluster, node_id=1):
    meta = cluster.metadata(node_id, [TOPIC])
    [t] = meta["topics"]
    return t["partitions"][0] if t["error_code"] == 0 and t["partitions"] else None


def log_bytes(cluster, node_id) -> bytes:
    d = cluster.nodes[node_id].data_dir / f"{TOPIC}-0"
    # each segment's batches (a live active segment has preallocated zeros after them)
    return b"".join(p.read_bytes()[:segment_data_end(p)] for p in sorted(d.glob("*.log")))


def batch(i):
    return build_batch([(b"k", b"value-%d" % i, [], 1000 + i)])


def test_followers_replicate_and_acks_all_waits_for_them(cluster):
    with WireClient(cluster.nodes[1].port) as c:
        body = {"topics": [{"name": TOPIC, "num_partitions": 1, "replication_factor": 3,
                            "assignments": [],
                            "configs": [{"name": "min.insync.replicas", "value": "3"}]}],
                "timeout_ms": 30000, "validate_only": False}
        [created] = c.request(19, 7, body)["topics"]
        assert created["error_code"] == 0, created
    state = wait_until(lambda: (s := partition_state(cluster)) and len(s["isr_nodes"]) == 3
                       and s, "the partition placed with three in-sync replicas")
    leader = state["leader_id"]
    followers = [n for n in cluster.nodes if n != leader]

    leader_port = cluster.nodes[leader].port
    with WireClient(cluster.nodes[followers[0]].port) as c:
        # A follower refuses and names the leader (KIP-951: Produce v10+, Fetch v12+/v16+).
        body = {"transactional_id": None, "acks": -1, "timeout_ms": 30000,
                "topic_data": [{"name": TOPIC, "partition_data": [
                    {"index": 0, "records": batch(0)}]}]}
        # (etcd holds the state before this node has applied it: until then
        # it refuses without a hint; a refused Produce appends nothing)
        r = wait_until(lambda: (got := c.request(0, 11, body))["responses"][0][
            "partition_responses"][0].get("current_leader") and got,
            "the follower to know the partition's leader")
        [p] = r["responses"][0]["partition_responses"]
        assert p["error_code"] == Err.NOT_LEADER_OR_FOLLOWER
        assert p["current_leader"] == {"leader_id": leader, "leader_epoch": state["leader_epoch"]}
        assert [(n["node_id"], n["port"]) for n in r["node_endpoints"]] == [(leader, leader_port)]
        got = fetch(c, TOPIC, 0, 0)
        assert got["error_code"] == Err.NOT_LEADER_OR_FOLLOWER
        assert got["current_leader"]["leader_id"] == leader
        listed = c.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                            "timestamp": -1}]}]})
        assert listed["topics"][0]["partitions"][0]["error_code"] == Err.NOT_LEADER_OR_FOLLOWER

    with WireClient(cluster.nodes[leader].port) as c:
        # the leader takes writes once its epoch is durable (fsynced off its
        # loop, a moment after the state above): until then it refuses
        # (appending nothing) with the error clients retry on; before its own
        # view has the topic (the watch lets the loop run between the keys it applies) it
        # answers UNKNOWN_TOPIC_OR_PARTITION, retried as well
        answers = []
        wait_until(lambda: answers.append(produce(c, TOPIC, 0, batch(0)))
                   or answers[-1]["error_code"] not in (Err.NOT_LEADER_OR_FOLLOWER,
                                                        Err.UNKNOWN_TOPIC_OR_PARTITION),
                   "the leader taking writes")
        for i in range(5):
            answer = answers[-1] if i == 0 else produce(c, TOPIC, 0, batch(i))
            assert answer["error_code"] == Err.NONE, answer
            assert answer["base_offset"] == i
        # acknowledged = on every in-sync replica's disk: the followers hold
        # the leader's very bytes (offsets and leader epoch included)
        leader_bytes = log_bytes(cluster, leader)
        for f in followers:
            assert log_bytes(cluster, f)[:len(leader_bytes)] == leader_bytes
        got = fetch(c, TOPIC, 0, 0)
        assert got["error_code"] == Err.NONE and got["high_watermark"] == 5
        # DeleteRecords on the leader: the followers' log start follows it
        r = c.request(21, 2, {"topics": [{"name": TOPIC, "partitions": [
            {"partition_index": 0, "offset": 2}]}], "timeout_ms": 30000})
        assert r["topics"][0]["partitions"][0]["error_code"] == Err.NONE, r
        for f in followers:
            start_file = cluster.nodes[f].data_dir / f"{TOPIC}-0" / "log-start-offset"
            wait_until(lambda: start_file.exists() and start_file.read_text().strip() == "2",
                       f"node {f}'s log start at 2")

        # A stopped follower: the write is appended but cannot be acknowledged
        # with three in-sync replicas; once the follower leaves the ISR the
        # answer says so, and later writes are refused up front.
        stopped = followers[0]
        os.kill(cluster.nodes[stopped].proc.pid, signal.SIGSTOP)
        answer = produce(c, TOPIC, 0, batch(5))
        assert answer["error_code"] == Err.NOT_ENOUGH_REPLICAS_AFTER_APPEND, answer
        s = partition_state(cluster, leader)
        assert stopped not in s["isr_nodes"]
        assert produce(c, TOPIC, 0, batch(6))["error_code"] == Err.NOT_ENOUGH_REPLICAS
        os.kill(cluster.nodes[stopped].proc.pid, signal.SIGCONT)

    # The follower comes back, catches up and rejoins the ISR (possibly under
    # a new leader epoch, or a new leader, after its lease lapsed).
    state = wait_until(lambda: (s := partition_state(cluster)) and len(s["isr_nodes"]) == 3
                       and s, "the stopped follower back in the ISR", timeout=90)
    with WireClient(cluster.nodes[state["leader_id"]].port) as c:
        wait_until(lambda: produce(c, TOPIC, 0, batch(7))["error_code"] == Err.NONE,
                   "an acknowledged write")
    leader_bytes = log_bytes(cluster, state["leader_id"])
    for n in cluster.nodes:
        wait_until(lambda: log_bytes(cluster, n) == leader_bytes,
                   f"node {n} to hold the leader's log")


def test_acknowledged_records_survive_the_leaders_sigkill(cluster):
    """confluent-kafka produces with acks=all while the partition's leader is
    killed with SIGKILL: every acknowledged record is then read back from the
    new leader, at the offset it was acknowledged at."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    bootstrap = ",".join(n.bootstrap for n in cluster.nodes.values())
    with WireClient(cluster.nodes[1].port) as c:
        body = {"topics": [{"name": TOPIC, "num_partitions": 1, "replication_factor": 3,
                            "assignments": [], "configs": [
                                {"name": "min.insync.replicas", "value": "2"}]}],
                "timeout_ms": 30000, "validate_only": False}
        assert c.request(19, 7, body)["topics"][0]["error_code"] == 0
    state = wait_until(lambda: (s := partition_state(cluster)) and len(s["isr_nodes"]) == 3
                       and s, "three in-sync replicas")
    old_leader = state["leader_id"]
    acked: dict[int, bytes] = {}
    errors = []

    def delivered(err, msg):
        if err is None:
            acked[msg.offset()] = msg.value()
        else:
            errors.append(err)

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2,
                         "message.timeout.ms": 60000, "retries": 1000,
                         "enable.idempotence": False})
    for i in range(400):
        producer.produce(TOPIC, value=b"v%d" % i, partition=0, on_delivery=delivered)
        producer.poll(0)
        if i == 200:
            producer.flush(30)
            assert len(acked) >= 190, (len(acked), errors[:3])
            cluster.nodes[old_leader].kill()         # SIGKILL, mid-stream
    assert producer.flush(90) == 0, "records still undelivered"
    assert len(acked) > 200
    new = wait_until(lambda: (s := partition_state(cluster, next(
        n for n in cluster.nodes if n != old_leader))) and s["leader_id"] not in (-1, old_leader)
        and s, "a new leader")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "verify",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    seen: dict[int, bytes] = {}
    deadline = max(acked) + 1
    wait_until(lambda: [seen.__setitem__(m.offset(), m.value())
                        for m in consumer.consume(200, 1.0) if m.error() is None] is not None
               and len(seen) >= deadline, "every acknowledged offset read back", timeout=90)
    consumer.close()
    missing = [o for o, v in acked.items() if seen.get(o) != v]
    assert not missing, f"{len(missing)} acknowledged records lost or changed (new leader {new})"


OFFSET_COMMIT, OFFSET_FETCH = 8, 9


def commit_offset(client, group, offset):
    body = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None, "retention_time_ms": -1,
            "topics": [{"name": TOPIC, "partitions": [
                {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}]}
    r = client.request(OFFSET_COMMIT, 8, body)
    return r["topics"][0]["partitions"][0]["error_code"]


def fetched_offset(client, group):
    r = client.request(OFFSET_FETCH, 8, {"groups": [
        {"group_id": group, "member_id": None, "member_epoch": -1,
         "topics": [{"name": TOPIC, "partition_indexes": [0]}]}], "require_stable": False})
    g = r["groups"][0]
    if g["error_code"] != 0:
        return None
    return g["topics"][0]["partitions"][0]["committed_offset"]


def create_replicated_topic(cluster):
    """TOPIC with one partition on all three nodes (CreateTopics through node 1)."""
    with WireClient(cluster.nodes[1].port) as c:
        body = {"topics": [{"name": TOPIC, "num_partitions": 1, "replication_factor": 3,
                            "assignments": [], "configs": []}],
                "timeout_ms": 30000, "validate_only": False}
        assert c.request(19, 7, body)["topics"][0]["error_code"] == 0


def coordinator_of(cluster, node_id, group):
    answer = cluster.find_coordinators(node_id, [group])[group]
    return answer["node_id"] if answer["error_code"] == 0 else None


def test_acknowledged_commits_survive_the_coordinators_sigkill(cluster):
    """OffsetCommit is answered once its records are on every in-sync
    replica of the group's __consumer_offsets partition; after SIGKILL of
    the coordinator the new one returns the last acknowledged offset."""
    group = "replicated-group"
    create_replicated_topic(cluster)
    coordinator = wait_until(lambda: coordinator_of(cluster, 1, group), "a coordinator")
    acknowledged = -1
    with WireClient(cluster.nodes[coordinator].port) as c:
        wait_until(lambda: commit_offset(c, group, 0) == Err.NONE, "the shard loaded")
        for offset in range(1, 200):
            code = commit_offset(c, group, offset)
            assert code == Err.NONE, code
            acknowledged = offset
        assert fetched_offset(c, group) == acknowledged
    cluster.nodes[coordinator].kill()
    survivor = next(n for n in cluster.nodes if n != coordinator)
    new = wait_until(lambda: (n := coordinator_of(cluster, survivor, group)) not in (None, coordinator)
                     and n, "a new coordinator", timeout=60)
    with WireClient(cluster.nodes[new].port) as c:
        got = wait_until(lambda: fetched_offset(c, group), "the new coordinator loaded")
        assert got == acknowledged
        assert commit_offset(c, group, acknowledged + 1) == Err.NONE


def test_a_coordinator_waking_past_its_lease_answers_no_stale_offset(cluster):
    """The group's coordinator is paused (SIGSTOP) past its etcd lease; a new
    coordinator acknowledges a newer commit; an OffsetFetch that reached the
    paused node meanwhile is answered once it wakes: NOT_COORDINATOR, never
    the offset it held.  A waking process reads the requests queued during
    its pause before its lease refresh loop runs, so it must notice the
    lapse before it serves from memory (fault run seed 160, clock mix: a
    stale and non-monotonic read)."""
    group = "paused-group"
    create_replicated_topic(cluster)
    old = wait_until(lambda: coordinator_of(cluster, 1, group), "a coordinator")
    with WireClient(cluster.nodes[old].port) as c:
        wait_until(lambda: commit_offset(c, group, 5) == Err.NONE, "the shard loaded")
        assert fetched_offset(c, group) == 5
    queued = WireClient(cluster.nodes[old].port)
    queued.api_versions()                    # connected and answered before the pause
    pid = cluster.nodes[old].proc.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        survivor = next(n for n in cluster.nodes if n != old)
        new = wait_until(lambda: (n := coordinator_of(cluster, survivor, group))
                         not in (None, old) and n, "a new coordinator", timeout=60)
        with WireClient(cluster.nodes[new].port) as c:
            wait_until(lambda: commit_offset(c, group, 7) == Err.NONE,
                       "a newer commit acknowledged by the new coordinator")
        queued.send_raw(encode_request(OFFSET_FETCH, 8, {"groups": [
            {"group_id": group, "member_id": None, "member_epoch": -1,
             "topics": [{"name": TOPIC, "partition_indexes": [0]}]}],
            "require_stable": False}, correlation_id=99))
    finally:
        os.kill(pid, signal.SIGCONT)
    _, r = decode_response(OFFSET_FETCH, 8, queued.recv_frame())
    queued.close()
    g = r["groups"][0]
    answer = g["error_code"] or g["topics"][0]["partitions"][0]["committed_offset"]
    assert answer in (Err.NOT_COORDINATOR, 7), f"the woken node answered {answer} (stale: 5)"


def test_a_deleted_and_recreated_topic_replicates_again(cluster):
    body = {"topics": [{"name": TOPIC, "num_partitions": 1, "replication_factor": 3,
                        "assignments": [], "configs": []}],
            "timeout_ms": 30000, "validate_only": False}
    for round_ in range(2):
        with WireClient(cluster.nodes[1].port) as c:
            wait_until(lambda: c.request(19, 7, body)["topics"][0]["error_code"] == 0,
                       "the topic created")
        state = wait_until(lambda: (s := partition_state(cluster)) and len(s["isr_nodes"]) == 3
                           and s, "three in-sync replicas")
        with WireClient(cluster.nodes[state["leader_id"]].port) as c:
            answer = wait_until(lambda: (a := produce(c, TOPIC, 0, batch(round_)))
                                and a["error_code"] == Err.NONE and a, "an acknowledged write")
            assert answer["base_offset"] == 0
        leader_bytes = log_bytes(cluster, state["leader_id"])
        for n in cluster.nodes:
            assert log_bytes(cluster, n)[:len(leader_bytes)] == leader_bytes
        if round_ == 0:
            with WireClient(cluster.nodes[2].port) as c:
                r = c.request(20, 6, {"topics": [{"name": TOPIC, "topic_id": bytes(16)}],
                                      "timeout_ms": 30000})
                assert r["responses"][0]["error_code"] == 0
            wait_until(lambda: all(cluster.metadata(n, [TOPIC])["topics"][0]["error_code"] == 3
                                   for n in cluster.nodes), "the topic deleted everywhere")


def test_a_restarted_lone_leader_leads_again_only_at_a_new_epoch(cluster):
    """The only in-sync replica of a partition is killed with SIGKILL and
    restarted: it leads again only at a leader epoch written after the
    controller handled its new incarnation (never at the epoch its old
    incarnation led, whose unfsynced tail followers may hold), and every
    acknowledged record is there."""
    with WireClient(cluster.nodes[1].port) as c:
        body = {"topics": [{"name": TOPIC, "num_partitions": 1, "replication_factor": 1,
                            "assignments": [], "configs": []}],
                "timeout_ms": 30000, "validate_only": False}
        assert c.request(19, 7, body)["topics"][0]["error_code"] == 0
    state = wait_until(lambda: (s := partition_state(cluster)) and s["leader_id"] >= 0 and s,
                       "a leader")
    leader, old_epoch = state["leader_id"], state["leader_epoch"]
    node = cluster.nodes[leader]
    with WireClient(node.port) as c:
        wait_until(lambda: produce(c, TOPIC, 0, batch(0))["error_code"] == Err.NONE,
                   "the first write acknowledged")
        for i in range(1, 20):
            assert produce(c, TOPIC, 0, batch(i))["error_code"] == Err.NONE
    node.kill()
    first_line = len(node.log_lines)
    node.start()
    other = next(n for n in cluster.nodes if n != leader)
    back = wait_until(lambda: (s := partition_state(cluster, other))
                      and s["leader_id"] == leader and s["leader_epoch"] > old_epoch and s,
                      "the restarted node leading again at a new epoch")
    assert back["leader_epoch"] >= old_epoch + 2  # fenced (no leader), then elected
    with WireClient(node.port) as c:
        got = wait_until(lambda: (f := fetch(c, TOPIC, 0, 0))["error_code"] == Err.NONE and f,
                         "the restarted leader serving")
        assert got["high_watermark"] == 20
    became = [line for line in node.log_lines[first_line:] if f"{TOPIC}-0: BecameLeader" in line]
    assert became, "the new incarnation logged its leadership"
    assert f"epoch={old_epoch})" not in " ".join(became), became
