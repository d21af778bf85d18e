"""Committed offsets through real Kafka clients, before and after a restart.

kafka-python, aiokafka and confluent-kafka consumers have a group.id and a
manual assignment (assign()), so they commit as "simple" groups (generation
-1, no member).  kafkajs has no assign(): its commits go through its own
protocol layer (FindCoordinator + OffsetCommit, generation -1) and through
admin.setOffsets, and are read back with admin.fetchOffsets.  Every test
restarts `kcoord serve` on the same port and data dir and checks that every
acknowledged commit is intact.  The group admin APIs (list, describe, delete
groups, list / alter / delete offsets) are driven through kafka-python's
KafkaAdminClient, confluent-kafka's AdminClient and kafkajs's admin.
"""
from __future__ import annotations

import asyncio
import json
import shutil
import socket
import struct
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.clients

TOPIC = "orders"
PARTITIONS = 6
JS_DIR = Path(__file__).parent / "js"


# ------------------------------------------------------------------ helpers
def create_topic(server, name: str = TOPIC, partitions: int = PARTITIONS) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=10000)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()


def run_js(server, ops: list[dict], timeout: float = 90) -> list[dict]:
    node = shutil.which("node")
    if node is None or not (JS_DIR / "node_modules" / "kafkajs").exists():
        pytest.skip("node or kafkajs is not installed (npm install in tests/clients/js)")
    spec = json.dumps({"brokers": [server.bootstrap], "ops": ops})
    proc = subprocess.run([node, "offsets.js", spec], cwd=JS_DIR, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, f"node failed:\n{proc.stderr}\n{proc.stdout}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def js_ok(result: dict):
    assert "ok" in result, f"kafkajs error: {result}"
    return result["ok"]


def js_offsets(result: dict) -> dict[int, tuple[int, str | None]]:
    """fetchOffsets result -> {partition: (offset, metadata)} for TOPIC."""
    (topic,) = js_ok(result)
    assert topic["topic"] == TOPIC
    return {p["partition"]: (int(p["offset"]), p["metadata"]) for p in topic["partitions"]}


def server_api_keys(server) -> set[int]:
    """ApiVersions v0 straight over a socket: the API keys the server advertises."""
    from kcoord.protocol.api import response_codec
    from kcoord.protocol.headers import encode_request_header
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        frame = encode_request_header(18, 0, 1, "probe", False)
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
            chunk = sock.recv(65536)
            assert chunk, "server closed the connection"
            data += chunk
    msg, _ = response_codec(18, 0)[1](data, 8)
    return {k["api_key"] for k in msg["api_keys"]}


def kafka_python_group_offsets(server, group: str) -> dict[int, tuple[int, str]]:
    from kafka import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=10000)
    try:
        got = admin.list_group_offsets(group)[group]
    finally:
        admin.close()
    return {tp.partition: (om.offset, om.metadata) for tp, om in got.items() if tp.topic == TOPIC}


# ------------------------------------------------------------ kafka-python
def kp_consumer(server, group: str, partitions):
    from kafka import KafkaConsumer, TopicPartition
    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id=group,
                             enable_auto_commit=False, request_timeout_ms=15000)
    consumer.assign([TopicPartition(TOPIC, p) for p in partitions])
    return consumer


def kp_commit(consumer, offsets: dict[int, tuple]) -> None:
    from kafka import TopicPartition
    from kafka.structs import OffsetAndMetadata
    consumer.commit({TopicPartition(TOPIC, p): OffsetAndMetadata(o, m, e)
                     for p, (o, m, e) in offsets.items()})


def kp_committed(consumer, partitions) -> dict[int, tuple | None]:
    from kafka import TopicPartition
    out = {}
    for p in partitions:
        om = consumer.committed(TopicPartition(TOPIC, p), metadata=True)
        out[p] = None if om is None else (om.offset, om.metadata, om.leader_epoch)
    return out


