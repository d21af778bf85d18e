"""__share_group_state on 3 real nodes and etcd: FindCoordinator key type 2
answers the leader of the key's partition (the topic created on first use,
replicated), only that leader serves the share-state RPCs, and what it
answered survives SIGKILL of it (the new leader reads it back)."""
import signal

from kcoord.coordinator.partitioner import partition_for
from kcoord.protocol.errors import Err
from kcoord.server.share_runtime import share_key
from tests.clients.wire import WireClient, create_topic, metadata
from tests.cluster.support import Cluster, wait_until

FIND, INIT, READ = 10, 83, 84
SHARE_STATE = "__share_group_state"


def _coordinator(cluster, node_id: int, key: str):
    with WireClient(cluster.nodes[node_id].port) as c:
        [a] = c.request(FIND, 6, {"key_type": 2, "coordinator_keys": [key]})["coordinators"]
    return a if a["error_code"] == 0 else None


def _state_call(cluster, node_id: int, api: int, body: dict) -> dict:
    with WireClient(cluster.nodes[node_id].port) as c:
        [t] = c.request(api, 0, body)["results"]
    return t["partitions"][0]


def test_share_state_follows_its_partition_leader(etcd, tmp_path):
    cluster = Cluster(etcd, tmp_path, settings={
        "share.coordinator.state.topic.num.partitions": "3"}).start()
    try:
        with WireClient(cluster.nodes[1].port) as c:
            create_topic(c, "t", 1)
            tid = metadata(c, ["t"])["topics"][0]["topic_id"]
        key = share_key("g", tid, 0)
        found = wait_until(lambda: _coordinator(cluster, 1, key), "a share coordinator")
        leader = found["node_id"]
        [rows] = [t for t in cluster.metadata(1, [SHARE_STATE])["topics"]]
        part = rows["partitions"][partition_for(key, 3)]
        assert part["leader_id"] == leader and sorted(part["replica_nodes"]) == [1, 2, 3]
        init = {"group_id": "g", "topics": [{"topic_id": tid, "partitions": [
            {"partition": 0, "state_epoch": 1, "start_offset": 42}]}]}
        read = {"group_id": "g", "topics": [{"topic_id": tid, "partitions": [
            {"partition": 0, "leader_epoch": 0}]}]}
        wait_until(lambda: _state_call(cluster, leader, INIT, init)["error_code"] == 0,
                   "initialize on the leader")
        other = next(n for n in (1, 2, 3) if n != leader)
        assert _state_call(cluster, other, INIT, init)["error_code"] == Err.NOT_COORDINATOR
        cluster.nodes[leader].proc.send_signal(signal.SIGKILL)
        cluster.nodes[leader].proc.wait(10)
        survivor = next(n for n in (1, 2, 3) if n != leader)
        moved = wait_until(lambda: (a := _coordinator(cluster, survivor, key))
                           and a["node_id"] != leader and a, "a new share coordinator")
        state = wait_until(lambda: (p := _state_call(cluster, moved["node_id"], READ, read))
                           ["error_code"] == 0 and p, "the state on the new leader")
        assert (state["state_epoch"], state["start_offset"]) == (1, 42)
    finally:
        cluster.stop()
