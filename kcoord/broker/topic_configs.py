"""Every topic-level config Kafka has (LogConfig), with its type, default,
valid range and broker synonyms (ServerTopicConfigSynonyms), and the rules
that relate keys to each other.

Which of them kcoord's log honours is said in HONOURED; the others are
validated, stored and described as Kafka does (tools round-trip them), and
docs/architecture.md lists them.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..protocol.config_types import (BOOLEAN, DOUBLE, INT, LIST, LONG, LONG_MAX, STRING, ConfigError,
                         ConfigKey)

COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")


def _gzip_level(value: int) -> str | None:
    return None if value == -1 or 1 <= value <= 9 else "Value must be between 1 and 9, or -1"


def _throttled_replicas(value: list[str]) -> str | None:
    if value == ["*"]:
        return None
    for item in value:
        part, sep, broker = item.partition(":")
        if not (sep and part.strip().isdigit() and broker.strip().isdigit()):
            return ("must be the literal '*' or a list of replicas in the form "
                    "[PartitionId]:[BrokerId],[PartitionId]:[BrokerId],...")
    return None


def _k(name, type_, default, low=None, high=None, choices=None, check=None, doc=""):
    return ConfigKey(name, type_, default, doc, low, high, choices, check)


# topic key -> (definition, broker synonyms in priority order; the first is the primary)
TOPIC_CONFIGS: dict[str, tuple[ConfigKey, tuple[str, ...]]] = {key.name: (key, syn) for key, syn in [
    (_k("cleanup.policy", LIST, ["delete"], choices=("compact", "delete"),
        doc="delete: old segments are removed by retention; compact: the latest record per key "
            "is kept"), ("log.cleanup.policy",)),
    (_k("compression.type", STRING, "producer", choices=COMPRESSION_TYPES),
     ("compression.type",)),
    (_k("compression.gzip.level", INT, -1, check=_gzip_level), ("compression.gzip.level",)),
    (_k("compression.lz4.level", INT, 9, 1, 17), ("compression.lz4.level",)),
    (_k("compression.zstd.level", INT, 3, -131072, 22), ("compression.zstd.level",)),
    (_k("delete.retention.ms", LONG, 86400000, 0), ("log.cleaner.delete.retention.ms",)),
    (_k("file.delete.delay.ms", LONG, 60000, 0), ("log.segment.delete.delay.ms",)),
    (_k("flush.messages", LONG, LONG_MAX, 1), ("log.flush.interval.messages",)),
    (_k("flush.ms", LONG, LONG_MAX, 0), ("log.flush.interval.ms", "log.flush.scheduler.interval.ms")),
    (_k("follower.replication.throttled.replicas", LIST, [], check=_throttled_replicas), ()),
    (_k("index.interval.bytes", INT, 4096, 0), ("log.index.interval.bytes",)),
    (_k("leader.replication.throttled.replicas", LIST, [], check=_throttled_replicas), ()),
    (_k("local.retention.bytes", LONG, -2, -2), ("log.local.retention.bytes",)),
    (_k("local.retention.ms", LONG, -2, -2), ("log.local.retention.ms",)),
    (_k("max.compaction.lag.ms", LONG, LONG_MAX, 1), ("log.cleaner.max.compaction.lag.ms",)),
    (_k("max.message.bytes", INT, 1048588, 0), ("message.max.bytes",)),
    (_k("message.downconversion.enable", BOOLEAN, True), ("log.message.downconversion.enable",)),
    (_k("message.format.version", STRING, "3.0-IV1"), ("log.message.format.version",)),
    (_k("message.timestamp.after.max.ms", LONG, 3600000, 0),  # Kafka 4.0 (KIP-1030)
     ("log.message.timestamp.after.max.ms",)),
    (_k("message.timestamp.before.max.ms", LONG, LONG_MAX, 0),
     ("log.message.timestamp.before.max.ms",)),
    (_k("message.timestamp.difference.max.ms", LONG, LONG_MAX, 0),
     ("log.message.timestamp.difference.max.ms",)),
    (_k("message.timestamp.type", STRING, "CreateTime", choices=("CreateTime", "LogAppendTime")),
     ("log.message.timestamp.type",)),
    (_k("min.cleanable.dirty.ratio", DOUBLE, 0.5, 0, 1), ("log.cleaner.min.cleanable.ratio",)),
    (_k("min.compaction.lag.ms", LONG, 0, 0), ("log.cleaner.min.compaction.lag.ms",)),
    (_k("min.insync.replicas", INT, 1, 1), ("min.insync.replicas",)),
    (_k("preallocate", BOOLEAN, False), ("log.preallocate",)),
    (_k("remote.log.copy.disable", BOOLEAN, False), ()),
    (_k("remote.log.delete.on.disable", BOOLEAN, False), ()),
    (_k("remote.storage.enable", BOOLEAN, False), ()),
    (_k("retention.bytes", LONG, -1), ("log.retention.bytes",)),
    (_k("retention.ms", LONG, 604800000, -1),
     ("log.retention.ms", "log.retention.minutes", "log.retention.hours")),
    (_k("segment.bytes", INT, 1073741824, 14), ("log.segment.bytes",)),
    (_k("segment.index.bytes", INT, 10485760, 4), ("log.index.size.max.bytes",)),
    (_k("segment.jitter.ms", LONG, 0, 0), ("log.roll.jitter.ms", "log.roll.jitter.hours")),
    (_k("segment.ms", LONG, 604800000, 1), ("log.roll.ms", "log.roll.hours")),
    (_k("unclean.leader.election.enable", BOOLEAN, False), ("unclean.leader.election.enable",)),
]}

# DescribeConfigs' documentation (IncludeDocumentation), kcoord's own words
DOCS = {
    "compression.type": "The codec batches are stored with; producer keeps what the producer "
                        "sent.",
    "compression.gzip.level": "The gzip level when compression.type is gzip.",
    "compression.lz4.level": "The lz4 level when compression.type is lz4.",
    "compression.zstd.level": "The zstd level when compression.type is zstd.",
    "delete.retention.ms": "How long tombstones stay in a compacted topic.",
    "file.delete.delay.ms": "How long a deleted segment file waits before it is removed.",
    "flush.messages": "fsync the log after this many messages.",
    "flush.ms": "fsync the log when a message has waited this long.",
    "follower.replication.throttled.replicas": "Replicas whose follower fetching is throttled.",
    "index.interval.bytes": "Bytes between two offset-index entries.",
    "leader.replication.throttled.replicas": "Replicas whose leader side is throttled.",
    "local.retention.bytes": "Bytes kept locally with tiered storage (-2: retention.bytes).",
    "local.retention.ms": "Time kept locally with tiered storage (-2: retention.ms).",
    "max.compaction.lag.ms": "The longest a record may stay uncompacted.",
    "max.message.bytes": "The largest record batch a producer may send to the topic.",
    "message.downconversion.enable": "Whether old-format fetches are down-converted.",
    "message.format.version": "The legacy message format version (ignored since Kafka 3.0).",
    "message.timestamp.after.max.ms": "How far in the future a record timestamp may be.",
    "message.timestamp.before.max.ms": "How far in the past a record timestamp may be.",
    "message.timestamp.difference.max.ms": "Deprecated bound on a record timestamp's age.",
    "message.timestamp.type": "CreateTime keeps the producer's timestamps; LogAppendTime stamps "
                              "batches when they are appended.",
    "min.cleanable.dirty.ratio": "The share of uncompacted log that triggers compaction.",
    "min.compaction.lag.ms": "The shortest a record stays uncompacted.",
    "min.insync.replicas": "In-sync replicas an acks=all produce needs.",
    "preallocate": "Whether segment files are preallocated.",
    "remote.log.copy.disable": "Stop copying segments to tiered storage.",
    "remote.log.delete.on.disable": "Delete tiered segments when tiering is turned off.",
    "remote.storage.enable": "Tiered storage for the topic (not available on kcoord).",
    "retention.bytes": "The most bytes a partition keeps before old segments go (-1: no limit).",
    "retention.ms": "How long a record is kept before its segment may go (-1: forever).",
    "segment.bytes": "The size at which a segment file is rolled.",
    "segment.index.bytes": "The size of a segment's offset index.",
    "segment.jitter.ms": "Random jitter subtracted from segment.ms.",
    "segment.ms": "The age at which a segment is rolled.",
    "unclean.leader.election.enable": "Whether an out-of-sync replica may become leader.",
}
TOPIC_CONFIGS = {name: (replace(key, doc=key.doc or DOCS.get(name, "")), synonyms)
                 for name, (key, synonyms) in TOPIC_CONFIGS.items()}

# what kcoord's log and produce path do with them, applied at once on a change
HONOURED = {
    "cleanup.policy": "without 'delete', retention never removes segments (compaction of user "
                      "topics is not implemented)",
    "retention.ms": "time retention", "retention.bytes": "size retention",
    "segment.bytes": "segment rolls", "segment.ms": "time-based segment rolls",
    "flush.messages": "fsync every N messages", "index.interval.bytes": "index density",
    "max.message.bytes": "largest batch accepted by Produce",
    "message.timestamp.type": "LogAppendTime stamps batches on append",
    "min.insync.replicas": "acks=all produce needs this many in-sync replicas",
}

# broker synonyms whose unit differs from the topic key's: factor to the topic's unit
SYNONYM_FACTORS = {"log.retention.minutes": 60000, "log.retention.hours": 3600000,
                   "log.roll.hours": 3600000, "log.roll.jitter.hours": 3600000}


def topic_key(name: str) -> ConfigKey:
    entry = TOPIC_CONFIGS.get(name)
    if entry is None:
        raise ConfigError(f"Unknown topic config name: {name}")
    return entry[0]


def validate_topic_configs(configs: dict[str, str | None]) -> dict[str, Any]:
    """Check a topic's complete override set (names, values, relations);
    -> the parsed values.  ConfigError (INVALID_CONFIG) on the first problem."""
    parsed: dict[str, Any] = {}
    for name, raw in configs.items():
        key = topic_key(name)
        if raw is None:
            raise ConfigError(f"Null value not supported for topic config {name}")
        parsed[name] = key.parse(raw)
    min_lag = parsed.get("min.compaction.lag.ms", 0)
    max_lag = parsed.get("max.compaction.lag.ms", LONG_MAX)
    if min_lag > max_lag:
        raise ConfigError(f"conflict topic config setting min.compaction.lag.ms ({min_lag}) > "
                          f"max.compaction.lag.ms ({max_lag})")
    if parsed.get("remote.storage.enable"):
        raise ConfigError("Tiered Storage is not enabled on this server: remote.storage.enable "
                          "cannot be true")
    return parsed


def canonical(configs: dict[str, str]) -> dict[str, str]:
    """The override set as stored: each value rendered from its parsed form
    (so ' compact , delete' is stored as 'compact,delete')."""
    return {name: topic_key(name).render(topic_key(name).parse(raw)) for name, raw in configs.items()}
