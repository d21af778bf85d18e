"""Real kcoord processes (3 nodes) and a real etcd on loopback: routing
answers, the topic catalogue in etcd, controller re-election after SIGKILL,
leadership moving on node loss and on a graceful stop."""
import signal

import pytest

from tests.clients.wire import WireClient, create_topic
from tests.cluster.support import Cluster, offsets_leaders, shard_of, wait_until

GROUPS = [f"group-{i}" for i in range(24)]


@pytest.fixture
def cluster(etcd, tmp_path):
    c = Cluster(etcd, tmp_path).start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def calm_cluster(module_etcd, tmp_path_factory):
    """One cluster for the tests that stop no node (a start of etcd and three
    nodes per test was most of their time)."""
    c = Cluster(module_etcd, tmp_path_factory.mktemp("calm")).start()
    yield c
    c.stop()


def routed(cluster, node_id):
    """FindCoordinator answers for GROUPS from one node once all are found."""
    answers = cluster.find_coordinators(node_id, GROUPS)
    return answers if all(a["error_code"] == 0 for a in answers.values()) else None


def test_routing_follows_the_offsets_partition_leaders(calm_cluster):
    cluster = calm_cluster
    first = cluster.find_coordinators(1, GROUPS)
    # the offsets topic is created on the first FindCoordinator, as in Kafka
    assert {a["error_code"] for a in first.values()} <= {0, 15}
    answers = wait_until(lambda: routed(cluster, 1), "every group routed")
    # every node answers the same once its watch has seen every partition state
    # (node 2's Metadata below must not be read before that)
    for node_id in (2, 3):
        again = wait_until(lambda: routed(cluster, node_id), "routed on another node")
        assert {g: a["node_id"] for g, a in again.items()} == \
            {g: a["node_id"] for g, a in answers.items()}
    def complete_on_node_2():
        m = cluster.metadata(2, ["__consumer_offsets"])
        parts = [t for t in m["topics"] if t["name"] == "__consumer_offsets"]
        return m if parts and len(parts[0]["partitions"]) == 50 else None
    meta = wait_until(complete_on_node_2, "node 2 to see every offsets partition")
    assert sorted(b["node_id"] for b in meta["brokers"]) == [1, 2, 3]
    ports = {b["node_id"]: b["port"] for b in meta["brokers"]}
    assert ports == {i: n.port for i, n in cluster.nodes.items()}
    assert {cluster.metadata(i)["controller_id"] for i in (1, 2, 3)} == {meta["controller_id"]}
    partitions = offsets_leaders(meta)
    assert len(partitions) == 50
    for p in partitions.values():
        assert sorted(p["replica_nodes"]) == [1, 2, 3]  # offsets.topic.replication.factor 3
        assert p["leader_id"] in p["isr_nodes"] and p["leader_epoch"] == 0
    assert {p["leader_id"] for p in partitions.values()} == {1, 2, 3}
    for group, a in answers.items():
        leader = partitions[shard_of(group)]["leader_id"]
        assert a["node_id"] == leader and a["port"] == ports[leader]
    # DescribeCluster agrees with Metadata
    with WireClient(cluster.nodes[1].port) as c:
        d = c.request(60, 1, {"include_cluster_authorized_operations": False,
                              "endpoint_type": 1})
    assert d["controller_id"] == meta["controller_id"]
    assert {b["broker_id"]: b["port"] for b in d["brokers"]} == ports
    # the v0-3 single-key form agrees
    with WireClient(cluster.nodes[3].port) as c:
        r = c.request(10, 3, {"key": GROUPS[0], "key_type": 0})
    assert (r["error_code"], r["node_id"]) == (0, answers[GROUPS[0]]["node_id"])


