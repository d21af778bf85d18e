"""`kcoord serve`: wire the handlers to the network and run until stopped."""
from __future__ import annotations

import asyncio
import logging
import signal

from ..broker.catalogue import Catalogue
from ..broker.data_handlers import DataPlane
from ..broker.partition_admin import PartitionAdmin
from ..broker.producer_ids import ProducerIds
from ..broker.topic_handlers import TopicAdmin
from ..observe.events import GroupEventLog, ServerMetrics
from ..log.dir_lock import DataDirLock, DataDirLocked
from ..log.durability import Durability, LocalDurability
from ..log.fsync_batcher import FsyncBatcher
from ..log.meta_properties import InconsistentClusterId, local_cluster_id
from ..security.setup import SecuritySetup
from .clock import WallClock
from .config import Config, parse_hostport
from .cluster_handlers import ClusterHandlers
from .leader_epoch_handlers import LeaderEpochHandlers
from .loop_stalls import LoopStallReporter
from .malloc_tuning import keep_freed_buffers
from .config_handlers import build_config_handlers
from .coordinator_runtime import CoordinatorRuntime
from .group_handlers import GroupHandlers
from .dispatch import Dispatcher
from .meta_handlers import MetaHandlers
from .network import KafkaConnection
from .share_persister import LocalSharePersister
from .share_runtime import ShareCoordinatorRuntime
from .share_state_handlers import ShareStateHandlers
from .share_fetch_handlers import ShareFetchHandlers
from .share_partitions import GroupSidePersister, SharePartitionManager
from .shutdown import drain_connections
from .txn_handlers import TxnHandlers
from .txn_markers import MarkerSender, MarkerWriter, WriteTxnMarkersHandler
from .txn_runtime import TxnRuntime

log = logging.getLogger("kcoord.server")


class StartupError(Exception):
    """The server cannot start; the message is the one line to print."""


