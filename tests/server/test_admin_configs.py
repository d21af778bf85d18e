"""Config APIs (DescribeConfigs, AlterConfigs, IncrementalAlterConfigs) and
CreateTopics config validation, against one real `kcoord serve`, with
confluent-kafka's and kafka-python's AdminClients and at the wire level
where a client hides the detail (ADMIN_REFERENCE.md sections 1-3, 7).
"""
from __future__ import annotations

import time

import pytest

from kcoord.protocol.errors import Err
from kcoord.protocol.records import build_batch
from tests.clients.wire import WireClient, create_topic, produce
from tests.support import ServerProcess

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

DESCRIBE, ALTER, INCREMENTAL, HEARTBEAT, CG_DESCRIBE = 32, 33, 44, 68, 69
TOPIC, BROKER, GROUP = 2, 4, 32
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc = ServerProcess(tmp_path_factory.mktemp("configs") / "data", settings={
        "group.initial.rebalance.delay.ms": "0",
        "log.segment.bytes": "1048576",
        "log.retention.hours": "48",
        "ssl.keystore.password": "not-for-your-eyes",
        # KIP-848 bounds low enough for a fencing test with short deadlines
        "group.consumer.min.session.timeout.ms": "1000",
        "group.consumer.session.timeout.ms": "60000",
        "group.consumer.min.heartbeat.interval.ms": "200",
    })
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def wire(server):
    with WireClient(server.port) as client:
        yield client


@pytest.fixture(scope="module")
def confluent(server):
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": server.bootstrap})


def describe(wire, rtype, name, keys=None, version=4, synonyms=True, docs=False):
    resp = wire.request(DESCRIBE, version, {
        "resources": [{"resource_type": rtype, "resource_name": name,
                       "configuration_keys": keys}],
        "include_synonyms": synonyms, "include_documentation": docs})
    [result] = resp["results"]
    return result


def incremental(wire, rtype, name, ops, validate_only=False, version=1):
    resp = wire.request(INCREMENTAL, version, {
        "resources": [{"resource_type": rtype, "resource_name": name,
                       "configs": [{"name": k, "config_operation": op, "value": v}
                                   for k, op, v in ops]}],
        "validate_only": validate_only})
    return resp["responses"]


def entries(result):
    return {c["name"]: c for c in result["configs"]}


# ----------------------------------------------------------------- CreateTopics
def test_create_topics_validates_configs_confluent(confluent):
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import NewTopic
    futures = confluent.create_topics([
        NewTopic("cfg-ok", 1, 1, config={"cleanup.policy": "compact,delete",
                                          "retention.ms": "-1"}),
        NewTopic("cfg-unknown", 1, 1, config={"no.such.key": "1"}),
        NewTopic("cfg-range", 1, 1, config={"min.insync.replicas": "0"}),
        NewTopic("cfg-policy", 1, 1, config={"cleanup.policy": "foo"}),
        NewTopic("cfg-number", 1, 1, config={"retention.ms": "abc"}),
        NewTopic("cfg-lags", 1, 1, config={"min.compaction.lag.ms": "10",
                                            "max.compaction.lag.ms": "5"}),
    ])
    futures["cfg-ok"].result(30)
    messages = {}
    for name in ("cfg-unknown", "cfg-range", "cfg-policy", "cfg-number", "cfg-lags"):
        with pytest.raises(Exception) as info:
            futures[name].result(30)
        assert info.value.args[0].code() == KafkaError.INVALID_CONFIG, name
        messages[name] = info.value.args[0].str()
    assert messages["cfg-unknown"] == "Unknown topic config name: no.such.key"
    assert "min.insync.replicas" in messages["cfg-range"]


