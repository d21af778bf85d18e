"""__share_group_state on 3 real nodes and etcd: FindCoordinator key type 2
answers the leader of the key's partition (the topic created on first use,
replicated), only that leader serves the share-state RPCs, and what it
answered survives SIGKILL of it (the new leader reads it back); share
consumers keep consuming through the share coordinator's SIGKILL or pause
past its lease and the data leader's SIGKILL."""
import os
import signal

from kcoord.coordinator.partitioner import partition_for
from kcoord.log.start_offset import read_start_offset
from kcoord.protocol.errors import Err
from kcoord.server.share_runtime import share_key
from tests.clients.wire import (WireClient, create_topic, decode_response, encode_request,
                                list_offset, metadata)
from tests.cluster.support import Cluster, wait_until

FIND, INIT, READ, WRITE, SUMMARY, DESCRIBE_OFFSETS = 10, 83, 84, 85, 87, 90
SHARE_STATE = "__share_group_state"


def _coordinator(cluster, node_id: int, key: str):
    with WireClient(cluster.nodes[node_id].port) as c:
        [a] = c.request(FIND, 6, {"key_type": 2, "coordinator_keys": [key]})["coordinators"]
    return a if a["error_code"] == 0 else None


def _state_call(cluster, node_id: int, api: int, body: dict) -> dict:
    with WireClient(cluster.nodes[node_id].port) as c:
        [t] = c.request(api, 0, body)["results"]
    return t["partitions"][0]


def test_share_state_follows_its_partition_leader(etcd, tmp_path):
    cluster = Cluster(etcd, tmp_path, settings={
        "share.coordinator.state.topic.num.partitions": "3"}).start()
    try:
        with WireClient(cluster.nodes[1].port) as c:
            create_topic(c, "t", 1)
            tid = metadata(c, ["t"])["topics"][0]["topic_id"]
        key = share_key("g", tid, 0)
        found = wait_until(lambda: _coordinator(cluster, 1, key), "a share coordinator")
        leader = found["node_id"]
        [rows] = [t for t in cluster.metadata(1, [SHARE_STATE])["topics"]]
        part = rows["partitions"][partition_for(key, 3)]
        assert part["leader_id"] == leader and sorted(part["replica_nodes"]) == [1, 2, 3]
        init = {"group_id": "g", "topics": [{"topic_id": tid, "partitions": [
            {"partition": 0, "state_epoch": 1, "start_offset": 42}]}]}
        read = {"group_id": "g", "topics": [{"topic_id": tid, "partitions": [
            {"partition": 0, "leader_epoch": 0}]}]}
        wait_until(lambda: _state_call(cluster, leader, INIT, init)["error_code"] == 0,
                   "initialize on the leader")
        other = next(n for n in (1, 2, 3) if n != leader)
        assert _state_call(cluster, other, INIT, init)["error_code"] == Err.NOT_COORDINATOR
        cluster.nodes[leader].proc.send_signal(signal.SIGKILL)
        cluster.nodes[leader].proc.wait(10)
        survivor = next(n for n in (1, 2, 3) if n != leader)
        moved = wait_until(lambda: (a := _coordinator(cluster, survivor, key))
                           and a["node_id"] != leader and a, "a new share coordinator")
        state = wait_until(lambda: (p := _state_call(cluster, moved["node_id"], READ, read))
                           ["error_code"] == 0 and p, "the state on the new leader")
        assert (state["state_epoch"], state["start_offset"]) == (1, 42)
    finally:
        cluster.stop()


SHARE_SETTINGS = {"share.coordinator.state.topic.num.partitions": "3",
                  # snapshots often, pruned often: the followers' log start must follow
                  "share.coordinator.snapshot.update.records.per.snapshot": "5",
                  "share.coordinator.state.topic.prune.interval.ms": "300",
                  "group.share.min.heartbeat.interval.ms": "200",
                  "group.share.heartbeat.interval.ms": "200",
                  "group.share.min.record.lock.duration.ms": "1000",
                  "group.share.record.lock.duration.ms": "3000"}
LIMIT = 5  # group.share.delivery.count.limit (Kafka's default)


def _group_away_from(cluster, tid: bytes, avoid: set[int]) -> tuple[str, int]:
    """A group whose share-state coordinator for (t, 0) is none of `avoid`
    (the data leader, the group's coordinator): -> (group, that node)."""
    for i in range(60):
        group = f"sg{i}"
        share = wait_until(lambda: _coordinator(cluster, 1, share_key(group, tid, 0)),
                           "a share coordinator")["node_id"]
        owner = wait_until(lambda: (c := cluster.find_coordinators(1, [group])[group])
                           ["error_code"] == 0 and c, "a group coordinator")["node_id"]
        if share not in avoid | {owner}:
            return group, share
    raise AssertionError("no group whose share state lives on a third node")


