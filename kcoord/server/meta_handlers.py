"""ApiVersions and Metadata: what a client needs to bootstrap."""
from __future__ import annotations

from typing import Protocol

from ..protocol.errors import Err
from .config import Config
from .dispatch import Dispatcher, RequestContext

AUTH_OPS_NOT_REQUESTED = -(2**31)


class TopicSource(Protocol):
    """What Metadata needs from the topic catalogue (the data plane)."""

    def metadata_topics(self, names: list[str] | None, allow_auto_create: bool,
                        version: int) -> list[dict]: ...


class MetaHandlers:
    def __init__(self, config: Config, dispatcher: Dispatcher,
                 topics: TopicSource | None = None) -> None:
        self.config = config
        self.dispatcher = dispatcher
        self.topics = topics

    def register(self) -> None:
        self.dispatcher.register(18, self.api_versions)
        self.dispatcher.register(3, self.metadata)

    def api_versions(self, ctx: RequestContext, req: dict) -> dict:
        return {"error_code": Err.NONE, "api_keys": self.dispatcher.api_versions(),
                "throttle_time_ms": 0}

    def metadata(self, ctx: RequestContext, req: dict) -> dict:
        host, port = self.config.advertised
        node_id = self.config["node.id"]
        requested = req["topics"]
        names = None
        if requested is not None and (requested or ctx.api_version >= 1):
            # v0 uses an empty list for "all topics"; v1+ uses null
            names = [t["name"] for t in requested if t.get("name") is not None]
        if self.topics is not None:
            topics = self.topics.metadata_topics(
                names, req.get("allow_auto_topic_creation", True), ctx.api_version)
        else:
            topics = [{"error_code": Err.UNKNOWN_TOPIC_OR_PARTITION, "name": n,
                       "partitions": [], "topic_authorized_operations": AUTH_OPS_NOT_REQUESTED}
                      for n in (names or [])]
        return {
            "throttle_time_ms": 0,
            "brokers": [{"node_id": node_id, "host": host, "port": port, "rack": None}],
            "cluster_id": self.config["cluster.id"],
            "controller_id": node_id,
            "topics": topics,
            "cluster_authorized_operations": AUTH_OPS_NOT_REQUESTED,
        }
