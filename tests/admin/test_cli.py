"""The operator CLI (`kcoord consumer-groups`, `topics`, `configs`) against
one real `kcoord serve`, with real consumers holding a classic and a
KIP-848 group Stable.  Outputs are compared with kafka-consumer-groups.sh's
formats (ConsumerGroupCommand: headers, column widths, ordering, messages;
ADMIN_REFERENCE.md section 5)."""
from __future__ import annotations

import time

import pytest

from kcoord.cli import main
from kcoord.protocol.records import build_batch
from tests.clients.wire import WireClient, create_topic, produce
from tests.support import ServerProcess

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

TOPIC, PARTITIONS, PER_PARTITION = "orders", 3, 10
OFFSETS_HEADER = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                  "CONSUMER-ID", "HOST", "CLIENT-ID"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc = ServerProcess(tmp_path_factory.mktemp("cli") / "data",
                         settings={"group.initial.rebalance.delay.ms": "0"})
    proc.start()
    with WireClient(proc.port) as wire:
        assert create_topic(wire, TOPIC, PARTITIONS)["error_code"] == 0
        now = int(time.time() * 1000)
        for p in range(PARTITIONS):
            for i in range(PER_PARTITION):
                batch = build_batch([(b"k", b"v%d" % i, [], now)], base_timestamp=now)
                assert produce(wire, TOPIC, p, batch)["error_code"] == 0
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def classic_group(server):
    """A Stable classic group: a kafka-python consumer that read and committed 4 records
    per partition and keeps heartbeating."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata
    consumer = KafkaConsumer(TOPIC, bootstrap_servers=server.bootstrap, group_id="g-classic",
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             client_id="classic-client")
    # the topic's partitions known before the first join: kafka-python 3.0.12
    # loses the second, metadata-started rebalance a join without them leads
    # to when poll()'s timeout ends mid JoinGroup/SyncGroup (examples/orders_app)
    consumer.partitions_for_topic(TOPIC)
    deadline = time.monotonic() + 60
    while len(consumer.assignment()) < PARTITIONS:
        assert time.monotonic() < deadline, "the classic consumer never got its partitions"
        consumer.poll(500)
    consumer.commit({TopicPartition(TOPIC, p): OffsetAndMetadata(4, "", -1)
                     for p in range(PARTITIONS)})
    yield "g-classic"
    consumer.close()


@pytest.fixture(scope="module")
def consumer_group(server):
    """A Stable KIP-848 group: confluent-kafka with group.protocol=consumer."""
    from confluent_kafka import Consumer
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "g-848",
                         "group.protocol": "consumer", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "client.id": "cg-client"})
    consumer.subscribe([TOPIC])
    deadline = time.monotonic() + 60
    while len(consumer.assignment()) < PARTITIONS:
        assert time.monotonic() < deadline, "the KIP-848 consumer never got its partitions"
        consumer.poll(0.5)
    yield "g-848"
    consumer.close()


def cli(capsys, *argv):
    capsys.readouterr()
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def groups_cli(capsys, server, *argv):
    return cli(capsys, "consumer-groups", "--bootstrap-server", server.bootstrap, *argv)


def columns(header: str, names: list[str]) -> list[int]:
    """The start position of each column name in a header line."""
    return [header.index(name) for name in names]


def offsets_table(out: str) -> tuple[str, list[list[str]]]:
    lines = [line for line in out.split("\n") if line.strip()]
    return lines[0], [line.split() for line in lines[1:]]


def committed(capsys, server, group) -> dict[int, str]:
    _, out, _ = groups_cli(capsys, server, "--describe", "--group", group)
    _, rows = offsets_table(out)
    return {int(r[2]): r[3] for r in rows}


# ------------------------------------------------------------------- basics
def test_version_and_help(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip().startswith("kcoord ")
    for command in ("consumer-groups", "topics", "configs"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert "works against Apache Kafka" in " ".join(capsys.readouterr().out.split())


def test_usage_errors(capsys, server):
    for argv in (["--list", "--describe"], [], ["--describe"],
                 ["--describe", "--group", "g", "--members", "--offsets"],
                 ["--reset-offsets", "--group", "g", "--to-earliest"],
                 ["--reset-offsets", "--group", "g", "--all-topics"],
                 ["--reset-offsets", "--group", "g", "--all-topics", "--to-earliest",
                  "--dry-run", "--execute"],
                 ["--delete-offsets", "--group", "g"],
                 ["--list", "--state", "bogus"], ["--list", "--type", "share"]):
        rc, out, err = groups_cli(capsys, server, *argv)
        assert rc == 1 and err, argv


# --------------------------------------------------------------------- list
def test_list(capsys, server, classic_group, consumer_group):
    assert groups_cli(capsys, server, "--reset-offsets", "--group", "g-empty", "--topic", TOPIC,
                      "--to-offset", "2", "--execute")[0] == 0
    rc, out, _ = groups_cli(capsys, server, "--list")
    assert rc == 0 and out.split("\n")[:-1] == ["g-848", "g-classic", "g-empty"]

    rc, out, _ = groups_cli(capsys, server, "--list", "--state", "--type")
    lines = out.rstrip("\n").split("\n")
    # GROUP is max(15, longest id) + 10 wide, TYPE and STATE 20
    assert lines[0] == "GROUP".ljust(25) + " " + "TYPE".ljust(20) + " " + "STATE".ljust(20)
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert rows == {"g-848": ["Consumer", "Stable"], "g-classic": ["Classic", "Stable"],
                    "g-empty": ["Classic", "Empty"]}

    _, out, _ = groups_cli(capsys, server, "--list", "--state", "stable")
    assert [line.split()[0] for line in out.split("\n")[1:] if line.strip()] == [
        "g-848", "g-classic"]
    _, out, _ = groups_cli(capsys, server, "--list", "--type", "consumer")
    assert [line.split() for line in out.split("\n")[1:] if line.strip()] == [
        ["g-848", "Consumer"]]


# ----------------------------------------------------------------- describe
def test_describe_offsets_of_a_stable_group(capsys, server, classic_group):
    rc, out, err = groups_cli(capsys, server, "--describe", "--group", classic_group)
    assert rc == 0 and err == ""
    assert out.startswith("\n")  # Kafka's format starts each table with a newline
    header, rows = offsets_table(out)
    assert header.split() == OFFSETS_HEADER
    # widths: group/topic/consumer/host at least 15, partition 10, the offsets 15
    group_at, topic_at, part_at, cur_at, end_at, lag_at, cid_at = columns(header, OFFSETS_HEADER[:7])
    assert (topic_at, part_at, cur_at, end_at, lag_at) == (16, 32, 43, 59, 75)
    assert [(r[1], r[2]) for r in rows] == [(TOPIC, str(p)) for p in range(PARTITIONS)]
    for r in rows:
        assert r[0] == classic_group
        assert (r[3], r[4], r[5]) == ("4", str(PER_PARTITION), str(PER_PARTITION - 4))
        assert r[6].startswith("classic-client") and r[8] == "classic-client"


def test_describe_offsets_verbose(capsys, server, classic_group, consumer_group):
    _, out, _ = groups_cli(capsys, server, "--describe", "--group", classic_group, "--verbose")
    header, rows = offsets_table(out)
    assert header.split() == OFFSETS_HEADER[:3] + ["LEADER-EPOCH"] + OFFSETS_HEADER[3:]
    assert all(r[3] == "-" for r in rows)  # committed without a leader epoch


@pytest.mark.parametrize("group", ["g-classic", "g-848"])
def test_admin_style_commit_to_a_group_with_members_is_refused(server, classic_group,
                                                               consumer_group, group):
    """What the CLI's refusal mirrors on the server: generation -1 and no member id."""
    with WireClient(server.port) as wire:
        resp = wire.request(8, 9, {"group_id": group, "generation_id_or_member_epoch": -1,
                                   "member_id": "", "group_instance_id": None, "topics": [
                                       {"name": TOPIC, "partitions": [
                                           {"partition_index": 0, "committed_offset": 0,
                                            "committed_leader_epoch": -1,
                                            "committed_metadata": ""}]}]})
    assert resp["topics"][0]["partitions"][0]["error_code"] == 25  # UNKNOWN_MEMBER_ID


