"""Server configuration with Apache Kafka's key names.

Values come from defaults, then a properties file (--config), then
--set key=value overrides.  Unknown keys are kept and logged, as Kafka does.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..coordinator.assignors import ASSIGNORS
from ..share.coordinator import SHARE_COORDINATOR_CONFIGS
from ..security import settings as security_settings

log = logging.getLogger("kcoord.config")

INT_MAX = 2**31 - 1

# key -> (type, default)
DEFAULTS: dict[str, tuple[type, Any]] = {
    "node.id": (int, 0),
    "advertised.listeners": (str, ""),
    "socket.request.max.bytes": (int, 104857600),
    "message.max.bytes": (int, 1048588),
    "auto.create.topics.enable": (bool, True),
    "num.partitions": (int, 1),
    "default.replication.factor": (int, 1),
    "log.segment.bytes": (int, 1073741824),
    "log.retention.ms": (int, 604800000),
    "log.retention.bytes": (int, -1),
    "log.retention.check.interval.ms": (int, 300000),
    "log.flush.interval.messages": (int, 2**63 - 1),
    # kcoord keeps a zeroed zone ahead of each active segment's end (256 KiB,
    # not Kafka's whole segment), so a durable step writes data, not the
    # inode too: on by default, unlike Kafka (kcoord/log/preallocate.py)
    "log.preallocate": (bool, True),
    "log.cleaner.delete.retention.ms": (int, 86400000),
    "log.cleanup.policy": (list, ["delete"]),
    "min.insync.replicas": (int, 1),
    "offsets.topic.num.partitions": (int, 50),
    "offsets.topic.segment.bytes": (int, 104857600),
    "offsets.retention.minutes": (int, 10080),
    "offsets.retention.check.interval.ms": (int, 600000),
    "offsets.commit.timeout.ms": (int, 5000),
    "offset.metadata.max.bytes": (int, 4096),
    "group.min.session.timeout.ms": (int, 6000),
    "group.max.session.timeout.ms": (int, 1800000),
    "group.initial.rebalance.delay.ms": (int, 3000),
    "group.max.size": (int, INT_MAX),
    "group.coordinator.rebalance.protocols": (list, ["classic", "consumer"]),
    # -1: adaptive (Kafka 4.2's default, KAFKA-19826): a round starts once
    # the loop has run what is queued, no linger on an idle path
    "group.coordinator.append.linger.ms": (int, -1),
    # a __consumer_offsets shard's state is snapshotted beside its log every
    # this many records (and at a clean stop), so a restart replays only the
    # records after it; 0: no snapshots (server/snapshot_schedule.py)
    "group.coordinator.snapshot.interval.records": (int, 100_000),
    "group.consumer.session.timeout.ms": (int, 45000),
    "group.consumer.min.session.timeout.ms": (int, 45000),
    "group.consumer.max.session.timeout.ms": (int, 60000),
    "group.consumer.heartbeat.interval.ms": (int, 5000),
    "group.consumer.min.heartbeat.interval.ms": (int, 5000),
    "group.consumer.max.heartbeat.interval.ms": (int, 15000),
    "group.consumer.max.size": (int, INT_MAX),
    "group.consumer.assignors": (list, ["uniform", "range"]),
    "group.consumer.migration.policy": (str, "bidirectional"),
    # KIP-932 share groups (Kafka's GroupCoordinatorConfig and ShareGroupConfig)
    "group.share.session.timeout.ms": (int, 45000),
    "group.share.min.session.timeout.ms": (int, 45000),
    "group.share.max.session.timeout.ms": (int, 60000),
    "group.share.heartbeat.interval.ms": (int, 5000),
    "group.share.min.heartbeat.interval.ms": (int, 5000),
    "group.share.max.heartbeat.interval.ms": (int, 15000),
    "group.share.max.size": (int, 200),
    "group.share.assignors": (list, ["simple"]),
    "group.share.initialize.retry.interval.ms": (int, 30000),  # internal in Kafka
    "group.share.delivery.count.limit": (int, 5),
    "group.share.record.lock.duration.ms": (int, 30000),
    "group.share.min.record.lock.duration.ms": (int, 15000),
    "group.share.max.record.lock.duration.ms": (int, 60000),
    "group.share.partition.max.record.locks": (int, 2000),
    "group.share.max.share.sessions": (int, 2000),
    # made when the data dir (or the cluster's etcd prefix) is first formatted
    # (log/meta_properties.py); set it only to pin a known id
    "cluster.id": (str, ""),
    # transactions (kcoord/txn)
    "transaction.state.log.num.partitions": (int, 50),
    "transaction.state.log.segment.bytes": (int, 104857600),
    "transaction.state.log.replication.factor": (int, 3),  # a cluster's; capped at live nodes
    "transaction.state.log.min.isr": (int, 2),
    "transaction.max.timeout.ms": (int, 900000),
    "transactional.id.expiration.ms": (int, 604800000),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": (int, 10000),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (int, 3600000),
    # HOST:PORT of the HTTP endpoint (/metrics, Burrow's /v3 API, status page); off when ""
    "http.listen": (str, ""),
    # the cluster name Burrow's /v3/kafka routes answer to (one per kcoord cluster)
    "http.burrow.cluster.name": (str, "local"),
    # TLS and authentication of http.listen (observe/http_security.py)
    "http.ssl.keystore.location": (str, ""), "http.ssl.keystore.type": (str, "PEM"),
    "http.ssl.key.password": (str, ""), "http.ssl.truststore.location": (str, ""),
    "http.ssl.truststore.type": (str, "PEM"), "http.ssl.client.auth": (str, "none"),
    "http.auth.basic.users": (str, ""), "http.auth.bearer.token": (str, ""),
    # Burrow's storage min-distance (s): a commit sooner than this after the
    # previous one takes its slot in the window, keeping the stored timestamp
    "http.burrow.min-distance": (int, 1),
    # cluster mode (docs/cluster.md): off while etcd.endpoints is empty
    "etcd.endpoints": (list, []),
    "etcd.lease.ttl.ms": (int, 2000),
    "etcd.prefix": (str, "/kcoord"),
    "offsets.topic.replication.factor": (int, 3),
    "unclean.leader.election.enable": (bool, False),
    "auto.leader.rebalance.enable": (bool, True),
    "leader.imbalance.check.interval.seconds": (int, 300),
    "leader.imbalance.per.broker.percentage": (int, 10),
    # replication between nodes (kcoord/cluster/replica.py)
    "replica.lag.time.max.ms": (int, 30000),
    "replica.fetch.wait.max.ms": (int, 500),
    "replica.fetch.max.bytes": (int, 1048576),
}


# smallest accepted values, as Kafka's ConfigDef validators have them
MINIMUMS = {
    "socket.request.max.bytes": 1,
    "message.max.bytes": 0,
    "num.partitions": 1,
    "log.segment.bytes": 14,
    "log.retention.check.interval.ms": 1,
    "log.flush.interval.messages": 1,
    "min.insync.replicas": 1,
    "offsets.topic.num.partitions": 1,
    "offsets.topic.segment.bytes": 1,
    "offsets.retention.minutes": 1,
    "offsets.retention.check.interval.ms": 1,
    "offset.metadata.max.bytes": 0,
    "group.min.session.timeout.ms": 0,
    "group.initial.rebalance.delay.ms": 0,
    "group.max.size": 1,
    "group.coordinator.append.linger.ms": -1,
    "group.coordinator.snapshot.interval.records": 0,
    "group.consumer.session.timeout.ms": 1,
    "group.consumer.min.session.timeout.ms": 1,
    "group.consumer.max.session.timeout.ms": 1,
    "group.consumer.heartbeat.interval.ms": 1,
    "group.consumer.min.heartbeat.interval.ms": 1,
    "group.consumer.max.heartbeat.interval.ms": 1,
    "group.consumer.max.size": 1,
    "group.share.session.timeout.ms": 1,
    "group.share.min.session.timeout.ms": 1,
    "group.share.max.session.timeout.ms": 1,
    "group.share.heartbeat.interval.ms": 1,
    "group.share.min.heartbeat.interval.ms": 1,
    "group.share.max.heartbeat.interval.ms": 1,
    "group.share.max.size": 1,
    "group.share.initialize.retry.interval.ms": 1,
    "group.share.delivery.count.limit": 2,
    "group.share.record.lock.duration.ms": 1000,
    "group.share.min.record.lock.duration.ms": 1000,
    "group.share.max.record.lock.duration.ms": 30000,
    "group.share.partition.max.record.locks": 100,
    "group.share.max.share.sessions": 1,
    "transaction.state.log.num.partitions": 1,
    "transaction.state.log.segment.bytes": 1,
    "transaction.state.log.replication.factor": 1,
    "transaction.state.log.min.isr": 1,
    "transaction.max.timeout.ms": 1,
    "transactional.id.expiration.ms": 1,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1,
    "transaction.remove.expired.transaction.cleanup.interval.ms": 1,
    "etcd.lease.ttl.ms": 1000,  # etcd's leases are whole seconds
    "offsets.topic.replication.factor": 1,
    "default.replication.factor": 1,
    "leader.imbalance.check.interval.seconds": 1,
    "leader.imbalance.per.broker.percentage": 0,
    "replica.lag.time.max.ms": 1,
    "replica.fetch.wait.max.ms": 0,
    "replica.fetch.max.bytes": 0,
}

# largest accepted values (Kafka's ConfigDef Range.between)
MAXIMUMS = {
    "group.share.max.size": 1000,
    "group.share.delivery.count.limit": 10,
    "group.share.record.lock.duration.ms": 3600000,
    "group.share.min.record.lock.duration.ms": 30000,
    "group.share.max.record.lock.duration.ms": 3600000,
    "group.share.partition.max.record.locks": 10000,
}

SHARE_ASSIGNORS = ("simple",)  # Kafka's built-in share assignor

# the share coordinator's keys (share.coordinator.*), with Kafka's defaults and minimums
DEFAULTS.update({k: (int, default) for k, (default, _) in SHARE_COORDINATOR_CONFIGS.items()})
MINIMUMS.update({k: low for k, (_, low) in SHARE_COORDINATOR_CONFIGS.items()})
KNOWN_REBALANCE_PROTOCOLS = ("classic", "consumer")


def parse_hostport(spec: str, key: str) -> tuple[str, int]:
    """HOST:PORT -> (host, port); a ValueError naming `key` for anything
    else, a port outside 0-65535 included (never wrapped)."""
    host, sep, port = spec.strip().rpartition(":")
    if not sep or not port.strip().isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{key}: {spec!r} is not HOST:PORT with a port in 0-65535")
    return host.strip().strip("[]") or "127.0.0.1", int(port)


def _check_between(values: dict, key: str, low_key: str, high_key: str) -> None:
    value, low, high = values[key], values[low_key], values[high_key]
    if not low <= value <= high:
        raise ValueError(f"{key}: {value} must be between {low_key} ({low}) "
                         f"and {high_key} ({high})")


# the settings a modern group type bounds by <prefix>min.<name> and <prefix>max.<name>
GROUP_TIMEOUTS = ("session.timeout.ms", "heartbeat.interval.ms")


def _check_ordered(values: dict, prefix: str, name: str) -> None:
    low_key, high_key = f"{prefix}min.{name}", f"{prefix}max.{name}"
    if values[low_key] > values[high_key]:
        raise ValueError(f"{high_key}: {values[high_key]} is below {low_key} "
                         f"({values[low_key]})")


def _check_group_timeouts(values: dict, prefix: str, names: tuple[str, ...]) -> None:
    """A group type's bounds (min <= max), its settings within them, and a
    heartbeat interval below the session timeout, as GroupCoordinatorConfig."""
    for name in names:
        _check_ordered(values, prefix, name)
    for name in names:
        _check_between(values, prefix + name, f"{prefix}min.{name}", f"{prefix}max.{name}")
    if values[prefix + "heartbeat.interval.ms"] >= values[prefix + "session.timeout.ms"]:
        raise ValueError(f"{prefix}heartbeat.interval.ms must be less than "
                         f"{prefix}session.timeout.ms")


def check_consistency(values: dict) -> None:
    """Relations between keys that Kafka's GroupCoordinatorConfig requires at
    start-up; ValueError names the keys involved."""
    _check_ordered(values, "group.", "session.timeout.ms")
    _check_group_timeouts(values, "group.consumer.", GROUP_TIMEOUTS)
    assignors = values["group.consumer.assignors"]
    from .assignor_plugins import load_assignors
    load_assignors(assignors)  # custom ones from the kcoord.assignors entry points
    unknown = [a for a in assignors if a not in ASSIGNORS]
    if not assignors or unknown:
        raise ValueError(f"group.consumer.assignors: {unknown or 'empty'}: "
                         f"known assignors are {', '.join(ASSIGNORS)} and the "
                         "kcoord.assignors entry points installed")
    check_share_groups(values)
    if values.get("http.listen"):
        parse_hostport(values["http.listen"], "http.listen")
    if values["http.burrow.min-distance"] < 0:
        raise ValueError("http.burrow.min-distance: must be 0 or more (seconds)")
    name = values["http.burrow.cluster.name"]
    if not name or not all(c.isalnum() or c in "._-" for c in name):
        raise ValueError(f"http.burrow.cluster.name: {name!r} must be letters, digits, "
                         f"'.', '_' or '-' (it is a URL path segment)")
    for endpoint in values["etcd.endpoints"]:
        host, sep, port = endpoint.split("://", 1)[-1].rstrip("/").rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"etcd.endpoints: {endpoint!r} is not host:port")
    protocols = values["group.coordinator.rebalance.protocols"]
    unknown = [p for p in protocols if p not in KNOWN_REBALANCE_PROTOCOLS]
    if unknown or "classic" not in protocols:
        raise ValueError(f"group.coordinator.rebalance.protocols: {protocols}: must include "
                         f"classic, and name only {', '.join(KNOWN_REBALANCE_PROTOCOLS)}")


def check_share_groups(values: dict) -> None:
    """The group.share.* relations Kafka's GroupCoordinatorConfig and
    ShareGroupConfig require (one line naming the key on a failure)."""
    _check_group_timeouts(values, "group.share.", GROUP_TIMEOUTS + ("record.lock.duration.ms",))
    if values["group.share.max.share.sessions"] < values["group.share.max.size"]:
        raise ValueError(f"group.share.max.share.sessions: {values['group.share.max.share.sessions']} "
                         f"must be at least group.share.max.size ({values['group.share.max.size']})")
    assignors = values["group.share.assignors"]
    if len(assignors) != 1 or assignors[0] not in SHARE_ASSIGNORS:
        raise ValueError(f"group.share.assignors: {','.join(assignors) or 'empty'}: must name "
                         f"exactly one share assignor ({', '.join(SHARE_ASSIGNORS)})")


# keys whose value is one of a few names (case-insensitive, as Kafka parses them)
CHOICES = {
    "group.consumer.migration.policy": ("disabled", "upgrade", "downgrade", "bidirectional"),
}


def _convert(kind: type, raw: str) -> Any:
    raw = raw.strip()
    if kind is bool:
        if raw.lower() not in ("true", "false"):
            raise ValueError(f"expected true or false, got {raw!r}")
        return raw.lower() == "true"
    if kind is int:
        try:
            return int(raw)
        except ValueError:
            raise ValueError(f"{raw!r} is not a number") from None
    if kind is list:
        return [item.strip() for item in raw.split(",") if item.strip()]
    return raw


def parse_properties(text: str) -> dict[str, str]:
    """Java-properties subset: key=value or key: value, # and ! comments."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            raise ValueError(f"not a key=value line: {line!r}")
        out[line[:sep].strip()] = line[sep + 1:].strip()
    return out