def test_create_topics_unknown_key_message_kafka_python(server):
    from kafka.admin import KafkaAdminClient, NewTopic
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=30000)
    try:
        with pytest.raises(Exception) as info:
            admin.create_topics([NewTopic("kp-bad", 1, 1, topic_configs={"bogus.key": "1"})])
        assert "InvalidConfig" in type(info.value).__name__ or "40" in str(info.value)
        admin.create_topics([NewTopic("kp-ok", 1, 1, topic_configs={"segment.bytes": "65536"})])
        assert "kp-ok" in admin.list_topics() and "kp-bad" not in admin.list_topics()
    finally:
        admin.close()


def test_create_topics_returns_the_effective_configs(wire):
    for validate_only in (True, False):
        body = {"topics": [{"name": "cfg-v5", "num_partitions": 1, "replication_factor": 1,
                            "assignments": [], "configs": [
                                {"name": "retention.ms", "value": "60000"}]}],
                "timeout_ms": 30000, "validate_only": validate_only}
        [result] = wire.request(19, 7, body)["topics"]
        assert result["error_code"] == 0
        names = [c["name"] for c in result["configs"]]
        assert names == sorted(names) and len(names) >= 35
        got = {c["name"]: c for c in result["configs"]}
        assert (got["retention.ms"]["value"], got["retention.ms"]["config_source"]) == ("60000", 1)
        assert (got["segment.bytes"]["value"], got["segment.bytes"]["config_source"]) == (
            "1048576", 4)
    [result] = wire.request(19, 4, {**body, "topics": [{**body["topics"][0], "name": "cfg-v4"}]})[
        "topics"]
    assert result["error_code"] == 0


def test_create_topics_null_value_is_invalid_config(wire):
    result = create_topic(wire, "cfg-null", 1, {"retention.ms": None})
    assert result["error_code"] == Err.INVALID_CONFIG
    assert describe(wire, TOPIC, "cfg-null")["error_code"] == Err.UNKNOWN_TOPIC_OR_PARTITION


# -------------------------------------------------------------- topic describe
def test_describe_topic_every_key_sources_and_synonyms(wire):
    assert create_topic(wire, "d1", 2)["error_code"] == 0
    assert incremental(wire, TOPIC, "d1", [("retention.bytes", SET, "123456")])[0][
        "error_code"] == 0
    result = describe(wire, TOPIC, "d1")
    assert result["error_code"] == 0
    got = entries(result)
    # every Kafka topic key, Streams' three among them
    for key in ("cleanup.policy", "retention.ms", "retention.bytes", "segment.bytes",
                "max.message.bytes", "min.insync.replicas", "compression.type",
                "message.timestamp.type", "segment.ms", "unclean.leader.election.enable"):
        assert key in got, key
    assert len(got) >= 35
    # a topic override comes first, source 1, then the broker's synonyms
    rb = got["retention.bytes"]
    assert (rb["value"], rb["config_source"]) == ("123456", 1)
    assert [(s["name"], s["source"]) for s in rb["synonyms"]] == [
        ("retention.bytes", 1), ("log.retention.bytes", 5)]
    # a static log.segment.bytes makes segment.bytes STATIC_BROKER_CONFIG
    sb = got["segment.bytes"]
    assert (sb["value"], sb["config_source"]) == ("1048576", 4)
    assert sb["synonyms"][0] == {"name": "log.segment.bytes", "value": "1048576", "source": 4}
    # log.retention.hours=48 only: the value follows, but Kafka's primary-synonym cut leaves
    # retention.ms reported as a default
    rm = got["retention.ms"]
    assert rm["value"] == str(48 * 3600000) and rm["config_source"] == 5
    assert got["cleanup.policy"]["value"] == "delete"
    assert all(not c["read_only"] and not c["is_sensitive"] for c in got.values())
    assert got["retention.ms"]["config_type"] == 5 and got["cleanup.policy"]["config_type"] == 7