def test_describe_empty_and_missing_groups(capsys, server):
    rc, out, err = groups_cli(capsys, server, "--describe", "--group", "g-empty")
    assert "Consumer group 'g-empty' has no active members." in err
    header, rows = offsets_table(out)
    assert header.split() == OFFSETS_HEADER
    assert rows == [["g-empty", TOPIC, str(p), "2", "10", "8", "-", "-", "-"]
                    for p in range(PARTITIONS)]
    rc, out, err = groups_cli(capsys, server, "--describe", "--group", "nope")
    assert rc == 1 and out.strip() == "Error: Consumer group 'nope' does not exist."


def test_refusals_exit_non_zero_from_a_real_process(server):
    import subprocess
    import sys
    base = [sys.executable, "-m", "kcoord.cli", "consumer-groups", "--bootstrap-server",
            server.bootstrap]
    out = subprocess.run(base + ["--describe", "--group", "nope"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 1 and "Consumer group 'nope' does not exist." in out.stdout
    out = subprocess.run(base + ["--list"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_describe_members_and_state(capsys, server, classic_group, consumer_group):
    _, out, _ = groups_cli(capsys, server, "--describe", "--group", consumer_group, "--members",
                           "--verbose")
    lines = out.strip("\n").split("\n")
    assert lines[0].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                                "CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH",
                                "TARGET-ASSIGNMENT"]
    [row] = [line.split() for line in lines[1:]]
    assert row[0] == consumer_group and row[3] == "cg-client" and row[4] == "3"
    assert row[6] == row[8] == f"{TOPIC}:0,1,2"
    _, out, _ = groups_cli(capsys, server, "--describe", "--group", classic_group, "--members")
    lines = out.strip("\n").split("\n")
    assert lines[0].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
    assert lines[1].split()[-1] == "3"

    _, out, _ = groups_cli(capsys, server, "--describe", "--group", consumer_group, "--state",
                           "--verbose")
    header, row = out.strip("\n").split("\n")
    assert header.split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE",
                              "GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]
    cells = row.split()
    assert cells[0] == consumer_group and cells[1] == server.bootstrap and cells[2] == "(0)"
    assert cells[3] == "uniform" and cells[4] == "Stable" and cells[-1] == "1"
    _, out, _ = groups_cli(capsys, server, "--describe", "--group", classic_group, "--state")
    header, row = out.strip("\n").split("\n")
    assert header.split() == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE",
                              "#MEMBERS"]
    assert row.split()[3:] == ["range", "Stable", "1"]


def test_all_groups(capsys, server, classic_group, consumer_group):
    _, out, _ = groups_cli(capsys, server, "--describe", "--all-groups", "--state")
    assert [line.split()[0] for line in out.split("\n") if line.strip()
            and not line.startswith("GROUP")] == ["g-848", "g-classic", "g-empty"]


# ------------------------------------------------------------ reset-offsets
def test_reset_is_refused_on_a_stable_group(capsys, server, classic_group, consumer_group):
    for group in (classic_group, consumer_group):
        before = committed(capsys, server, group)
        rc, out, _ = groups_cli(capsys, server, "--reset-offsets", "--group", group,
                                "--all-topics", "--to-earliest", "--execute")
        assert rc == 1
        state = "Stable"
        assert (f"Error: Assignments can only be reset if the group '{group}' is inactive, "
                f"but the current state is {state}.") in out
        assert out.rstrip().endswith("NEW-OFFSET")  # an empty plan
        assert committed(capsys, server, group) == before


def reset(capsys, server, *argv):
    rc, out, err = groups_cli(capsys, server, "--reset-offsets", "--group", "g-reset", *argv)
    assert rc == 0, err
    lines = [line.split() for line in out.split("\n") if line.strip()
             and not line.startswith(("Warn", "Error"))]
    if lines and lines[0][0] == "GROUP":
        assert lines[0] == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
        lines = lines[1:]
    return {int(r[2]): int(r[3]) for r in lines}, out, err


def test_reset_scenarios_on_an_empty_group(capsys, server, tmp_path):
    everything = ["--topic", TOPIC]
    # a nonexistent (Dead) group may be reset; --execute creates its offsets
    plan, _, err = reset(capsys, server, *everything, "--to-offset", "5")
    assert plan == {0: 5, 1: 5, 2: 5} and "--execute option is missing" in err
    assert committed(capsys, server, "g-reset") == {}  # a dry run by default
    plan, _, _ = reset(capsys, server, *everything, "--to-offset", "5", "--execute")
    assert committed(capsys, server, "g-reset") == {0: "5", 1: "5", 2: "5"}
    # scopes: --topic t:p,p and --all-topics (the partitions with commits)
    assert reset(capsys, server, "--topic", f"{TOPIC}:1", "--to-earliest", "--execute")[0] == {1: 0}
    assert reset(capsys, server, "--all-topics", "--to-latest", "--dry-run")[0] == {
        0: 10, 1: 10, 2: 10}
    assert reset(capsys, server, "--all-topics", "--shift-by", "-2", "--execute")[0] == {
        0: 3, 1: 0, 2: 3}  # 0 - 2 is clamped to the log start
    assert reset(capsys, server, "--all-topics", "--to-current")[0] == {0: 3, 1: 0, 2: 3}
    plan, _, err = reset(capsys, server, *everything, "--to-offset", "99")
    assert plan == {0: 10, 1: 10, 2: 10} and "higher than latest offset" in err
    assert reset(capsys, server, *everything, "--to-datetime",
                 "2000-01-01T00:00:00.000")[0] == {0: 0, 1: 0, 2: 0}
    plan, out, _ = reset(capsys, server, *everything, "--to-datetime",
                         "2999-01-01T00:00:00.000Z")
    assert plan == {0: 10, 1: 10, 2: 10}
    assert f"Warn: Partition 0 from topic {TOPIC} is empty. Falling back to latest known " \
           "offset." in out
    assert reset(capsys, server, *everything, "--by-duration", "PT1H")[0] == {0: 0, 1: 0, 2: 0}
    assert reset(capsys, server, *everything, "--by-duration", "P1DT0H0M0S")[0] == {
        0: 0, 1: 0, 2: 0}
    # --export then --from-file round trip
    rc, out, _ = groups_cli(capsys, server, "--reset-offsets", "--group", "g-reset",
                            *everything, "--to-offset", "7", "--export")
    assert out.split("\n")[:3] == [f"{TOPIC},0,7", f"{TOPIC},1,7", f"{TOPIC},2,7"]
    plan_file = tmp_path / "plan.csv"
    plan_file.write_text(out)
    assert reset(capsys, server, "--from-file", str(plan_file), "--execute")[0] == {
        0: 7, 1: 7, 2: 7}
    assert committed(capsys, server, "g-reset") == {0: "7", 1: "7", 2: "7"}
    rc, out, err = groups_cli(capsys, server, "--reset-offsets", "--group", "g-none",
                              "--all-topics", "--shift-by", "1")
    assert rc == 0  # nothing committed: --all-topics is an empty scope
    rc, out, err = groups_cli(capsys, server, "--reset-offsets", "--group", "g-none",
                              "--topic", TOPIC, "--shift-by", "1")
    assert rc == 1 and "since there is no current committed offset" in err


def test_to_earliest_follows_delete_records(capsys, server):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    [(_, fut)] = list(admin.delete_records([TopicPartition(TOPIC, 2, 4)]).items())
    assert fut.result(30).low_watermark == 4
    assert reset(capsys, server, "--topic", f"{TOPIC}:2", "--to-earliest")[0] == {2: 4}
    plan, _, err = reset(capsys, server, "--topic", f"{TOPIC}:2", "--to-offset", "1")
    assert plan == {2: 4} and "lower than earliest offset" in err


# ------------------------------------------------- delete-offsets and delete
def test_delete_offsets_and_delete(capsys, server, classic_group):
    rc, out, _ = groups_cli(capsys, server, "--delete-offsets", "--group", "g-empty",
                            "--topic", f"{TOPIC}:0")
    assert out.split("\n")[0] == "Request succeeded for deleting offsets from group g-empty."
    assert out.strip().split("\n")[-1].split() == [TOPIC, "0", "Successful"]
    assert set(committed(capsys, server, "g-empty")) == {1, 2}
    rc, out, _ = groups_cli(capsys, server, "--delete-offsets", "--group", classic_group,
                            "--topic", TOPIC)
    assert rc == 1
    assert "Error: Encountered some partition-level error, see the follow-up details." in out
    assert "Error: Deleting offsets of a topic is forbidden" in out
    rc, out, _ = groups_cli(capsys, server, "--delete", "--group", classic_group,
                            "--group", "g-empty")
    assert rc == 1 and "Error: Deletion of some consumer groups failed:" in out
    assert f"* Group '{classic_group}' could not be deleted due to: The group is not empty." in out
    assert "These consumer groups were deleted successfully: 'g-empty'" in out
    rc, out, _ = groups_cli(capsys, server, "--list")
    assert "g-empty" not in out.split()


# ------------------------------------------------------------ topics/configs
def test_topics(capsys, server):
    base = ["topics", "--bootstrap-server", server.bootstrap]
    rc, out, _ = cli(capsys, *base, "--create", "--topic", "cli-t", "--partitions", "2",
                     "--config", "retention.ms=3600000", "--config", "cleanup.policy=delete")
    assert rc == 0 and out.strip() == "Created topic cli-t."
    rc, out, err = cli(capsys, *base, "--create", "--topic", "cli-bad", "--config", "nope=1")
    assert rc == 1 and "INVALID_CONFIG" in err and "Unknown topic config name: nope" in err
    assert cli(capsys, *base, "--create", "--topic", "cli-t", "--if-not-exists")[0] == 0
    rc, out, _ = cli(capsys, *base, "--list")
    assert "cli-t" in out.split() and "cli-bad" not in out.split()
    rc, out, _ = cli(capsys, *base, "--describe", "--topic", "cli-t")
    first, *parts = out.strip("\n").split("\n")
    assert first.startswith("Topic: cli-t\tTopicId: ") and "PartitionCount: 2" in first
    assert first.endswith("Configs: cleanup.policy=delete,retention.ms=3600000")
    assert parts[1].split("\t")[1:5] == ["Topic: cli-t", "Partition: 1", "Leader: 0",
                                         "Replicas: 0"]
    assert cli(capsys, *base, "--alter", "--topic", "cli-t", "--partitions", "4")[0] == 0
    assert "PartitionCount: 4" in cli(capsys, *base, "--describe", "--topic", "cli-t")[1]
    assert cli(capsys, *base, "--alter", "--topic", "cli-t", "--partitions", "1")[0] == 1
    assert cli(capsys, *base, "--delete", "--topic", "cli-t")[0] == 0
    assert "cli-t" not in cli(capsys, *base, "--list")[1].split()


def test_configs(capsys, server):
    base = ["configs", "--bootstrap-server", server.bootstrap]
    assert cli(capsys, "topics", "--bootstrap-server", server.bootstrap, "--create",
               "--topic", "cfg-t")[0] == 0
    rc, out, _ = cli(capsys, *base, "--alter", "--entity-type", "topics", "--entity-name",
                     "cfg-t", "--add-config", "cleanup.policy=[compact,delete],retention.ms=1000")
    assert rc == 0 and out.strip() == "Completed updating config for topic cfg-t."
    rc, out, _ = cli(capsys, *base, "--describe", "--topic", "cfg-t")
    assert out.strip("\n").split("\n") == [
        "Dynamic configs for topic cfg-t are:",
        "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
        "cleanup.policy=compact,delete, DEFAULT_CONFIG:log.cleanup.policy=delete}",
        # Kafka's cut at the primary synonym (log.retention.ms, unset) drops the hours default
        "  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000}"]
    rc, out, _ = cli(capsys, *base, "--describe", "--topic", "cfg-t", "--all")
    assert out.startswith("All configs for topic cfg-t are:") and "  segment.bytes=" in out
    assert cli(capsys, *base, "--alter", "--topic", "cfg-t", "--delete-config",
               "retention.ms")[0] == 0
    rc, _, err = cli(capsys, *base, "--alter", "--topic", "cfg-t", "--delete-config",
                     "retention.ms")
    assert rc == 1 and "Invalid config(s): retention.ms" in err
    rc, _, err = cli(capsys, *base, "--alter", "--topic", "cfg-t", "--add-config",
                     "min.insync.replicas=0")
    assert rc == 1 and "INVALID_CONFIG" in err
    # brokers: the cluster default, then one broker
    rc, out, _ = cli(capsys, *base, "--alter", "--entity-type", "brokers", "--entity-default",
                     "--add-config", "log.retention.ms=7200000")
    assert out.strip() == "Completed updating default config for brokers in the cluster."
    rc, out, _ = cli(capsys, *base, "--describe", "--broker-defaults")
    assert out.strip("\n").split("\n")[0] == "Default configs for brokers in the cluster are:"
    assert "  log.retention.ms=7200000 sensitive=false" in out
    rc, out, _ = cli(capsys, *base, "--describe", "--broker", "0", "--all")
    assert out.startswith("All configs for broker 0 are:")
    assert "  log.retention.ms=7200000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:" \
           "log.retention.ms=7200000" in out
    assert cli(capsys, *base, "--alter", "--broker-defaults", "--delete-config",
               "log.retention.ms")[0] == 0
    # groups
    rc, out, _ = cli(capsys, *base, "--alter", "--group", "cfg-g", "--add-config",
                     "consumer.heartbeat.interval.ms=6000")
    assert out.strip() == "Completed updating config for group cfg-g."
    rc, out, _ = cli(capsys, *base, "--describe", "--entity-type", "group", "--entity-name",
                     "cfg-g")
    assert out.strip("\n").split("\n") == [
        "Dynamic configs for group cfg-g are:",
        "  consumer.heartbeat.interval.ms=6000 sensitive=false "
        "synonyms={DYNAMIC_GROUP_CONFIG:consumer.heartbeat.interval.ms=6000}"]
    # broker loggers
    rc, out, _ = cli(capsys, *base, "--describe", "--entity-type", "broker-loggers",
                     "--entity-name", "0")
    lines = out.strip("\n").split("\n")
    assert lines[0] == "Dynamic configs for broker-logger 0 are:"
    assert "  root=INFO sensitive=false synonyms={}" in lines
    rc, out, _ = cli(capsys, *base, "--alter", "--entity-type", "broker-loggers",
                     "--entity-name", "0", "--add-config", "kcoord.configs=DEBUG")
    assert out.strip() == "Completed updating config for broker-logger 0."
    rc, out, _ = cli(capsys, *base, "--describe", "--entity-type", "broker-loggers",
                     "--entity-name", "0")
    assert "  kcoord.configs=DEBUG sensitive=false synonyms={}" in out.split("\n")
    rc, _, err = cli(capsys, *base, "--describe", "--entity-type", "widgets",
                     "--entity-name", "x")
    assert rc == 1 and "Invalid entity type" in err


def test_command_config_and_unreachable(capsys, server, tmp_path):
    props = tmp_path / "client.properties"
    props.write_text("# Kafka client properties\nsecurity.protocol=PLAINTEXT\nclient.id=x\n")
    rc, out, _ = groups_cli(capsys, server, "--list", "--command-config", str(props))
    assert rc == 0 and "g-classic" in out.split()
    props.write_text("security.protocol=SASL_SSL\n")
    rc, out, _ = groups_cli(capsys, server, "--list", "--command-config", str(props))
    # a TLS client on the plaintext listener: the TLS handshake fails, one line
    assert rc == 1 and "cannot connect to" in out and "SSL" in out
    rc, out, _ = cli(capsys, "consumer-groups", "--bootstrap-server", "127.0.0.1:1", "--list")
    assert rc == 1 and "cannot connect to 127.0.0.1:1" in out
