"""The topic catalogue: which topics exist, their ids, partitions and configs.

Persisted as one JSON file in the data dir, replaced atomically (write,
fsync, rename, fsync dir) so a crash leaves the old or the new catalogue,
never a torn one.  Partition logs live beside it in <topic>-<partition>/.
The catalogue opens and closes every log of the data dir, so it also keeps
the clean-shutdown marker: taken at open (the logs then skip their recovery
scan if it was there), written by close() once every log is closed.
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..log import LogConfig, PartitionLog
from ..protocol.config_types import ConfigError
from .topic_configs import canonical, validate_topic_configs
from ..log.clean_shutdown import take_clean_shutdown_marker, write_clean_shutdown_marker

log = logging.getLogger("kcoord.catalogue")

CATALOGUE_FILE = "kcoord-topics.json"
MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
INTERNAL_TOPICS = {"__consumer_offsets", "__transaction_state", "__share_group_state"}


class TopicError(Exception):
    """A topic operation refused with a Kafka error code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def topic_name_problem(name: str) -> str | None:
    """Kafka's Topic.validate rules; None when the name is legal."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return "topic name cannot be '.' or '..'"
    if len(name) > MAX_NAME_LENGTH:
        return f"topic name is longer than {MAX_NAME_LENGTH} characters"
    if not _LEGAL.match(name):
        return "topic name has characters other than ASCII alphanumerics, '.', '_' and '-'"
    return None


@dataclass
class Topic:
    name: str
    topic_id: bytes
    partitions: list[PartitionLog]
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


class Catalogue:
    def __init__(self, data_dir: Path, defaults: dict[str, object],
                 now_ms: Callable[[], int] | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.now_ms = now_ms  # the server's clock, for its logs' segment.ms (None: wall time)
        self.defaults = defaults  # broker-level Kafka config (log.* keys)
        self.topics: dict[str, Topic] = {}
        self.by_id: dict[bytes, Topic] = {}
        self.version = 0  # bumped whenever a topic is created, grows or is deleted
        self.listeners: list = []  # called (no arguments) after each such change
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._closed = False
        # taken (durably removed) before any log is opened, so before anything is appended
        self.clean_shutdown = take_clean_shutdown_marker(self.data_dir)
        self._load()

    # ------------------------------------------------------------- storage
    def _path(self) -> Path:
        return self.data_dir / CATALOGUE_FILE

    def _load(self) -> None:
        path = self._path()
        if not path.exists():
            return
        doc = json.loads(path.read_text())
        for entry in doc["topics"]:
            self._open(entry["name"], bytes.fromhex(entry["id"]), entry["partitions"],
                       entry.get("configs", {}), self.clean_shutdown)
        scanned = sum(plog.recovery_scanned for plog in self.all_logs())
        log.info("loaded %d topics (%s; %d active segments recovery-scanned)", len(self.topics),
                 "clean shutdown" if self.clean_shutdown else "no clean-shutdown marker", scanned)

    def _save(self) -> None:
        doc = {"topics": [{"name": t.name, "id": t.topic_id.hex(), "partitions": len(t.partitions),
                           "configs": t.configs} for t in self.topics.values()]}
        tmp = self._path().with_suffix(".tmp")
        with open(tmp, "w") as fh:
            json.dump(doc, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self._path())
        dir_fd = os.open(self.data_dir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def log_config(self, configs: dict[str, str]) -> LogConfig:
        merged = {k: v for k, v in self.defaults.items() if k.startswith("log.")}
        merged.update(configs)
        for key in ("log.flush.interval.messages", "flush.messages"):
            if int(merged.get(key, 0) or 0) >= 2**62:
                merged.pop(key)  # Kafka's "never" default
        policy = configs.get("cleanup.policy", self.defaults.get("log.cleanup.policy", "delete"))
        if isinstance(policy, str):
            policy = [p.strip() for p in policy.split(",")]
        if "delete" not in policy:  # compact-only topics are never trimmed by retention
            merged["retention.ms"] = merged["retention.bytes"] = -1
        return LogConfig.from_properties(
            {k: v for k, v in merged.items() if k in LogConfig.KAFKA_NAMES})

    def _open(self, name: str, topic_id: bytes, count: int, configs: dict[str, str],
              clean_shutdown: bool = False) -> Topic:
        cfg = self.log_config(configs)
        logs = [PartitionLog(self.data_dir / f"{name}-{p}", cfg, clean_shutdown=clean_shutdown,
                             now_ms=self.now_ms) for p in range(count)]
        topic = Topic(name, topic_id, logs, dict(configs))
        self.topics[name] = topic
        self.by_id[topic_id] = topic
        return topic

    # ---------------------------------------------------------- operations
    def get(self, name: str) -> Topic | None:
        return self.topics.get(name)

    def partition(self, name: str, index: int) -> PartitionLog | None:
        topic = self.topics.get(name)
        if topic is None or not 0 <= index < len(topic.partitions):
            return None
        return topic.partitions[index]

    def create(self, name: str, partitions: int, configs: dict[str, str] | None = None,
               validate_only: bool = False, topic_id: bytes | None = None) -> Topic | None:
        """topic_id: the id the cluster's catalogue gave it (a new one if None)."""
        problem = topic_name_problem(name)
        if problem:
            raise TopicError(17, problem)  # INVALID_TOPIC_EXCEPTION
        if name in self.topics:
            raise TopicError(36, f"topic '{name}' already exists")  # TOPIC_ALREADY_EXISTS
        if partitions < 1:
            raise TopicError(37, "number of partitions must be at least 1")  # INVALID_PARTITIONS
        try:
            validate_topic_configs(configs or {})
            configs = canonical(configs or {})
            self.log_config(configs)
        except ConfigError as exc:
            raise TopicError(exc.code, exc.message) from exc  # INVALID_CONFIG
        except (ValueError, TypeError) as exc:
            raise TopicError(40, f"invalid config: {exc}") from exc  # INVALID_CONFIG
        if validate_only:
            return None
        topic = self._open(name, topic_id or uuid.uuid4().bytes, partitions, configs)
        self._save()
        log.info("created topic %s with %d partitions", name, partitions)
        self._changed()
        return topic

    def add_partitions(self, name: str, total: int, validate_only: bool = False) -> None:
        topic = self.topics.get(name)
        if topic is None:
            raise TopicError(3, f"topic '{name}' does not exist")
        current = len(topic.partitions)
        if total <= current:
            raise TopicError(37, f"topic has {current} partitions; cannot change to {total}")
        if validate_only:
            return
        cfg = self.log_config(topic.configs)
        for p in range(current, total):
            topic.partitions.append(PartitionLog(self.data_dir / f"{name}-{p}", cfg,
                                                 now_ms=self.now_ms))
        self._save()
        self._changed()

    def set_configs(self, name: str, configs: dict[str, str]) -> None:
        """Replace a topic's override set (already validated), durably, and
        apply it to its logs at once."""
        topic = self.topics[name]
        cfg = self.log_config(configs)
        topic.configs = dict(configs)
        self._save()
        for plog in topic.partitions:
            plog.config = cfg

    def reconfigure(self) -> None:
        """Re-derive every topic's log settings (after a broker default changed)."""
        for topic in self.topics.values():
            cfg = self.log_config(topic.configs)
            for plog in topic.partitions:
                plog.config = cfg

    def delete(self, name: str) -> None:
        topic = self.topics.pop(name, None)
        if topic is None:
            raise TopicError(3, f"topic '{name}' does not exist")
        del self.by_id[topic.topic_id]
        self._save()
        for plog in topic.partitions:
            plog.close()
            shutil.rmtree(plog.path, ignore_errors=True)
        log.info("deleted topic %s", name)
        self._changed()

    def _changed(self) -> None:
        self.version += 1
        for listener in list(self.listeners):
            try:
                listener()
            except Exception:
                log.exception("topic change listener failed")

    def all_logs(self):
        for topic in self.topics.values():
            yield from topic.partitions

    def close(self) -> None:
        """Flush and close every log, then write the clean-shutdown marker
        (not written if a close fails: the next start recovers)."""
        if self._closed:
            return
        for plog in self.all_logs():
            plog.close()
        self._closed = True
        write_clean_shutdown_marker(self.data_dir)