def test_describe_key_filter_and_versions(wire):
    # a list returns only those keys; unknown names are dropped without an error
    result = describe(wire, TOPIC, "d1", keys=["retention.ms", "nope"])
    assert [c["name"] for c in result["configs"]] == ["retention.ms"]
    # an empty list means every key, like null
    assert len(describe(wire, TOPIC, "d1", keys=[])["configs"]) == len(
        describe(wire, TOPIC, "d1")["configs"])
    # without synonyms the source is still computed; documentation only when asked
    plain = entries(describe(wire, TOPIC, "d1", synonyms=False))["segment.bytes"]
    assert plain["synonyms"] == [] and plain["config_source"] == 4
    assert plain["documentation"] is None
    documented = entries(describe(wire, TOPIC, "d1", docs=True))
    assert all(e["documentation"] for e in documented.values())
    for version in (1, 2, 3):
        assert describe(wire, TOPIC, "d1", keys=["cleanup.policy"],
                        version=version)["configs"][0]["value"] == "delete"


def test_describe_errors(wire):
    assert describe(wire, TOPIC, "missing")["error_code"] == Err.UNKNOWN_TOPIC_OR_PARTITION
    assert describe(wire, TOPIC, "bad/name")["error_code"] == Err.INVALID_TOPIC_EXCEPTION
    assert describe(wire, 99, "x")["error_code"] == Err.INVALID_REQUEST
    assert describe(wire, BROKER, "7")["error_code"] == Err.INVALID_REQUEST
    assert describe(wire, BROKER, "abc")["error_code"] == Err.INVALID_REQUEST
    assert describe(wire, GROUP, "")["error_code"] == Err.INVALID_REQUEST


# ----------------------------------------------------------------- topic alter
def test_incremental_ops_and_validation(wire):
    assert create_topic(wire, "ops", 1)["error_code"] == 0

    def value(key):
        return entries(describe(wire, TOPIC, "ops", keys=[key]))[key]

    assert incremental(wire, TOPIC, "ops", [("cleanup.policy", APPEND, "compact")])[0][
        "error_code"] == 0
    assert value("cleanup.policy")["value"] == "delete,compact"
    # APPEND does not duplicate; SUBTRACT removes
    incremental(wire, TOPIC, "ops", [("cleanup.policy", APPEND, "compact")])
    assert value("cleanup.policy")["value"] == "delete,compact"
    incremental(wire, TOPIC, "ops", [("cleanup.policy", SUBTRACT, "delete")])
    assert value("cleanup.policy")["value"] == "compact"
    # APPEND on a non-list key; bad values; a null SET; an unknown op; duplicate keys
    for ops, code in [
        ([("retention.ms", APPEND, "1")], Err.INVALID_CONFIG),
        ([("min.insync.replicas", SET, "0")], Err.INVALID_CONFIG),
        ([("cleanup.policy", SET, "foo")], Err.INVALID_CONFIG),
        ([("retention.ms", SET, "abc")], Err.INVALID_CONFIG),
        ([("no.such", SET, "1")], Err.INVALID_CONFIG),
        ([("retention.ms", SET, None)], Err.INVALID_REQUEST),
        ([("retention.ms", 9, "1")], Err.INVALID_REQUEST),
        ([("retention.ms", SET, "1"), ("retention.ms", SET, "2")], Err.INVALID_REQUEST),
    ]:
        assert incremental(wire, TOPIC, "ops", ops)[0]["error_code"] == code, ops
    # merged validation: min.compaction.lag.ms above an existing max
    incremental(wire, TOPIC, "ops", [("max.compaction.lag.ms", SET, "100")])
    assert incremental(wire, TOPIC, "ops", [("min.compaction.lag.ms", SET, "200")])[0][
        "error_code"] == Err.INVALID_CONFIG
    # validate_only changes nothing; DELETE of an absent key is fine
    assert incremental(wire, TOPIC, "ops", [("retention.ms", SET, "5000")],
                       validate_only=True)[0]["error_code"] == 0
    assert value("retention.ms")["config_source"] != 1
    assert incremental(wire, TOPIC, "ops", [("flush.ms", DELETE, None)])[0]["error_code"] == 0
    # a resource is all or nothing
    assert incremental(wire, TOPIC, "ops", [("retention.ms", SET, "5000"),
                                            ("segment.bytes", SET, "1")])[0]["error_code"] \
        == Err.INVALID_CONFIG
    assert value("retention.ms")["config_source"] != 1
    # a missing topic; the default topic resource
    assert incremental(wire, TOPIC, "gone", [("retention.ms", SET, "1")])[0]["error_code"] \
        == Err.UNKNOWN_TOPIC_OR_PARTITION
    assert incremental(wire, TOPIC, "", [("retention.ms", SET, "1")])[0]["error_code"] \
        == Err.INVALID_REQUEST