def _through_failover(cluster, log, values: list[bytes], fail, recover=lambda: None) -> None:
    """Half of `values` produced and acknowledged in part, then `fail()` (a
    SIGKILL or SIGSTOP), the rest produced to the nodes still up, then
    `recover()`: every record acknowledged, and none whose acknowledgement
    was confirmed before the failure delivered again after it."""
    from tests.clients.share_workers import produce
    half = len(values) // 2
    produce(",".join(cluster.nodes[n].bootstrap for n in cluster.running()), "t", values[:half], 1)
    wait_until(lambda: len(log.confirmed_values() & set(values)) >= half // 2,
               "acknowledgements before the failure", 120)
    with log.lock:
        before = {v: len(log.received[v]) for v in
                  {log.where[k] for k in log.confirmed if k in log.where}}
    fail()
    produce(",".join(cluster.nodes[n].bootstrap for n in cluster.running()), "t",
            values[half:], 1)
    recover()
    # an acknowledgement in flight to a killed leader may answer an error and
    # still have been applied: its record is not owed again (the offsets check)
    wait_until(lambda: log.answered_values() >= set(values), "every record acknowledged", 180)
    with log.lock:
        again = {v: n for v, n in before.items() if len(log.received[v]) != n}
    assert not again, f"confirmed records delivered again after the failover: {again}"


def _sigkill(cluster, node_id: int):
    def fail() -> None:
        cluster.nodes[node_id].proc.send_signal(signal.SIGKILL)
        cluster.nodes[node_id].proc.wait(10)
    return fail


def _leader_of_t(cluster, node_id: int, avoid: int = -1) -> dict:
    return wait_until(lambda: (t := cluster.metadata(node_id, ["t"])["topics"][0])["partitions"]
                      and t["partitions"][0]["leader_id"] not in (-1, avoid) and t, "t's leader")


def _all_in_sync(cluster, node_id: int) -> None:
    wait_until(lambda: all(sorted(p["isr_nodes"]) == [1, 2, 3] for t in cluster.metadata(
        node_id, [SHARE_STATE, "t"])["topics"] for p in t["partitions"]),
        "every node back in sync")


def _offsets_agree(cluster, group: str, log) -> None:
    """DescribeShareGroupOffsets (v1, from the group's coordinator) agrees with
    what the consumers acknowledged: lag 0 and every offset from the start
    offset to the high watermark acknowledged by a consumer (confirmed, or
    answered an error by a leader killed meanwhile)."""
    node = cluster.running()[0]

    def described():
        owner = cluster.find_coordinators(node, [group])[group]
        if owner["error_code"]:
            return None
        with WireClient(cluster.nodes[owner["node_id"]].port) as c:
            [g] = c.request(DESCRIBE_OFFSETS, 1, {"groups": [
                {"group_id": group, "topics": [{"topic_name": "t", "partitions": [0]}]}]})["groups"]
        p = g["topics"][0]["partitions"][0] if g["error_code"] == 0 else None
        return p if p and p["error_code"] == 0 and p["lag"] == 0 else None
    start = wait_until(described, "DescribeShareGroupOffsets: lag 0", 60)["start_offset"]
    end = _leader_of_t(cluster, node)["partitions"][0]
    with WireClient(cluster.nodes[end["leader_id"]].port) as c:
        hw = list_offset(c, "t", 0)["offset"]
    with log.lock:
        unconfirmed = [o for o in range(start, hw)
                       if (0, o) not in log.confirmed and (0, o) not in log.unknown]
    assert 0 <= start <= hw and not unconfirmed, (start, hw, unconfirmed[:10])


def _consuming(cluster) -> tuple:
    """Topic t (RF 3), a group whose share state lives on a third node (neither
    t's leader nor the group's coordinator), one ShareConsumer receiving ->
    (t's id, group, that share coordinator, Deliveries, the ShareWorker)."""
    from confluent_kafka.admin import AdminClient, NewTopic
    from tests.clients.share_workers import Deliveries, ShareWorker
    from tests.clients.test_share_consumers import flowing
    bootstrap = ",".join(n.bootstrap for n in cluster.nodes.values())
    admin = AdminClient({"bootstrap.servers": bootstrap})   # alive until its futures end
    for f in admin.create_topics([NewTopic("t", 1, 3)]).values():
        f.result(60)
    part = _leader_of_t(cluster, 1)
    tid, data_leader = part["topic_id"], part["partitions"][0]["leader_id"]
    group, share_leader = _group_away_from(cluster, tid, {data_leader})
    log = Deliveries()
    worker = ShareWorker("m", bootstrap, group, "t", log)
    worker.start()
    try:
        flowing(bootstrap, "t", 1, log)
    except BaseException:
        worker.stop.set()
        raise
    return tid, group, share_leader, log, worker


def _delivered_within_limit(log, values: list[bytes]) -> None:
    """Every value delivered, its delivery counts 1, 2, ... within the limit."""
    counts = {v: [c for _, c in log.received[v]] for v in values}
    assert all(counts[v] for v in values)                       # none lost
    assert all(c == list(range(1, len(c) + 1)) and len(c) <= LIMIT
               for c in counts.values()), {v: c for v, c in counts.items() if len(c) > 1}


