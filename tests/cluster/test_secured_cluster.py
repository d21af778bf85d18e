"""A secured cluster of real processes: etcd + 2 kcoord nodes whose only
inter-broker listener (INTERNAL) is SASL_SSL with PLAIN, certificates made
here with trustme.  A confluent-kafka producer with acks=all over the
SASL_SSL client listener succeeds only if the follower fetched over
INTERNAL (min.insync.replicas=2); with a wrong inter-broker password the
follower cannot log in, says so in its log, drops out of the ISR and
acks=all fails with NOT_ENOUGH_REPLICAS.  A PLAINTEXT listener stays for
the harness (Cluster.start, metadata checks): it proves each listener is
answered with its own endpoints."""
from __future__ import annotations

import pytest

from kcoord.log.scan import segment_data_end
from kcoord.protocol.errors import Err
from kcoord.protocol.records import build_batch
from tests.clients.wire import WireClient, produce
from tests.cluster.support import Cluster, wait_until
from tests.security.certs import make_pki

TOPIC = "secured"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule required"
N = 20


def settings(pki, inter_broker_password: str) -> dict[str, str]:
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "INTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_file),
        "sasl.enabled.mechanisms": "PLAIN",
        # sasl.mechanism.inter.broker.protocol left unset: kcoord's default is PLAIN
        "listener.name.sasl_ssl.plain.sasl.jaas.config": f'{PLAIN} user_bob="bob-secret";',
        "listener.name.internal.plain.sasl.jaas.config":
            f'{PLAIN} username="broker" password="{inter_broker_password}" '
            f'user_broker="broker-secret";',
        "replica.fetch.wait.max.ms": "100", "replica.lag.time.max.ms": "3000",
    }


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def start(etcd, tmp_path, pki, password) -> Cluster:
    return Cluster(etcd, tmp_path, nodes=2, settings=settings(pki, password)).start()


def create_topic(cluster) -> None:
    with WireClient(cluster.nodes[1].port) as c:
        body = {"topics": [{"name": TOPIC, "num_partitions": 1, "replication_factor": 2,
                            "assignments": [],
                            "configs": [{"name": "min.insync.replicas", "value": "2"}]}],
                "timeout_ms": 30000, "validate_only": False}
        [created] = c.request(19, 7, body)["topics"]
        assert created["error_code"] == 0, created


def partition_state(cluster, node_id=1):
    [t] = cluster.metadata(node_id, [TOPIC])["topics"]
    return t["partitions"][0] if t["error_code"] == 0 and t["partitions"] else None


def log_bytes(cluster, node_id) -> bytes:
    d = cluster.nodes[node_id].data_dir / f"{TOPIC}-0"
    # each segment's batches (a live active segment has preallocated zeros after them)
    return b"".join(p.read_bytes()[:segment_data_end(p)] for p in sorted(d.glob("*.log")))


def assert_fetching_refused(cluster, follower, reason: str) -> None:
    """The follower logs why the leader refuses its inter-broker connection
    (reason: a phrase of that line) and holds none of the topic's data."""
    wait_until(lambda: any("cannot use its inter-broker listener" in line and reason in line
                           for line in cluster.nodes[follower].log_lines),
               f"the follower to log that it cannot fetch ({reason})", timeout=30)
    assert log_bytes(cluster, follower) == b""


