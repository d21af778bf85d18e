"""A fake runtime for the KIP-848 consumer group core: a fake clock, timers as a
dict, and the log as a list of encoded records (each record goes through
kcoord's own record codec, as the runtime writes it)."""
from __future__ import annotations

import itertools

from kcoord.coordinator.consumer_group import TopicInfo
from kcoord.coordinator.result import Result
from kcoord.coordinator.shard import CoordinatorConfig, CoordinatorShard
from kcoord.protocol.record_codec import encode_record
from kcoord.protocol.record_codec import decode_record

GROUP = "g"
HOUR = 3600_000


def tid(n: int) -> bytes:
    return bytes([0xAA, n]) + bytes(14)


def hb_request(group=GROUP, member_id="", epoch=0, *, instance_id=None, rack_id=None,
               rebalance_timeout_ms=-1, names=None, regex=None, assignor=None, owned=None) -> dict:
    return {"group_id": group, "member_id": member_id, "member_epoch": epoch,
            "instance_id": instance_id, "rack_id": rack_id,
            "rebalance_timeout_ms": rebalance_timeout_ms, "subscribed_topic_names": names,
            "subscribed_topic_regex": regex, "server_assignor": assignor,
            "topic_partitions": owned}


def join_request(member_id="", names=("foo",), *, group=GROUP, rebalance_timeout_ms=30000,
                 **kw) -> dict:
    return hb_request(group, member_id, 0, rebalance_timeout_ms=rebalance_timeout_ms,
                      names=None if names is None else list(names), owned=[], **kw)


def owned_list(assignment) -> list[dict]:
    return [{"topic_id": t, "partitions": sorted(p)} for t, p in sorted(assignment.items()) if p]


def wire_assignment(response) -> dict[bytes, set[int]]:
    a = response["assignment"]
    if a is None:
        return None
    return {tp["topic_id"]: set(tp["partitions"]) for tp in a["topic_partitions"] if tp["partitions"]}


class Harness:
    def __init__(self, config: CoordinatorConfig | None = None, topics=None) -> None:
        self.config = config or CoordinatorConfig()
        self.shard = CoordinatorShard(0, self.config)
        counter = itertools.count()
        self.shard.consumer.new_member_id = lambda: f"server-{next(counter)}"
        self.now = 1_000_000
        self.timers: dict[tuple, int] = {}
        self.log: list[tuple[bytes, bytes | None]] = []
        self.topics: dict[str, TopicInfo] = dict(topics or {})
        self.fired: list[tuple] = []
        self.earlier_steady_answers = 0  # by the shards reload() replaced

    # ------------------------------------------------------------- plumbing
    def apply(self, result: Result) -> list[dict]:
        for record in result.records:  # the log gets every record
            key, value = encode_record(record)
            self.log.append((key, value))
        # memory gets what the runtime replays: not the AppliedRecords
        self.shard.replay_emitted(result.records)
        for key, deadline in result.timers:
            if deadline is None:
                self.timers.pop(key, None)
            else:
                self.timers[key] = deadline
        return [resp for _, resp in result.replies]

    def heartbeat(self, req: dict, version: int = 1, client_id: str = "client",
                  client_host: str = "/127.0.0.1", principal=None) -> dict:
        result = self.shard.consumer_group_heartbeat(req, version, client_id, client_host,
                                                     self.now, self.topics, principal)
        replies = self.apply(result)
        assert not replies  # no parked request to answer: the heartbeat's is its response
        return result.response

    def advance(self, ms: int) -> None:
        """Move the clock, firing due timers in deadline order."""
        target = self.now + ms
        while True:
            due = [(d, k) for k, d in self.timers.items() if d <= target]
            if not due:
                break
            deadline, key = min(due, key=lambda dk: (dk[0], repr(dk[1])))
            del self.timers[key]
            self.now = max(self.now, deadline)
            self.fired.append(key)
            self.apply(self.shard.on_timer(key, self.now))
        self.now = target

    def set_topics(self, topics: dict) -> None:
        self.topics = dict(topics)
        self.apply(self.shard.on_topics_changed(self.topics))

    def replayed(self) -> CoordinatorShard:
        fresh = CoordinatorShard(0, self.config)
        for key, value in self.log:
            fresh.replay(decode_record(key, value))
        return fresh

    def reload(self) -> None:
        """The shard is unloaded (its timers cancelled, its memory dropped) and
        loaded again from its log, as after a move to another node and back:
        its durable state must be the live one, and on_loaded re-arms timers."""
        live = self.shard.snapshot()
        old = self.shard.consumer
        self.earlier_steady_answers += old.steady_answers
        self.shard = self.replayed()
        self.shard.consumer.new_member_id = old.new_member_id
        self.shard.consumer.steady_shortcut = old.steady_shortcut
        assert self.shard.snapshot() == live
        self.timers = {}
        self.apply(self.shard.on_loaded(self.now))

    def steady_answers(self) -> int:
        """Heartbeats the steady shortcut answered, over reloads."""
        return self.earlier_steady_answers + self.shard.consumer.steady_answers

    def group(self, group_id: str = GROUP):
        return self.shard.consumer.groups.get(group_id)

    def member(self, member_id: str, group_id: str = GROUP):
        return self.group(group_id).members[member_id]
