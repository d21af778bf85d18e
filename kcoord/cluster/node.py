"""A kcoord node in a cluster: the control plane wired to what the server
serves.

- routing: FindCoordinator answers the leader of the group's
  __consumer_offsets partition, Metadata the registered nodes, the
  controller and each partition's leader, replicas, ISR and leader epoch,
  all from the view etcd's watch keeps current;
- the topic catalogue lives in etcd: CreateTopics, DeleteTopics and
  CreatePartitions on any node write it there, and every node mirrors it
  into its local catalogue (same topic ids everywhere, so KIP-848
  assignments by topic id agree between nodes);
- the offsets topic is created in etcd on the first FindCoordinator, as
  Kafka creates it, with offsets.topic.replication.factor capped at the
  nodes live then.

Imported only when etcd.endpoints is set: a single node never loads it."""
from __future__ import annotations

import asyncio
import logging

from ..broker.catalogue import INTERNAL_TOPICS, TopicError, topic_name_problem
from ..broker.topic_answers import ZERO_UUID, create_topic_answer, delete_topic_answers
from ..broker.topic_configs import validate_topic_configs
from ..protocol.config_types import ConfigError
from ..coordinator.partitioner import partition_for
from ..log.meta_properties import check_or_record, new_cluster_id, read_meta
from ..protocol.api import AUTH_OPS_NOT_REQUESTED, API_KEYS, error_item, serves
from ..protocol.errors import Err
from ..security.etcd_tls import etcd_tls
from .etcd_control import EtcdControlPlane
from .state import NO_LEADER, PartitionState
from ..protocol.internal_topics import OFFSETS_TOPIC, SHARE_STATE_TOPIC, TXN_TOPIC

log = logging.getLogger("kcoord.cluster")

KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION, KEY_TYPE_SHARE = 0, 1, 2
# FindCoordinator key type -> (its internal topic, what the key is)
_COORDINATED = {KEY_TYPE_GROUP: (OFFSETS_TOPIC, "group"),
                KEY_TYPE_TRANSACTION: (TXN_TOPIC, "transactional id"),
                KEY_TYPE_SHARE: (SHARE_STATE_TOPIC, "share partition")}
PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE, ELECTION_NOT_NEEDED = 80, 83, 84
CREATE_WAIT_S = 10.0  # bound on waiting for a created topic to be placed and mirrored


