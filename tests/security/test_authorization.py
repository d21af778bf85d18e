"""ACL authorization (StandardAuthorizer semantics) against one kcoord with
an authorizer: the ACL APIs, what each group/offset/data API refuses and
with which error, filtering, DENY over ALLOW, PREFIXED patterns, super
users, mTLS principals, and ACLs after a restart."""
from __future__ import annotations

import time

import pytest

from kcoord.protocol.records import build_batch
from tests.clients.wire import WireClient, create_topic, fetch, produce
from tests.security.conftest import PLAIN_JAAS, USERS
from tests.security.sasl_wire import plain_login
from tests.support import ServerProcess

pytestmark = pytest.mark.clients

TOPIC, GROUP, CLUSTER, TXN = 2, 3, 4, 5
LITERAL, PREFIXED = 3, 4
READ, WRITE, CREATE, DESCRIBE, ALL = 3, 4, 5, 8, 2
DENY, ALLOW = 2, 3
JAAS = PLAIN_JAAS.replace('user_admin="admin-secret";',
                          'user_admin="admin-secret" user_alice="alice-secret";')


def settings(pki) -> dict[str, str]:
    return {
        "group.initial.rebalance.delay.ms": "0",
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:ops",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.jaas.config": JAAS,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca_file),
        "ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]+),OU=(.*?),.*$/$1@$2/L,DEFAULT",
    }


@pytest.fixture(scope="module")
def authz(pki, tmp_path_factory):
    proc = ServerProcess(tmp_path_factory.mktemp("authz") / "data", settings(pki))
    proc.start()
    with user(proc, "admin") as admin:
        for name in ("orders", "secret", "pre-a", "other-a"):
            assert create_topic(admin, name)["error_code"] == 0
    yield proc
    proc.stop()


def user(server, name: str) -> WireClient:
    c = WireClient(server.ports["SASL_PLAINTEXT"])
    assert plain_login(c, name, USERS[name])["error_code"] == 0
    return c


def acl(rtype, name, principal, op, perm=ALLOW, pattern=LITERAL, host="*") -> dict:
    return {"resource_type": rtype, "resource_name": name, "resource_pattern_type": pattern,
            "principal": principal, "host": host, "operation": op, "permission_type": perm}


def create_acls(server, *acls) -> None:
    with user(server, "admin") as admin:
        resp = admin.request(30, 3, {"creations": list(acls)})
        assert [r["error_code"] for r in resp["results"]] == [0] * len(acls), resp


def describe_all(client) -> list:
    resp = client.request(29, 3, {"resource_type_filter": 1, "resource_name_filter": None,
                                  "pattern_type_filter": 1, "principal_filter": None,
                                  "host_filter": None, "operation": 1, "permission_type": 1})
    assert resp["error_code"] == 0, resp
    return sorted((r["resource_type"], r["resource_name"], r["pattern_type"], a["principal"],
                   a["host"], a["operation"], a["permission_type"])
                  for r in resp["resources"] for a in r["acls"])


def commit(client, group, topic, offset=1, version=8) -> list[int]:
    resp = client.request(8, version, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
        "group_instance_id": None, "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "committed_offset": offset, "committed_leader_epoch": -1,
             "committed_metadata": ""}]}]})
    return [p["error_code"] for t in resp["topics"] for p in t["partitions"]]


def committed(client, group, topic) -> int:
    resp = client.request(9, 7, {"group_id": group, "topics": [
        {"name": topic, "partition_indexes": [0]}], "require_stable": False})
    return resp["topics"][0]["partitions"][0]["committed_offset"]


