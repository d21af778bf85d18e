"""SCRAM credentials and ACLs are cluster-wide: real etcd, two real kcoord
processes with an authorizer.  A user and an ACL made through node 1 log
in and are authorized on node 2 (once its watch delivered them), survive
node 2's restart, an ACL deleted on node 2 makes node 1 deny, a credential
deleted on node 2 stops the login on node 1; etcd holds salted
credentials only; `--add-scram` on every node stores one credential; with
etcd gone a change is answered with an error, never as stored.

The harness talks PLAINTEXT as User:ANONYMOUS (a super user here); users
log in with SCRAM-SHA-256 on SASL_PLAINTEXT."""
from __future__ import annotations

import asyncio
import secrets
import socket
import subprocess
import sys
import time

import aetcd

from kcoord.cluster.etcd_server import free_port
from kcoord.security.sasl_mechanisms import salted_password
from tests.clients.wire import WireClient, create_topic, metadata
from tests.cluster.support import Cluster, wait_until
from tests.security.sasl_wire import scram_login

TOPIC, LITERAL, READ, ALLOW = 2, 3, 3, 3
TOPIC_AUTHORIZATION_FAILED = 29
SCRAM_SHA_256 = 1
MECH = "SCRAM-SHA-256"
ADMIN_SPEC = f"{MECH}=[name=admin,password=admin-secret]"
SETTINGS = {
    "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms": MECH,
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS;User:admin",
    "allow.everyone.if.no.acl.found": "false",
}
ORDERS_READ = {"resource_type": TOPIC, "resource_name": "orders",
               "resource_pattern_type": LITERAL, "principal": "User:alice", "host": "*",
               "operation": READ, "permission_type": ALLOW}

