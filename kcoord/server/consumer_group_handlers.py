"""ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69): the KIP-848 APIs.

Served only when group.coordinator.rebalance.protocols contains "consumer"
(Kafka's isConsumerGroupProtocolEnabled); otherwise they are not advertised
and a request for them gets UNSUPPORTED_VERSION from the dispatcher.

The core learns the topics from here: every heartbeat carries the current
TopicMetadata (name -> (topic id, partitions), internal topics left out),
and a change in the catalogue (create, delete, add partitions) is pushed to
every loaded shard through `on_topics_changed`, so targets follow at once.
"""
from __future__ import annotations

import logging

from ..coordinator.consumer_group import TopicInfo
from ..coordinator.consumer_requests import (describe_error, heartbeat_error, is_blank,
                                            validate_heartbeat)
from ..protocol.api import error_response
from ..protocol.errors import Err
from .coordinator_runtime import CoordinatorRuntime
from .dispatch import Dispatcher, RequestContext, serves
from .group_handlers import gather
from .hot_ops import heartbeat_op

log = logging.getLogger("kcoord.consumer_groups")

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


class ConsumerGroupApi:
    def __init__(self, runtime: CoordinatorRuntime, catalogue, config) -> None:
        self.runtime = runtime
        self.catalogue = catalogue
        self.config = config
        self._topics: dict[str, TopicInfo] = {}
        self._topics_version: object = None
        listeners = getattr(catalogue, "listeners", None)
        if listeners is not None and self.enabled:
            listeners.append(self._on_catalogue_change)

    @property
    def enabled(self) -> bool:
        protocols = self.config["group.coordinator.rebalance.protocols"]
        return "consumer" in [p.strip().lower() for p in protocols]

    def register(self, d: Dispatcher) -> None:
        if self.enabled:
            d.register_handlers(self)
        else:
            d.register_handlers(ConsumerProtocolDisabled())

    # ------------------------------------------------------------ topics
    def topic_metadata(self) -> dict[str, TopicInfo]:
        """The catalogue as TopicMetadata, rebuilt only when the catalogue changed."""
        version = getattr(self.catalogue, "version", None)
        if version is None or version != self._topics_version:
            self._topics = {name: TopicInfo(t.topic_id, len(t.partitions))
                            for name, t in self.catalogue.topics.items()
                            if name not in INTERNAL_TOPICS}
            self._topics_version = version
        return self._topics

    def _on_catalogue_change(self) -> None:
        try:
            topics = self.topic_metadata()
            # written (and so replayed) now: a heartbeat handled before a task ran
            # would compute from state that misses these records
            self.runtime.write_all(lambda core, _now: core.on_topics_changed(topics))
        except RuntimeError:  # not serving (a tool or a test using the catalogue)
            return

    # ------------------------------------------------------------ heartbeat
    @serves("ConsumerGroupHeartbeat")
    def consumer_group_heartbeat(self, ctx: RequestContext, req: dict):
        """A steady heartbeat (a stable member, nothing to change) takes the
        core's shortcut: no token, no record; answered at once unless writes
        are in flight (bench/consumer_heartbeat.py)."""
        group_id = req["group_id"]
        if not group_id or group_id[0] <= " " or group_id[-1] <= " ":  # (cheap first look)
            if group_id is None or is_blank(group_id):
                # not routable: Kafka validates before it picks the shard
                invalid = validate_heartbeat(req, ctx.api_version, ())
                if invalid is not None:
                    return heartbeat_error(invalid.code, invalid.message)
        return self.runtime.write(group_id, heartbeat_op, heartbeat_error, req, ctx,
                                  self.topic_metadata())

    # ------------------------------------------------------------ describe
    @serves("ConsumerGroupDescribe")
    def consumer_group_describe(self, _ctx: RequestContext, req: dict):
        include = bool(req.get("include_authorized_operations"))
        answers = [self.runtime.read(
            g, lambda core, _now, g=g: core.consumer_group_describe([g], include)[0],
            lambda code, g=g: describe_error(g, code))
            if g else describe_error(g, Err.INVALID_GROUP_ID) for g in req["group_ids"]]
        return gather(answers, lambda groups: {"throttle_time_ms": 0, "groups": groups})


class ConsumerProtocolDisabled:
    """APIs 68 and 69 when group.coordinator.rebalance.protocols has no
    "consumer": Kafka answers UNSUPPORTED_VERSION and does not advertise them."""

    @staticmethod
    @serves("ConsumerGroupHeartbeat", hidden=True)
    def heartbeat(_ctx: RequestContext, _req: dict) -> dict:
        return heartbeat_error(Err.UNSUPPORTED_VERSION)

    @staticmethod
    @serves("ConsumerGroupDescribe", hidden=True)
    def describe(ctx: RequestContext, req: dict) -> dict:
        return error_response(ctx.api_key, ctx.api_version, req, Err.UNSUPPORTED_VERSION)