def test_share_consumer_survives_the_share_coordinator_and_data_leader_failing(etcd, tmp_path):
    """confluent_kafka.ShareConsumer on a 3-node cluster, the share state on a
    third node (neither the data leader nor the group coordinator), reached
    by the routed persister.  In turn, mid-run: the share coordinator's node
    SIGKILLed; (that node back) the data partition's leader SIGKILLed, its
    acquisitions lost with it.  Every record is acknowledged, none confirmed
    before a failure is delivered again after it, delivery counts go 1, 2,
    ... within the limit, and the pruned __share_group_state's log start is
    followed by the replicas."""
    cluster = Cluster(etcd, tmp_path, settings=SHARE_SETTINGS).start()
    worker = None
    try:
        tid, group, share_leader, log, worker = _consuming(cluster)
        key = share_key(group, tid, 0)
        values = [b"r%04d" % i for i in range(400)]
        _through_failover(cluster, log, values[:200], _sigkill(cluster, share_leader))
        survivor = cluster.running()[0]
        moved = _coordinator(cluster, survivor, key)
        assert moved is not None and moved["node_id"] != share_leader
        cluster.nodes[share_leader].start()
        _all_in_sync(cluster, survivor)
        data_leader = _leader_of_t(cluster, survivor)["partitions"][0]["leader_id"]
        _through_failover(cluster, log, values[200:400], _sigkill(cluster, data_leader))
        survivor = cluster.running()[0]
        assert _leader_of_t(cluster, survivor, data_leader)
        _offsets_agree(cluster, group, log)     # consuming still: records owed come again
        worker.finish()
        worker = None
        state_dir = f"{SHARE_STATE}-{partition_for(key, 3)}"
        wait_until(lambda: all(read_start_offset(cluster.nodes[n].data_dir / state_dir) > 0
                               for n in cluster.running()),
                   "__share_group_state pruned on its leader and followers")
        _delivered_within_limit(log, values)
    finally:
        if worker is not None:
            worker.stop.set()
        cluster.stop()


def test_share_consumer_survives_its_share_coordinator_paused_past_its_lease(etcd, tmp_path):
    """The share state's coordinator (a third node) SIGSTOPped mid-run until
    its key has moved, then SIGCONTed: consumption carries on through the
    new coordinator, the woken node refuses the share partition's writes
    (its leadership of the state partition is gone), every record is
    acknowledged, none confirmed before the pause is delivered again after
    it, and DescribeShareGroupOffsets agrees with the acknowledgements."""
    cluster = Cluster(etcd, tmp_path, settings=SHARE_SETTINGS).start()
    worker, paused = None, None
    try:
        tid, group, paused, log, worker = _consuming(cluster)
        key = share_key(group, tid, 0)
        survivor = next(n for n in (1, 2, 3) if n != paused)
        proc = cluster.nodes[paused].proc
        moved: dict = {}

        def pause() -> None:
            proc.send_signal(signal.SIGSTOP)
            moved.update(wait_until(lambda: (a := _coordinator(cluster, survivor, key))
                                    and a["node_id"] != paused and a, "the key to move"))

        stale: dict = {}
        summary_of = {"group_id": group, "topics": [{"topic_id": tid, "partitions": [
            {"partition": 0, "leader_epoch": -1}]}]}

        def wake() -> None:
            # the state as the new coordinator holds it, then a write of a marker
            # start offset queued to the paused node (the kernel takes the connection
            # and bytes), so it is there the moment the node wakes, before it may
            # have learnt that its lease lapsed
            summary = wait_until(lambda: (p := _state_call(cluster, moved["node_id"], SUMMARY,
                                                           summary_of))["error_code"] == 0 and p,
                                 "the new coordinator's summary")
            with WireClient(cluster.nodes[paused].port) as c:
                c.send_raw(encode_request(WRITE, 0, {
                    "group_id": group, "topics": [{"topic_id": tid, "partitions": [{
                        "partition": 0, "state_epoch": summary["state_epoch"],
                        "leader_epoch": summary["leader_epoch"], "start_offset": MARKER,
                        "state_batches": []}]}]}))
                proc.send_signal(signal.SIGCONT)
                _, answer = decode_response(WRITE, 0, c.recv_frame())
            stale.update(answer["results"][0]["partitions"][0])

        values = [b"s%04d" % i for i in range(200)]
        _through_failover(cluster, log, values, pause, wake)
        assert stale["error_code"] != 0, stale          # the woken node wrote nothing
        wait_until(lambda: any("registering again as a new incarnation" in line
                               for line in cluster.nodes[paused].log_lines),
                   "the woken node registered as a new incarnation")
        _offsets_agree(cluster, group, log)
        worker.finish()
        worker = None
        owner = _coordinator(cluster, survivor, key)["node_id"]
        state = _state_call(cluster, owner, SUMMARY, summary_of)
        assert state["error_code"] == 0 and state["start_offset"] != MARKER, state
        _delivered_within_limit(log, values)
    finally:
        if worker is not None:
            worker.stop.set()
        if paused is not None and cluster.nodes[paused].proc.poll() is None:
            os.kill(cluster.nodes[paused].proc.pid, signal.SIGCONT)   # so it can die
        cluster.stop()


MARKER = 10 ** 9     # a start offset no consumer's acknowledgement produces
