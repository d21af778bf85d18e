"""A seeded randomized simulation of the real coordinator runtime: shards that
load and unload under classic, KIP-848 and offsets traffic, with a fake
clock and a durability seam the schedule controls.

No server and no sockets: the real CoordinatorRuntime, GroupHandlers and
ConsumerGroupApi on a tmp data dir, driven on an asyncio loop whose clock is
virtual (VirtualLoop: its time() and the runtime's wall clock are one fake
millisecond counter, so the shard's timers fire only when the schedule
advances the clock).  The durability seam (SimDurability) holds every
group-commit round until the schedule completes it, late, or fails it with
an I/O error (the shard reloads) or lost leadership (the shard unloads).  In
"replicated" schedules it also models a high watermark that the schedule
moves on its own: a round completes only once the watermark passes what it
appended (a write not durable offsets.commit.timeout.ms after it was made
answers COORDINATOR_NOT_AVAILABLE and completes later quietly), and a shard that
loads stays COORDINATOR_LOAD_IN_PROGRESS until the watermark reaches the
end of the log it replayed (the takeover fence).  One round is in flight
at a time (the group commit's rule), so rounds complete in order; what
varies is when, against unloads, loads, timers and new requests.

The schedule mixes JoinGroup/SyncGroup/Heartbeat/LeaveGroup of classic
members, ConsumerGroupHeartbeat of KIP-848 members (join, heartbeat, leave),
OffsetCommit (simple groups and members) and OffsetFetch, a subscribed topic
created and deleted (a write on every active shard), clock advances
(session and rebalance expiry), durability completing or failing, unload
at any point (parked joins/syncs, writes in flight, reads behind them) and
load again at the same or a newer epoch, and stale-epoch loads/unloads.

Invariants, after every step (Simulation.check):
  * every request is answered exactly once, and none is left waiting on a
    shard that is not active (nor on an active one with nothing in flight,
    except joins/syncs parked in a rebalance);
  * a request to a shard that is not loaded is answered NOT_COORDINATOR at
    once, to a loading shard COORDINATOR_LOAD_IN_PROGRESS (a classic
    Heartbeat: NONE, as Kafka);
  * an unload answers every pending, parked and queued request of the shard
    NOT_COORDINATOR, and leaves no timer of the shard on the loop;
  * the timers the core believes armed are exactly those on the loop;
  * an acknowledged OffsetCommit is visible (at least that offset: later
    commits carry larger offsets) whenever its shard is active, so after
    every reload, and in every successful OffsetFetch issued after the ack;
  * an OffsetFetch shows no commit that is not durable: only acknowledged
    ones, failed ones that a later load replayed from the log, or ones that
    timed out (offsets.commit.timeout.ms, replicated schedules) and that the
    fetch waited for;
  * the live state equals the state a fresh load of the shard's log gives
    (plus the records not appended yet);
  * a stale-epoch load or unload changes nothing;
  * a shard whose load failed answers NOT_COORDINATOR and loads again.
"""
from __future__ import annotations

import asyncio
import random
import uuid
from pathlib import Path

from kcoord.coordinator.shard import CoordinatorShard
from kcoord.log.durability import NotReplicated
from kcoord.protocol.api import response_codec
from kcoord.protocol.coordinator_batch import EncodedRecords, build_records_batch
from kcoord.protocol.record_codec import decode_record
from kcoord.protocol.records import decode_batch
from kcoord.protocol.errors import Err
from kcoord.server.clock import LoopClock, WallClock
from kcoord.server.consumer_group_handlers import ConsumerGroupApi
from kcoord.server.coordinator_runtime import ACTIVE, FAILED, LOADING, NOT_OWNED, ShardRuntime
from kcoord.server.dispatch import Reply
from kcoord.server.hot_ops import commit_flat

from tests.server.runtime_harness import Node, ctx

START_MS = 1_700_000_000_000
SESSION_MS = 10_000
REBALANCE_MS = 20_000
CG_SESSION_MS = 15_000
PARTITIONS = 2