ALL_ACLS = {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
            "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}


def login(cluster, node_id, user, password) -> WireClient | None:
    """A connection logged in on node_id's SASL listener, or None when refused."""
    c = WireClient(cluster.nodes[node_id].ports["SASL_PLAINTEXT"])
    if scram_login(c, MECH, user, password)["error_code"] == 0:
        return c
    c.close()
    return None


def topic_error(cluster, node_id, user, password, topic) -> int | None:
    """The Metadata error `user` gets for `topic` on node_id (None: no login)."""
    c = login(cluster, node_id, user, password)
    if c is None:
        return None
    with c:
        [t] = metadata(c, [topic], allow_auto_create=False)["topics"]
        return t["error_code"]


def admin(cluster, node_id) -> WireClient:
    return WireClient(cluster.nodes[node_id].port)


def upsert_alice(c, password) -> dict:
    salt = secrets.token_bytes(16)
    return c.request(51, 0, {"deletions": [], "upsertions": [{
        "name": "alice", "mechanism": SCRAM_SHA_256, "iterations": 4096, "salt": salt,
        "salted_password": salted_password(MECH, password, salt, 4096)}]})


def delete_orders_acl(c) -> dict:
    return c.request(31, 3, {"filters": [{
        "resource_type_filter": TOPIC, "resource_name_filter": "orders",
        "pattern_type_filter": LITERAL, "principal_filter": "User:alice", "host_filter": None,
        "operation": READ, "permission_type": ALLOW}]})


def etcd_security_values(etcd) -> list[bytes]:
    async def read():
        host, port = etcd.endpoint.split(":")
        async with aetcd.Client(host=host, port=int(port)) as client:
            return [kv.value for kv in await client.get_prefix(b"/kcoord/security/")]
    return asyncio.run(read())


def test_credentials_and_acls_are_the_same_on_every_node(etcd, tmp_path):
    cluster = Cluster(etcd, tmp_path, nodes=2, settings=SETTINGS)
    for node in cluster.nodes.values():  # every node bootstrapped with the same credential
        node.extra_args = ["--add-scram", ADMIN_SPEC]
    cluster.start()
    try:
        # --add-scram stored it once; both nodes authenticate admin
        stored = [i for i, n in cluster.nodes.items()
                  if any("stored in the cluster" in line for line in n.log_lines)]
        assert len(stored) == 1, stored
        for node_id in cluster.nodes:
            c = wait_until(lambda: login(cluster, node_id, "admin", "admin-secret"),
                           f"admin's login on node {node_id}")
            c.close()

        with admin(cluster, 1) as c:
            assert create_topic(c, "orders")["error_code"] == 0
            assert upsert_alice(c, "alice-secret")["results"][0]["error_code"] == 0
            assert c.request(30, 3, {"creations": [ORDERS_READ]})["results"] == \
                [{"error_code": 0, "error_message": None}]
            # answered once etcd had it, and applied on node 1 by then
            assert len(c.request(29, 3, ALL_ACLS)["resources"]) == 1
        assert login(cluster, 1, "alice", "alice-secret") is not None
        wait_until(lambda: topic_error(cluster, 1, "alice", "alice-secret", "orders") == 0,
                   "alice to read orders on node 1")
        # node 2 applies them from its watch
        wait_until(lambda: topic_error(cluster, 2, "alice", "alice-secret", "orders") == 0,
                   "alice to log in and read orders on node 2", timeout=30)
        assert topic_error(cluster, 2, "alice", "alice-secret", "secret") == \
            TOPIC_AUTHORIZATION_FAILED
        assert login(cluster, 2, "alice", "wrong") is None
        with admin(cluster, 2) as c:
            described = c.request(50, 0, {"users": None})["results"]
            assert {(r["user"], tuple((i["mechanism"], i["iterations"])
                                      for i in r["credential_infos"])) for r in described} \
                == {("admin", ((SCRAM_SHA_256, 4096),)), ("alice", ((SCRAM_SHA_256, 4096),))}
        # etcd holds salted credentials, never a password; no node wrote a local log
        values = etcd_security_values(etcd)
        assert len(values) == 3 and b"secret" not in b"".join(values)
        for node in cluster.nodes.values():
            assert not (node.data_dir / "__kcoord_security" / "metadata.log").exists()

        # node 2 restarted reads them back from etcd
        cluster.nodes[2].stop()
        cluster.nodes[2].ports.clear()
        cluster.nodes[2].start()
        # it accepts connections only once it has read etcd: no wait needed
        assert topic_error(cluster, 2, "alice", "alice-secret", "orders") == 0

        # an ACL deleted on node 2: node 1 denies; a credential deleted on node 2: no login on 1
        with admin(cluster, 2) as c:
            [result] = delete_orders_acl(c)["filter_results"]
            assert result["error_code"] == 0 and len(result["matching_acls"]) == 1
            assert c.request(51, 0, {"upsertions": [], "deletions": [
                {"name": "alice", "mechanism": SCRAM_SHA_256}]})["results"][0]["error_code"] == 0
        assert topic_error(cluster, 2, "alice", "alice-secret", "orders") is None
        wait_until(lambda: login(cluster, 1, "alice", "alice-secret") is None,
                   "node 1 to refuse alice's login", timeout=30)
        with admin(cluster, 1) as c:  # alice again, without the ACL: node 1 denies
            assert upsert_alice(c, "alice-2")["results"][0]["error_code"] == 0
        assert topic_error(cluster, 1, "alice", "alice-2", "orders") == \
            TOPIC_AUTHORIZATION_FAILED
        wait_until(lambda: topic_error(cluster, 2, "alice", "alice-2", "orders") ==
                   TOPIC_AUTHORIZATION_FAILED, "node 2 to have alice's new password", timeout=30)

        # etcd gone: the change is not acknowledged
        etcd.stop()
        with admin(cluster, 1) as c:
            [result] = c.request(30, 3, {"creations": [ORDERS_READ]})["results"]
            assert result["error_code"] != 0, result
            with_upsert = upsert_alice(c, "alice-3")["results"][0]
            assert with_upsert["error_code"] != 0, with_upsert
    finally:
        cluster.stop()


def test_a_node_accepts_connections_only_once_it_joined(tmp_path):
    """Bound (its ports are logged and registered) but not accepting while
    etcd is unreachable: a client is refused (and retries) rather than
    authenticated or authorized against credentials and ACLs not read yet."""
    dead = free_port()  # nothing listens there
    cmd = [sys.executable, "-m", "kcoord.cli", "serve", "--listen", "127.0.0.1:0",
           "--data-dir", str(tmp_path / "node"), "--set", "node.id=1",
           "--set", f"etcd.endpoints=127.0.0.1:{dead}"]
    for key, value in SETTINGS.items():
        cmd += ["--set", f"{key}={value}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        ports = []
        deadline = time.monotonic() + 60
        while len(ports) < 2:
            line = proc.stderr.readline()
            assert line and time.monotonic() < deadline, "no listener lines"
            if "kcoord listener " in line:
                ports.append(int(line.rsplit(":", 1)[1]))
        for port in ports:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=5).close()
            except ConnectionRefusedError:
                continue
            raise AssertionError(f"port {port} accepted a connection before the node joined")
    finally:
        proc.kill()
        proc.wait(10)


def test_scram_inter_broker_login_with_one_bootstrapped_credential(etcd, tmp_path):
    """Replication over a SCRAM-SHA-256 inter-broker listener: the broker's
    credential is bootstrapped once (every node runs the same --add-scram)
    and every node verifies its peers' logins against it."""
    from kcoord.protocol.errors import Err
    from kcoord.protocol.records import build_batch
    from tests.clients.wire import produce
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required"
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": MECH, "sasl.mechanism.inter.broker.protocol": MECH,
        "listener.name.internal.scram-sha-256.sasl.jaas.config":
            f'{scram} username="broker" password="broker-secret";',
        "replica.fetch.wait.max.ms": "100",
    }
    cluster = Cluster(etcd, tmp_path, nodes=2, settings=settings)
    for node in cluster.nodes.values():
        node.extra_args = ["--add-scram", f"{MECH}=[name=broker,password=broker-secret]"]
    cluster.start()
    try:
        with admin(cluster, 1) as c:
            [created] = c.request(19, 7, {"topics": [{
                "name": "replicated", "num_partitions": 1, "replication_factor": 2,
                "assignments": [], "configs": [{"name": "min.insync.replicas", "value": "2"}]}],
                "timeout_ms": 30000, "validate_only": False})["topics"]
            assert created["error_code"] == 0, created

        def leader():
            [t] = cluster.metadata(1, ["replicated"])["topics"]
            p = t["partitions"][0] if t["partitions"] else None
            return p is not None and len(p["isr_nodes"]) == 2 and p["leader_id"]
        leader_id = wait_until(leader, "two in-sync replicas")
        with admin(cluster, leader_id) as c:  # acks=all needs the follower's SCRAM fetches
            wait_until(lambda: produce(c, "replicated", 0, build_batch([(b"k", b"v", [], 1)]),
                                       acks=-1)["error_code"] == Err.NONE, "an acks=all write")
    finally:
        cluster.stop()