def join(client, group) -> int:
    resp = client.request(11, 7, {
        "group_id": group, "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
        "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}], "reason": None})
    return resp["error_code"]


# ------------------------------------------------------------------ tests
def test_acl_apis_without_authorizer_are_security_disabled(server):
    with WireClient(server.port) as c:
        assert c.request(29, 3, {"resource_type_filter": 1, "pattern_type_filter": 1,
                                 "operation": 1, "permission_type": 1})["error_code"] == 54
        resp = c.request(30, 3, {"creations": [acl(TOPIC, "t", "User:a", READ)]})
        assert [r["error_code"] for r in resp["results"]] == [54]


def test_acl_apis_need_cluster_permission(authz):
    with user(authz, "alice") as alice:
        assert alice.request(29, 3, {"resource_type_filter": 1, "pattern_type_filter": 1,
                                     "operation": 1, "permission_type": 1})["error_code"] == 31
        resp = alice.request(30, 3, {"creations": [acl(TOPIC, "t", "User:alice", ALL)]})
        assert [r["error_code"] for r in resp["results"]] == [31]


def test_invalid_acls_are_refused(authz):
    with user(authz, "admin") as admin:
        resp = admin.request(30, 3, {"creations": [
            acl(CLUSTER, "other-cluster", "User:a", DESCRIBE),
            acl(TOPIC, "t", "no-colon", READ),
            acl(TOPIC, "t", "User:a", 1)]})  # operation ANY
        assert [r["error_code"] for r in resp["results"]] == [42, 42, 42]


def test_without_group_read_cannot_join_or_commit_and_group_is_unchanged(authz):
    create_acls(authz, acl(TOPIC, "orders", "User:alice", READ))
    with user(authz, "alice") as alice:
        assert join(alice, "g-nogroup") == 30
        assert commit(alice, "g-nogroup", "orders", 5) == [30]
    with user(authz, "admin") as admin:
        assert committed(admin, "g-nogroup", "orders") == -1  # nothing was written
        groups = admin.request(16, 4, {"states_filter": []})["groups"]
        assert "g-nogroup" not in [g["group_id"] for g in groups]


def test_without_topic_read_cannot_fetch_or_commit_that_topic(authz):
    create_acls(authz, acl(GROUP, "g-topic", "User:alice", READ),
                acl(TOPIC, "orders", "User:alice", READ))
    with user(authz, "admin") as admin:
        assert produce(admin, "secret", 0, build_batch([(None, b"x", [], None)]))["error_code"] == 0
    with user(authz, "alice") as alice:
        assert fetch(alice, "secret", 0, 0)["error_code"] == 29
        assert fetch(alice, "orders", 0, 0)["error_code"] == 0
        resp = alice.request(8, 8, {
            "group_id": "g-topic", "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None, "topics": [
                {"name": t, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                            "committed_leader_epoch": -1,
                                            "committed_metadata": ""}]}
                for t in ("orders", "secret", "no-such-topic")]})
        errors = {t["name"]: t["partitions"][0]["error_code"] for t in resp["topics"]}
        # authorization before existence: a topic alice may not read is 29, never 3
        assert errors == {"orders": 0, "secret": 29, "no-such-topic": 29}
        assert committed(alice, "g-topic", "orders") == 1


def test_deny_beats_allow_and_prefixed_patterns(authz):
    create_acls(authz, acl(TOPIC, "*", "User:bob", READ),
                acl(TOPIC, "secret", "User:bob", ALL, DENY),
                acl(TOPIC, "pre-", "User:alice", READ, pattern=PREFIXED))
    with user(authz, "bob") as bob:
        assert fetch(bob, "orders", 0, 0)["error_code"] == 0
        assert fetch(bob, "secret", 0, 0)["error_code"] == 29
    with user(authz, "alice") as alice:
        assert fetch(alice, "pre-a", 0, 0)["error_code"] == 0
        assert fetch(alice, "other-a", 0, 0)["error_code"] == 29


def test_metadata_filters_all_topics_and_refuses_named_ones(authz):
    create_acls(authz, acl(TOPIC, "orders", "User:alice", DESCRIBE))
    with user(authz, "alice") as alice:
        every = alice.request(3, 9, {"topics": None, "allow_auto_topic_creation": False,
                                     "include_topic_authorized_operations": True})
        names = {t["name"]: t for t in every["topics"]}
        assert "orders" in names and "secret" not in names
        # DESCRIBE alone, plus the READ given earlier (READ implies DESCRIBE)
        assert names["orders"]["topic_authorized_operations"] & (1 << DESCRIBE)
        named = alice.request(3, 9, {"topics": [{"name": "secret"}],
                                     "allow_auto_topic_creation": True})
        assert [(t["name"], t["error_code"]) for t in named["topics"]] == [("secret", 29)]
        # auto-creation needs CREATE: a missing topic is 29, and is not created
        named = alice.request(3, 9, {"topics": [{"name": "orders-new"}],
                                     "allow_auto_topic_creation": True})
        assert named["topics"][0]["error_code"] == 29


