"""The inter-broker share-state APIs (83-87), served by the share coordinator.

Each request names one group and (topic id, partitions); every key
(group, topic id, partition) is one operation on the shard that owns it
(share_runtime.py), and the response gathers the keys' answers by topic.
As Kafka's ShareCoordinatorService, a request with no group id, no topics
or a topic without partitions gets an empty response.  The callers' ACL
(CLUSTER_ACTION on the cluster) is checked by security/checks.py.
"""
from __future__ import annotations

from .dispatch import RequestContext, serves
from .group_handlers import gather
from .share_runtime import ShareCoordinatorRuntime
from ..share.coordinator import batches_from_rows


class ShareStateHandlers:
    def __init__(self, runtime: ShareCoordinatorRuntime) -> None:
        self.runtime = runtime

    def _each(self, req: dict, op: str, args):
        """op on every key of the request, args(partition row) its arguments."""
        group_id, topics = req["group_id"], req["topics"]
        if not group_id or not topics or any(not t["partitions"] for t in topics):
            return {"results": []}
        call = self.runtime.call
        answers, shape = [], []
        for t in topics:
            shape.append((t["topic_id"], len(t["partitions"])))
            for p in t["partitions"]:
                answers.append(call(op, group_id, t["topic_id"], p["partition"], *args(p)))

        def build(done: list) -> dict:
            results, i = [], 0
            for topic_id, n in shape:
                results.append({"topic_id": topic_id, "partitions": done[i:i + n]})
                i += n
            return {"results": results}
        return gather(answers, build)

    @serves("InitializeShareGroupState")
    def initialize(self, _ctx: RequestContext, req: dict):
        return self._each(req, "initialize", lambda p: (p["state_epoch"], p["start_offset"]))

    @serves("ReadShareGroupState")
    def read(self, _ctx: RequestContext, req: dict):
        return self._each(req, "read", lambda p: (p["leader_epoch"],))

    @serves("WriteShareGroupState")
    def write(self, _ctx: RequestContext, req: dict):
        return self._each(req, "write", lambda p: (
            p["state_epoch"], p["leader_epoch"], p["start_offset"],
            p.get("delivery_complete_count", -1), batches_from_rows(p["state_batches"])))

    @serves("DeleteShareGroupState")
    def delete(self, _ctx: RequestContext, req: dict):
        return self._each(req, "delete", lambda _p: ())

    @serves("ReadShareGroupStateSummary")
    def summary(self, _ctx: RequestContext, req: dict):
        return self._each(req, "summary", lambda p: (p["leader_epoch"],))
