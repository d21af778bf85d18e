"""Append-only partition logs in Kafka's on-disk layout (segments + indexes)."""
from .config import LogConfig
from .errors import CorruptSegmentError, InvalidAppend, LogError, OffsetOutOfRange
from .partition_log import PartitionLog

__all__ = [
    "CorruptSegmentError",
    "InvalidAppend",
    "LogConfig",
    "LogError",
    "OffsetOutOfRange",
    "PartitionLog",
]
