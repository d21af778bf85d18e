"""The harness's own requests (kcoord's codec over a blocking socket): who
leads what, and the offsets register's commits and fetches."""
from __future__ import annotations

from tests.clients.wire import WireClient

METADATA, FIND_COORDINATOR, OFFSET_COMMIT, OFFSET_FETCH = 3, 10, 8, 9
JOIN_GROUP, SYNC_GROUP, HEARTBEAT, CREATE_TOPICS = 11, 14, 12, 19


def connect(addr: tuple[str, int], timeout: float = 5.0) -> WireClient:
    return WireClient(addr[1], host=addr[0], timeout=timeout)


def metadata_of(addr: tuple[str, int], topics: list[str] | None = None) -> dict:
    with connect(addr) as c:
        return c.request(METADATA, 12, {
            "topics": None if topics is None else [{"name": t, "topic_id": bytes(16)}
                                                   for t in topics],
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})


def leaders(meta: dict, topic: str) -> dict[int, int]:
    for t in meta["topics"]:
        if t["name"] == topic:
            return {p["partition_index"]: p["leader_id"] for p in t["partitions"]}
    return {}


def create_topic(addr, name: str, partitions: int, rf: int = 3,
                 configs: dict[str, str] | None = None) -> int:
    with connect(addr, timeout=30) as c:
        r = c.request(CREATE_TOPICS, 7, {"topics": [{
            "name": name, "num_partitions": partitions, "replication_factor": rf,
            "assignments": [], "configs": [{"name": k, "value": v}
                                           for k, v in (configs or {}).items()]}],
            "timeout_ms": 30000, "validate_only": False})
    return r["topics"][0]["error_code"]


def find_coordinator(addr, key: str, key_type: int = 0) -> tuple[int, int]:
    """(error code, node id)."""
    with connect(addr) as c:
        r = c.request(FIND_COORDINATOR, 3, {"key": key, "key_type": key_type})
    return r["error_code"], r["node_id"]
