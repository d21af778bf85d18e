"""Seeded simulation of the KIP-848 consumer group core with a fake clock.

Each schedule drives one group with randomized clients that behave like the
Java and librdkafka KIP-848 consumers: they join (dynamic or static, by topic
names or by regex), heartbeat, revoke what the coordinator takes away before
acknowledging, lose responses (the request was processed, the answer never
arrived, so the next heartbeat is a full one), crash (stop heartbeating),
leave with -1 or -2, come back as a new static instance, change their
subscription; meanwhile topics are created, deleted and grow, and the shard
is unloaded and loaded again from its log (its timers re-armed by on_loaded).

After every step:
  * no partition is owned by two live clients, and whatever a client owns
    the coordinator still counts as that member's (assigned or pending
    revocation), so it can never hand it to someone else;
  * the coordinator's own bookkeeping is disjoint and its partition epochs
    match its members.
Once the schedule quiesces (no more losses, crashes or changes), every member
converges to its target, the targets cover every subscribed partition, and
replaying the emitted records into a fresh shard gives the same snapshot().
"""
from __future__ import annotations

import os
import random

import pytest

from kcoord.coordinator.consumer_group import GROUP_STABLE, STABLE, TopicInfo
from kcoord.coordinator.shard import CoordinatorConfig
from kcoord.protocol.errors import Err
from tests.coordinator.cg_harness import GROUP, Harness, hb_request, tid

SCHEDULES = int(os.environ.get("KCOORD_SIM_SCHEDULES", "1000"))
HEARTBEAT_MS = 5000
SESSION_MS = 45000
TOPIC_NAMES = ["orders", "orders-eu", "payments", "audit", "clicks"]
REGEXES = ["orders.*", "(payments|audit)", "o.*|c.*", ".*"]


class Client:
    def __init__(self, name: str, member_id: str, instance_id: str | None, names, regex,
                 rebalance_timeout: int, assignor: str | None, now: int) -> None:
        self.name = name
        self.member_id = member_id
        self.instance_id = instance_id
        self.names = names
        self.regex = regex
        self.rebalance_timeout = rebalance_timeout
        self.assignor = assignor
        self.epoch = 0
        self.owned: dict[bytes, set[int]] = {}
        self.alive = True
        self.next_hb = now
        self.full = True
        self.owned_dirty = True
        self.sub_dirty = True
        self.lost_streak = 0

    def owned_wire(self):
        return [{"topic_id": t, "partitions": sorted(p)} for t, p in sorted(self.owned.items()) if p]


