"""CreateTopics, DeleteTopics, CreatePartitions and Metadata's topic list."""
from __future__ import annotations

from ..protocol.api import AUTH_OPS_NOT_REQUESTED, serves
from ..protocol.errors import Err
from .catalogue import Catalogue, TopicError, topic_name_problem
from .topic_answers import ZERO_UUID, create_topic_answer, delete_topic_answers
from .topic_configs import canonical


class TopicAdmin:
    def __init__(self, catalogue: Catalogue, config) -> None:
        self.catalogue = catalogue
        self.config = config
        self.cluster = None  # cluster mode: topics and partitions from kcoord/cluster/node.py
        # (topic, overrides) -> its DescribeConfigs entries (set by the server's config handlers)
        self.config_entries = None

    @serves("CreateTopics")
    def create_topics(self, ctx, req: dict) -> dict:
        results = []
        for t in req["topics"]:
            name = t["name"]
            result = create_topic_answer(name)
            results.append(result)
            count = t["num_partitions"]
            if t["assignments"]:
                count = len(t["assignments"])
            elif count == -1:
                count = self.config["num.partitions"]
            rf = t["replication_factor"]
            if rf not in (-1, 1) and not t["assignments"]:
                result["error_code"] = Err.INVALID_REPLICATION_FACTOR
                result["error_message"] = "replication factor must be 1 on a single-node cluster"
                continue
            configs = {c["name"]: c["value"] for c in t["configs"]}
            try:
                topic = self.catalogue.create(name, count, configs, req["validate_only"])
            except TopicError as exc:
                result["error_code"], result["error_message"] = exc.code, exc.message
                continue
            result["num_partitions"], result["replication_factor"] = count, 1
            if topic is not None:
                result["topic_id"] = topic.topic_id
            if self.config_entries is not None and ctx.api_version >= 5:
                # v5+: every effective config of the new topic, sorted by name
                result["configs"] = [
                    {"name": e["name"], "value": e["value"], "read_only": e["read_only"],
                     "config_source": e["config_source"], "is_sensitive": e["is_sensitive"]}
                    for e in self.config_entries(name, canonical(configs))]
        return {"throttle_time_ms": 0, "topics": results}

    @serves("DeleteTopics")
    def delete_topics(self, _ctx, req: dict) -> dict:
        def name_of_id(topic_id: bytes) -> str | None:
            topic = self.catalogue.by_id.get(topic_id)
            return topic.name if topic else None

        def id_of_name(name: str) -> bytes | None:
            topic = self.catalogue.get(name)
            return topic.topic_id if topic else None
        results = []
        for name, result in delete_topic_answers(req, results, name_of_id, id_of_name):
            try:
                self.catalogue.delete(name)
            except TopicError as exc:
                result["error_code"], result["error_message"] = exc.code, exc.message
        return {"throttle_time_ms": 0, "responses": results}

    @serves("CreatePartitions")
    def create_partitions(self, _ctx, req: dict) -> dict:
        results = []
        for t in req["topics"]:
            result = {"name": t["name"], "error_code": Err.NONE, "error_message": None}
            results.append(result)
            try:
                self.catalogue.add_partitions(t["name"], t["count"], req["validate_only"])
            except TopicError as exc:
                result["error_code"], result["error_message"] = exc.code, exc.message
        return {"throttle_time_ms": 0, "results": results}

    # ------------------------------------------------------------- Metadata
    def metadata_topics(self, names: list[str] | None, allow_auto_create: bool,
                        version: int) -> list[dict]:
        if self.cluster is not None:
            return self.cluster.metadata_topics(names, allow_auto_create, version)
        node_id = self.config["node.id"]
        if names is None:
            chosen = list(self.catalogue.topics)
        else:
            chosen = names
        out = []
        for name in chosen:
            topic = self.catalogue.get(name)
            if topic is None and allow_auto_create and self.config["auto.create.topics.enable"] \
                    and topic_name_problem(name) is None:
                try:
                    topic = self.catalogue.create(name, self.config["num.partitions"])
                except TopicError:
                    topic = self.catalogue.get(name)
            if topic is None:
                code = (Err.INVALID_TOPIC_EXCEPTION if topic_name_problem(name)
                        else Err.UNKNOWN_TOPIC_OR_PARTITION)
                out.append({"error_code": code, "name": name, "topic_id": ZERO_UUID,
                            "is_internal": False, "partitions": [],
                            "topic_authorized_operations": AUTH_OPS_NOT_REQUESTED})
                continue
            partitions = [{"error_code": Err.NONE, "partition_index": p, "leader_id": node_id,
                           "leader_epoch": 0, "replica_nodes": [node_id], "isr_nodes": [node_id],
                           "offline_replicas": []} for p in range(len(topic.partitions))]
            out.append({"error_code": Err.NONE, "name": topic.name, "topic_id": topic.topic_id,
                        "is_internal": topic.internal, "partitions": partitions,
                        "topic_authorized_operations": AUTH_OPS_NOT_REQUESTED})
        return out