def test_every_listed_key_can_be_set_back(wire):
    """kafka-ui's round trip: each described value is accepted by SET."""
    assert create_topic(wire, "roundtrip", 1)["error_code"] == 0
    got = describe(wire, TOPIC, "roundtrip")["configs"]
    ops = [(c["name"], SET, c["value"]) for c in got if c["name"] != "remote.storage.enable"]
    assert incremental(wire, TOPIC, "roundtrip", ops)[0]["error_code"] == 0
    after = entries(describe(wire, TOPIC, "roundtrip"))
    assert all(after[c["name"]]["value"] == c["value"] for c in got)


def test_duplicate_resources_fail_both(wire):
    res = {"resource_type": TOPIC, "resource_name": "d1",
           "configs": [{"name": "retention.ms", "config_operation": SET, "value": "1000"}]}
    resp = wire.request(INCREMENTAL, 1, {"resources": [res, res], "validate_only": False})
    assert [r["error_code"] for r in resp["responses"]] == [Err.INVALID_REQUEST] * 2


def test_legacy_alter_replaces_the_whole_set(wire):
    assert create_topic(wire, "legacy", 1)["error_code"] == 0
    incremental(wire, TOPIC, "legacy", [("retention.ms", SET, "1000"),
                                        ("retention.bytes", SET, "5000")])
    resp = wire.request(ALTER, 2, {"resources": [{
        "resource_type": TOPIC, "resource_name": "legacy",
        "configs": [{"name": "segment.bytes", "value": "65536"}]}], "validate_only": False})
    assert resp["responses"][0]["error_code"] == 0
    got = entries(describe(wire, TOPIC, "legacy"))
    assert got["segment.bytes"]["config_source"] == 1
    assert got["retention.ms"]["config_source"] != 1 and got["retention.bytes"]["config_source"] != 1
    resp = wire.request(ALTER, 0, {"resources": [{
        "resource_type": TOPIC, "resource_name": "legacy",
        "configs": [{"name": "segment.bytes", "value": None}]}], "validate_only": False})
    assert resp["responses"][0]["error_code"] == Err.INVALID_REQUEST


def test_honoured_configs_take_effect_at_once(wire, server):
    assert create_topic(wire, "live", 1)["error_code"] == 0
    batch = build_batch([(None, b"x" * 300, [], None)], base_timestamp=int(time.time() * 1000))
    assert produce(wire, "live", 0, batch)["error_code"] == 0
    # max.message.bytes below the batch: refused from the next produce on
    incremental(wire, TOPIC, "live", [("max.message.bytes", SET, "200")])
    assert produce(wire, "live", 0, batch)["error_code"] == Err.MESSAGE_TOO_LARGE
    incremental(wire, TOPIC, "live", [("max.message.bytes", DELETE, None)])
    # min.insync.replicas above the one-node ISR: acks=all is refused, acks=1 is not
    incremental(wire, TOPIC, "live", [("min.insync.replicas", SET, "2")])
    assert produce(wire, "live", 0, batch, acks=-1)["error_code"] == Err.NOT_ENOUGH_REPLICAS
    assert produce(wire, "live", 0, batch, acks=1)["error_code"] == 0
    incremental(wire, TOPIC, "live", [("min.insync.replicas", DELETE, None)])
    # segment.bytes: the next appends roll segments of that size
    incremental(wire, TOPIC, "live", [("segment.bytes", SET, "1000")])
    for _ in range(6):
        assert produce(wire, "live", 0, batch)["error_code"] == 0
    segments = list((server.data_dir / "live-0").glob("*.log"))
    assert len(segments) >= 3