def test_list_groups_filters_and_describe_groups_reports_operations(authz):
    create_acls(authz, acl(GROUP, "g-visible", "User:alice", READ))
    with user(authz, "admin") as admin:
        for g in ("g-visible", "g-hidden"):
            assert commit(admin, g, "orders") == [0]
    with user(authz, "alice") as alice:
        groups = {g["group_id"] for g in alice.request(16, 4, {"states_filter": []})["groups"]}
        assert "g-visible" in groups and "g-hidden" not in groups
        resp = alice.request(15, 5, {"groups": ["g-visible", "g-hidden"],
                                     "include_authorized_operations": True})
        by_id = {g["group_id"]: g for g in resp["groups"]}
        assert by_id["g-hidden"]["error_code"] == 30
        assert by_id["g-visible"]["authorized_operations"] == (1 << READ) | (1 << DESCRIBE)


def test_super_user_and_anonymous(authz):
    with user(authz, "admin") as admin:  # no ACL names admin
        assert fetch(admin, "secret", 0, 0)["error_code"] == 0
        assert join(admin, "g-super") == 79  # MEMBER_ID_REQUIRED: it got through
    with WireClient(authz.ports["PLAINTEXT"]) as anonymous:
        assert fetch(anonymous, "orders", 0, 0)["error_code"] == 29
        assert produce(anonymous, "orders", 0, build_batch([(None, b"x", [], None)]))["error_code"] == 29
        resp = anonymous.request(22, 4, {"transactional_id": None,
                                         "transaction_timeout_ms": 1000})
        assert resp["error_code"] == 31  # no IDEMPOTENT_WRITE, no WRITE on any topic


def test_mtls_principal_from_mapping_rules(authz, pki):
    import ssl
    create_acls(authz, acl(TOPIC, "orders", "User:alice@eng", READ))
    ctx = ssl.create_default_context(cafile=str(pki.ca_file))
    ctx.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    c = WireClient(authz.ports["SSL"])
    c.sock = ctx.wrap_socket(c.sock, server_hostname="localhost")
    with c:
        assert fetch(c, "orders", 0, 0)["error_code"] == 0   # User:alice@eng may read
        assert fetch(c, "secret", 0, 0)["error_code"] == 29


def test_confluent_consumer_with_consumer_acls(authz):
    from tests.security.clients import confluent_roundtrip
    create_acls(authz, acl(TOPIC, "ck-acl", "User:alice", READ),
                acl(TOPIC, "ck-acl", "User:alice", WRITE),
                acl(TOPIC, "ck-acl", "User:alice", CREATE),
                acl(GROUP, "g-ck-acl", "User:alice", READ))
    conf = {"security.protocol": "sasl_plaintext", "sasl.mechanisms": "PLAIN",
            "sasl.username": "alice", "sasl.password": USERS["alice"]}
    got, offset = confluent_roundtrip(f"127.0.0.1:{authz.ports['SASL_PLAINTEXT']}", "ck-acl",
                                      "g-ck-acl", conf)
    assert len(got) == 10 and offset == 10


def test_acls_survive_restart_and_delete(authz, pki):
    with user(authz, "admin") as admin:
        before = describe_all(admin)
    assert before
    authz.stop()
    authz.ports.clear()
    authz.start()
    with user(authz, "admin") as admin:
        assert describe_all(admin) == before
        resp = admin.request(31, 3, {"filters": [{
            "resource_type_filter": TOPIC, "resource_name_filter": "secret",
            "pattern_type_filter": 1, "principal_filter": None, "host_filter": None,
            "operation": 1, "permission_type": DENY}]})
        [result] = resp["filter_results"]
        assert [(m["resource_name"], m["permission_type"]) for m in result["matching_acls"]] \
            == [("secret", DENY)]
        assert len(describe_all(admin)) == len(before) - 1


def test_consumer_group_apis_check_topics(authz):
    """KIP-848: a heartbeat subscribing to a topic the member may not describe is
    29; ConsumerGroupDescribe withholds a group whose assignment has such a topic."""
    import time
    from confluent_kafka import Consumer
    create_acls(authz, acl(GROUP, "g-848", "User:alice", READ))
    with user(authz, "alice") as alice:
        resp = alice.request(68, 0, {
            "group_id": "g-848", "member_id": "", "member_epoch": 0, "instance_id": None,
            "rack_id": None, "rebalance_timeout_ms": 30000, "subscribed_topic_names": ["secret"],
            "server_assignor": None, "topic_partitions": []})
        assert resp["error_code"] == 29
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{authz.ports['SASL_PLAINTEXT']}",
                         "security.protocol": "sasl_plaintext", "sasl.mechanisms": "PLAIN",
                         "sasl.username": "admin", "sasl.password": USERS["admin"],
                         "group.id": "g-848", "group.protocol": "consumer"})
    try:
        consumer.subscribe(["secret"])
        deadline = time.monotonic() + 60
        while not consumer.assignment():
            assert time.monotonic() < deadline, "the consumer never got its partition"
            consumer.poll(0.2)
        body = {"group_ids": ["g-848"], "include_authorized_operations": True}
        with user(authz, "admin") as admin:
            [g] = admin.request(69, 0, body)["groups"]
            assert g["error_code"] == 0 and g["members"]
        with user(authz, "alice") as alice:
            [g] = alice.request(69, 0, body)["groups"]
            assert g["error_code"] == 29 and g["members"] == []
    finally:
        consumer.close()


