"""Every node's picture of the cluster, built from etcd's keys (no I/O here).

Key layout under the prefix (`etcd.prefix`, default /kcoord), as Kafka's
ZooKeeper layout had it:
    <prefix>/nodes/<id>                 {"host", "port", "stopping", "endpoints"}
                                        (under the node's lease; endpoints: every
                                        advertised listener, name -> [host, port])
    <prefix>/controller                 {"node", "epoch"}               (under the controller's lease)
    <prefix>/controller_epoch           "<epoch>"
    <prefix>/topics/<name>              {"id", "partitions", "replication_factor", "configs"}
    <prefix>/partitions/<topic>/<p>     {"leader", "leader_epoch", "isr", "replicas"}
    <prefix>/incarnations/<id>          "<lease>": the node's registration the controller
                                        last handled (a new lease = the node bounced)
    <prefix>/configs/<type>/<name>      {key: value}: dynamic broker ("" = cluster default,
                                        else a node id) and group config overrides
    <prefix>/security/...               SCRAM credentials and ACLs (security_sync.py)
A partition state's `version` is its key's mod revision (zkVersion's role)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from .state import PartitionState


@dataclass(frozen=True, slots=True)
class NodeInfo:
    node_id: int
    host: str
    port: int
    stopping: bool = False  # in controlled shutdown: leads nothing new
    # advertised listener name -> (host, port), as Kafka's broker registration
    # lists every endpoint; empty in a registration from before listeners
    endpoints: tuple = ()
    # the lease this same process held before its lease expired (0: a new
    # process): its memory and its log are whole, so the controller may keep
    # its leaderships and ISR places instead of fencing it as a restart
    resumes: int = 0

    def endpoint(self, listener: str | None) -> tuple[str, int] | None:
        """The node's endpoint on `listener` (None: it has no such listener);
        a registration without endpoints answers host and port for any."""
        if not self.endpoints or listener is None:
            return self.host, self.port
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        return None


@dataclass(frozen=True, slots=True)
class TopicRecord:
    name: str
    topic_id: bytes
    partitions: int
    replication_factor: int
    configs: dict = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True, slots=True)
class Controller:
    node_id: int
    epoch: int
    create_revision: int  # a controller's writes compare it: a deposed one's fail


class Keys:
    def __init__(self, prefix: str = "/kcoord") -> None:
        self.prefix = prefix.rstrip("/")
        self.nodes = f"{self.prefix}/nodes/"
        self.controller = f"{self.prefix}/controller"
        self.controller_epoch = f"{self.prefix}/controller_epoch"
        self.topics = f"{self.prefix}/topics/"
        self.partitions = f"{self.prefix}/partitions/"
        self.incarnations = f"{self.prefix}/incarnations/"
        self.configs = f"{self.prefix}/configs/"
        self.security = f"{self.prefix}/security/"
        self.cluster_id = f"{self.prefix}/cluster_id"  # written once, by the first node

    def node(self, node_id: int) -> str:
        return f"{self.nodes}{node_id}"

    def incarnation(self, node_id: int) -> str:
        return f"{self.incarnations}{node_id}"

    def topic(self, name: str) -> str:
        return f"{self.topics}{name}"

    def partition(self, topic: str, partition: int) -> str:
        return f"{self.partitions}{topic}/{partition}"

    def config(self, entity_type: str, name: str) -> str:
        return f"{self.configs}{entity_type}/{name}"


def encode_node(info: NodeInfo) -> bytes:
    doc = {"host": info.host, "port": info.port, "stopping": info.stopping,
           "endpoints": {n: [h, p] for n, h, p in info.endpoints}}
    if info.resumes:
        doc["resumes"] = f"{info.resumes:x}"
    return json.dumps(doc).encode()


def encode_topic(t: TopicRecord) -> bytes:
    return json.dumps({"id": t.topic_id.hex(), "partitions": t.partitions,
                       "replication_factor": t.replication_factor,
                       "configs": t.configs}).encode()


def encode_state(s: PartitionState) -> bytes:
    return json.dumps({"leader": s.leader, "leader_epoch": s.leader_epoch,
                       "isr": list(s.isr), "replicas": list(s.replicas)}).encode()


def encode_controller(node_id: int, epoch: int) -> bytes:
    return json.dumps({"node": node_id, "epoch": epoch}).encode()


class ClusterView:
    """Nodes, controller, topics and partition states, as last seen in etcd.

    `apply` takes one key's new value (None when deleted) and returns what
    it changed: ("node", id), ("controller", None), ("topic", name),
    ("partition", state or (topic, p) when deleted), or None."""

    def __init__(self, keys: Keys) -> None:
        self.keys = keys
        self.nodes: dict[int, NodeInfo] = {}
        self.sessions: dict[int, int] = {}  # node -> lease of its registration (its incarnation)
        self.registered: dict[int, int] = {}  # node -> mod revision of its registration
        self.incarnations: dict[int, int] = {}  # node -> lease the controller last handled
        self.controller: Controller | None = None
        self.controller_epoch = 0
        self.controller_epoch_version = 0  # mod revision of the epoch key (0: absent)
        self.topics: dict[str, TopicRecord] = {}
        self.partitions: dict[tuple[str, int], PartitionState] = {}
        self.configs: dict[tuple[str, str], dict] = {}  # (entity type, name) -> overrides
        # security key -> (value, mod revision): applied by security_sync.py
        self.security: dict[str, tuple[bytes, int]] = {}
        self.revision = 0  # etcd revision this view reflects

    # ------------------------------------------------------------ queries
    def live(self) -> set[int]:
        return set(self.nodes)

    def serving(self) -> set[int]:
        return {n for n, info in self.nodes.items() if not info.stopping}

    def stopping(self) -> set[int]:
        return {n for n, info in self.nodes.items() if info.stopping}

    def resumed(self, node_id: int, handled: int | None) -> bool:
        """Is the node's registration the same process as the incarnation
        the controller handled (lease `handled`), back under a new lease
        after its old one expired (etcd paused, cut from etcd, a pause of
        the process past its lease)?  Its log lost nothing and it acted on
        no state while lapsed, so it keeps its leaderships and ISR places."""
        info = self.nodes.get(node_id)
        return info is not None and bool(handled) and info.resumes == handled

    def isr_eligible(self, node_id: int) -> bool:
        """May the node join an ISR (Kafka's isReplicaIsrEligible)? Registered,
        not shutting down, and its incarnation handled by the controller: a
        new incarnation joins only once the old one's leaderships and ISR
        places are gone, else that fencing would throw the new one out."""
        info = self.nodes.get(node_id)
        return (info is not None and not info.stopping
                and self.incarnations.get(node_id) == self.sessions.get(node_id))

    def state(self, topic: str, partition: int) -> PartitionState | None:
        return self.partitions.get((topic, partition))

    def topic_states(self, topic: str) -> list[PartitionState]:
        record = self.topics.get(topic)
        if record is None:
            return []
        return [s for p in range(record.partitions)
                if (s := self.partitions.get((topic, p))) is not None]

    # ------------------------------------------------------------- update
    def apply(self, key: str, value: bytes | None, mod_revision: int, create_revision: int = 0,
              lease: int = 0):
        k = self.keys
        if key.startswith(k.nodes):
            node_id = int(key[len(k.nodes):])
            if value is None:
                self.nodes.pop(node_id, None)
                self.sessions.pop(node_id, None)
                self.registered.pop(node_id, None)
            else:
                self.sessions[node_id] = lease
                self.registered[node_id] = mod_revision
                doc = json.loads(value)
                endpoints = tuple((str(n), str(h), int(p))
                                  for n, (h, p) in (doc.get("endpoints") or {}).items())
                self.nodes[node_id] = NodeInfo(node_id, doc["host"], int(doc["port"]),
                                               bool(doc.get("stopping", False)), endpoints,
                                               int(doc.get("resumes", "0"), 16))
            return ("node", node_id)
        if key == k.controller:
            if value is None:
                self.controller = None
            else:
                doc = json.loads(value)
                self.controller = Controller(int(doc["node"]), int(doc["epoch"]), create_revision)
            return ("controller", None)
        if key.startswith(k.incarnations):
            node_id = int(key[len(k.incarnations):])
            if value is None:
                self.incarnations.pop(node_id, None)
            else:
                self.incarnations[node_id] = int(value)
            return ("incarnation", node_id)
        if key == k.controller_epoch:
            self.controller_epoch = int(value) if value is not None else 0
            self.controller_epoch_version = mod_revision if value is not None else 0
            return None
        if key.startswith(k.topics):
            name = key[len(k.topics):]
            if value is None:
                self.topics.pop(name, None)
            else:
                doc = json.loads(value)
                self.topics[name] = TopicRecord(name, bytes.fromhex(doc["id"]),
                                                int(doc["partitions"]),
                                                int(doc["replication_factor"]),
                                                dict(doc.get("configs") or {}))
            return ("topic", name)
        if key.startswith(k.configs):
            entity_type, _, name = key[len(k.configs):].partition("/")
            if value is None:
                self.configs.pop((entity_type, name), None)
            else:
                self.configs[(entity_type, name)] = dict(json.loads(value))
            return ("configs", (entity_type, name))
        if key.startswith(k.security):
            if value is None:
                self.security.pop(key, None)
            else:
                self.security[key] = (value, mod_revision)
            return ("security", (key, value, mod_revision))
        if key.startswith(k.partitions):
            topic, _, index = key[len(k.partitions):].rpartition("/")
            p = int(index)
            if value is None:
                self.partitions.pop((topic, p), None)
                return ("partition", (topic, p))
            doc = json.loads(value)
            state = PartitionState(topic, p, int(doc["leader"]), int(doc["leader_epoch"]),
                                   tuple(doc["isr"]), tuple(doc["replicas"]), mod_revision)
            self.partitions[(topic, p)] = state
            return ("partition", state)
        return None
