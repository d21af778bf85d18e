"""A cluster node stopped gracefully while consumers are parked in Fetch
long polls on partitions it leads and producers write to it: every parked
fetch is answered before the connection closes, the node exits 0, and no
task fails on a closed log ("Task exception was never retrieved ... log is
closed" once per parked consumer, as the fault-harness issue reported)."""
from __future__ import annotations

import threading

from kcoord.protocol.records import build_batch
from tests.clients.wire import FETCH, WireClient, decode_response, encode_request, produce
from tests.cluster.support import Cluster, wait_until
from tests.server.test_stop_drain import VERSION, fetch_body

TOPIC = "parked"


def test_parked_fetches_are_answered_when_a_cluster_node_stops(etcd, tmp_path):
    cluster = Cluster(etcd, tmp_path, settings={"min.insync.replicas": "1"}).start()
    try:
        with WireClient(cluster.nodes[1].port) as c:
            r = c.request(19, 7, {"topics": [{"name": TOPIC, "num_partitions": 3,
                                              "replication_factor": 3, "assignments": [],
                                              "configs": []}],
                                  "timeout_ms": 30000, "validate_only": False})
            assert r["topics"][0]["error_code"] == 0, r

        def leaders():
            meta = cluster.metadata(1, [TOPIC])
            found = {p["partition_index"]: p["leader_id"] for p in meta["topics"][0]["partitions"]}
            return found if all(v > 0 for v in found.values()) else None
        led = wait_until(leaders, "every partition led")
        victim = led[0]
        mine = [p for p, node in led.items() if node == victim]
        stop = threading.Event()
        produced = []

        def producer(acks):
            try:
                with WireClient(cluster.nodes[victim].port, timeout=10) as c:
                    while not stop.is_set():
                        for p in mine:
                            produce(c, TOPIC, p, build_batch([(None, b"v", [], None)]), acks=acks)
                            produced.append(acks)
            except (OSError, ConnectionError):
                pass  # the node went away under it: what matters is the node's log
        writers = [threading.Thread(target=producer, args=(a,), daemon=True) for a in (1, -1)]
        for t in writers:
            t.start()
        wait_until(lambda: len(produced) > 20, "writes under way")
        parked = []
        for p in mine * 3:
            c = WireClient(cluster.nodes[victim].port, timeout=60)
            body = fetch_body(TOPIC, 60_000)
            body["topics"][0]["partitions"][0]["partition"] = p
            body["min_bytes"] = 1 << 30  # more than will ever come: it waits its 60 s
            now = fetch_body(TOPIC, 0)
            now["topics"][0]["partitions"][0]["partition"] = p
            # one write, so one read on the server: once the first is answered
            # the long poll behind it has been read and is parked
            c.send_raw(encode_request(FETCH, VERSION, now, 1)
                       + encode_request(FETCH, VERSION, body, 2))
            assert decode_response(FETCH, VERSION, c.recv_frame())[0] == 1
            parked.append(c)
        node = cluster.nodes[victim]
        node.stop()
        stop.set()
        assert node.proc.returncode == 0, node.log_text()
        for c in parked:
            cid, _ = decode_response(FETCH, VERSION, c.recv_frame())  # answered, not dropped
            assert cid == 2
            c.close()
        log = "\n".join(node.log_lines)
        for marker in ("never retrieved", "log is closed", "Traceback"):
            assert marker not in log, log[-5000:]
    finally:
        cluster.stop()