class Server:
    """Everything one kcoord process serves, on one listening socket."""

    def __init__(self, config: Config, clock: WallClock | None = None) -> None:
        self.config = config
        # the one clock (clock.py) of the coordinators' timers and log retention:
        # wall time unless a test injects a virtual one (kcoord.testing)
        self.clock = clock if clock is not None else WallClock()
        self.dispatcher = Dispatcher()
        config.data_dir.mkdir(parents=True, exist_ok=True)
        # before anything opens a log or takes the clean-shutdown marker
        try:
            self.dir_lock = DataDirLock.acquire(config.data_dir)
        except DataDirLocked as exc:
            raise StartupError(str(exc)) from None
        if not config["etcd.endpoints"]:  # a cluster takes its id from etcd (ClusterNode)
            try:
                config.values["cluster.id"] = local_cluster_id(
                    config.data_dir, config.values.get("cluster.id"), config["node.id"])
            except ValueError as exc:
                self.dir_lock.release()
                raise StartupError(str(exc)) from None
        self.security = SecuritySetup(config.values, config.host, config.port, config.data_dir)
        self.security.load()
        self.security.install(self.dispatcher)  # before any handler: they are wrapped as registered
        self.catalogue = Catalogue(config.data_dir, config.values, now_ms=self.clock.ms)
        self.security.use_catalogue(self.catalogue)
        # the one fsync batcher: data plane and coordinators; a single node
        # flushes a quiet round's one log on the loop (fsync_batcher.py)
        self.fsync = FsyncBatcher(inline_quiet=not config["etcd.endpoints"])
        self.data = DataPlane(self.catalogue, config, self.fsync, clock=self.clock)
        self.topic_admin = TopicAdmin(self.catalogue, config)
        self.meta = MetaHandlers(config, self.dispatcher, self.topic_admin)
        # /metrics counts only when the HTTP endpoint is on; the log lines are always there
        self.http_listen = config.values.get("http.listen") or ""
        self.events = ServerMetrics() if self.http_listen else GroupEventLog()
        if self.http_listen:
            self.dispatcher.metrics = self.events
        self.http = None
        # In a cluster a shard write is durable once replicated (its high
        # watermark passed it), and shards load as this node becomes leader.
        self.cluster = None
        self.replica_manager = None
        self.durability: Durability = LocalDurability(self.fsync)
        if config["etcd.endpoints"]:
            from ..cluster.durability import ReplicatedDurability
            from ..cluster.node import ClusterNode
            from ..cluster.replica_manager import build_replica_manager
            self.cluster = ClusterNode(config, self.catalogue)
            self.replica_manager = build_replica_manager(config, self.catalogue, self.cluster,
                                                         self.data, self.fsync, self.clock.ms)
            self.durability = ReplicatedDurability(self.replica_manager, self.fsync)
        self.coordinator = CoordinatorRuntime(self.catalogue, config, self.events,
                                              durability=self.durability, clock=self.clock)
        self.security.use_coordinator_config(self.coordinator.core_config)
        self.groups = GroupHandlers(self.coordinator, self.catalogue, config)
        # The share coordinator: a second coordinator on the same runtime, over
        # __share_group_state (its own event log: the group metrics stay the groups')
        self.share_state = ShareCoordinatorRuntime(self.catalogue, config, GroupEventLog(),
                                                   durability=self.durability, clock=self.clock)
        self.groups.share = self.share_state
        # What share partitions persist through (kcoord/share/persister.py): the
        # local share coordinator, durable before it returns
        self.share_persister = LocalSharePersister(self.share_state)
        self._share_peers = None
        if self.cluster is not None:
            # in a cluster: each key's owner, this node's coordinator or another's by RPC
            self.share_persister = self._routed_share_persister(self.share_persister)
        # share groups initialize and delete share state through it (and the
        # share partitions led here forget what is re-initialized or deleted)
        self.groups.share_persister = lambda: self.group_share_persister
        # a cluster's nodes allocate producer ids apart (node.id in the low bits)
        self.producer_ids = ProducerIds(config["node.id"] if config["etcd.endpoints"] else None)
        self.txn = TxnRuntime(self.catalogue, config, self.data, self.coordinator,
                              self.fsync, self.producer_ids, self.durability,
                              clock=self.clock)
        self.marker_writer = MarkerWriter(self.data, self.coordinator)
        self.configs = build_config_handlers(config, self.catalogue,
                                             self.coordinator.core_config.group_overrides,
                                             self.topic_admin)
        self._register()
        if self.cluster is not None:
            self._join_cluster()
        self._servers: list = []
        self.connections: set = set()  # open client connections (network.py)
        self._retention = None  # the clock's handle of the next retention tick

    def _routed_share_persister(self, local):
        from .peer_calls import PeerCalls
        from .share_routed_persister import RoutedSharePersister
        cluster = self.cluster
        self._share_peers = PeerCalls(cluster, f"kcoord-share-{cluster.node_id}")

        def owner(key: str) -> int | None:
            found = cluster.find_coordinator(key, 2, cluster.inter_broker_listener)
            return None if found["error_code"] else found["node_id"]
        return RoutedSharePersister(cluster.node_id, local, owner, self._share_peers.call)

    def _register(self) -> None:
        d = self.dispatcher
        self.meta.register()
        d.register_handlers(self.data)         # Produce, Fetch, ListOffsets
        d.register_handlers(self.topic_admin)  # CreateTopics, DeleteTopics, CreatePartitions
        self.groups.register(d)
        TxnHandlers(self.txn, self.producer_ids, self.groups).register(d)
        d.register_handlers(WriteTxnMarkersHandler(self.marker_writer))
        d.register_handlers(ShareStateHandlers(self.share_state))  # APIs 83-87
        # share partitions led here (ShareFetch, ShareAcknowledge): durable through
        # the share coordinator's persister; group-level share configs through the
        # groups' overrides
        overrides = self.coordinator.core_config.group_overrides
        self.shares = SharePartitionManager(
            self.catalogue, self.data, self.config, self.share_persister,
            group_config=lambda group, name, default: overrides.get(group, name, default),
            clock=self.clock)
        self.group_share_persister = GroupSidePersister(self.share_persister, self.shares)
        self.share_metrics = None
        if self.http_listen:   # the share partitions count for /metrics only when it is on
            from ..observe.share_metrics import ShareMetrics
            self.share_metrics = ShareMetrics()
            self.shares.events_for = self.share_metrics.for_partition
        # DescribeShareGroupOffsets' lag: the high watermark the share partitions see
        self.groups.share_groups.high_watermark = self._share_high_watermark
        share_fetch = ShareFetchHandlers(self.shares)
        d.register_handlers(share_fetch)
        d.on_connection_closed.append(share_fetch.connection_closed)
        self.catalogue.listeners.append(self.shares.on_topics_changed)
        d.register_handlers(self.configs)
        d.register_handlers(PartitionAdmin(self.catalogue, self.topic_admin, self.config))
        self.cluster_handlers = ClusterHandlers(self.config)
        d.register_handlers(self.cluster_handlers)
        # In a cluster the partitions' replicas answer (replica.py); none
        # until replication has started.
        self.replicas = None
        d.register_handlers(LeaderEpochHandlers(
            self.catalogue, self._replica_for if self.config["etcd.endpoints"] else None))

    def _share_high_watermark(self, name: str, partition: int) -> int | None:
        topic = self.catalogue.get(name)
        if topic is None or not 0 <= partition < len(topic.partitions):
            return None
        return self.shares.hw(topic, partition)

    def _join_cluster(self) -> None:
        """Cluster mode (etcd.endpoints set): routing and the topic catalogue
        come from the control plane (kcoord/cluster/node.py)."""
        self.meta.cluster = self.groups.cluster = self.topic_admin.cluster = self.cluster
        self.cluster_handlers.cluster = self.cluster
        self.configs.join_cluster(self.cluster)  # topic configs through etcd
        # SCRAM credentials and ACLs through etcd, the same on every node
        self.cluster.share_security(self.security.store, self.config.bootstrap_scram)
        # CreateTopics, DeleteTopics, CreatePartitions, ElectLeaders through etcd
        self.dispatcher.register_handlers(self.cluster)

    def _retention_tick(self) -> None:
        now = self.clock.ms()
        for plog in list(self.catalogue.all_logs()):
            try:
                plog.apply_retention(now)
            except OSError:
                log.exception("retention failed for %s", plog.path)
        self._schedule_retention()

    def _schedule_retention(self) -> None:
        interval = self.config["log.retention.check.interval.ms"] / 1000.0
        self._retention = self.clock.call_later(interval, self._retention_tick)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        max_bytes = self.config["socket.request.max.bytes"]

        def connection(listener, gate, tls_principal):
            return KafkaConnection(self.dispatcher, max_bytes, listener, gate, tls_principal,
                                   self.connections)

        for lsn in self.security.listeners:
            try:
                server = await loop.create_server(
                    self.security.protocol_factory(lsn, connection),
                    lsn.host or None, lsn.port, reuse_address=True, backlog=1024,
                    # a cluster node binds first (it registers its ports) but accepts only
                    # once joined: before, it would refuse SCRAM users and deny by ACL
                    # (etcd's not read yet), which clients take as fatal
                    start_serving=self.cluster is None)
            except OSError as exc:
                for bound in self._servers:
                    bound.close()
                self.catalogue.close()  # writes the clean-shutdown marker back
                raise StartupError(f"{lsn.source} {lsn.host}:{lsn.port} (listener {lsn.name}): "
                                   f"cannot listen: {exc.strerror or exc}") from None
            self._servers.append(server)
            # port 0 binds an ephemeral port: advertise the real one
            lsn.port = server.sockets[0].getsockname()[1]
            log.info("kcoord listener %s (%s) on %s:%d", lsn.name, lsn.protocol,
                     lsn.host, lsn.port)
        self.config.listeners = self.security.listeners
        first = self.security.listeners[0]
        self.config.host, self.config.port = first.host, first.port
        self._schedule_retention()
        # in a cluster a shard is loaded when this node leads its partition
        self.coordinator.start(load_all=self.cluster is None)
        self.txn.start(load_all=self.cluster is None)
        self.share_state.start(load_all=self.cluster is None)
        if self.cluster is not None:
            try:
                await self.cluster.start()
            except InconsistentClusterId as exc:  # a data dir of another cluster
                await self.stop()
                raise StartupError(str(exc)) from None
            self.cluster.follow_shards(self.coordinator)
            self.cluster.follow_transactions(self.txn)
            self.cluster.follow_share_state(self.share_state)
            self.txn.markers = MarkerSender(self.cluster, self.marker_writer)
            self._start_replication()
            for server in self._servers:
                await server.start_serving()
        if self.http_listen:
            from ..observe.http import HttpEndpoint  # prometheus_client only when it is on
            from ..observe.http_security import exposed_warning
            from ..observe.share_metrics import ShareCollector
            try:
                self.http = HttpEndpoint(self.coordinator, self.catalogue, self.events,
                                         ["%s:%d" % self.config.advertised],
                                         self.config["http.burrow.cluster.name"],
                                         self.config["http.burrow.min-distance"],
                                         self.config.values,
                                         shares=ShareCollector(self.shares, self.share_state,
                                                               self.catalogue,
                                                               self.share_metrics))
            except (ValueError, OSError) as exc:  # a bad http.ssl.* or http.auth.* key
                await self.stop()
                raise StartupError(str(exc)) from None
            http_host, http_port = parse_hostport(self.http_listen, "http.listen")
            warning = exposed_warning(self.config.values, self.security.listeners, http_host)
            if warning:
                log.warning("%s", warning)
            try:
                await self.http.start(http_host, http_port)
            except OSError as exc:
                await self.stop()
                raise StartupError(f"http.listen {self.http_listen}: cannot listen: "
                                   f"{exc.strerror or exc}") from None
        log.info("kcoord listening on %s:%d data-dir %s", self.config.host, self.config.port,
                 self.config.data_dir)

    def _start_replication(self) -> None:
        """Replicas of the user topics' partitions (kcoord/cluster/replica_manager.py),
        fed by the control plane's partition states."""
        from ..cluster.replica_manager import start_replication
        start_replication(self.replica_manager, self.cluster, self.data)
        # share partitions follow their data partition's leadership
        self.replica_manager.role_listeners.append(self.shares.on_roles_changed)
        self.replicas = self.replica_manager

    def _replica_for(self, topic: str, partition: int):
        return self.replicas.replica(topic, partition) if self.replicas is not None else None

    async def stop(self) -> None:
        if self.cluster is not None:  # hand leaderships over while still serving
            await self.cluster.stop()
        if self.replicas is not None:
            # bounded: a fetcher that misses its cancellation must not keep the node up
            from ..cluster.aio import bounded
            try:
                await bounded(self.replicas.stop(), 10.0)
            except asyncio.TimeoutError:
                log.warning("replica fetchers did not stop within 10 s; stopping anyway")
        if self._retention is not None:
            self._retention.cancel()
        if self.http is not None:
            await self.http.stop()
        for server in self._servers:
            server.close()
        # answer what was read, then close the clients' connections: no
        # request may run once the coordinator and the logs are closed
        self.data.stop_waiting()
        await drain_connections(self.connections)
        for server in self._servers:
            await server.wait_closed()
        self.txn.stop()
        if self.txn.markers is not None:
            self.txn.markers.close()
        if self._share_peers is not None:
            self._share_peers.close()
        self.shares.close()
        self.coordinator.stop()
        self.share_state.stop()
        self.catalogue.close()
        self.dir_lock.release()
        log.info("kcoord stopped")


async def serve(config: Config) -> None:
    loop = asyncio.get_running_loop()
    stalls = LoopStallReporter(loop).start()
    server = Server(config)
    await server.start()
    stopping = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    await stopping.wait()
    await server.stop()
    stalls.stop()


def run(config: Config) -> None:
    keep_freed_buffers()
    try:
        import uvloop
    except ImportError:  # uvloop is optional: plain asyncio works, just slower
        asyncio.run(serve(config))
    else:
        uvloop.run(serve(config))