def test_regex_subscription_resolves_only_to_describable_topics(authz):
    """Kafka 4.0: a regex subscription (ConsumerGroupHeartbeat v1) resolves
    only to the topics the member's principal may DESCRIBE. alice's regex
    matches three topics but she may describe two: only those are assigned;
    a super user's group with the same regex gets all three."""
    import time
    from confluent_kafka import Consumer
    with user(authz, "admin") as admin:
        for name in ("rxa-one", "rxa-two", "rxa-hidden"):
            assert create_topic(admin, name)["error_code"] == 0
    create_acls(authz, acl(GROUP, "g-rx-alice", "User:alice", READ),
                *[acl(TOPIC, t, "User:alice", op) for t in ("rxa-one", "rxa-two")
                  for op in (READ, DESCRIBE)])

    def assigned_by_regex(name: str, group: str) -> set[str]:
        topics: set[str] = set()
        consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{authz.ports['SASL_PLAINTEXT']}",
                             "security.protocol": "sasl_plaintext", "sasl.mechanisms": "PLAIN",
                             "sasl.username": name, "sasl.password": USERS[name],
                             "group.id": group, "group.protocol": "consumer"})
        try:
            consumer.subscribe(["^rxa-.*"], on_assign=lambda _, ps: topics.update(
                tp.topic for tp in ps))
            deadline = time.monotonic() + 60
            while len(topics) < 2:
                assert time.monotonic() < deadline, f"{name}: assigned only {topics}"
                consumer.poll(0.2)
            # the group's own view: the member's assignment as the coordinator holds it
            with user(authz, "admin") as admin:
                [g] = admin.request(69, 0, {"group_ids": [group],
                                            "include_authorized_operations": False})["groups"]
            [member] = g["members"]
            held = {tp["topic_name"] for tp in member["assignment"]["topic_partitions"]}
            assert held == topics, (held, topics)
            return topics
        finally:
            consumer.close()

    # the super user first: the regex does match all three
    deadline = time.monotonic() + 60
    while (got := assigned_by_regex("admin", "g-rx-admin")) != {"rxa-one", "rxa-two",
                                                                 "rxa-hidden"}:
        assert time.monotonic() < deadline, got  # (a first assignment may be partial)
    assert assigned_by_regex("alice", "g-rx-alice") == {"rxa-one", "rxa-two"}


def test_transactional_id_checks(authz):
    with user(authz, "alice") as alice:
        resp = alice.request(22, 4, {"transactional_id": "tx-a", "transaction_timeout_ms": 60000})
        assert resp["error_code"] == 53
        resp = alice.request(10, 4, {"key_type": 1, "coordinator_keys": ["tx-a"]})
        assert resp["coordinators"][0]["error_code"] == 53
        resp = alice.request(26, 3, {"transactional_id": "tx-a", "producer_id": 1,
                                     "producer_epoch": 0, "committed": True})
        assert resp["error_code"] == 53
    create_acls(authz, acl(TXN, "tx-", "User:alice", WRITE, pattern=PREFIXED))
    with user(authz, "alice") as alice:
        resp = alice.request(22, 4, {"transactional_id": "tx-a", "transaction_timeout_ms": 60000})
        assert resp["error_code"] == 0 and resp["producer_id"] >= 0
        # WRITE implies DESCRIBE: the transaction coordinator is found
        resp = alice.request(10, 4, {"key_type": 1, "coordinator_keys": ["tx-a"]})
        assert resp["coordinators"][0]["error_code"] == 0


def test_denied_acks0_produce_closes_the_connection(authz):
    from tests.clients.wire import encode_request
    with WireClient(authz.ports["PLAINTEXT"]) as anonymous:
        anonymous.send_raw(encode_request(0, 9, {
            "transactional_id": None, "acks": 0, "timeout_ms": 30000,
            "topic_data": [{"name": "orders", "partition_data": [
                {"index": 0, "records": build_batch([(None, b"x", [], None)])}]}]}))
        anonymous.wait_closed()