def test_topics_created_on_any_node_are_placed_and_mirrored(calm_cluster):
    cluster = calm_cluster
    with WireClient(cluster.nodes[2].port) as c:
        body = {"topics": [{"name": "orders", "num_partitions": 4, "replication_factor": 2,
                            "assignments": [], "configs": []}],
                "timeout_ms": 30000, "validate_only": False}
        [created] = c.request(19, 7, body)["topics"]
        assert created["error_code"] == 0, created
        assert (created["num_partitions"], created["replication_factor"]) == (4, 2)
        body["topics"][0].update(name="too-wide", replication_factor=4)
        [refused] = c.request(19, 7, body)["topics"]
        assert refused["error_code"] == 38  # INVALID_REPLICATION_FACTOR
        assert create_topic(c, "orders")["error_code"] == 36  # TOPIC_ALREADY_EXISTS
    for node_id in (1, 3):
        def placed(node_id=node_id):
            meta = cluster.metadata(node_id, ["orders"])
            [t] = meta["topics"]
            return t["error_code"] == 0 and all(p["error_code"] == 0 for p in t["partitions"]) \
                and meta
        meta = wait_until(placed, "topic placed and mirrored")
        [t] = meta["topics"]
        assert t["topic_id"] == created["topic_id"]
        assert len(t["partitions"]) == 4
        for p in t["partitions"]:
            assert len(set(p["replica_nodes"])) == 2 and p["leader_id"] in p["isr_nodes"]
    with WireClient(cluster.nodes[1].port) as c:  # CreatePartitions on another node
        r = c.request(37, 3, {"topics": [{"name": "orders", "count": 6, "assignments": None}],
                              "timeout_ms": 30000, "validate_only": False})
        assert r["results"][0]["error_code"] == 0, r
    grown = wait_until(lambda: (t := cluster.metadata(3, ["orders"])["topics"][0]) and
                       len(t["partitions"]) == 6 and
                       all(p["error_code"] == 0 for p in t["partitions"]) and t, "grown")
    assert all(len(set(p["replica_nodes"])) == 2 for p in grown["partitions"])
    with WireClient(cluster.nodes[3].port) as c:
        r = c.request(20, 6, {"topics": [{"name": "orders", "topic_id": bytes(16)}],
                              "timeout_ms": 30000})
        assert r["responses"][0]["error_code"] == 0
    wait_until(lambda: cluster.metadata(1, ["orders"])["topics"][0]["error_code"] == 3,
               "topic deleted everywhere")


def test_sigkill_of_the_controller_reelects_and_moves_its_leaderships(cluster):
    wait_until(lambda: routed(cluster, 1), "every group routed")
    before = offsets_leaders(cluster.metadata(1, ["__consumer_offsets"]))
    victim = cluster.metadata(1)["controller_id"]
    led = {i for i, p in before.items() if p["leader_id"] == victim}
    assert led
    cluster.nodes[victim].proc.send_signal(signal.SIGKILL)
    cluster.nodes[victim].proc.wait(10)
    survivor = next(i for i in (1, 2, 3) if i != victim)

    def moved():
        meta = cluster.metadata(survivor, ["__consumer_offsets"])
        parts = offsets_leaders(meta)
        if meta["controller_id"] in (-1, victim) or victim in \
                {b["node_id"] for b in meta["brokers"]}:
            return None
        if any(p["leader_id"] == victim or victim in p["isr_nodes"] for p in parts.values()):
            return None
        return parts
    after = wait_until(moved, "a new controller and new leaders")
    for i in led:
        assert after[i]["leader_epoch"] == before[i]["leader_epoch"] + 1
        assert after[i]["leader_id"] in before[i]["isr_nodes"]
    answers = wait_until(lambda: routed(cluster, survivor), "groups routed to survivors")
    assert victim not in {a["node_id"] for a in answers.values()}

    # the node comes back: registered again, following (it leads nothing yet)
    cluster.nodes[victim].start()
    meta = wait_until(lambda: (m := cluster.metadata(survivor)) and victim in
                      {b["node_id"] for b in m["brokers"]} and m, "node back")
    parts = offsets_leaders(cluster.metadata(survivor, ["__consumer_offsets"]))
    assert all(p["leader_id"] != victim for p in parts.values())


def test_graceful_stop_hands_leaderships_over_first(cluster):
    wait_until(lambda: routed(cluster, 1), "every group routed")
    target = 2
    before = offsets_leaders(cluster.metadata(1, ["__consumer_offsets"]))
    led = {i for i, p in before.items() if p["leader_id"] == target}
    assert led
    node = cluster.nodes[target]
    node.stop()
    assert node.proc.returncode == 0, node.log_text()
    assert any("leaderships handed over" in line for line in node.log_lines), node.log_text()
    after = wait_until(lambda: (m := cluster.metadata(1, ["__consumer_offsets"])) and
                       target not in {b["node_id"] for b in m["brokers"]} and
                       offsets_leaders(m), "node gone")
    for i in led:
        assert after[i]["leader_id"] != target
        assert after[i]["leader_epoch"] == before[i]["leader_epoch"] + 1


