"""A partition's leader-epoch checkpoint file (Kafka's `leader-epoch-checkpoint`).

One small text file in the partition's directory (leader_epoch.py has the
format), rewritten whole whenever the cache changes: temp file, fsync,
rename, fsync of the directory, so a crash leaves the old or the new
contents (PartitionLog writes it).  Changes are rare (a new leader epoch, a
truncation, a new log start); each is made durable at once, as Kafka does,
but a new leader's epoch is written in an fsync thread, and that leader
appends nothing until it is (Replica's SettleEpoch).
"""
from __future__ import annotations

import logging
from pathlib import Path

from .leader_epoch import EpochCache

CHECKPOINT = "leader-epoch-checkpoint"

log = logging.getLogger(__name__)


def read_epoch_checkpoint(partition_dir: Path) -> EpochCache:
    """The stored cache; empty when there is none or it does not parse."""
    path = Path(partition_dir) / CHECKPOINT
    try:
        return EpochCache.from_text(path.read_text())
    except FileNotFoundError:
        return EpochCache()
    except (ValueError, UnicodeDecodeError) as exc:
        log.warning("%s: ignoring a damaged leader-epoch checkpoint (%s)", path, exc)
        return EpochCache()