def test_kafka_python_commits_survive_restart(server):
    create_topic(server)
    consumer = kp_consumer(server, "kp-group", range(PARTITIONS))
    try:
        kp_commit(consumer, {0: (10, "kp-0", -1), 1: (11, "kp-1", 3), 2: (12, "", -1)})
        kp_commit(consumer, {0: (15, "kp-0-again", 4)})  # the latest commit wins
        expected = {0: (15, "kp-0-again", 4), 1: (11, "kp-1", 3), 2: (12, "", -1), 3: None}
        assert kp_committed(consumer, range(4)) == expected

        server.restart()
        # the open consumer finds the coordinator again and keeps working
        assert kp_committed(consumer, range(4)) == expected
        kp_commit(consumer, {3: (13, "after-restart", -1)})
    finally:
        consumer.close()
    expected[3] = (13, "after-restart", -1)

    server.restart()
    fresh = kp_consumer(server, "kp-group", range(PARTITIONS))
    try:
        assert kp_committed(fresh, range(4)) == expected
    finally:
        fresh.close()


# ----------------------------------------------------------------- aiokafka
async def aio_commit_and_read(bootstrap: str, group: str, commits: list[dict[int, tuple]],
                              read: list[int]) -> dict[int, int | None]:
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.structs import OffsetAndMetadata
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                enable_auto_commit=False, request_timeout_ms=15000)
    await consumer.start()
    try:
        consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
        for offsets in commits:
            await consumer.commit({TopicPartition(TOPIC, p): OffsetAndMetadata(o, m)
                                   for p, (o, m) in offsets.items()})
        return {p: await consumer.committed(TopicPartition(TOPIC, p)) for p in read}
    finally:
        await consumer.stop()


def test_aiokafka_commits_survive_restart(server):
    create_topic(server)
    commits = [{0: (20, "aio-0"), 1: (21, "aio-1")}, {1: (25, "aio-1-again"), 4: (24, "")}]
    got = asyncio.run(aio_commit_and_read(server.bootstrap, "aio-group", commits, [0, 1, 2, 4]))
    assert got == {0: 20, 1: 25, 2: None, 4: 24}
    expected_meta = {0: (20, "aio-0"), 1: (25, "aio-1-again"), 4: (24, "")}
    assert kafka_python_group_offsets(server, "aio-group") == expected_meta

    server.restart()
    got = asyncio.run(aio_commit_and_read(server.bootstrap, "aio-group", [], [0, 1, 2, 4]))
    assert got == {0: 20, 1: 25, 2: None, 4: 24}
    assert kafka_python_group_offsets(server, "aio-group") == expected_meta


# ----------------------------------------------------------- confluent-kafka
# confluent-kafka treats offset metadata as a C string: commit() sends it with
# a trailing NUL byte ("ck-0" goes on the wire as "ck-0\x00"), and committed()
# reads it up to the first NUL, so metadata that another client committed (with
# no NUL) comes back with trailing garbage.  kcoord stores and returns the bytes
# as sent (as Kafka does); the cross-client test below strips the NUL and does
# not compare metadata read by confluent-kafka from other clients' commits.
def ck_consumer(server, group: str):
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "socket.timeout.ms": 15000})
    tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    consumer.pause(tps)  # commit and read offsets only; no fetching
    return consumer


def ck_commit(consumer, offsets: dict[int, tuple]) -> None:
    from confluent_kafka import TopicPartition
    tps = [TopicPartition(TOPIC, p, o, metadata=m) if e is None
           else TopicPartition(TOPIC, p, o, metadata=m, leader_epoch=e)
           for p, (o, m, e) in offsets.items()]
    result = consumer.commit(offsets=tps, asynchronous=False)
    assert all(tp.error is None for tp in result), result


def ck_committed_offsets(consumer) -> dict[int, tuple]:
    """committed() without touching .metadata (unsafe for other clients' commits)."""
    from confluent_kafka import TopicPartition
    got = consumer.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=15)
    assert all(tp.error is None for tp in got), got
    return {tp.partition: (tp.offset, None, tp.leader_epoch) for tp in got}


def ck_committed(consumer, partitions) -> dict[int, tuple]:
    from confluent_kafka import TopicPartition
    got = consumer.committed([TopicPartition(TOPIC, p) for p in partitions], timeout=15)
    assert all(tp.error is None for tp in got), got
    return {tp.partition: (tp.offset, tp.metadata, tp.leader_epoch) for tp in got}