class VirtualLoop(asyncio.SelectorEventLoop):
    """An event loop on a fake clock: `now_ms` moves only when told.  It is
    only ever run for one pass of ready callbacks (step()), so it never
    waits on its selector."""

    def __init__(self) -> None:
        super().__init__()
        self.now_ms = START_MS
        self.errors: list = []
        self.set_exception_handler(lambda loop, context: self.errors.append(context))

    def time(self) -> float:
        # small numbers: at 1.7e9 s a float cannot hold the loop's 1 ns resolution
        return (self.now_ms - START_MS) / 1000.0

    def step(self) -> None:
        self.call_soon(self.stop)
        self.run_forever()

    def idle(self) -> bool:
        if self._ready:
            return False
        return not any(not h.cancelled() and h.when() <= self.time() for h in self._scheduled)

    def run_idle(self) -> None:
        for _ in range(10_000):
            self.step()
            if self.idle():
                return
        raise AssertionError("the loop never went idle")

    def next_timer(self) -> float | None:
        whens = [h.when() for h in self._scheduled if not h.cancelled()]
        return min(whens) if whens else None

    def advance(self, ms: int) -> None:
        """Move the clock by `ms`, running every timer due on the way at its time."""
        target = self.now_ms + ms
        while True:
            when = self.next_timer()
            if when is None or START_MS + when * 1000 > target:
                break
            self.now_ms = max(self.now_ms, START_MS + int(when * 1000 + 0.999))
            self.run_idle()
        self.now_ms = target
        self.run_idle()


class SimDurability:
    """The runtime's durability seam under the schedule's control (see the
    module doc).  `hw` is each log's committed end (id(log) -> offset)."""

    closed = False

    def __init__(self, loop: VirtualLoop, replicated: bool) -> None:
        self.loop = loop
        self.replicated = replicated
        self.rounds: list[list] = []     # [logs, ends, done], oldest first
        self.hw: dict[int, int] = {}
        self.fences: list[tuple] = []    # (log, end, future) of loading shards

    @staticmethod
    def append_error(_plog) -> int:
        return 0  # the ISR is never short here: every write may be appended

    @staticmethod
    def serve_error(_plog) -> int:
        return 0  # the shard's node leads its log for the whole schedule

    def sync(self, logs, done) -> None:
        self.rounds.append([list(logs), [p.log_end_offset for p in logs], done])

    async def replayed(self, plog, end: int, epoch: int) -> None:
        if not self.replicated or self.hw.get(id(plog), 0) >= end:
            return
        fut = self.loop.create_future()
        self.fences.append((plog, end, fut))
        await fut

    # -------------------------------------------------------- the schedule's moves
    def replicate(self, plog, upto: int) -> None:
        """Replicated: the high watermark of `plog` moves to `upto`."""
        if upto > self.hw.get(id(plog), 0):
            self.hw[id(plog)] = upto
        fences, self.fences = self.fences, []
        for entry in fences:
            log_, end, fut = entry
            if fut.done():
                continue
            if self.hw.get(id(log_), 0) >= end:
                fut.set_result(None)
            else:
                self.fences.append(entry)

    def fail_fence(self) -> None:
        """A loading shard's wait fails (its load fails: the shard is FAILED)."""
        if self.fences:
            _, _, fut = self.fences.pop(0)
            if not fut.done():
                fut.set_exception(OSError("log unreadable (simulated)"))

    def completable(self) -> bool:
        if not self.rounds:
            return False
        logs, ends, _ = self.rounds[0]
        return not self.replicated or all(self.hw.get(id(p), 0) >= e for p, e in zip(logs, ends))

    def complete(self) -> None:
        logs, ends, done = self.rounds.pop(0)
        if not self.replicated:
            for plog, end in zip(logs, ends):
                self.hw[id(plog)] = max(self.hw.get(id(plog), 0), end)
        done([None] * len(logs))

    def fail(self, rng: random.Random) -> None:
        logs, _, done = self.rounds.pop(0)
        errors: list = [None] * len(logs)
        i = rng.randrange(len(logs))
        errors[i] = (NotReplicated(Err.NOT_LEADER_OR_FOLLOWER) if rng.random() < 0.5
                     else OSError("fsync failed (simulated)"))
        done(errors)

    def close(self) -> None:
        self.closed = True


