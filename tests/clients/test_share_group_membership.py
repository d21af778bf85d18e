"""Share-group membership with real confluent-kafka ShareConsumers: the group
coordinator's side (SHARE_GROUPS_REFERENCE section 2).

- a group-level share.auto.offset.reset=earliest set with the AdminClient
  (IncrementalAlterConfigs on the GROUP) delivers what was produced before
  anyone joined; three members split the three partitions (ShareGroupDescribe
  shows them, each partition held by one member); they close, the group is
  Empty, DescribeShareGroupOffsets shows no lag anywhere, and the group is
  deleted with the AdminClient's DeleteGroups;
- a member SIGKILLed is fenced when its session (a group-level
  share.session.timeout.ms) expires, and its partitions go to the others.
"""
from __future__ import annotations

import time

import pytest

from tests.clients.share_workers import Deliveries, ShareWorker, produce, start_holder, wait_for
from tests.clients.wire import WireClient
from tests.support import ServerProcess

pytestmark = pytest.mark.clients

DEADLINE_S = 60.0
TOPIC, PARTITIONS = "members", 3


@pytest.fixture
def server(tmp_path):
    proc = ServerProcess(tmp_path / "data", {
        "group.share.min.heartbeat.interval.ms": "200",
        "group.share.heartbeat.interval.ms": "200",
        "group.share.min.session.timeout.ms": "2000",
    })
    proc.start()
    yield proc
    proc.kill()


def admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient, NewTopic
    client = AdminClient({"bootstrap.servers": bootstrap})
    for f in client.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
        f.result(30)
    return client


def set_group_configs(client, group: str, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
    res = ConfigResource("group", group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
    client.incremental_alter_configs([res])[res].result(30)


def describe(port: int, group: str) -> dict:
    with WireClient(port) as c:
        [g] = c.request(77, 1, {"group_ids": [group],
                                "include_authorized_operations": False})["groups"]
    return g


def held(group: dict) -> dict[str, list[int]]:
    return {m["member_id"]: sorted(p for tp in m["assignment"]["topic_partitions"]
                                   for p in tp["partitions"]) for m in group["members"]}


def test_members_split_partitions_close_and_delete(server):
    client = admin(server.bootstrap)
    set_group_configs(client, "early", {"share.auto.offset.reset": "earliest"})
    values = [b"v%d" % i for i in range(300)]
    produce(server.bootstrap, TOPIC, values, PARTITIONS)  # before anyone joined
    log = Deliveries()
    workers = [ShareWorker(f"w{i}", server.bootstrap, "early", TOPIC, log) for i in range(3)]
    for w in workers:
        w.start()
    wait_for(lambda: log.values() >= set(values), "every record delivered", DEADLINE_S, 0.2)

    def split() -> bool:
        g = describe(server.port, "early")
        parts = held(g)
        return (g["group_state"] == "Stable" and len(parts) == 3
                and sorted(p for ps in parts.values() for p in ps) == [0, 1, 2])
    wait_for(split, "three members holding one partition each", DEADLINE_S, 0.2)
    for w in workers:
        w.finish()
    g = describe(server.port, "early")
    assert g["group_state"] == "Empty" and g["members"] == []

    def offsets():
        with WireClient(server.port) as c:
            [o] = c.request(90, 1, {"groups": [{"group_id": "early", "topics": None}]})["groups"]
        return [(p["partition_index"], p["lag"]) for t in o["topics"] for p in t["partitions"]]
    # everything acknowledged: nothing lags (end - start - delivery complete count)
    wait_for(lambda: offsets() == [(0, 0), (1, 0), (2, 0)],
             "DescribeShareGroupOffsets: lag 0 everywhere", DEADLINE_S, 0.2)
    with WireClient(server.port) as c:  # (the AdminClient lists consumer groups only)
        listed = c.request(16, 5, {"states_filter": ["Empty"], "types_filter": ["share"]})
    assert [g["group_id"] for g in listed["groups"]] == ["early"]
    client.delete_consumer_groups(["early"])["early"].result(30)
    assert describe(server.port, "early")["error_code"] == 69  # GROUP_ID_NOT_FOUND


def test_killed_member_expires_and_its_partitions_move(server):
    client = admin(server.bootstrap)
    set_group_configs(client, "exp", {"share.session.timeout.ms": "3000"})
    holder = start_holder(server.bootstrap, "exp", TOPIC)
    try:
        wait_for(lambda: len(describe(server.port, "exp")["members"]) == 1, "the holder joined",
                 DEADLINE_S, 0.2)
        log = Deliveries()
        worker = ShareWorker("w", server.bootstrap, "exp", TOPIC, log)
        worker.start()
        wait_for(lambda: len(held(describe(server.port, "exp"))) == 2
                 and all(held(describe(server.port, "exp")).values()),
                 "both members hold partitions", DEADLINE_S, 0.2)
        holder.kill()
        holder.wait(10)
        killed_at = time.monotonic()
        wait_for(lambda: len(describe(server.port, "exp")["members"]) == 1,
                 "the killed member fenced", DEADLINE_S, 0.2)
        assert time.monotonic() - killed_at >= 2.0  # not before its session ran out
        wait_for(lambda: list(held(describe(server.port, "exp")).values()) == [[0, 1, 2]],
                 "the survivor holds every partition", DEADLINE_S, 0.2)
        worker.finish()
    finally:
        holder.kill()