def test_confluent_kafka_commits_survive_restart(server):
    create_topic(server)
    consumer = ck_consumer(server, "ck-group")
    try:
        ck_commit(consumer, {0: (30, "ck-0", None), 5: (35, "ck-5", 2)})
        ck_commit(consumer, {0: (31, "ck-0-again", None)})
        # librdkafka reports "no committed offset" as OFFSET_INVALID (-1001)
        expected = {0: (31, "ck-0-again", None), 1: (-1001, None, None), 5: (35, "ck-5", 2)}
        assert ck_committed(consumer, [0, 1, 5]) == expected
    finally:
        consumer.close()

    server.restart()
    fresh = ck_consumer(server, "ck-group")
    try:
        assert ck_committed(fresh, [0, 1, 5]) == expected
    finally:
        fresh.close()


# ------------------------------------------------------------------ kafkajs
def test_kafkajs_commit_and_fetch_offsets_survive_restart(server):
    create_topic(server)
    results = run_js(server, [
        {"op": "commit", "groupId": "kjs-group", "topic": TOPIC,
         "partitions": [{"partition": 0, "offset": 40, "metadata": "kjs-0"},
                        {"partition": 3, "offset": 43}]},
        {"op": "commit", "groupId": "kjs-group", "topic": TOPIC,
         "partitions": [{"partition": 3, "offset": 44, "metadata": "kjs-3"}]},
        {"op": "fetchOffsets", "groupId": "kjs-group", "topics": [TOPIC]},
        {"op": "commit", "groupId": "kjs-group", "topic": "no-such-topic",
         "partitions": [{"partition": 0, "offset": 1}]},
    ])
    ack = js_ok(results[0])
    assert ack == [{"topic": TOPIC, "partitions": [{"partition": 0, "errorCode": 0},
                                                   {"partition": 3, "errorCode": 0}]}]
    js_ok(results[1])
    expected = {p: (-1, None) for p in range(PARTITIONS)}
    expected.update({0: (40, "kjs-0"), 3: (44, "kjs-3")})
    assert js_offsets(results[2]) == expected
    assert results[3]["error"]["type"] == "UNKNOWN_TOPIC_OR_PARTITION"

    server.restart()
    results = run_js(server, [{"op": "fetchOffsets", "groupId": "kjs-group", "topics": [TOPIC]}])
    assert js_offsets(results[0]) == expected


def test_kafkajs_admin_set_offsets_survives_restart(server):
    """admin.setOffsets runs a consumer that joins the group, seeks and commits:
    it needs the classic group protocol (JoinGroup/SyncGroup/Heartbeat)."""
    keys = server_api_keys(server)
    if not {11, 12, 14}.issubset(keys):
        pytest.skip("kcoord does not advertise JoinGroup/Heartbeat/SyncGroup yet")
    create_topic(server)
    results = run_js(server, [
        {"op": "setOffsets", "groupId": "kjs-set", "topic": TOPIC,
         "partitions": [{"partition": 1, "offset": "51"}, {"partition": 2, "offset": "52"}]},
        {"op": "fetchOffsets", "groupId": "kjs-set", "topics": [TOPIC]},
    ], timeout=120)
    js_ok(results[0])
    expected = {p: (-1, None) for p in range(PARTITIONS)}
    expected.update({1: (51, None), 2: (52, None)})
    assert js_offsets(results[1]) == expected

    server.restart()
    results = run_js(server, [{"op": "fetchOffsets", "groupId": "kjs-set", "topics": [TOPIC]}])
    assert js_offsets(results[0]) == expected


