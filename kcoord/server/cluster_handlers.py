"""DescribeCluster (60) and DescribeClientQuotas (48), answered as Kafka
answers them on a one-node cluster with no quotas set."""
from __future__ import annotations

from ..protocol.api import AUTH_OPS_NOT_REQUESTED, serves
from ..protocol.errors import Err
from .config import Config

MISMATCHED_ENDPOINT_TYPE, UNSUPPORTED_ENDPOINT_TYPE = 114, 115
BROKERS_ENDPOINT, CONTROLLERS_ENDPOINT = 1, 2
# AclOperation codes a CLUSTER resource supports: CREATE 5, ALTER 7, DESCRIBE 8,
# CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12,
# CREATE_TOKENS 13, DESCRIBE_TOKENS 14; with no authorizer Kafka reports all of them
CLUSTER_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12, 13, 14))
QUOTA_ENTITY_TYPES = ("user", "client-id", "ip")
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


class ClusterHandlers:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.cluster = None  # cluster mode: nodes and controller from kcoord/cluster/node.py

    def cluster_operations(self, _ctx) -> int:
        """The cluster operations the caller may perform (an authorizer narrows this)."""
        return CLUSTER_OPERATIONS

    @serves("DescribeCluster")
    def describe_cluster(self, ctx, req: dict) -> dict:
        host, port = self.config.advertised_for(ctx.listener)
        node_id = self.config["node.id"]
        endpoint = req.get("endpoint_type", BROKERS_ENDPOINT)
        response = {"throttle_time_ms": 0, "error_code": Err.NONE, "error_message": None,
                    "endpoint_type": endpoint, "cluster_id": self.config["cluster.id"],
                    "controller_id": node_id, "brokers": [],
                    "cluster_authorized_operations": AUTH_OPS_NOT_REQUESTED}
        if endpoint not in (BROKERS_ENDPOINT, CONTROLLERS_ENDPOINT):
            response["error_code"] = UNSUPPORTED_ENDPOINT_TYPE
            response["error_message"] = f"Unsupported endpoint type {endpoint}"
            return response
        if endpoint == CONTROLLERS_ENDPOINT:
            response["error_code"] = MISMATCHED_ENDPOINT_TYPE
            response["error_message"] = "The request was sent to an endpoint of type BROKER, " \
                                        "but we wanted an endpoint of type CONTROLLER"
            return response
        response["brokers"] = [{"broker_id": node_id, "host": host, "port": port, "rack": None,
                                "is_fenced": False}]
        if self.cluster is not None:
            response["controller_id"] = self.cluster.controller_id()
            response["brokers"] = [{"broker_id": b["node_id"], "host": b["host"],
                                    "port": b["port"], "rack": None, "is_fenced": False}
                                   for b in self.cluster.brokers(ctx.listener)]
        if req.get("include_cluster_authorized_operations"):
            response["cluster_authorized_operations"] = self.cluster_operations(ctx)
        return response

    @serves("DescribeClientQuotas")
    def describe_client_quotas(self, _ctx, req: dict) -> dict:
        response = {"throttle_time_ms": 0, "error_code": Err.NONE, "error_message": None,
                    "entries": []}
        seen = set()
        for c in req["components"]:
            problem = None
            if c["entity_type"] not in QUOTA_ENTITY_TYPES:
                problem = f"Custom entity type '{c['entity_type']}' not supported"
            elif c["entity_type"] in seen:
                problem = f"Duplicate {c['entity_type']} component entity type"
            elif c["match_type"] not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
                problem = f"Unexpected match type {c['match_type']}"
            elif c["match_type"] == MATCH_EXACT and c["match"] is None:
                problem = "Exact match requires a name"
            seen.add(c["entity_type"])
            if problem:
                response["error_code"], response["error_message"] = Err.INVALID_REQUEST, problem
                response["entries"] = None
                return response
        if "ip" in seen and len(seen) > 1:
            response["error_code"] = Err.INVALID_REQUEST
            response["error_message"] = "Invalid entity filter component combination, IP " \
                                        "filter component should not be used with user or " \
                                        "clientId filter component."
            response["entries"] = None
        return response  # no quotas are set on this server (and none are enforced)