def test_sigstop_past_the_lease_fences_the_node_and_it_rejoins(cluster):
    wait_until(lambda: routed(cluster, 1), "every group routed")
    controller = cluster.metadata(1)["controller_id"]
    paused = next(i for i in (1, 2, 3) if i != controller)
    before = offsets_leaders(cluster.metadata(controller, ["__consumer_offsets"]))
    led = {i for i, p in before.items() if p["leader_id"] == paused}
    assert led
    proc = cluster.nodes[paused].proc
    proc.send_signal(signal.SIGSTOP)
    try:
        after = wait_until(
            lambda: (m := cluster.metadata(controller, ["__consumer_offsets"])) and
            paused not in {b["node_id"] for b in m["brokers"]} and
            all(p["leader_id"] != paused for p in offsets_leaders(m).values()) and
            offsets_leaders(m), "leaderships moved off the paused node")
    finally:
        proc.send_signal(signal.SIGCONT)
    for i in led:
        assert after[i]["leader_epoch"] > before[i]["leader_epoch"]
    # awake: it learns its lease lapsed, registers again and leads nothing it led before
    wait_until(lambda: paused in {b["node_id"] for b in cluster.metadata(controller)["brokers"]},
               "paused node registered again")
    wait_until(lambda: any("registering again as a new incarnation" in l
                           for l in cluster.nodes[paused].log_lines), "new incarnation logged")
    now = offsets_leaders(cluster.metadata(controller, ["__consumer_offsets"]))
    assert all(now[i]["leader_id"] != paused for i in led)
    # its own answers agree with the cluster once its view caught up
    answers = wait_until(lambda: (a := routed(cluster, paused)) and
                         all(a[g]["node_id"] == now[shard_of(g)]["leader_id"] for g in GROUPS)
                         and a, "paused node routes like the others")
    assert paused not in {a["node_id"] for a in answers.values()}


def commit(cluster, node_id, group, offset):
    """OffsetCommit v8 of one offset (a group with no members, generation -1)."""
    with WireClient(cluster.nodes[node_id].port) as c:
        r = c.request(8, 8, {"group_id": group, "generation_id_or_member_epoch": -1,
                             "member_id": "", "group_instance_id": None,
                             "topics": [{"name": "t", "partitions": [{
                                 "partition_index": 0, "committed_offset": offset,
                                 "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
    return r["topics"][0]["partitions"][0]["error_code"]


def test_only_the_leader_of_a_shard_coordinates_its_groups(cluster):
    with WireClient(cluster.nodes[1].port) as c:
        assert create_topic(c, "t")["error_code"] in (0, 36)
    group = GROUPS[0]
    leader = wait_until(lambda: routed(cluster, 1), "routed")[group]["node_id"]
    others = [i for i in (1, 2, 3) if i != leader]
    assert wait_until(lambda: commit(cluster, leader, group, 5) == 0, "leader commits")
    for i in others:
        assert commit(cluster, i, group, 6) == 16  # NOT_COORDINATOR
    # the leader stops gracefully: the next one serves the group, the old one no longer does
    cluster.nodes[leader].stop()
    new = wait_until(lambda: (a := routed(cluster, others[0])) and a[group]["node_id"] != leader
                     and a[group]["node_id"], "new coordinator")
    assert wait_until(lambda: commit(cluster, new, group, 7) == 0, "new leader commits")
    cluster.nodes[leader].start()
    wait_until(lambda: leader in {b["node_id"] for b in cluster.metadata(new)["brokers"]},
               "old leader back")
    still = routed(cluster, leader)
    if still and still[group]["node_id"] != leader:  # unless leadership came back to it
        assert commit(cluster, leader, group, 8) == 16


def test_elect_leaders_preferred_moves_leadership_back(cluster):
    """After a failover leadership sits on another replica; ElectLeaders
    (preferred) on any node moves it back once the preferred one is in sync."""
    wait_until(lambda: routed(cluster, 1), "every group routed")
    before = offsets_leaders(cluster.metadata(1, ["__consumer_offsets"]))
    p = next(i for i, s in before.items() if s["leader_id"] == s["replica_nodes"][0])
    preferred = before[p]["leader_id"]
    body = {"election_type": 0, "timeout_ms": 30000,
            "topic_partitions": [{"topic": "__consumer_offsets", "partitions": [p]}]}
    with WireClient(cluster.nodes[preferred].port) as c:
        [r] = c.request(43, 2, body)["replica_election_results"]
    assert r["partition_result"][0]["error_code"] == 84  # ELECTION_NOT_NEEDED
    cluster.nodes[preferred].stop()  # controlled shutdown: leadership moves away
    cluster.nodes[preferred].start()
    other = next(i for i in (1, 2, 3) if i != preferred)
    # back in the ISR (replication catches it up), then the election moves it back
    wait_until(lambda: preferred in offsets_leaders(
        cluster.metadata(other, ["__consumer_offsets"]))[p]["isr_nodes"], "back in sync")

    def elected():
        with WireClient(cluster.nodes[other].port) as c:
            [r] = c.request(43, 2, body)["replica_election_results"]
        return r["partition_result"][0]["error_code"] in (0, 84)
    wait_until(elected, "preferred election")
    after = wait_until(lambda: (s := offsets_leaders(cluster.metadata(
        other, ["__consumer_offsets"]))[p]) and s["leader_id"] == preferred and s,
        "leadership back on the preferred replica")
    assert after["leader_epoch"] >= before[p]["leader_epoch"] + 2
