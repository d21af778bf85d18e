"""Partition admin APIs: DeleteRecords (21), DescribeLogDirs (35),
ElectLeaders (43), ListPartitionReassignments (46) and
DescribeTopicPartitions (75), answered as Kafka answers them on a
one-node cluster."""
from __future__ import annotations

import os

from ..log.errors import LogError
from ..protocol.api import AUTH_OPS_NOT_REQUESTED, serves
from ..protocol.errors import Err
from .catalogue import Catalogue

ELECTION_NOT_NEEDED = 84


class PartitionAdmin:
    def __init__(self, catalogue: Catalogue, topic_admin, config) -> None:
        self.catalogue = catalogue
        self.topic_admin = topic_admin  # its metadata_topics gives leaders, replicas, ISR
        self.config = config

    # ------------------------------------------------------- DeleteRecords
    @serves("DeleteRecords")
    def delete_records(self, _ctx, req: dict) -> dict:
        topics = []
        for treq in req["topics"]:
            topic = self.catalogue.get(treq["name"])
            parts = []
            for preq in treq["partitions"]:
                index, offset = preq["partition_index"], preq["offset"]
                entry = {"partition_index": index, "low_watermark": -1, "error_code": Err.NONE}
                parts.append(entry)
                if topic is None or not 0 <= index < len(topic.partitions):
                    entry["error_code"] = Err.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                policy = topic.configs.get("cleanup.policy") or ",".join(
                    self.config.values.get("log.cleanup.policy", ["delete"]))
                if "delete" not in [p.strip() for p in policy.split(",")]:
                    entry["error_code"] = Err.POLICY_VIOLATION
                    continue
                plog = topic.partitions[index]
                high_watermark = plog.durable_end_offset if topic.internal else plog.log_end_offset
                if offset == -1:
                    offset = high_watermark
                if offset < 0 or offset > high_watermark:
                    entry["error_code"] = Err.OFFSET_OUT_OF_RANGE
                    continue
                try:
                    entry["low_watermark"] = plog.advance_log_start(offset)
                except (OSError, LogError):
                    entry["error_code"] = Err.KAFKA_STORAGE_ERROR
            topics.append({"name": treq["name"], "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}

    # ----------------------------------------------------- DescribeLogDirs
    @serves("DescribeLogDirs")
    def describe_log_dirs(self, _ctx, req: dict) -> dict:
        wanted = None
        if req["topics"] is not None:
            wanted = {}
            for t in req["topics"]:
                wanted.setdefault(t["topic"], set()).update(t["partitions"])
        topics = []
        for name, topic in sorted(self.catalogue.topics.items()):
            if wanted is not None and name not in wanted:
                continue
            parts = [{"partition_index": p, "partition_size": plog.size_bytes, "offset_lag": 0,
                      "is_future_key": False}
                     for p, plog in enumerate(topic.partitions)
                     if wanted is None or p in wanted[name]]
            if parts:  # topics with no matching partitions are left out
                topics.append({"name": name, "partitions": parts})
        data_dir = self.catalogue.data_dir.resolve()
        try:
            stat = os.statvfs(data_dir)
            total, usable = stat.f_blocks * stat.f_frsize, stat.f_bavail * stat.f_frsize
        except OSError:
            total = usable = -1
        return {"throttle_time_ms": 0, "error_code": Err.NONE, "results": [{
            "error_code": Err.NONE, "log_dir": str(data_dir), "topics": topics,
            "total_bytes": total, "usable_bytes": usable}]}

    # -------------------------------------------------------- ElectLeaders
    @serves("ElectLeaders")
    def elect_leaders(self, _ctx, req: dict) -> dict:
        """One replica per partition: the leader is always the preferred one
        and no other can be elected, so every named partition is
        ELECTION_NOT_NEEDED; with null (all partitions) those entries are
        left out, as Kafka does."""
        results = []
        if req["topic_partitions"] is None:
            results = [{"topic": name, "partition_result": []}
                       for name in sorted(self.catalogue.topics)]
        else:
            for t in req["topic_partitions"]:
                topic = self.catalogue.get(t["topic"])
                parts = []
                for p in t["partitions"]:
                    known = topic is not None and 0 <= p < len(topic.partitions)
                    parts.append({
                        "partition_id": p,
                        "error_code": ELECTION_NOT_NEEDED if known
                        else Err.UNKNOWN_TOPIC_OR_PARTITION,
                        "error_message": "Leader election not needed for topic partition"
                        if known else "The topic or partition does not exist"})
                results.append({"topic": t["topic"], "partition_result": parts})
        return {"throttle_time_ms": 0, "error_code": Err.NONE,
                "replica_election_results": results}

    # ------------------------------------------ ListPartitionReassignments
    @serves("ListPartitionReassignments")
    def list_partition_reassignments(self, _ctx, _req: dict) -> dict:
        """No reassignment is ever in progress (kcoord does not move replicas):
        NONE with no topics, as Kafka answers when none is ongoing."""
        return {"throttle_time_ms": 0, "error_code": Err.NONE, "error_message": None,
                "topics": []}

    # --------------------------------------------- DescribeTopicPartitions
    @serves("DescribeTopicPartitions")
    def describe_topic_partitions(self, _ctx, req: dict) -> dict:
        names = sorted({t["name"] for t in req["topics"]}) if req["topics"] \
            else sorted(self.catalogue.topics)
        cursor = req.get("cursor")
        limit = req["response_partition_limit"]
        if cursor is not None:
            if (req["topics"] and cursor["topic_name"] not in names) \
                    or cursor["partition_index"] < 0:
                return {"throttle_time_ms": 0, "next_cursor": None, "topics": [
                    self._topic_error(n, Err.INVALID_REQUEST) for n in names]}
            names = [n for n in names if n >= cursor["topic_name"]]
        described = {t["name"]: t for t in self.topic_admin.metadata_topics(names, False, 12)}
        out, budget, next_cursor = [], max(limit, 1), None
        for name in names:
            meta = described.get(name)
            if meta is None or meta["error_code"] != Err.NONE:
                out.append(self._topic_error(name, meta["error_code"] if meta
                                             else Err.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            first = cursor["partition_index"] if cursor and name == cursor["topic_name"] else 0
            parts = [p for p in meta["partitions"] if p["partition_index"] >= first]
            if budget <= 0:
                next_cursor = {"topic_name": name, "partition_index": first}
                break
            taken, rest = parts[:budget], parts[budget:]
            budget -= len(taken)
            out.append({"error_code": Err.NONE, "name": name, "topic_id": meta["topic_id"],
                        "is_internal": meta["is_internal"],
                        "partitions": [self._partition(p) for p in taken],
                        "topic_authorized_operations": AUTH_OPS_NOT_REQUESTED})
            if rest:
                next_cursor = {"topic_name": name, "partition_index": rest[0]["partition_index"]}
                break
        return {"throttle_time_ms": 0, "topics": out, "next_cursor": next_cursor}

    @staticmethod
    def _topic_error(name: str, code: int) -> dict:
        return {"error_code": code, "name": name, "topic_id": bytes(16), "is_internal": False,
                "partitions": [], "topic_authorized_operations": AUTH_OPS_NOT_REQUESTED}

    @staticmethod
    def _partition(p: dict) -> dict:
        return {"error_code": p["error_code"], "partition_index": p["partition_index"],
                "leader_id": p["leader_id"], "leader_epoch": p["leader_epoch"],
                "replica_nodes": p["replica_nodes"], "isr_nodes": p["isr_nodes"],
                "eligible_leader_replicas": [], "last_known_elr": [],
                "offline_replicas": p.get("offline_replicas", [])}