# ------------------------------------------------- all four, read by all four
def test_every_client_reads_every_clients_commits_after_restart(server):
    create_topic(server)
    consumer = kp_consumer(server, "x-kp", range(PARTITIONS))
    try:
        kp_commit(consumer, {p: (100 + p, f"kp-{p}", -1) for p in range(PARTITIONS)})
    finally:
        consumer.close()
    asyncio.run(aio_commit_and_read(server.bootstrap, "x-aio",
                                    [{p: (200 + p, f"aio-{p}") for p in range(PARTITIONS)}], []))
    consumer = ck_consumer(server, "x-ck")
    try:
        ck_commit(consumer, {p: (300 + p, f"ck-{p}", None) for p in range(PARTITIONS)})
    finally:
        consumer.close()
    js_ok(run_js(server, [{"op": "commit", "groupId": "x-kjs", "topic": TOPIC, "partitions": [
        {"partition": p, "offset": 400 + p, "metadata": f"kjs-{p}"}
        for p in range(PARTITIONS)]}])[0])
    groups = {"x-kp": (100, "kp"), "x-aio": (200, "aio"), "x-ck": (300, "ck"), "x-kjs": (400, "kjs")}

    def want(group):
        base, tag = groups[group]
        return {p: (base + p, f"{tag}-{p}") for p in range(PARTITIONS)}

    def strip_nul(got):  # see the confluent-kafka note above
        return {p: (o, m.rstrip("\x00") if m else m) for p, (o, m) in got.items()}

    server.restart()
    for group, (base, _) in groups.items():
        # kafka-python
        consumer = kp_consumer(server, group, range(PARTITIONS))
        try:
            got = {p: v[:2] for p, v in kp_committed(consumer, range(PARTITIONS)).items()}
        finally:
            consumer.close()
        assert strip_nul(got) == want(group), group
        # aiokafka (committed() returns the offset only)
        got = asyncio.run(aio_commit_and_read(server.bootstrap, group, [], list(range(PARTITIONS))))
        assert got == {p: base + p for p in range(PARTITIONS)}, group
        # confluent-kafka: offsets for every group, metadata for its own commits only
        consumer = ck_consumer(server, group)
        try:
            got = ck_committed(consumer, range(PARTITIONS)) if group == "x-ck" else {
                p: (o, None) for p, (o, _, _) in ck_committed_offsets(consumer).items()}
        finally:
            consumer.close()
        if group == "x-ck":
            assert {p: v[:2] for p, v in got.items()} == want(group)
        else:
            assert {p: o for p, (o, _) in got.items()} == {p: base + p for p in range(PARTITIONS)}
    # kafkajs
    results = run_js(server, [{"op": "fetchOffsets", "groupId": g, "topics": [TOPIC]} for g in groups])
    for result, group in zip(results, groups):
        assert strip_nul(js_offsets(result)) == want(group), group


# ------------------------------------------------------------- group admin
def test_kafka_python_admin_groups_survive_restart(server):
    from kafka import KafkaAdminClient, TopicPartition
    from kafka.structs import OffsetAndMetadata
    create_topic(server)

    def admin():
        return KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=10000)

    a = admin()
    try:
        for group, base in (("adm-a", 10), ("adm-b", 20), ("adm-c", 30)):
            errors = a.alter_group_offsets(group, {
                TopicPartition(TOPIC, p): OffsetAndMetadata(base + p, f"{group}-{p}", -1)
                for p in range(3)})
            assert all(e.__name__ == "NoError" for e in errors.values()), errors
        listed = {g["group_id"]: g for g in a.list_groups()}
        assert {"adm-a", "adm-b", "adm-c"} <= set(listed)
        assert listed["adm-a"]["protocol_type"] == ""
        assert listed["adm-a"]["group_state"] == "Empty"
        described = a.describe_groups(["adm-c"])["adm-c"]
        assert (described["group_state"], described["members"]) == ("Empty", [])
        offsets = a.list_group_offsets(["adm-a", "adm-b"])
        assert {tp.partition: om.offset for tp, om in offsets["adm-b"].items()} == {0: 20, 1: 21, 2: 22}

        errors = a.delete_group_offsets("adm-b", [TopicPartition(TOPIC, 1)])
        assert {tp.partition: e.__name__ for tp, e in errors.items()} == {1: "NoError"}
        assert a.delete_groups(["adm-a", "adm-nope"]) == {"adm-a": "OK",
                                                          "adm-nope": "GroupIdNotFoundError"}
    finally:
        a.close()

    def check():
        a = admin()
        try:
            listed = {g["group_id"] for g in a.list_groups()}
            assert "adm-a" not in listed and {"adm-b", "adm-c"} <= listed
            offsets = a.list_group_offsets(["adm-a", "adm-b", "adm-c"])
            assert offsets["adm-a"] == {}
            assert {tp.partition: (om.offset, om.metadata) for tp, om in offsets["adm-b"].items()} == {
                0: (20, "adm-b-0"), 2: (22, "adm-b-2")}
            assert {tp.partition: om.offset for tp, om in offsets["adm-c"].items()} == {
                0: 30, 1: 31, 2: 32}
            assert a.delete_groups(["adm-a"]) == {"adm-a": "GroupIdNotFoundError"}
        finally:
            a.close()

    check()
    server.restart()
    check()