def test_acks_all_over_sasl_ssl_replicates_through_the_internal_listener(etcd, tmp_path, pki):
    from confluent_kafka import Producer
    cluster = start(etcd, tmp_path, pki, "broker-secret")
    try:
        # each listener is answered with its own endpoints
        meta = cluster.metadata(1)
        assert {b["node_id"]: b["port"] for b in meta["brokers"]} == \
            {i: n.ports["PLAINTEXT"] for i, n in cluster.nodes.items()}
        create_topic(cluster)
        state = wait_until(lambda: (s := partition_state(cluster)) and len(s["isr_nodes"]) == 2
                           and s, "the partition with two in-sync replicas")
        leader = state["leader_id"]
        follower = next(n for n in cluster.nodes if n != leader)
        # the follower's own view must have the partition too (its watch may lag node 1's)
        wait_until(lambda: (s := partition_state(cluster, follower)) and s["leader_id"] == leader,
                   "the follower to know the partition's leader")
        with WireClient(cluster.nodes[follower].port) as c:
            # KIP-951: the follower names the leader at the PLAINTEXT endpoint the request
            # came in on, not at its INTERNAL one
            body = {"transactional_id": None, "acks": -1, "timeout_ms": 30000,
                    "topic_data": [{"name": TOPIC, "partition_data": [
                        {"index": 0, "records": build_batch([(b"k", b"v", [], 1)])}]}]}
            r = c.request(0, 11, body)
            assert r["responses"][0]["partition_responses"][0]["error_code"] == \
                Err.NOT_LEADER_OR_FOLLOWER
            assert [(n["node_id"], n["port"]) for n in r["node_endpoints"]] == \
                [(leader, cluster.nodes[leader].ports["PLAINTEXT"])]
        found = wait_until(lambda: (f := cluster.find_coordinators(follower, ["g"])["g"])
                           and f["error_code"] == 0 and f, "a group coordinator")
        assert found["port"] == cluster.nodes[found["node_id"]].ports["PLAINTEXT"]

        delivered, failed = [], []

        def report(err, msg):
            (failed if err is not None else delivered).append(err or msg.offset())
        producer = Producer({
            "bootstrap.servers": f"127.0.0.1:{cluster.nodes[follower].ports['SASL_SSL']}",
            "security.protocol": "sasl_ssl", "sasl.mechanisms": "PLAIN",
            "sasl.username": "bob", "sasl.password": "bob-secret",
            "ssl.ca.location": str(pki.ca_file), "acks": "all",
            "message.timeout.ms": 60000})
        for i in range(N):
            producer.produce(TOPIC, f"value-{i}".encode(), on_delivery=report)
        assert producer.flush(90) == 0
        assert failed == [] and sorted(delivered) == list(range(N))

        # acks=all with min.insync.replicas=2: the follower has them; same bytes on disk
        wait_until(lambda: log_bytes(cluster, follower) == log_bytes(cluster, leader)
                   and log_bytes(cluster, leader), "the follower's log to match the leader's")
    finally:
        cluster.stop()


def test_wrong_inter_broker_password_keeps_the_follower_out(etcd, tmp_path, pki):
    # every node logs in to its peers with a password the peers do not accept
    cluster = start(etcd, tmp_path, pki, "not-the-secret")
    try:
        create_topic(cluster)
        state = wait_until(lambda: (s := partition_state(cluster)) and s["leader_id"] >= 0 and s,
                           "a leader")
        leader = state["leader_id"]
        follower = next(n for n in cluster.nodes if n != leader)
        with WireClient(cluster.nodes[leader].port) as c:  # once the leader serves it
            wait_until(lambda: produce(c, TOPIC, 0, build_batch([(b"k", b"v0", [], 1000)]),
                                       acks=1)["error_code"] == Err.NONE, "an acks=1 write")
        wait_until(lambda: partition_state(cluster)["isr_nodes"] == [leader],
                   "the follower to leave the ISR")
        with WireClient(cluster.nodes[leader].port) as c:
            answer = produce(c, TOPIC, 0, build_batch([(b"k", b"v1", [], 1001)]), acks=-1)
        assert answer["error_code"] in (Err.NOT_ENOUGH_REPLICAS,
                                        Err.NOT_ENOUGH_REPLICAS_AFTER_APPEND), answer
        assert_fetching_refused(cluster, follower, "SASL authentication failed")
    finally:
        cluster.stop()


@pytest.mark.parametrize("broker_is_super", [False, True])
def test_acls_the_inter_broker_principal_needs_cluster_action(etcd, tmp_path, pki,
                                                               broker_is_super):
    # the harness talks PLAINTEXT as ANONYMOUS (a super user here); User:broker logs in
    # on INTERNAL and may replicate only with CLUSTER_ACTION (as a super user)
    supers = "User:ANONYMOUS;User:broker" if broker_is_super else "User:ANONYMOUS"
    extra = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
             "allow.everyone.if.no.acl.found": "false", "super.users": supers}
    cluster = Cluster(etcd, tmp_path, nodes=2,
                      settings={**settings(pki, "broker-secret"), **extra}).start()
    try:
        create_topic(cluster)
        state = wait_until(lambda: (s := partition_state(cluster)) and s["leader_id"] >= 0 and s,
                           "a leader")
        leader = state["leader_id"]
        follower = next(n for n in cluster.nodes if n != leader)
        with WireClient(cluster.nodes[leader].port) as c:
            wait_until(lambda: produce(c, TOPIC, 0, build_batch([(b"k", b"v0", [], 1000)]),
                                       acks=1)["error_code"] == Err.NONE, "an acks=1 write")
        if broker_is_super:
            with WireClient(cluster.nodes[leader].port) as c:  # retried if the ISR blinked
                wait_until(lambda: produce(c, TOPIC, 0, build_batch([(b"k", b"v1", [], 1001)]),
                                           acks=-1)["error_code"] == Err.NONE, "acks=all")
            wait_until(lambda: log_bytes(cluster, follower) == log_bytes(cluster, leader),
                       "the follower's log to match the leader's")
            return
        wait_until(lambda: partition_state(cluster)["isr_nodes"] == [leader],
                   "the refused follower to leave the ISR")
        assert_fetching_refused(cluster, follower, "CLUSTER_ACTION")
    finally:
        cluster.stop()