# ---------------------------------------------------------------- requests
class Request:
    __slots__ = ("api", "group", "shard", "answers", "value", "issued_state", "meta", "reply")

    def __init__(self, api: str, group: str, shard: int, issued_state: str, meta=None) -> None:
        self.api = api
        self.group = group
        self.shard = shard
        self.issued_state = issued_state
        self.meta = meta
        self.answers = 0
        self.value = None
        self.reply = None

    @property
    def done(self) -> bool:
        return self.answers > 0


# the requests whose answers may come encoded, and their (API key, version) here
ENCODED_ANSWERS = {"commit": (8, 9), "consumer_heartbeat": (68, 1)}


def error_code(api: str, value) -> int:
    if isinstance(value, BaseException):
        return -1
    if api == "commit":
        return value["topics"][0]["partitions"][0]["error_code"]
    if api == "fetch":
        return value["groups"][0]["error_code"]
    return value["error_code"]


class ClassicClient:
    def __init__(self, name: str, group: str) -> None:
        self.name = name
        self.group = group
        self.member_id = ""
        self.generation = -1
        self.members: list = []   # the join answer's members (the leader's)
        self.busy = False          # a join or sync outstanding
        self.synced = False        # its last sync succeeded: heartbeats next


class ConsumerClient:
    def __init__(self, name: str, group: str, member_id: str) -> None:
        self.name = name
        self.group = group
        self.member_id = member_id
        self.epoch = 0
        self.owned: list | None = []
        self.busy = False