def test_confluent_admin_groups_survive_restart(server):
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient
    create_topic(server)

    def admin():
        return AdminClient({"bootstrap.servers": server.bootstrap})

    def group_offsets(a, group):
        futures = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                request_timeout=15)
        result = futures[group].result()
        return {tp.partition: (tp.offset, tp.metadata) for tp in result.topic_partitions
                if tp.topic == TOPIC}

    def listed(a):
        result = a.list_consumer_groups(request_timeout=15).result()
        assert not result.errors, result.errors
        return {g.group_id: g for g in result.valid}

    a = admin()
    for group, base in (("cka-a", 10), ("cka-b", 20)):
        futures = a.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [
            TopicPartition(TOPIC, p, base + p, metadata=f"{group}-{p}") for p in range(3)])],
            request_timeout=15)
        result = futures[group].result()
        assert all(tp.error is None for tp in result.topic_partitions)
    groups = listed(a)
    assert {"cka-a", "cka-b"} <= set(groups)
    assert groups["cka-a"].is_simple_consumer_group
    assert groups["cka-a"].state.name == "EMPTY"
    assert group_offsets(a, "cka-a") == {p: (10 + p, f"cka-a-{p}") for p in range(3)}

    futures = a.delete_consumer_groups(["cka-a"], request_timeout=15)
    futures["cka-a"].result()
    futures = a.delete_consumer_groups(["cka-nope"], request_timeout=15)
    with pytest.raises(KafkaException) as exc:
        futures["cka-nope"].result()
    assert exc.value.args[0].code() == 69  # GROUP_ID_NOT_FOUND

    def check():
        a = admin()
        groups = listed(a)
        assert "cka-a" not in groups and "cka-b" in groups
        assert group_offsets(a, "cka-b") == {p: (20 + p, f"cka-b-{p}") for p in range(3)}
        offsets = group_offsets(a, "cka-a")
        assert all(offset < 0 for offset, _ in offsets.values()), offsets

    check()
    server.restart()
    check()


def test_kafkajs_admin_groups_survive_restart(server):
    create_topic(server)
    results = run_js(server, [
        {"op": "commit", "groupId": "kjs-a", "topic": TOPIC, "partitions": [{"partition": 0, "offset": 1}]},
        {"op": "commit", "groupId": "kjs-b", "topic": TOPIC, "partitions": [{"partition": 0, "offset": 2}]},
        {"op": "listGroups"},
        {"op": "describeGroups", "groupIds": ["kjs-a"]},
        {"op": "deleteGroups", "groupIds": ["kjs-a"]},
        {"op": "deleteGroups", "groupIds": ["kjs-a"]},
    ])
    groups = {g["groupId"]: g for g in js_ok(results[2])["groups"]}
    assert {"kjs-a", "kjs-b"} <= set(groups) and groups["kjs-a"]["protocolType"] == ""
    (described,) = js_ok(results[3])["groups"]
    assert (described["state"], described["members"]) == ("Empty", [])
    assert js_ok(results[4]) == [{"groupId": "kjs-a", "errorCode": 0}]
    assert results[5]["error"]["groups"] == [{"groupId": "kjs-a", "errorCode": 69}]

    server.restart()
    results = run_js(server, [{"op": "listGroups"},
                              {"op": "fetchOffsets", "groupId": "kjs-a", "topics": [TOPIC]},
                              {"op": "fetchOffsets", "groupId": "kjs-b", "topics": [TOPIC]}])
    groups = {g["groupId"] for g in js_ok(results[0])["groups"]}
    assert "kjs-a" not in groups and "kjs-b" in groups
    assert js_offsets(results[1])[0] == (-1, None)
    assert js_offsets(results[2])[0] == (2, None)