def test_kafka_python_describe_and_alter(server):
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap, request_timeout_ms=30000)
    try:
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "d1",
                                            configs={"retention.ms": "86400000"})])
        got = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "d1")],
                                     config_filter="all")
        topic = got["topic"]["d1"]
        assert topic["retention.ms"]["value"] == "86400000"
        assert topic["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        assert topic["cleanup.policy"]["value"] == "delete"
        # the legacy AlterConfigs path (AKHQ's): the client re-sends the other overrides
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "d1",
                                            configs={"segment.ms": "3600000"})],
                            incremental=False)
        topic = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "d1")])[
            "topic"]["d1"]
        assert topic["segment.ms"]["value"] == "3600000"
        assert topic["retention.ms"]["value"] == "86400000"  # kept by the client's re-send
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "d1",
                                            configs={"segment.ms": ("DELETE", None)})])
    finally:
        admin.close()


def test_confluent_describe_and_incremental_alter(confluent):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
    res = ConfigResource("topic", "d1", incremental_configs=[
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
    confluent.incremental_alter_configs([res])[res].result(30)
    res = ConfigResource("topic", "d1")
    got = confluent.describe_configs([res])[res].result(30)
    assert got["retention.ms"].value == "3600000"
    assert got["retention.ms"].source == 1  # DYNAMIC_TOPIC_CONFIG
    assert got["segment.bytes"].source == 4  # STATIC_BROKER_CONFIG


# ---------------------------------------------------------------------- broker
def test_broker_describe(confluent, wire):
    from confluent_kafka.admin import ConfigResource
    res = ConfigResource("broker", "0")
    got = confluent.describe_configs([res])[res].result(30)
    assert got["log.segment.bytes"].value == "1048576" and got["log.segment.bytes"].source == 4
    assert got["num.partitions"].value == "1" and got["num.partitions"].source == 5
    # read-only where Kafka's is
    assert got["log.retention.hours"].is_read_only
    assert not got["log.retention.ms"].is_read_only
    # unset itself (only log.retention.hours=48 is): null, with the hours synonym's source
    retention = got["log.retention.ms"]
    assert retention.value is None and retention.source == 4, retention
    ms = entries(describe(wire, BROKER, "0", keys=["log.retention.ms"]))["log.retention.ms"]
    assert [(s["name"], s["value"], s["source"]) for s in ms["synonyms"]] == [
        ("log.retention.hours", "48", 4), ("log.retention.hours", "168", 5)]
    # sensitive: null value, in the entry and its synonyms
    secret = entries(describe(wire, BROKER, "0", keys=["ssl.keystore.password"]))[
        "ssl.keystore.password"]
    assert secret["is_sensitive"] and secret["value"] is None
    assert secret["synonyms"] and all(s["value"] is None for s in secret["synonyms"])
    # "" is the cluster default resource: only dynamic defaults (none yet)
    assert describe(wire, BROKER, "")["configs"] == []


def test_broker_dynamic_default_reaches_topics(wire):
    assert create_topic(wire, "inherit", 1)["error_code"] == 0
    assert incremental(wire, BROKER, "", [("log.retention.ms", SET, "7200000")])[0][
        "error_code"] == 0
    got = entries(describe(wire, TOPIC, "inherit", keys=["retention.ms"]))["retention.ms"]
    assert got["value"] == "7200000" and got["config_source"] == 3
    assert [c["name"] for c in describe(wire, BROKER, "")["configs"]] == ["log.retention.ms"]
    # a read-only key, or a bad value, fails with INVALID_REQUEST on a broker resource
    assert incremental(wire, BROKER, "0", [("num.partitions", SET, "3")])[0]["error_code"] \
        == Err.INVALID_REQUEST
    assert incremental(wire, BROKER, "0", [("log.retention.ms", SET, "x")])[0]["error_code"] \
        == Err.INVALID_REQUEST
    assert incremental(wire, BROKER, "", [("log.retention.ms", DELETE, None)])[0][
        "error_code"] == 0
    got = entries(describe(wire, TOPIC, "inherit", keys=["retention.ms"]))["retention.ms"]
    assert got["value"] == str(48 * 3600000)


# ----------------------------------------------------------------------- group
def test_group_configs(wire, confluent):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
    # the group need not exist; the value goes within the broker's bounds
    res = ConfigResource("group", "no-such-group", incremental_configs=[ConfigEntry(
        "consumer.session.timeout.ms", "50000", incremental_operation=AlterConfigOpType.SET)])
    confluent.incremental_alter_configs([res])[res].result(30)
    got = entries(describe(wire, GROUP, "no-such-group"))
    assert set(got) == {"consumer.session.timeout.ms", "consumer.heartbeat.interval.ms",
                        "share.session.timeout.ms", "share.heartbeat.interval.ms",
                        "share.record.lock.duration.ms", "share.auto.offset.reset",
                        "share.isolation.level"}
    assert (got["share.auto.offset.reset"]["value"], got["share.isolation.level"]["value"],
            got["share.record.lock.duration.ms"]["value"]) == ("latest", "read_uncommitted",
                                                                "30000")
    assert (got["consumer.session.timeout.ms"]["value"],
            got["consumer.session.timeout.ms"]["config_source"]) == ("50000", 8)
    assert (got["consumer.heartbeat.interval.ms"]["value"],
            got["consumer.heartbeat.interval.ms"]["config_source"]) == ("5000", 5)
    for ops in ([("consumer.heartbeat.interval.ms", SET, "20000")],   # above the max 15000
                [("consumer.session.timeout.ms", SET, "70000")],      # above the max 60000
                [("consumer.session.timeout.ms", SET, "1000"),        # session <= heartbeat
                 ("consumer.heartbeat.interval.ms", SET, "1000")],
                [("share.record.lock.duration.ms", SET, "14999")],    # below the min 15000
                [("share.auto.offset.reset", SET, "by_duration:-PT1H")],
                [("share.isolation.level", SET, "serializable")],
                [("streams.session.timeout.ms", SET, "45000")]):      # no streams groups here
        assert incremental(wire, GROUP, "g-bad", ops)[0]["error_code"] == Err.INVALID_CONFIG
    assert incremental(wire, GROUP, "g-bad", [("consumer.session.timeout.ms", SET, None)])[0][
        "error_code"] == Err.INVALID_REQUEST


def _heartbeat(group, member, epoch, names=("fence",)):
    return {"group_id": group, "member_id": member, "member_epoch": epoch,
            "instance_id": None, "rack_id": None, "rebalance_timeout_ms": 30000,
            "subscribed_topic_names": list(names) if epoch == 0 else None,
            "subscribed_topic_regex": None, "server_assignor": None,
            "topic_partitions": [] if epoch == 0 else None}


def _members(wire, group):
    [described] = wire.request(CG_DESCRIBE, 0, {"group_ids": [group],
                                                "include_authorized_operations": False})["groups"]
    return {m["member_id"] for m in described["members"]}


def test_group_session_override_fences_a_silent_member(wire):
    """Two silent KIP-848 members: the one whose group overrides
    consumer.session.timeout.ms to 1.5 s is fenced; the other (broker
    default 60 s) stays, and the heartbeat answer carries the group's interval."""
    assert create_topic(wire, "fence", 2)["error_code"] == 0
    assert incremental(wire, GROUP, "g-short", [("consumer.session.timeout.ms", SET, "1500"),
                                                ("consumer.heartbeat.interval.ms", SET, "300")])[
        0]["error_code"] == 0
    short = wire.request(HEARTBEAT, 1, _heartbeat("g-short", "silent-1", 0))
    assert short["error_code"] == 0 and short["heartbeat_interval_ms"] == 300
    long = wire.request(HEARTBEAT, 1, _heartbeat("g-long", "silent-2", 0))
    assert long["error_code"] == 0 and long["heartbeat_interval_ms"] == 5000
    deadline = time.monotonic() + 60
    while "silent-1" in _members(wire, "g-short"):
        assert time.monotonic() < deadline, "the overridden session timeout never fenced"
        time.sleep(0.2)
    assert "silent-2" in _members(wire, "g-long")
    # the fenced member learns it on its next heartbeat
    again = wire.request(HEARTBEAT, 1, _heartbeat("g-short", "silent-1", short["member_epoch"]))
    assert again["error_code"] == Err.UNKNOWN_MEMBER_ID


# -------------------------------------------------------------- broker loggers
def test_broker_loggers(wire, server):
    LOGGER = 8
    got = entries(describe(wire, LOGGER, "0"))
    assert got["root"]["value"] == "INFO" and got["root"]["config_source"] == 6
    assert "kcoord.configs" in got
    assert describe(wire, LOGGER, "5")["error_code"] == Err.INVALID_REQUEST
    # WARN on kcoord.configs silences its INFO line about a topic change; DELETE restores it
    assert incremental(wire, LOGGER, "0", [("kcoord.configs", SET, "warn")])[0][
        "error_code"] == 0
    assert entries(describe(wire, LOGGER, "0"))["kcoord.configs"]["value"] == "WARN"
    incremental(wire, TOPIC, "d1", [("flush.messages", SET, "1000")])
    assert incremental(wire, LOGGER, "0", [("kcoord.configs", DELETE, None)])[0][
        "error_code"] == 0
    incremental(wire, TOPIC, "d1", [("flush.messages", SET, "2000")])
    deadline = time.monotonic() + 30
    while "'flush.messages': '2000'" not in server.log_text():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert "'flush.messages': '1000'" not in server.log_text()
    incremental(wire, TOPIC, "d1", [("flush.messages", DELETE, None)])
    for ops, code in [([("kcoord.configs", SET, "LOUD")], Err.INVALID_CONFIG),
                      ([("no.such.logger", SET, "INFO")], Err.INVALID_CONFIG),
                      ([("kcoord.configs", APPEND, "INFO")], Err.INVALID_REQUEST)]:
        assert incremental(wire, LOGGER, "0", ops)[0]["error_code"] == code, ops
    assert incremental(wire, LOGGER, "0", [("root", SET, "INFO")])[0]["error_code"] == 0
    assert incremental(wire, LOGGER, "0", [("root", DELETE, None)])[0]["error_code"] \
        == Err.INVALID_REQUEST
    resp = wire.request(ALTER, 2, {"resources": [{"resource_type": LOGGER, "resource_name": "0",
                                                  "configs": [{"name": "root",
                                                               "value": "INFO"}]}],
                                   "validate_only": False})
    assert resp["responses"][0]["error_code"] == Err.INVALID_REQUEST


def test_overrides_are_durable(server):
    server.restart()
    with WireClient(server.port) as client:
        got = entries(describe(client, GROUP, "no-such-group"))
        assert got["consumer.session.timeout.ms"]["value"] == "50000"
        got = entries(describe(client, TOPIC, "d1"))
        assert got["retention.ms"]["value"] == "3600000"
        assert got["retention.ms"]["config_source"] == 1
    # narrower broker bounds after the fact: the stored override is clamped, not fatal
    server.settings["group.consumer.max.session.timeout.ms"] = "48000"
    server.settings["group.consumer.session.timeout.ms"] = "45000"
    server.restart()
    assert "group no-such-group: stored configs" in server.log_text()
    assert "clamped" in server.log_text()