class Simulation:
    def __init__(self, seed: int, data_dir: Path, steps: int = 120,
                 shard_class: type = ShardRuntime, wall_steps: bool = False) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.steps = steps
        self.loop = VirtualLoop()
        self.replicated = self.rng.random() < 0.5
        asyncio.set_event_loop(self.loop)
        # the runtime's one clock is the loop's virtual time; shard_class: a
        # deliberately broken ShardRuntime, for the bench's check of the checks
        # wall_steps: the server's own clock (WallClock) over a wall clock that
        # is the loop's time plus `wall_offset_ms`, which a test steps (a
        # clock fault: the monotonic clock, the loop's, never moves with it)
        self.wall_offset_ms = 0
        clock = WallClock(wall=lambda: (self.loop.now_ms + self.wall_offset_ms) / 1000.0,
                          mono=lambda: self.loop.now_ms / 1000.0) if wall_steps \
            else LoopClock(lambda: self.loop.now_ms)
        self.node = Node(data_dir, partitions=PARTITIONS, shard_class=shard_class,
                         clock=clock,
                         **{"group.coordinator.append.linger.ms": self.rng.choice([0, 0, 5])})
        self.runtime = self.node.runtime
        self.durability = SimDurability(self.loop, self.replicated)
        self.runtime.commit.durability = self.durability
        if self.replicated:  # offsets.commit.timeout.ms, as with ReplicatedDurability
            self.runtime.commit.write_timeout = 5.0
        self.groups = self.node.groups
        self.consumer_api = ConsumerGroupApi(self.runtime, self.node.catalogue, self.node.config)
        self.requests: list[Request] = []
        self.acked: dict[tuple, int] = {}   # (group, topic, partition) -> offset acknowledged
        self.commits: dict[int, tuple] = {}  # offset -> (its OffsetCommit, the core it went to)
        self.shown: list[tuple] = []        # (offset, core) of successful OffsetFetch answers
        self.offset_seq = 0
        self.epochs = [0] * PARTITIONS
        self.classic = [ClassicClient(f"c{i}", f"classic-{i % 2}") for i in range(6)]
        self.consumers = [ConsumerClient(f"k{i}", f"consumer-{i % 2}",
                                         str(uuid.UUID(int=self.rng.getrandbits(128))))
                          for i in range(3)]
        self.simple_groups = ["simple-0", "simple-1", "simple-2"]
        self.trace: list[str] = []
        self.counts: dict[str, int] = {}

    # ------------------------------------------------------------ plumbing
    def close(self) -> None:
        try:
            for shard in self.runtime.shards:
                if shard._load_task is not None:
                    shard._load_task.cancel()
                shard.cancel_all_timers()
            self.loop.run_idle()
            self.node.catalogue.close()
        finally:
            asyncio.set_event_loop(None)
            self.loop.close()

    def in_loop(self, fn):
        """Run fn() inside the loop (handlers need a running loop); -> its value."""
        out = []
        self.loop.call_soon(lambda: out.append(fn()))
        self.loop.step()
        assert out, f"raised in the loop: {self.loop.errors}"
        return out[0]

    def shard(self, group: str) -> ShardRuntime:
        return self.runtime.shard_for(group)

    def issue(self, api: str, group: str, call, meta=None, on_answer=None) -> Request:
        shard = self.shard(group)
        req = Request(api, group, shard.index, shard.state, meta)
        self.requests.append(req)
        self.counts[api] = self.counts.get(api, 0) + 1

        def answered(value) -> None:
            req.answers += 1
            assert req.answers == 1, f"{api} answered twice"
            if value.__class__ is bytes and api in ENCODED_ANSWERS:
                # an answer the handler encoded once and cached (server/hot_ops.py)
                value, _ = response_codec(*ENCODED_ANSWERS[api])[1](value, 0)
            req.value = value
            code = error_code(api, value)
            tally = f"{api}:{Err(code).name if code >= 0 else 'exception'}"
            self.counts[tally] = self.counts.get(tally, 0) + 1
            if on_answer is not None and not isinstance(value, BaseException):
                on_answer(value)

        def start():
            value = call()
            if asyncio.iscoroutine(value):
                task = self.loop.create_task(value)
                req.reply = task
                task.add_done_callback(lambda t: answered(
                    t.exception() if t.exception() is not None else t.result()))
            elif value.__class__ is Reply:
                req.reply = value
                value.add_done_callback(lambda r: answered(
                    r.exception() if r.exception() is not None else r.result()))
            else:
                answered(value)
            return value
        self.in_loop(start)
        if req.issued_state is not ACTIVE:
            # not loaded: NOT_COORDINATOR at once; loading: COORDINATOR_LOAD_IN_PROGRESS
            assert req.done, f"{api} to a {req.issued_state} shard not answered at once"
            want = Err.COORDINATOR_LOAD_IN_PROGRESS if req.issued_state is LOADING \
                else Err.NOT_COORDINATOR
            if api == "heartbeat" and want == Err.COORDINATOR_LOAD_IN_PROGRESS:
                want = Err.NONE  # Kafka answers a heartbeat to a loading coordinator NONE
            got = error_code(api, req.value)
            assert got == want, f"{api} to a {req.issued_state} shard: {Err(got).name}"
        return req

    # ------------------------------------------------------------ classic clients
    def classic_join(self, c: ClassicClient) -> None:
        c.busy = True
        req = {"group_id": c.group, "session_timeout_ms": SESSION_MS,
               "rebalance_timeout_ms": REBALANCE_MS, "member_id": c.member_id,
               "group_instance_id": None, "protocol_type": "consumer",
               "protocols": [{"name": "range", "metadata": b"\x00\x01" + c.name.encode()}],
               "reason": None}

        def on_answer(resp) -> None:
            c.busy = False
            code = resp["error_code"]
            if code == Err.MEMBER_ID_REQUIRED:
                c.member_id = resp["member_id"]
            elif code == Err.NONE:
                c.member_id, c.generation = resp["member_id"], resp["generation_id"]
                c.members = [m["member_id"] for m in resp["members"]]
                c.synced = False
            elif code in (Err.UNKNOWN_MEMBER_ID, Err.FENCED_INSTANCE_ID):
                c.member_id, c.generation = "", -1
        self.issue("join", c.group, lambda: self.groups.join_group(ctx(11, 7), req),
                   on_answer=on_answer)

    def classic_sync(self, c: ClassicClient) -> None:
        c.busy = True
        assignments = [{"member_id": m, "assignment": m.encode()[:8]} for m in c.members]
        req = {"group_id": c.group, "generation_id": c.generation, "member_id": c.member_id,
               "group_instance_id": None, "protocol_type": "consumer",
               "protocol_name": "range", "assignments": assignments}
        c.members = []

        def on_answer(resp) -> None:
            c.busy = False
            code = resp["error_code"]
            c.synced = code == Err.NONE
            if code in (Err.UNKNOWN_MEMBER_ID, Err.ILLEGAL_GENERATION):
                c.generation = -1
        self.issue("sync", c.group, lambda: self.groups.sync_group(ctx(14, 5), req),
                   on_answer=on_answer)

    def classic_heartbeat(self, c: ClassicClient) -> None:
        req = {"group_id": c.group, "generation_id": c.generation, "member_id": c.member_id,
               "group_instance_id": None}

        def on_answer(resp) -> None:
            code = resp["error_code"]
            if code != Err.NONE:
                c.synced = False
            if code == Err.UNKNOWN_MEMBER_ID:
                c.member_id, c.generation = "", -1
            elif code in (Err.REBALANCE_IN_PROGRESS, Err.ILLEGAL_GENERATION) and not c.busy:
                c.generation = -1  # rejoin (with its member id)
        self.issue("heartbeat", c.group, lambda: self.groups.heartbeat(ctx(12, 4), req),
                   on_answer=on_answer)

    def classic_leave(self, c: ClassicClient) -> None:
        req = {"group_id": c.group, "member_id": "", "members": [
            {"member_id": c.member_id, "group_instance_id": None, "reason": None}]}
        self.issue("leave", c.group, lambda: self.groups.leave_group(ctx(13, 5), req))
        c.member_id, c.generation, c.synced = "", -1, False

    def classic_next(self, c: ClassicClient) -> None:
        """What a classic consumer does next: join, sync, or heartbeat."""
        if c.busy:
            if c.member_id and self.rng.random() < 0.3:
                self.classic_heartbeat(c)  # heartbeats go on while a join waits
            return
        if c.synced:
            self.classic_heartbeat(c)
        elif c.generation >= 0 and c.member_id and self.rng.random() < 0.8:
            self.classic_sync(c)
        else:
            self.classic_join(c)

    # ------------------------------------------------------------ KIP-848 clients
    def consumer_heartbeat(self, k: ConsumerClient, leave: bool = False) -> None:
        k.busy = True
        if leave:
            epoch = -1
        else:
            epoch = k.epoch
        joining = epoch == 0
        req = {"group_id": k.group, "member_id": k.member_id, "member_epoch": epoch,
               "instance_id": None, "rack_id": None,
               "rebalance_timeout_ms": REBALANCE_MS if joining else -1,
               "subscribed_topic_names": ["t", "u"] if joining or self.rng.random() < 0.2
               else None,
               "subscribed_topic_regex": None, "server_assignor": None,
               "topic_partitions": [] if joining else k.owned}

        def on_answer(resp) -> None:
            k.busy = False
            code = resp["error_code"]
            if leave:
                return
            if code == Err.NONE:
                k.epoch = resp["member_epoch"]
                if resp["assignment"] is not None:
                    k.owned = [{"topic_id": tp["topic_id"], "partitions": list(tp["partitions"])}
                               for tp in resp["assignment"]["topic_partitions"]]
                else:
                    k.owned = None  # unchanged since the last full heartbeat
            elif code in (Err.UNKNOWN_MEMBER_ID, Err.FENCED_MEMBER_EPOCH):
                k.epoch, k.owned = 0, []
        if leave:
            k.epoch, k.owned = 0, []
        self.issue("consumer_heartbeat", k.group,
                   lambda: self.consumer_api.consumer_group_heartbeat(ctx(68, 1), req),
                   on_answer=on_answer)

    # ------------------------------------------------------------ offsets
    def commit(self) -> None:
        choice = self.rng.random()
        if choice < 0.5:
            group, member, generation = self.rng.choice(self.simple_groups), "", -1
        elif choice < 0.8:
            c = self.rng.choice(self.classic)
            group, member, generation = c.group, c.member_id, c.generation
        else:
            k = self.rng.choice(self.consumers)
            group, member, generation = k.group, k.member_id, k.epoch
        partition = self.rng.randrange(2)
        self.offset_seq += 1
        offset = self.offset_seq
        req = {"group_id": group, "generation_id_or_member_epoch": generation,
               "member_id": member, "group_instance_id": None, "retention_time_ms": -1,
               "topics": [{"name": "t", "partitions": [
                   {"partition_index": partition, "committed_offset": offset,
                    "committed_leader_epoch": -1, "committed_metadata": ""}]}]}
        key = (group, "t", partition)

        def on_answer(resp) -> None:
            if error_code("commit", resp) == Err.NONE:
                self.acked[key] = max(self.acked.get(key, 0), offset)
        core = self.shard(group).core
        # every other commit as the server takes v8-v9 from the wire: flat
        # (protocol/commit_request.py), through hot_ops.commit_flat
        flat = (group, generation, member, None, [("t", [(partition, offset, -1, "")])])
        self.commits[offset] = (self.issue(
            "commit", group, (lambda: commit_flat(self.groups, ctx(8, 9), flat)) if offset % 2
            else (lambda: self.groups.offset_commit(ctx(8, 9), req)),
            meta=key, on_answer=on_answer), core)

    def fetch(self) -> None:
        group = self.rng.choice(self.simple_groups + [c.group for c in self.classic[:2]]
                                + [k.group for k in self.consumers[:2]])
        req = {"groups": [{"group_id": group, "member_id": None, "member_epoch": -1,
                           "topics": None}], "require_stable": False}
        floor = {k: v for k, v in self.acked.items() if k[0] == group}
        core = self.shard(group).core

        def on_answer(resp) -> None:
            g = resp["groups"][0]
            if g["error_code"] != Err.NONE:
                return
            got = {(group, t["name"], p["partition_index"]): p["committed_offset"]
                   for t in g["topics"] for p in t["partitions"]}
            for key, offset in floor.items():
                assert got.get(key, -1) >= offset, \
                    f"fetch of {group} lost acknowledged commit {key}={offset}: {got}"
            self.shown.extend((offset, core) for offset in got.values())
        self.issue("fetch", group, lambda: self.groups.offset_fetch(ctx(9, 8), req),
                   on_answer=on_answer)

    # ------------------------------------------------------------ lifecycle
    def unload(self, p: int) -> None:
        shard = self.runtime.shards[p]
        was = shard.state
        waiting = [r for r in self.requests if r.shard == p and not r.done]
        for r in waiting:
            tally = "unload-answers:" + r.api
            self.counts[tally] = self.counts.get(tally, 0) + 1
        if self.rng.random() < 0.3:
            unloaded = self.in_loop(lambda: self.runtime.unload(p))  # lost leadership: no epoch
        else:
            self.epochs[p] = max(self.epochs[p], shard.epoch) + self.rng.randint(1, 2)
            unloaded = self.in_loop(lambda: self.runtime.unload(p, self.epochs[p]))
        assert unloaded == (was is not NOT_OWNED), (was, unloaded)
        assert shard.state is NOT_OWNED and shard.core is None and not shard.parked
        assert shard._timers == {}, "timers left after unload"
        self.loop.run_idle()
        for r in waiting:
            assert r.done, f"{r.api} still waiting after unload"
            assert error_code(r.api, r.value) == Err.NOT_COORDINATOR, \
                f"{r.api} after unload: {error_code(r.api, r.value)}"

    def load(self, p: int) -> None:
        shard = self.runtime.shards[p]
        epoch = max(self.epochs[p], shard.epoch) + self.rng.choice([0, 0, 1])
        self.epochs[p] = epoch
        was = shard.state
        self.in_loop(lambda: self.runtime.load(p, epoch))
        assert shard.epoch == epoch
        if was is NOT_OWNED or was is FAILED:
            assert shard.state is LOADING

    def stale(self, p: int) -> None:
        shard = self.runtime.shards[p]
        before = (shard.state, shard.epoch, shard.core)
        if shard.epoch <= 0:
            return
        if self.rng.random() < 0.5:
            task = self.in_loop(lambda: self.runtime.load(p, shard.epoch - 1))
            assert task is None
        else:
            assert not self.in_loop(lambda: self.runtime.unload(p, shard.epoch))
        assert (shard.state, shard.epoch, shard.core) == before, "a stale epoch changed the shard"

    # ------------------------------------------------------------ the schedule
    def run(self) -> None:
        for p in range(PARTITIONS):
            self.load(p)
        self.loop.run_idle()
        self.settle_fences()
        for i in range(self.steps):
            event = self.rng.choices(
                ["classic", "leave", "cg", "cg_leave", "commit", "fetch",
                 "advance", "durable", "fail", "fail_load", "replicate", "unload", "load",
                 "stale", "topic"],
                [24, 2, 10, 1, 12, 6, 8, 14, 1, 1, 6, 3, 6, 1, 1])[0]
            self.trace.append(event)
            self.counts["step:" + event] = self.counts.get("step:" + event, 0) + 1
            self.do(event)
            self.loop.run_idle()
            self.check()
        self.quiesce()
        self.check()

    def do(self, event: str) -> None:
        rng = self.rng
        if event == "classic":
            self.classic_next(rng.choice(self.classic))
        elif event == "leave":
            c = rng.choice(self.classic)
            if c.member_id:
                self.classic_leave(c)
        elif event in ("cg", "cg_leave"):
            k = rng.choice(self.consumers)
            if not k.busy and (event == "cg" or k.epoch > 0):
                self.consumer_heartbeat(k, leave=event == "cg_leave")
        elif event == "commit":
            self.commit()
        elif event == "fetch":
            self.fetch()
        elif event == "advance":
            self.loop.advance(rng.choice([100, 500, 1000, 1000, 2000, 3000, 8000, 12_000, 25_000]))
        elif event == "durable":
            if self.durability.completable():
                self.in_loop(self.durability.complete)
        elif event == "fail":
            if self.durability.rounds:
                self.in_loop(lambda: self.durability.fail(rng))
        elif event == "topic":  # a topic the consumers subscribe to comes and goes (write_all)
            catalogue = self.node.catalogue
            if catalogue.get("u") is None:
                self.in_loop(lambda: catalogue.create("u", rng.randint(1, 3), {}))
            else:
                self.in_loop(lambda: catalogue.delete("u"))
        elif event == "fail_load":
            self.in_loop(self.durability.fail_fence)
        elif event == "replicate":
            self.replicate_one()
        elif event == "unload":
            self.unload(rng.randrange(PARTITIONS))
        elif event == "load":
            # mostly a shard that is not loaded; sometimes a newer epoch of a loaded one
            idle = [s.index for s in self.runtime.shards if s.state in (NOT_OWNED, FAILED)]
            pick = rng.choice(idle) if idle and rng.random() < 0.8 else rng.randrange(PARTITIONS)
            self.load(pick)
        elif event == "stale":
            self.stale(rng.randrange(PARTITIONS))

    def replicate_one(self) -> None:
        if not self.replicated:
            return
        shard = self.runtime.shards[self.rng.randrange(PARTITIONS)]
        plog = shard.plog
        hw = self.durability.hw.get(id(plog), 0)
        end = plog.log_end_offset
        upto = end if self.rng.random() < 0.7 else self.rng.randint(hw, end)
        self.in_loop(lambda: self.durability.replicate(plog, upto))

    def settle_fences(self) -> None:
        if self.replicated:
            for shard in self.runtime.shards:
                plog = shard.plog
                self.in_loop(lambda: self.durability.replicate(plog, plog.log_end_offset))
            self.loop.run_idle()

    def quiesce(self) -> None:
        """No more failures: every shard loaded, every write durable; then
        every request is answered but joins/syncs parked in a rebalance."""
        for p in range(PARTITIONS):
            if self.runtime.shards[p].state is not ACTIVE:
                self.load(p)
        for _ in range(50):
            self.loop.run_idle()
            self.settle_fences()
            while self.durability.rounds:
                self.settle_fences()
                if self.durability.completable():
                    self.in_loop(self.durability.complete)
                self.loop.run_idle()
            if all(s.state is ACTIVE for s in self.runtime.shards) and not self.durability.rounds:
                break
        assert all(s.state is ACTIVE for s in self.runtime.shards), "shards never loaded"

    # ------------------------------------------------------------ invariants
    def check(self) -> None:
        assert not self.loop.errors, self.loop.errors
        # A fetch shows no commit that is not durable: each offset it showed is
        # one an acknowledged commit wrote, or one a failed commit left in the
        # log that a later load (another core) replayed.
        shown, self.shown = self.shown, []
        for offset, core in shown:
            commit, commit_core = self.commits[offset]
            assert commit.done, f"a fetch showed commit {offset} before it was answered"
            code = error_code("commit", commit.value)
            # a commit that timed out (COORDINATOR_NOT_AVAILABLE on the same
            # core) stays in flight: the fetch behind it waited until it was durable
            assert code == Err.NONE or core is not commit_core or (
                code == Err.COORDINATOR_NOT_AVAILABLE and self.replicated), \
                f"a fetch showed commit {offset}, which failed ({code})"
        for r in self.requests:
            assert r.answers <= 1
        for shard in self.runtime.shards:
            waiting = [r for r in self.requests if r.shard == shard.index and not r.done]
            fire_handles = [h for h in self.loop._scheduled if not h.cancelled()
                            and getattr(h._callback, "__self__", None) is shard
                            and getattr(h._callback, "__func__", None) is ShardRuntime._fire]
            if shard.state is not ACTIVE:
                assert not waiting, f"{[r.api for r in waiting]} wait on a {shard.state} shard"
                assert not fire_handles and not shard._timers, "timers of a shard not active"
                assert not shard.parked
                continue
            # no orphan timer: the loop holds exactly the shard's timers, which
            # are exactly those the core believes armed
            assert sorted(id(h) for h in fire_handles) == \
                sorted(id(h) for h in shard._timers.values()), "orphan timer handles"
            assert set(shard._timers) == set(shard.core.timers.armed), \
                (set(shard._timers) ^ set(shard.core.timers.armed))
            for key in shard.core.timers.deadlines:
                assert key in shard.core.timers.armed, f"timer {key} pending but not armed"
            if not shard._batches:
                stuck = [r.api for r in waiting if r.api not in ("join", "sync")]
                assert not stuck, f"{stuck} unanswered with nothing in flight"
                assert len(waiting) <= len(shard.parked)
            # acknowledged commits are in the live state
            offsets = shard.core.offsets.snapshot()
            for (group, topic, partition), offset in self.acked.items():
                if self.runtime.partition_for(group) != shard.index:
                    continue
                value = offsets.get(group, {}).get((topic, partition))
                assert value is not None and value[0] >= offset, \
                    f"acknowledged commit {group}/{topic}-{partition}={offset} lost: {value}"
            self.check_replay(shard)

    def check_replay(self, shard: ShardRuntime) -> None:
        """Live state == a fresh load of the shard's log (+ what is not appended yet)."""
        fresh = ShardRuntime(shard.index, shard.plog, shard.config)
        fresh.core = CoordinatorShard(shard.index, shard.config)
        coro = fresh.replay_log()
        try:
            while True:
                coro.send(None)
        except StopIteration:
            pass
        if shard._pending is not None:
            fresh.core.replay_all(pending_records(shard._pending.records))
        assert fresh.core.snapshot() == shard.core.snapshot(), "live state != replayed log"


def pending_records(items: list) -> list:
    """A pending batch's records, those queued encoded (EncodedRecords)
    decoded back from their bytes (their batch as the round would write it)."""
    if not any(item.__class__ is EncodedRecords for item in items):
        return items
    _, decoded = decode_batch(build_records_batch(items, 0))
    return [decode_record(r.key, r.value) for r in decoded]


def run_seed(seed: int, data_dir: Path, steps: int = 120,
             shard_class: type = ShardRuntime) -> Simulation:
    sim = Simulation(seed, data_dir, steps, shard_class)
    try:
        sim.run()
    except AssertionError as exc:
        raise AssertionError(f"seed {seed} (replicated={sim.replicated}) after "
                             f"{sim.trace[-12:]}: {exc}") from exc
    finally:
        sim.close()
    return sim
