"""`kcoord share-groups` (as a real process, and in this process where a
process adds nothing) against one real `kcoord serve`, with one
confluent-kafka ShareConsumer holding a share group Stable.  Outputs are compared with kafka-share-groups.sh's (ShareGroupCommand:
headers, column widths, row order, messages; SHARE_GROUPS_REFERENCE 6.2),
and `kcoord consumer-groups` is checked to treat a share group id as
kafka-consumer-groups.sh does."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from kcoord.cli import main
from kcoord.protocol.records import build_batch
from tests.clients.group_workers import wait_for
from tests.clients.share_workers import Deliveries, ShareWorker
from tests.clients.wire import WireClient, create_topic, produce
from tests.support import ServerProcess

pytestmark = [pytest.mark.clients, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

TOPIC, PARTITIONS, PER_PARTITION = "shares", 2, 5
LIVE = "sg-live"  # has one member for the whole module
DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerProcess(tmp_path_factory.mktemp("share-cli") / "data", settings={
            "group.share.min.heartbeat.interval.ms": "200",
            "group.share.heartbeat.interval.ms": "200"}) as proc:
        with WireClient(proc.port) as wire:
            assert create_topic(wire, TOPIC, PARTITIONS)["error_code"] == 0
            now = int(time.time() * 1000)
            for p in range(PARTITIONS):
                batch = build_batch([(b"k", b"v%d" % i, [], now) for i in range(PER_PARTITION)],
                                    base_timestamp=now)
                assert produce(wire, TOPIC, p, batch)["error_code"] == 0
        yield proc


def share_cli(server, *argv) -> tuple[int, str, str]:
    """The real command in a process of its own."""
    done = subprocess.run([sys.executable, "-m", "kcoord.cli", "share-groups",
                           "--bootstrap-server", server.bootstrap, *argv],
                          capture_output=True, text=True, timeout=120, env=dict(os.environ))
    return done.returncode, done.stdout, done.stderr


def quick_cli(capsys, server, *argv) -> tuple[int, str, str]:
    """The same command in this process (the checks that need no process of their own)."""
    capsys.readouterr()
    rc = main(["share-groups", "--bootstrap-server", server.bootstrap, *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def table(out: str) -> tuple[str, list[list[str]]]:
    lines = [line for line in out.split("\n") if line.strip()]
    return lines[0], [line.split() for line in lines[1:]]


@pytest.fixture(scope="module")
def live(server):
    """LIVE: a ShareConsumer that read every record (earliest) and keeps its two partitions."""
    assert main(["configs", "--bootstrap-server", server.bootstrap, "--alter", "--entity-type",
                 "groups", "--entity-name", LIVE, "--add-config",
                 "share.auto.offset.reset=earliest"]) == 0
    log = Deliveries()
    worker = ShareWorker("live", server.bootstrap, LIVE, TOPIC, log)
    worker.start()
    wait_for(lambda: len(log.values()) >= PER_PARTITION,  # values repeat per partition
             "the share consumer received the records", DEADLINE_S, 0.1)

    def holds_both() -> bool:
        with WireClient(server.port) as c:
            [g] = c.request(77, 1, {"group_ids": [LIVE],
                                    "include_authorized_operations": False})["groups"]
        return g["group_state"] == "Stable" and [
            sorted(p for t in m["assignment"]["topic_partitions"] for p in t["partitions"])
            for m in g["members"]] == [[0, 1]]
    wait_for(holds_both, "the member holding both partitions", DEADLINE_S, 0.1)
    yield LIVE
    worker.finish()


def test_usage_errors(capsys):
    with pytest.raises(SystemExit):
        main(["share-groups", "--help"])
    assert "works against Apache Kafka" in " ".join(capsys.readouterr().out.split())
    for argv, said in (
            (["--list", "--describe"], "exactly one action"),
            (["--describe"], "takes one of these options: --all-groups, --group"),
            (["--describe", "--group", "g", "--members", "--state"], "at most one"),
            (["--describe", "--group", "g", "--state", "Stable"], "does not take a value"),
            (["--delete", "--group", "g", "--all-groups"], "not both"),
            (["--delete-offsets", "--group", "g"], "--group, --topic"),
            (["--reset-offsets", "--group", "g", "--topic", "t", "--to-earliest", "--dry-run",
              "--execute"], "only accepts one of --execute and --dry-run"),
            (["--reset-offsets", "--group", "g", "--topic", "t", "--to-latest"],
             "takes the option: --execute or --dry-run"),
            (["--reset-offsets", "--group", "g", "--topic", "t", "--dry-run"],
             "--to-datetime, --to-earliest, --to-latest"),
            (["--reset-offsets", "--group", "g", "--topic", "t", "--dry-run", "--to-latest",
              "--to-earliest"], "--to-earliest can't be used with option --to-latest"),
            (["--reset-offsets", "--group", "g", "--to-latest", "--execute"],
             "--all-topics, --topic"),
            (["--list", "--members"], "only valid with --describe"),
            (["--list", "--state", "Rebalancing"], "Valid states are: Empty, Stable, Dead")):
        capsys.readouterr()
        rc = main(["share-groups", "--bootstrap-server", "127.0.0.1:1", *argv])
        assert rc == 1 and said in capsys.readouterr().err, argv


def test_list(server, live, capsys):
    rc, out, _ = share_cli(server, "--list")
    assert rc == 0 and out.split("\n")[:-1] == [live]
    rc, out, _ = quick_cli(capsys, server, "--list", "--state")
    assert rc == 0 and out.split("\n")[:-1] == ["GROUP".ljust(15) + " STATE",
                                                 live.ljust(15) + " Stable"]
    rc, out, _ = quick_cli(capsys, server, "--list", "--state", "empty")
    assert rc == 0 and out.split("\n")[:-1] == ["GROUP".ljust(15) + " STATE"]


def test_describe_members_state_and_offsets(server, live, capsys):
    rc, out, err = share_cli(server, "--describe", "--group", live, "--members", "--verbose")
    assert rc == 0 and err == "" and out.startswith("\n")
    header, [row] = table(out)
    names = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "MEMBER-EPOCH",
             "ASSIGNMENT"]
    assert header.split() == names
    # GROUP, CONSUMER-ID, HOST and CLIENT-ID at least 15 wide, #PARTITIONS 12, MEMBER-EPOCH 13
    assert [header.index(n) for n in names[:2]] == [0, 16]
    assert row[0] == live and row[4] == "2" and row[6] == f"{TOPIC}:0,1"
    assert int(row[5]) >= 1
    _, out, _ = quick_cli(capsys, server, "--describe", "--group", live, "--members")
    assert table(out)[0].split() == names[:5] + names[6:]

    rc, out, _ = quick_cli(capsys, server, "--describe", "--group", live, "--state", "--verbose")
    header, [row] = table(out)
    assert header.split() == ["GROUP", "COORDINATOR", "(ID)", "STATE", "GROUP-EPOCH",
                              "ASSIGNMENT-EPOCH", "#MEMBERS"]
    # the coordinator prints as host:port  (id), at least 25 wide; STATE 15
    assert row[1] == server.bootstrap and row[2].startswith("(") and row[3] == "Stable"
    assert row[-1] == "1" and int(row[4]) >= int(row[5]) >= 1  # group epoch >= assignment epoch
    assert header.index("STATE") == 16 + 26 and header.index("GROUP-EPOCH") == 16 + 26 + 16

    rc, out, _ = quick_cli(capsys, server, "--describe", "--group", live)  # --offsets is the default
    header, rows = table(out)
    assert header.split() == ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"]
    assert [header.index(n) for n in ("TOPIC", "PARTITION", "START-OFFSET", "LAG")] == [
        16, 32, 43, 57]
    assert [r[:3] for r in rows] == [[live, TOPIC, str(p)] for p in range(PARTITIONS)]
    assert all(int(r[3]) >= 0 and int(r[4]) >= 0 for r in rows)
    _, out, _ = quick_cli(capsys, server, "--describe", "--group", live, "--offsets", "--verbose")
    header, rows = table(out)
    assert header.split() == ["GROUP", "TOPIC", "PARTITION", "LEADER-EPOCH", "START-OFFSET",
                              "LAG"]
    assert len(rows) == PARTITIONS

    rc, out, _ = quick_cli(capsys, server, "--describe", "--group", "nobody")
    assert rc == 1 and "Group nobody not found." in out
    rc, out, _ = quick_cli(capsys, server, "--describe", "--all-groups", "--state")
    assert rc == 0 and [r[0] for r in table(out)[1]] == [live]  # (the only share group yet)


def test_reset_is_refused_while_the_group_has_members(server, live):
    rc, out, err = share_cli(server, "--reset-offsets", "--group", live, "--topic", TOPIC,
                             "--to-earliest", "--execute")
    assert rc == 1 and out == "" and err.strip() == f"Share group '{live}' is not empty."


def test_reset_delete_offsets_and_delete_an_empty_group(server, live, tmp_path, capsys):
    group = "sg-reset"  # no member ever: AlterShareGroupOffsets creates it
    rc, out, _ = quick_cli(capsys, server, "--reset-offsets", "--group", group, "--topic", TOPIC,
                           "--to-latest", "--dry-run")
    header, rows = table(out)
    assert rc == 0 and header.split() == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert rows == [[group, TOPIC, str(p), str(PER_PARTITION)] for p in range(PARTITIONS)]
    assert quick_cli(capsys, server, "--list")[1].split() == [live]  # a dry run changes nothing
    _, out, _ = quick_cli(capsys, server, "--reset-offsets", "--group", group, "--topic", TOPIC,
                          "--to-datetime", "2000-01-01T00:00:00.000", "--dry-run")
    assert table(out)[1] == [[group, TOPIC, str(p), "0"] for p in range(PARTITIONS)]

    assert share_cli(server, "--reset-offsets", "--group", group, "--topic", f"{TOPIC}:1",
                     "--to-latest", "--execute")[0] == 0
    rc, out, err = quick_cli(capsys, server, "--describe", "--group", group)
    assert rc == 0 and table(out)[1] == [[group, TOPIC, "1", str(PER_PARTITION), "0"]]
    rc, out, _ = quick_cli(capsys, server, "--reset-offsets", "--group", group, "--all-topics",
                           "--to-earliest", "--execute")
    assert rc == 0 and table(out)[1] == [[group, TOPIC, "1", "0"]]
    _, out, _ = quick_cli(capsys, server, "--describe", "--group", group)
    assert table(out)[1] == [[group, TOPIC, "1", "0", str(PER_PARTITION)]]
    _, out, err = quick_cli(capsys, server, "--describe", "--group", group, "--state")
    assert table(out)[1][0][3] == "Empty" and f"Share group '{group}' has no active members." in err

    # the newer scenarios: --to-offset (clamped to the log), --to-current + --export, --from-file
    rc, out, err = quick_cli(capsys, server, "--reset-offsets", "--group", group, "--topic", TOPIC,
                             "--to-offset", "99", "--dry-run")
    assert rc == 0 and table(out)[1] == [[group, TOPIC, str(p), str(PER_PARTITION)]
                                         for p in range(PARTITIONS)]
    assert "New offset (99) is higher than latest offset" in err
    rc, out, _ = quick_cli(capsys, server, "--reset-offsets", "--group", group, "--topic", TOPIC,
                           "--to-current", "--export", "--dry-run")
    assert rc == 0 and out == f"{TOPIC},0,{PER_PARTITION}\n{TOPIC},1,0\n\n"  # 0: no state yet
    plan = tmp_path / "plan.csv"
    plan.write_text(f"{TOPIC},0,2\n")
    assert quick_cli(capsys, server, "--reset-offsets", "--group", group, "--from-file", str(plan),
                     "--execute")[0] == 0
    _, out, _ = quick_cli(capsys, server, "--describe", "--group", group)
    assert table(out)[1] == [[group, TOPIC, "0", "2", str(PER_PARTITION - 2)],
                             [group, TOPIC, "1", "0", str(PER_PARTITION)]]
    rc, out, _ = quick_cli(capsys, server, "--reset-offsets", "--group", group, "--topic", f"{TOPIC}:7",
                           "--to-latest", "--dry-run")
    assert rc == 1 and f'The partitions "{TOPIC}-7" do not exist' in out

    rc, out, _ = quick_cli(capsys, server, "--delete-offsets", "--group", group, "--topic", "nope",
                           "--topic", TOPIC)
    assert rc == 1 and out.split("\n")[1:-1] == [
        "TOPIC".ljust(15) + " STATUS",
        "nope".ljust(15) + " Error: This server does not host this topic-partition.",
        TOPIC.ljust(15) + " Successful"]
    _, out, _ = quick_cli(capsys, server, "--describe", "--group", group)
    assert out.strip() == f"Share group '{group}' has no offset information."
    rc, out, _ = quick_cli(capsys, server, "--delete-offsets", "--group", live, "--topic", TOPIC)
    assert rc == 1 and out.split("\n")[:3] == ["", "Error: The group is not empty.", ""]

    rc, out, _ = share_cli(server, "--delete", "--group", group, "--group", live,
                           "--group", "nobody")
    assert rc == 1 and out.split("\n")[1:-1] == [
        "Error: Deletion of some share groups failed:",
        f"* Group '{live}' could not be deleted due to: Share group '{live}' is not EMPTY.",
        "* Group 'nobody' could not be deleted due to: Group 'nobody' is not a share group.",
        "", f"These share groups were deleted successfully: '{group}'"]
    assert quick_cli(capsys, server, "--list")[1].split() == [live]


def test_consumer_groups_and_the_admin_client_on_a_share_group_id(server, live, capsys):
    """kafka-consumer-groups.sh lists consumer groups only (ListGroupsOptions.
    forConsumerGroups: types classic/consumer, protocol "" or consumer) and its
    describe fails with ConsumerGroupDescribe's message; confluent-kafka's
    AdminClient (no share-group admin calls in this version) lists none either."""
    capsys.readouterr()
    for argv in (["--list"], ["--list", "--type", "--state"]):
        assert main(["consumer-groups", "--bootstrap-server", server.bootstrap, *argv]) == 0
        assert live not in capsys.readouterr().out, argv
    rc = main(["consumer-groups", "--bootstrap-server", server.bootstrap, "--describe",
               "--group", live])
    assert rc == 1 and capsys.readouterr().out.strip() == (
        f"Error: Executing consumer group command failed due to Group {live} is not a "
        f"consumer group.")
    # and the other way round: share-groups on a (classic) consumer group's id
    assert main(["consumer-groups", "--bootstrap-server", server.bootstrap, "--reset-offsets",
                 "--group", "cg", "--topic", TOPIC, "--to-earliest", "--execute"]) == 0
    rc, out, _ = quick_cli(capsys, server, "--describe", "--group", "cg")
    assert rc == 1 and out.strip() == ("Error: Executing share group command failed due to "
                                       "Group cg is not a share group.")
    rc, out, _ = quick_cli(capsys, server, "--delete", "--group", "cg")
    assert rc == 1 and "Group 'cg' is not a share group." in out
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    listed = admin.list_consumer_groups().result(30)
    assert live not in [g.group_id for g in listed.valid]