def test_every_served_api_has_an_authorization_rule(authz):
    """An API without a rule would be served to super users only: none is left."""
    assert not [line for line in authz.log_lines if "has no authorization rule" in line]
    with user(authz, "alice") as alice:
        assert alice.request(46, 0, {"timeout_ms": 1000, "topics": None})["error_code"] == 31


def test_share_group_offsets_apis_check_the_group_and_each_topic(authz):
    """KafkaApis' checks on 90-92: Alter READ on the group and each topic,
    Delete DELETE on the group and READ on each topic, Describe DESCRIBE on
    the group and each topic; a refused group answers its error alone."""
    delete_op = 6
    alter = {"group_id": "sg-acl", "topics": [
        {"topic_name": t, "partitions": [{"partition_index": 0, "start_offset": 0}]}
        for t in ("orders", "secret")]}
    delete = {"group_id": "sg-acl", "topics": [{"topic_name": "orders"},
                                               {"topic_name": "secret"}]}
    named = {"groups": [{"group_id": "sg-acl", "topics": [
        {"topic_name": t, "partitions": [0]} for t in ("orders", "secret")]}]}
    with user(authz, "alice") as alice:
        r = alice.request(91, 0, alter)
        assert (r["error_code"], r["responses"]) == (30, [])
        r = alice.request(92, 0, delete)
        assert (r["error_code"], r["responses"]) == (30, [])
        [g] = alice.request(90, 1, named)["groups"]
        assert (g["error_code"], g["topics"]) == (30, [])
    create_acls(authz, acl(GROUP, "sg-acl", "User:alice", READ),
                acl(TOPIC, "orders", "User:alice", READ))
    with user(authz, "alice") as alice:
        r = alice.request(91, 0, alter)
        assert r["error_code"] == 0
        assert {t["topic_name"]: [(p["error_code"], p["error_message"]) for p in t["partitions"]]
                for t in r["responses"]} == {
            "orders": [(0, None)], "secret": [(29, "Topic authorization failed.")]}
        [g] = alice.request(90, 1, {"groups": [{"group_id": "sg-acl", "topics": None}]})["groups"]
        assert [(t["topic_name"], [(p["partition_index"], p["start_offset"], p["error_code"])
                                   for p in t["partitions"]]) for t in g["topics"]] == [
            ("orders", [(0, 0, 0)])]
        [g] = alice.request(90, 1, named)["groups"]
        assert {t["topic_name"]: [(p["start_offset"], p["error_code"]) for p in t["partitions"]]
                for t in g["topics"]} == {"orders": [(0, 0)], "secret": [(-1, 29)]}
        assert alice.request(92, 0, delete)["error_code"] == 30  # READ is not DELETE
    create_acls(authz, acl(GROUP, "sg-acl", "User:alice", delete_op))
    with user(authz, "alice") as alice:
        r = alice.request(92, 0, delete)
        assert r["error_code"] == 0
        assert {t["topic_name"]: t["error_code"] for t in r["responses"]} == {
            "orders": 0, "secret": 29}


def test_share_state_apis_need_cluster_action(authz):
    """83-87 and FindCoordinator key type 2 are broker to broker: CLUSTER_ACTION
    on the cluster, else every partition (every key) answers 31."""
    body = {"group_id": "g", "topics": [{"topic_id": b"\x01" * 16, "partitions": [
        {"partition": 0, "leader_epoch": 0}, {"partition": 1, "leader_epoch": 0}]}]}
    with user(authz, "alice") as alice:
        for key in (84, 87):
            resp = alice.request(key, 0, body)
            assert [p["error_code"] for p in resp["results"][0]["partitions"]] == [31, 31]
        resp = alice.request(10, 6, {"key_type": 2, "coordinator_keys": ["g:AAAAAAAAAAAAAAAAAAAAAA:0"]})
        assert [c["error_code"] for c in resp["coordinators"]] == [31]
    with user(authz, "admin") as admin:  # a super user is a broker here
        deadline = time.monotonic() + 20
        while True:  # the topic is created on first use, then its shards load (14)
            resp = admin.request(87, 0, body)
            codes = [p["error_code"] for p in resp["results"][0]["partitions"]]
            if 14 not in codes or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert codes == [3, 3]  # allowed: the topic id is unknown