class Simulation:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.seed = seed
        config = CoordinatorConfig(consumer_group_session_timeout_ms=SESSION_MS,
                                   consumer_group_heartbeat_interval_ms=HEARTBEAT_MS)
        self.h = Harness(config)
        self.clients: dict[str, Client] = {}
        self.counter = 0
        self.topic_counter = 0
        self.loss = self.rng.choice([0.0, 0.05, 0.15])
        self.static_instances: set[str] = set()
        self.assignors = self.rng.choice([[None], ["uniform"], ["range"], [None, "uniform", "range"]])
        topics = {}
        for name in self.rng.sample(TOPIC_NAMES, self.rng.randint(1, 3)):
            topics[name] = self._new_topic()
        self.h.set_topics(topics)

    # ------------------------------------------------------------- helpers
    def _new_topic(self, partitions: int | None = None) -> TopicInfo:
        self.topic_counter += 1
        return TopicInfo(tid(self.topic_counter), partitions or self.rng.randint(1, 8))

    def _subscription(self):
        if self.rng.random() < 0.25:
            return None, self.rng.choice(REGEXES)
        names = self.rng.sample(TOPIC_NAMES, self.rng.randint(1, 3))
        return names, None

    def alive(self):
        return [c for c in self.clients.values() if c.alive]

    # ------------------------------------------------------------- events
    def join(self, instance_id: str | None = None) -> None:
        self.counter += 1
        name = f"c{self.counter}"
        if instance_id is None and self.rng.random() < 0.3:
            instance_id = f"instance-{self.counter}"
        names, regex = self._subscription()
        c = Client(name, f"member-{self.counter}", instance_id, names, regex,
                   self.rng.choice([20000, 30000, 60000]), self.rng.choice(self.assignors), self.h.now)
        self.clients[name] = c
        if instance_id:
            self.static_instances.add(instance_id)

    def leave(self, c: Client) -> None:
        c.owned = {}  # the client revokes everything before it leaves
        static_temporary = c.instance_id is not None and self.rng.random() < 0.5
        epoch = -2 if static_temporary else -1
        c.alive = False
        if c.epoch == 0:
            return  # never joined (or rejoining): nothing to leave
        resp = self.h.heartbeat(hb_request(GROUP, c.member_id, epoch, instance_id=c.instance_id))
        assert resp["error_code"] in (Err.NONE, Err.UNKNOWN_MEMBER_ID, Err.FENCED_INSTANCE_ID,
                                      Err.GROUP_ID_NOT_FOUND), resp

    def crash(self, c: Client) -> None:
        c.alive = False
        c.owned = {}

    def restart_static(self) -> None:
        gone = [i for i in self.static_instances
                if not any(c.alive and c.instance_id == i for c in self.clients.values())]
        if gone:
            self.join(self.rng.choice(sorted(gone)))

    def change_subscription(self, c: Client) -> None:
        c.names, c.regex = self._subscription()
        if c.regex is None:
            c.regex = ""  # an empty regex clears a previous one
        c.sub_dirty = True
        c.next_hb = self.h.now + self.rng.randint(0, 500)

    def topic_change(self) -> None:
        topics = dict(self.h.topics)
        kind = self.rng.choice(["create", "delete", "grow"])
        missing = [n for n in TOPIC_NAMES if n not in topics]
        if kind == "create" and missing:
            topics[self.rng.choice(missing)] = self._new_topic()
        elif kind == "delete" and topics:
            del topics[self.rng.choice(sorted(topics))]
        elif kind == "grow" and topics:
            name = self.rng.choice(sorted(topics))
            info = topics[name]
            topics[name] = TopicInfo(info.topic_id, info.partitions + self.rng.randint(1, 4))
        if self.rng.random() < 0.7:
            self.h.set_topics(topics)  # pushed by the runtime
        else:
            self.h.topics = topics  # only seen by the next heartbeat

    # ------------------------------------------------------------- heartbeats
    def heartbeat(self, c: Client, lossy: bool) -> None:
        h = self.h
        if c.epoch == 0:
            names = c.names if c.names is not None else ([] if c.regex is None else None)
            req = hb_request(GROUP, c.member_id, 0, instance_id=c.instance_id,
                             rebalance_timeout_ms=c.rebalance_timeout, names=names,
                             regex=c.regex or None, assignor=c.assignor, owned=[])
            if req["subscribed_topic_names"] is None and req["subscribed_topic_regex"] is None:
                req["subscribed_topic_names"] = []
        else:
            full = c.full
            req = hb_request(
                GROUP, c.member_id, c.epoch, instance_id=c.instance_id,
                rebalance_timeout_ms=c.rebalance_timeout if full else -1,
                names=(c.names if c.names is not None else []) if (full or c.sub_dirty) else None,
                regex=c.regex if (full or c.sub_dirty) and c.regex is not None else None,
                assignor=c.assignor if full else None,
                owned=c.owned_wire() if (full or c.owned_dirty) else None)
        resp = h.heartbeat(req)
        c.next_hb = h.now + HEARTBEAT_MS - self.rng.randint(0, 300)
        if lossy and c.lost_streak < 2 and self.rng.random() < self.loss:
            c.lost_streak += 1
            c.full = True  # after a timeout the client sends a full request
            c.next_hb = h.now + 1000
            return
        c.lost_streak = 0
        code = resp["error_code"]
        if code in (Err.FENCED_MEMBER_EPOCH, Err.UNKNOWN_MEMBER_ID):
            c.owned = {}  # lost partitions
            c.epoch = 0
            c.full = c.owned_dirty = c.sub_dirty = True
            c.next_hb = h.now + self.rng.randint(0, 500)
            return
        if code == Err.UNRELEASED_INSTANCE_ID:
            c.next_hb = h.now + 1000  # the old instance still holds the id: retry
            return
        assert code == Err.NONE, (self.seed, resp)
        sent_owned = req["topic_partitions"] is not None
        c.epoch = resp["member_epoch"]
        c.full = False
        c.sub_dirty = False
        if sent_owned:
            c.owned_dirty = False
        if resp["assignment"] is not None:
            new = {tp["topic_id"]: set(tp["partitions"])
                   for tp in resp["assignment"]["topic_partitions"] if tp["partitions"]}
            if new != c.owned:
                c.owned = new  # revoke what went away, then take what came
                c.owned_dirty = True
                c.next_hb = h.now + self.rng.randint(0, 500)

    def run_until(self, target: int, lossy: bool = True) -> None:
        h = self.h
        while True:
            alive = self.alive()
            if not alive:
                break
            c = min(alive, key=lambda x: (x.next_hb, x.name))
            if c.next_hb > target:
                break
            h.advance(max(c.next_hb - h.now, 0))
            self.heartbeat(c, lossy)
            self.check()
        h.advance(max(target - h.now, 0))
        self.check()

    # ------------------------------------------------------------- invariants
    def check(self) -> None:
        group = self.h.group()
        holders: dict[tuple, str] = {}
        epochs: dict[bytes, dict[int, int]] = {}
        if group is not None:
            for m in group.members.values():
                for a in (m.assigned, m.pending_revocation):
                    for t, parts in a.items():
                        for p in parts:
                            assert (t, p) not in holders, (
                                f"seed {self.seed}: {t.hex()[:4]}-{p} held by {holders[(t, p)]} "
                                f"and {m.member_id} on the coordinator")
                            holders[(t, p)] = m.member_id
                            epochs.setdefault(t, {})[p] = m.member_epoch
            assert epochs == {t: e for t, e in group.partition_epochs.items() if e}, self.seed
        owners: dict[tuple, str] = {}
        for c in self.alive():
            member = group.members.get(c.member_id) if group is not None else None
            for t, parts in c.owned.items():
                for p in parts:
                    assert (t, p) not in owners, (
                        f"seed {self.seed}: {t.hex()[:4]}-{p} owned by {owners[(t, p)]} and {c.name}")
                    owners[(t, p)] = c.name
                    assert member is not None and holders.get((t, p)) == c.member_id, (
                        f"seed {self.seed}: {c.name} owns {t.hex()[:4]}-{p} the coordinator "
                        f"does not count as its own")

    def converged(self) -> bool:
        group = self.h.group()
        alive = self.alive()
        if group is None:
            return not any(c.epoch for c in alive)
        if set(group.members) != {c.member_id for c in alive}:
            return False
        if alive and group.state != GROUP_STABLE:
            return False
        for c in alive:
            m = group.members[c.member_id]
            target = group.target.get(c.member_id, {})
            if m.state != STABLE or c.epoch != m.member_epoch or m.member_epoch != group.assignment_epoch:
                return False
            if {t: set(p) for t, p in m.assigned.items()} != c.owned:
                return False
            if {t: set(p) for t, p in target.items() if p} != c.owned:
                return False
        return True

    def check_targets_cover_subscriptions(self) -> None:
        group = self.h.group()
        if group is None or not group.members:
            return
        subscribed = group.subscribed_topic_names(self.h.topics)
        assigned: dict[bytes, set[int]] = {}
        for a in group.target.values():
            for t, parts in a.items():
                assert not (assigned.setdefault(t, set()) & parts), self.seed
                assigned[t] |= parts
        for name in subscribed:
            info = self.h.topics.get(name)
            if info is not None:
                assert assigned.get(info.topic_id, set()) == set(range(info.partitions)), (
                    f"seed {self.seed}: topic {name} not fully assigned")

    # ------------------------------------------------------------- the schedule
    def run(self) -> None:
        rng = self.rng
        for _ in range(rng.randint(1, 4)):
            self.join()
        for _ in range(rng.randint(15, 45)):
            event = rng.choices(
                ["tick", "join", "leave", "crash", "restart", "subscribe", "topic", "reload"],
                weights=[10, 2, 1, 1, 1, 1, 1, 1])[0]
            alive = self.alive()
            if event == "join":
                self.join()
            elif event == "leave" and alive:
                self.leave(rng.choice(alive))
            elif event == "crash" and alive:
                self.crash(rng.choice(alive))
            elif event == "restart":
                self.restart_static()
            elif event == "subscribe" and alive:
                self.change_subscription(rng.choice(alive))
            elif event == "topic":
                self.topic_change()
            elif event == "reload":  # unload, then load again from the log
                self.h.reload()
            self.run_until(self.h.now + rng.randint(50, 6000))
        # quiesce: no more losses or changes; every member must converge
        self.run_until(self.h.now + HEARTBEAT_MS, lossy=False)  # everyone heartbeats once
        deadline = self.h.now + 4 * SESSION_MS
        while not self.converged():
            assert self.h.now < deadline, (
                f"seed {self.seed}: no convergence; state {self.h.group().state}")
            self.run_until(self.h.now + 1000, lossy=False)
        self.check_targets_cover_subscriptions()
        assert self.h.replayed().snapshot() == self.h.shard.snapshot(), f"seed {self.seed}"


@pytest.mark.parametrize("block", range(10))
def test_simulated_schedules(block):
    per_block = SCHEDULES // 10
    for seed in range(block * per_block, (block + 1) * per_block):
        Simulation(seed).run()
