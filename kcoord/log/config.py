"""Per-partition log settings, named after Kafka's broker/topic configs."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Mapping

# Positions in the offset index are int32, so a segment can never be larger.
MAX_SEGMENT_BYTES = 2**31 - 1


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1073741824          # log.segment.bytes
    retention_bytes: int = -1                # log.retention.bytes (-1: no limit)
    retention_ms: int = 604800000            # log.retention.ms (<0: no limit)
    flush_interval_messages: int | None = None  # log.flush.interval.messages
    index_interval_bytes: int = 4096         # log.index.interval.bytes
    segment_ms: int | None = None            # log.roll.ms (None: size-only rolls)
    # log.preallocate: the active segment is kept zero-filled ahead of its
    # end, so a flush writes the data alone (preallocate.py)
    preallocate: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.segment_bytes <= MAX_SEGMENT_BYTES:
            raise ValueError(f"segment_bytes must be in 1..{MAX_SEGMENT_BYTES}")
        if self.index_interval_bytes < 0:
            raise ValueError("index_interval_bytes must be >= 0")
        if self.flush_interval_messages is not None and self.flush_interval_messages < 1:
            raise ValueError("flush_interval_messages must be >= 1 or None")

    # Kafka property name -> field, for building a config from server/topic
    # properties without every caller knowing the mapping.
    KAFKA_NAMES = {
        "log.segment.bytes": "segment_bytes",
        "segment.bytes": "segment_bytes",
        "log.retention.bytes": "retention_bytes",
        "retention.bytes": "retention_bytes",
        "log.retention.ms": "retention_ms",
        "retention.ms": "retention_ms",
        "log.flush.interval.messages": "flush_interval_messages",
        "flush.messages": "flush_interval_messages",
        "log.index.interval.bytes": "index_interval_bytes",
        "index.interval.bytes": "index_interval_bytes",
        "log.roll.ms": "segment_ms",
        "segment.ms": "segment_ms",
        "log.preallocate": "preallocate",
        "preallocate": "preallocate",
    }

    @classmethod
    def from_properties(cls, props: Mapping[str, object]) -> "LogConfig":
        """Build from Kafka-named properties (unknown names are ignored)."""
        known = {f.name for f in fields(cls)}
        kwargs = {}
        for key, value in props.items():
            name = cls.KAFKA_NAMES.get(key, key if key in known else None)
            if name == "preallocate":
                kwargs[name] = str(value).strip().lower() in ("true", "1")
            elif name is not None:
                kwargs[name] = None if value is None else int(value)  # type: ignore[arg-type]
        return cls(**kwargs)
