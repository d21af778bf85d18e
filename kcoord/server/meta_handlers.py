"""ApiVersions and Metadata: what a client needs to bootstrap."""
from __future__ import annotations

from typing import Protocol

from ..protocol.api import AUTH_OPS_NOT_REQUESTED, response_codec
from ..protocol.errors import Err
from .config import Config
from .dispatch import Dispatcher, RequestContext, serves


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
        self.cluster = None  # cluster mode: nodes and controller from kcoord/cluster/node.py
        self._api_versions_bodies: dict[int, tuple[object, bytes]] = {}

    def register(self) -> None:
        self.dispatcher.register_handlers(self)

    @serves("ApiVersions", pure=True)
    def api_versions(self, ctx: RequestContext, _req: dict) -> bytes:
        """The body is the same for every request of a version: encode it once."""
        cached = self._api_versions_bodies.get(ctx.api_version)
        if cached is None or cached[0] is not self.dispatcher.handlers_version:
            body = bytes(response_codec(18, ctx.api_version)[0]({
                "error_code": Err.NONE, "api_keys": self.dispatcher.api_versions(),
                "throttle_time_ms": 0}))
            cached = self._api_versions_bodies[ctx.api_version] = (
                self.dispatcher.handlers_version, body)
        return cached[1]

    def _topics_by_id(self, topic_ids: list[bytes], version: int) -> list[dict]:
        catalogue = getattr(self.topics, "catalogue", None)
        known = [] if catalogue is None else [catalogue.by_id.get(i) for i in topic_ids]
        names = [t.name for t in known if t is not None]
        found = {t["topic_id"]: t for t in self.topics.metadata_topics(names, False, version)} \
            if names else {}
        out = []
        for topic_id in topic_ids:
            if topic_id in found:
                out.append(found[topic_id])
            else:
                out.append({"error_code": Err.UNKNOWN_TOPIC_ID, "name": None, "topic_id": topic_id,
                            "is_internal": False, "partitions": [],
                            "topic_authorized_operations": AUTH_OPS_NOT_REQUESTED})
        return out

    @serves("Metadata")
    def metadata(self, ctx: RequestContext, req: dict) -> dict:
        host, port = self.config.advertised_for(ctx.listener)
        node_id = self.config["node.id"]
        requested = req["topics"]
        names = None
        if requested is not None and (requested or ctx.api_version >= 1):
            # v0 uses an empty list for "all topics"; v1+ uses null
            names = [t["name"] for t in requested if t.get("name") is not None]
        by_id: list[bytes] = []
        if requested and ctx.api_version >= 10:
            # v10+: a topic may be asked for by id alone (KIP-848 consumers resolve
            # the topic ids of their assignment this way)
            by_id = [t["topic_id"] for t in requested
                     if t.get("name") is None and t.get("topic_id") not in (None, bytes(16))]
        if self.topics is not None:
            topics = self.topics.metadata_topics(
                names, req.get("allow_auto_topic_creation", True), ctx.api_version)
            if by_id:
                topics += self._topics_by_id(by_id, ctx.api_version)
        else:
            topics = [{"error_code": Err.UNKNOWN_TOPIC_OR_PARTITION, "name": n,
                       "partitions": [], "topic_authorized_operations": AUTH_OPS_NOT_REQUESTED}
                      for n in (names or [])]
        brokers = [{"node_id": node_id, "host": host, "port": port, "rack": None}]
        controller_id = node_id
        if self.cluster is not None:
            brokers, controller_id = self.cluster.brokers(ctx.listener), self.cluster.controller_id()
        return {
            "throttle_time_ms": 0,
            "brokers": brokers,
            "cluster_id": self.config["cluster.id"],
            "controller_id": controller_id,
            "topics": topics,
            "cluster_authorized_operations": AUTH_OPS_NOT_REQUESTED,
        }