# Kafka keys whose job a kcoord flag does
FLAG_KEYS = {"log.dirs": "the --data-dir flag replaces it",
             "log.dir": "the --data-dir flag replaces it",
             "port": "the --listen flag replaces it", "host.name": "the --listen flag replaces it",
             "broker.id": "kcoord's key is node.id"}


def unknown_key_hint(key: str) -> str:
    """'; did you mean ...?' for a near miss of a known key, or what replaces a
    Kafka key kcoord takes as a flag ('' if neither)."""
    import difflib
    if key in FLAG_KEYS:
        return f"; {FLAG_KEYS[key]}"
    from ..broker.topic_configs import TOPIC_CONFIGS
    known = set(DEFAULTS) | {n for _, names in TOPIC_CONFIGS.values() for n in names}
    known |= set(security_settings.IMPLEMENTED)
    close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.8)
    return f"; did you mean {close[0]}?" if close else ""


@dataclass
class Config:
    host: str = "127.0.0.1"
    port: int = 9092
    data_dir: Path = Path("./data")
    values: dict[str, Any] = field(default_factory=lambda: {k: d for k, (_, d) in DEFAULTS.items()})
    # the bound listeners (kcoord.security.listeners.Listener), set by the server
    listeners: list = field(default_factory=list)
    # the keys set by --config/--set, as given: DescribeConfigs reports them as static
    static: dict[str, str] = field(default_factory=dict)
    # `serve --add-scram` credential records a cluster node writes to etcd at start
    bootstrap_scram: list = field(default_factory=list)

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def set(self, key: str, raw: Any) -> None:
        self.static[key] = raw if isinstance(raw, str) else str(raw)
        # Kafka accepts log.retention.hours/minutes as coarser forms of log.retention.ms
        coarse = {"log.retention.hours": 3600000, "log.retention.minutes": 60000}
        if key in coarse:
            self.values["log.retention.ms"] = int(raw) * coarse[key]
            return
        if key in DEFAULTS:
            kind = DEFAULTS[key][0]
            try:
                value = _convert(kind, raw) if isinstance(raw, str) else raw
            except ValueError as exc:
                raise ValueError(f"{key}: {exc}") from None
            low = MINIMUMS.get(key)
            if low is not None and value < low:
                raise ValueError(f"{key}: {value} is below the minimum {low}")
            high = MAXIMUMS.get(key)
            if high is not None and value > high:
                raise ValueError(f"{key}: {value} is above the maximum {high}")
            choices = CHOICES.get(key)
            if choices is not None:
                value = str(value).strip().lower()
                if value not in choices:
                    raise ValueError(f"{key}: {value!r} is not one of {', '.join(choices)}")
        elif security_settings.is_security_key(key):
            value = raw  # checked as a whole in build_config: unimplemented is an error
        elif key.startswith("etcd."):  # a misspelt one could leave a node out of its cluster
            raise ValueError(f"{key}: unknown etcd setting (kcoord has etcd.endpoints, "
                             f"etcd.prefix, etcd.lease.ttl.ms and etcd.ssl.*)")
        else:
            log.warning("unknown config key %s kept as a string%s", key, unknown_key_hint(key))
            value = raw
        self.values[key] = value

    def update(self, pairs: dict[str, Any]) -> None:
        for k, v in pairs.items():
            self.set(k, v)

    def advertised_for(self, listener: str) -> tuple[str, int]:
        """Host and port of the listener a request arrived on (Kafka answers
        Metadata and FindCoordinator with that listener's endpoint)."""
        for lsn in self.listeners:
            if lsn.name == listener:
                return lsn.advertised
        return self.advertised

    @property
    def advertised(self) -> tuple[str, int]:
        """Host and port clients should connect to (from advertised.listeners if set)."""
        if self.listeners:
            return self.listeners[0].advertised
        spec = self.values.get("advertised.listeners") or ""
        if spec:
            first = spec.split(",")[0]
            hostport = first.split("://", 1)[-1]
            host, _, port = hostport.rpartition(":")
            return host or self.host, int(port)
        return self.host, self.port


def build_config(listen: str, data_dir: str, config_file: str | None,
                 overrides: list[str]) -> Config:
    host, port = parse_hostport(listen, "--listen")
    cfg = Config(host=host, port=port, data_dir=Path(data_dir))
    if config_file:
        cfg.update(parse_properties(Path(config_file).read_text()))
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--set expects key=value, got {item!r}")
        cfg.set(key.strip(), value)
    check_consistency(cfg.values)
    security_settings.check(cfg.values, cfg.host, cfg.port)
    return cfg