class ClusterNode:
    def __init__(self, config, catalogue) -> None:
        self.config = config
        self.catalogue = catalogue
        self.node_id = config["node.id"]
        self.plane: EtcdControlPlane | None = None
        self._offsets_task: asyncio.Task | None = None
        self._txn_task: asyncio.Task | None = None
        self._share_task: asyncio.Task | None = None
        self._share_ownership = None  # shard_ownership.ShareStateOwnership once followed
        self._auto_create: dict[str, asyncio.Task] = {}
        # (entity type, name, overrides or None) -> None: applies etcd's dynamic broker and
        # group configs on this node (set by the server's config handlers)
        self.on_configs = None
        self.security = None  # security_sync.EtcdSecurity once share_security is called
        self._bootstrap_scram: list[dict] = []
        # the listener peers reach each other on, and the client properties
        # (TLS/SASL) for it; ValueError naming the key when they cannot log in
        from ..security.inter_broker import inter_broker_properties
        listener, self.peer_properties = inter_broker_properties(config.values)
        self.inter_broker_listener = listener.name

    def client_endpoint(self, node_id: int, listener: str):
        """A node's endpoint on a client's listener (KIP-951 node_endpoints)."""
        info = self.plane.view.nodes.get(node_id)
        return None if info is None else info.endpoint(listener)

    async def alter_isr(self, proposed: PartitionState) -> PartitionState | None:
        """The replica manager's state store: an ISR change by compare-and-set."""
        return await self.plane.alter_isr(proposed)

    def isr_eligible(self, node_id: int) -> bool:
        return self.plane.view.isr_eligible(node_id)

    def peer_address(self, node_id: int) -> tuple[str, int] | None:
        """Where another node's inter-broker listener is, as it registered it."""
        info = self.plane.view.nodes.get(node_id)
        return None if info is None else info.endpoint(self.inter_broker_listener)

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        host, port = self.config.advertised
        cfg = self.config
        # every advertised listener: peers pick the inter-broker one, clients theirs
        endpoints = [(lsn.name, *lsn.advertised) for lsn in cfg.listeners]
        self.plane = EtcdControlPlane(
            self.node_id, host, port, cfg["etcd.endpoints"], cfg["etcd.prefix"],
            cfg["etcd.lease.ttl.ms"], cfg["unclean.leader.election.enable"],
            endpoints_by_listener=endpoints, tls=etcd_tls(cfg.values))
        if cfg["auto.leader.rebalance.enable"]:
            self.plane.rebalance_interval_s = cfg["leader.imbalance.check.interval.seconds"]
        self.plane.imbalance_pct = cfg["leader.imbalance.per.broker.percentage"]
        self.plane.view_listeners.append(self._on_change)
        await self.plane.start()  # its first read applied etcd's credentials and ACLs
        candidate = (cfg.values.get("cluster.id") or read_meta(cfg.data_dir).get("cluster.id")
                     or new_cluster_id())
        cfg.values["cluster.id"] = await self.plane.cluster_id(candidate)
        check_or_record(cfg.data_dir, cfg.values["cluster.id"], self.node_id)
        if self.security is not None and self._bootstrap_scram:
            await self.security.bootstrap(self._bootstrap_scram)
        for name in list(self.plane.view.topics):
            self._mirror_topic(name)
        if self.on_configs is not None:
            self.on_configs(None, None, dict(self.plane.view.configs))  # the whole set at start
        strays = [n for n in self.catalogue.topics
                  if n not in self.plane.view.topics and n not in INTERNAL_TOPICS]
        if strays:
            log.warning("local topics not in the cluster's catalogue are not served: %s",
                        ", ".join(sorted(strays)))

    def follow_transactions(self, runtime) -> None:
        """Load and unload the transaction coordinator's __transaction_state
        partitions as their leadership moves (shard_ownership.py)."""
        from .shard_ownership import txn_ownership
        self._follow(txn_ownership(runtime, self.node_id))

    def follow_share_state(self, runtime) -> None:
        """Load and unload the share coordinator's __share_group_state
        partitions as their leadership moves (shard_ownership.py)."""
        from .shard_ownership import share_ownership
        self._share_ownership = share_ownership(runtime, self.node_id)
        self._follow(self._share_ownership)

    def share_security(self, store, bootstrap_scram=()) -> None:
        """SCRAM credentials and ACLs cluster-wide (security_sync.py): `store`
        (what SASL and the authorizer read) writes to etcd and applies what
        the watch delivers; `bootstrap_scram` (serve --add-scram) is stored
        at start if etcd lacks it."""
        from .security_sync import EtcdSecurity
        self.security = EtcdSecurity(self, store)
        store.backend = self.security.write
        self._bootstrap_scram = list(bootstrap_scram)

    def follow_shards(self, runtime) -> None:
        """Load and unload the coordinator's shards as the leadership of
        their __consumer_offsets partitions moves (shard_ownership.py)."""
        from .shard_ownership import shard_ownership
        self._follow(shard_ownership(runtime, self.node_id))

    def _follow(self, ownership) -> None:
        self.plane.listeners.append(ownership)
        self._follow_again(ownership)

    def _follow_again(self, ownership) -> None:
        for state in self.plane.partition_states():
            if state.topic == ownership.topic:
                ownership.on_partition_state(state)

    async def stop(self, controlled: bool = True) -> None:
        for task in [self._offsets_task, self._txn_task, self._share_task,
                     *self._auto_create.values()]:
            if task is not None:
                task.cancel()
        if self.plane is not None:
            await self.plane.stop(controlled=controlled,
                                  timeout=max(5.0, 3 * self.config["etcd.lease.ttl.ms"] / 1000))

    @property
    def view(self):
        return self.plane.view

    # ------------------------------------------------- catalogue mirroring
    def _on_change(self, change: tuple) -> None:
        kind, what = change
        if kind == "topic":
            self._mirror_topic(what)
            share = self._share_ownership
            if what == SHARE_STATE_TOPIC and share is not None and share.ensure_open():
                self._follow_again(share)  # states seen before the topic was mirrored
        elif kind == "configs" and self.on_configs is not None:
            self.on_configs(what[0], what[1], self.plane.view.configs.get(what))
        elif kind == "security" and self.security is not None:
            self.security.on_change(what)

    def _mirror_topic(self, name: str) -> None:
        """Make the local catalogue agree with etcd's record of `name`."""
        record = self.plane.view.topics.get(name)
        local = self.catalogue.get(name)
        try:
            if record is None:
                if local is not None and name not in INTERNAL_TOPICS:
                    self.catalogue.delete(name)
                return
            if local is not None and local.topic_id != record.topic_id \
                    and name not in INTERNAL_TOPICS:
                # deleted and created again while this node was away: the old log is stale
                log.warning("topic %s has a new id in the cluster: replacing the local one", name)
                self.catalogue.delete(name)
                local = None
            if local is None:
                self.catalogue.create(name, record.partitions, record.configs,
                                      topic_id=record.topic_id)
            elif len(local.partitions) < record.partitions:
                self.catalogue.add_partitions(name, record.partitions)
            if local is not None and local.configs != record.configs:
                self.catalogue.set_configs(name, dict(record.configs))  # AlterConfigs
        except TopicError as exc:
            log.error("mirroring topic %s from the cluster failed: %s", name, exc.message)

    async def set_entity_configs(self, entity_type: str, name: str,
                                 configs: dict[str, str]) -> None:
        """A broker's or group's new overrides, through etcd (every node applies
        them); returns once this node's view has them."""
        await self.plane.put_configs(entity_type, name, configs)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while (self.plane.view.configs.get((entity_type, name)) or {}) != configs:
            if loop.time() > deadline:
                raise ConnectionError("the change did not come back from etcd in 10 s")
            await asyncio.sleep(0.02)

    async def set_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        """A topic's new override set, through etcd's catalogue (so every node
        applies it); returns once this node's mirror has it."""
        for _ in range(10):  # the record's revision moved under us: read it again
            if await self.plane.set_topic_configs(name, configs):
                break
        else:
            raise ConnectionError(f"topic {name}: the catalogue kept changing")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while True:
            local = self.catalogue.get(name)
            if local is None or local.configs == configs or loop.time() > deadline:
                return
            await asyncio.sleep(0.02)

    # -------------------------------------------------------------- routing
    def _node_row(self, node_id: int, listener: str | None) -> tuple[str, int] | None:
        info = self.plane.view.nodes.get(node_id)
        return None if info is None else info.endpoint(listener)

    def find_coordinator(self, key: str, key_type: int, listener: str | None = None) -> dict:
        """The group's (key type 0) or transactional id's (1) coordinator: the
        leader of its __consumer_offsets / __transaction_state partition, at
        its endpoint on the listener the request came in on (Kafka answers
        each listener with its own)."""
        def unavailable(message: str) -> dict:  # one key's answer (the v4+ item shape)
            return error_item(API_KEYS["FindCoordinator"], 4, ("coordinator_keys",), key,
                              Err.COORDINATOR_NOT_AVAILABLE, message)
        if key_type not in _COORDINATED:
            return unavailable("only group, transaction and share coordinators are served")
        topic, what = _COORDINATED[key_type]
        view = self.plane.view
        record = view.topics.get(topic)
        if record is None:
            self._ensure_topic(key_type)
            return unavailable(f"the {topic} topic is being created")
        state = view.state(topic, partition_for(key, record.partitions))
        if state is None or state.leader == NO_LEADER:
            return unavailable(f"the {what}'s {topic} partition has no leader")
        row = self._node_row(state.leader, listener)
        if row is None:
            return unavailable(f"the {what}'s coordinator is not registered"
                               if state.leader not in view.nodes
                               else f"the {what}'s coordinator has no listener {listener}")
        return {"key": key, "node_id": state.leader, "host": row[0], "port": row[1],
                "error_code": Err.NONE, "error_message": None}

    def _ensure_topic(self, key_type: int) -> None:
        """Create the internal topic of a FindCoordinator key type (once at a time)."""
        if key_type == KEY_TYPE_GROUP:
            self._ensure_offsets_topic()
        elif key_type == KEY_TYPE_TRANSACTION:
            self._ensure_txn_topic()
        else:
            self._ensure_share_topic()

    def _ensure_offsets_topic(self) -> None:
        if self._offsets_task is not None and not self._offsets_task.done():
            return
        cfg = self.config
        rf = min(cfg["offsets.topic.replication.factor"], max(1, len(self.plane.view.serving())))
        self._offsets_task = asyncio.get_running_loop().create_task(self.plane.create_topic(
            OFFSETS_TOPIC, cfg["offsets.topic.num.partitions"], rf,
            {"cleanup.policy": "compact", "segment.bytes": str(cfg["offsets.topic.segment.bytes"])}))

    def _ensure_txn_topic(self) -> None:
        """__transaction_state as Kafka creates it on the first FindCoordinator
        of a transactional id: compacted."""
        self._txn_task = self._create_state_topic(
            self._txn_task, TXN_TOPIC, "transaction.state.log.", {"cleanup.policy": "compact"})

    def _ensure_share_topic(self) -> None:
        """__share_group_state as Kafka creates it on the first FindCoordinator
        for key type 2: delete policy, kept forever (pruned, not expired)."""
        self._share_task = self._create_state_topic(
            self._share_task, SHARE_STATE_TOPIC, "share.coordinator.state.topic.",
            {"cleanup.policy": "delete", "retention.ms": "-1"})

    def _create_state_topic(self, task, topic: str, prefix: str, configs: dict) -> asyncio.Task:
        """Create a coordinator's internal topic (once at a time): partitions,
        segment bytes and min.insync.replicas from `prefix`'s keys, the
        replication factor capped at the nodes live now."""
        if task is not None and not task.done():
            return task
        cfg = self.config
        rf = min(cfg[prefix + "replication.factor"], max(1, len(self.plane.view.serving())))
        min_isr = min(cfg[prefix + "min.isr"], rf)
        return asyncio.get_running_loop().create_task(self.plane.create_topic(
            topic, cfg[prefix + "num.partitions"], rf,
            {**configs, "min.insync.replicas": str(min_isr),
             "segment.bytes": str(cfg[prefix + "segment.bytes"])}))

    def brokers(self, listener: str | None = None) -> list[dict]:
        """The registered nodes at their endpoints on `listener`; as in
        Kafka, a node without that listener is left out."""
        rows = []
        for n in sorted(self.plane.view.nodes.values(), key=lambda n: n.node_id):
            found = n.endpoint(listener)
            if found is not None:
                rows.append({"node_id": n.node_id, "host": found[0], "port": found[1],
                             "rack": None})
        return rows

    def controller_id(self) -> int:
        c = self.plane.view.controller
        return -1 if c is None else c.node_id

    def partition_rows(self, name: str, count: int) -> list[dict]:
        view = self.plane.view
        rows = []
        for p in range(count):
            s = view.state(name, p)
            if s is None:
                rows.append({"error_code": Err.LEADER_NOT_AVAILABLE, "partition_index": p,
                             "leader_id": -1, "leader_epoch": -1, "replica_nodes": [],
                             "isr_nodes": [], "offline_replicas": []})
                continue
            rows.append({"error_code": Err.NONE if s.leader != NO_LEADER
                         else Err.LEADER_NOT_AVAILABLE,
                         "partition_index": p, "leader_id": s.leader,
                         "leader_epoch": s.leader_epoch, "replica_nodes": list(s.replicas),
                         "isr_nodes": list(s.isr),
                         "offline_replicas": [r for r in s.replicas if r not in view.nodes]})
        return rows

    def metadata_topics(self, names: list[str] | None, allow_auto_create: bool,
                        _version: int) -> list[dict]:
        view = self.plane.view
        chosen = list(view.topics) if names is None else names
        out = []
        for name in chosen:
            record = view.topics.get(name)
            if record is None:
                problem = topic_name_problem(name)
                code = Err.INVALID_TOPIC_EXCEPTION if problem else Err.UNKNOWN_TOPIC_OR_PARTITION
                if not problem and allow_auto_create and name not in INTERNAL_TOPICS \
                        and self.config["auto.create.topics.enable"]:
                    self._auto_create_topic(name)
                    code = Err.LEADER_NOT_AVAILABLE  # Kafka's answer while it creates one
                out.append({"error_code": code, "name": name, "topic_id": ZERO_UUID,
                            "is_internal": False, "partitions": [],
                            "topic_authorized_operations": AUTH_OPS_NOT_REQUESTED})
                continue
            out.append({"error_code": Err.NONE, "name": name, "topic_id": record.topic_id,
                        "is_internal": name in INTERNAL_TOPICS,
                        "partitions": self.partition_rows(name, record.partitions),
                        "topic_authorized_operations": AUTH_OPS_NOT_REQUESTED})
        return out

    def _auto_create_topic(self, name: str) -> None:
        if name in self._auto_create and not self._auto_create[name].done():
            return
        rf = min(self.config["default.replication.factor"], len(self.plane.view.serving()))
        if rf < 1:
            return
        self._auto_create[name] = asyncio.get_running_loop().create_task(
            self.plane.create_topic(name, self.config["num.partitions"], rf))

    # ----------------------------------------------------------- topic admin
    async def _placed(self, name: str, count: int, timeout: float) -> bool:
        """Wait (bounded) until the topic's partitions have states and the
        local catalogue mirrors it."""
        def done() -> bool:
            local = self.catalogue.get(name)
            return (local is not None and len(local.partitions) >= count
                    and len(self.plane.view.topic_states(name)) >= count)
        return await self.plane.wait_for(done, timeout)

    @serves("CreateTopics")
    async def create_topics(self, _ctx, req: dict) -> dict:
        results = []
        timeout = max(0.0, min(req.get("timeout_ms", 30000) / 1000.0, CREATE_WAIT_S))
        for t in req["topics"]:
            name = t["name"]
            result = create_topic_answer(name)
            results.append(result)

            def fail(code: int, message: str, result: dict = result) -> None:
                result["error_code"], result["error_message"] = code, message
            problem = topic_name_problem(name)
            if problem:
                fail(Err.INVALID_TOPIC_EXCEPTION, problem)
                continue
            if t["assignments"]:
                fail(Err.INVALID_REPLICA_ASSIGNMENT,
                     "manual replica assignment is not supported; the controller places replicas")
                continue
            count = t["num_partitions"]
            if count == -1:
                count = self.config["num.partitions"]
            if count < 1:
                fail(Err.INVALID_PARTITIONS, "number of partitions must be at least 1")
                continue
            rf = t["replication_factor"]
            if rf == -1:
                rf = self.config["default.replication.factor"]
            serving = len(self.plane.view.serving())
            if rf < 1 or rf > serving:
                fail(Err.INVALID_REPLICATION_FACTOR,
                     f"replication factor {rf} must be between 1 and the {serving} live node(s)")
                continue
            configs = {c["name"]: c["value"] for c in t["configs"]}
            try:
                validate_topic_configs(configs)  # Kafka's names, values and relations
                self.catalogue.log_config(configs)
            except ConfigError as exc:
                fail(exc.code, exc.message)
                continue
            except (ValueError, TypeError) as exc:
                fail(Err.INVALID_CONFIG, f"invalid config: {exc}")
                continue
            if name in self.plane.view.topics:
                fail(Err.TOPIC_ALREADY_EXISTS, f"topic '{name}' already exists")
                continue
            if req["validate_only"]:
                result["num_partitions"], result["replication_factor"] = count, rf
                continue
            record = await self.plane.create_topic(name, count, rf, configs)
            if record is None:
                fail(Err.TOPIC_ALREADY_EXISTS, f"topic '{name}' already exists")
                continue
            result.update(topic_id=record.topic_id, num_partitions=count, replication_factor=rf)
            if timeout and not await self._placed(name, count, timeout):
                fail(Err.REQUEST_TIMED_OUT, "created; its partitions are not all placed yet")
        return {"throttle_time_ms": 0, "topics": results}

    @serves("DeleteTopics")
    async def delete_topics(self, _ctx, req: dict) -> dict:
        view = self.plane.view

        def name_of_id(topic_id: bytes) -> str | None:
            return next((r.name for r in view.topics.values() if r.topic_id == topic_id), None)

        def id_of_name(name: str) -> bytes | None:
            record = view.topics.get(name)
            return record.topic_id if record is not None else None
        results = []
        for name, result in delete_topic_answers(req, results, name_of_id, id_of_name):
            if name not in view.topics or not await self.plane.delete_topic(name):
                result["error_code"] = Err.UNKNOWN_TOPIC_OR_PARTITION
                result["error_message"] = f"topic '{name}' does not exist"
                continue
            await self.plane.wait_for(lambda n=name: self.catalogue.get(n) is None, CREATE_WAIT_S)
        return {"throttle_time_ms": 0, "responses": results}

    @serves("ElectLeaders")
    async def elect_leaders(self, _ctx, req: dict) -> dict:
        """ElectLeaders (43): preferred (0) moves leadership to the first
        replica when it is live and in sync; unclean (1) elects any live
        replica for a partition whose leader is gone.  Written by
        compare-and-set, so a concurrent controller decision wins cleanly."""
        from . import decisions
        unclean = req.get("election_type", 0) == 1
        view = self.plane.view
        named = req["topic_partitions"]
        if named is None:
            targets = sorted(view.partitions)
        else:
            targets = [(t["topic"], p) for t in named for p in t["partitions"]]
        results: dict[str, list] = {}
        for topic, p in targets:
            state = view.state(topic, p)
            code, message = Err.NONE, None
            if state is None:
                code, message = Err.UNKNOWN_TOPIC_OR_PARTITION, "The topic or partition does not exist"
            elif unclean:
                new = None
                if state.leader in view.serving():
                    code = ELECTION_NOT_NEEDED
                else:
                    new = decisions.elect(state, view.serving(), unclean=True)
                    if new is None or new.leader == NO_LEADER:
                        code = ELIGIBLE_LEADERS_NOT_AVAILABLE
            else:
                new = decisions.preferred_leader(state, view.serving())
                if state.replicas and state.leader == state.replicas[0]:
                    code = ELECTION_NOT_NEEDED
                elif new is None:
                    code = PREFERRED_LEADER_NOT_AVAILABLE
            if code == Err.NONE and not await self.plane.replace_state(state, new):
                code, message = Err.REQUEST_TIMED_OUT, "the partition changed meanwhile; try again"
            if code == ELECTION_NOT_NEEDED:
                if named is None:
                    continue  # with null, Kafka lists only the partitions it tried
                message = "Leader election not needed for topic partition"
            results.setdefault(topic, []).append(
                {"partition_id": p, "error_code": code, "error_message": message})
        return {"throttle_time_ms": 0, "error_code": Err.NONE,
                "replica_election_results": [{"topic": t, "partition_result": r}
                                             for t, r in results.items()]}

    @serves("CreatePartitions")
    async def create_partitions(self, _ctx, req: dict) -> dict:
        results = []
        for t in req["topics"]:
            name, total = t["name"], t["count"]
            result = {"name": name, "error_code": Err.NONE, "error_message": None}
            results.append(result)
            record = self.plane.view.topics.get(name)
            if record is None:
                result["error_code"] = Err.UNKNOWN_TOPIC_OR_PARTITION
                result["error_message"] = f"topic '{name}' does not exist"
                continue
            if total <= record.partitions:
                result["error_code"] = Err.INVALID_PARTITIONS
                result["error_message"] = (f"topic has {record.partitions} partitions; "
                                           f"cannot change to {total}")
                continue
            if t.get("assignments"):
                result["error_code"] = Err.INVALID_REPLICA_ASSIGNMENT
                result["error_message"] = "manual replica assignment is not supported"
                continue
            if req["validate_only"]:
                continue
            if not await self.plane.set_partition_count(name, total):
                result["error_code"] = Err.REQUEST_TIMED_OUT
                result["error_message"] = "the topic changed meanwhile; try again"
                continue
            await self._placed(name, total, CREATE_WAIT_S)
        return {"throttle_time_ms": 0, "results": results}
