"""Transaction markers between nodes (a cluster).

- `MarkerWriter`: writes one marker on this node, durably, for a partition
  this node leads: a data partition through the data plane (acknowledged at
  its high watermark), a __consumer_offsets partition through its shard's
  write primitive (so the group core replays it; the group runtime's
  durability waits for the high watermark).
- WriteTxnMarkers (27), Kafka's coordinator-to-leader API, served by every
  node for the partitions it leads (authorization: CLUSTER_ACTION on the
  cluster, security/checks.py).
- `MarkerSender`: the transaction coordinator's side (Kafka's
  TransactionMarkerChannelManager): each partition of a completing
  transaction gets its marker from the node leading it, this one directly,
  others by WriteTxnMarkers over the inter-broker listener; retriable
  answers (NOT_LEADER_OR_FOLLOWER after a leadership move, a node down,
  too few replicas) are retried until every partition is done or this node
  stops coordinating the transaction.  Also the KIP-890 question another
  node's coordinator answers (AddPartitionsToTxn v4 VerifyOnly) for a
  TxnOffsetCommit whose producer is coordinated elsewhere.
"""
from __future__ import annotations

import asyncio
import logging

from ..coordinator.partitioner import partition_for
from ..protocol.api import serves
from ..protocol.errors import Err
from ..protocol.internal_topics import OFFSETS_TOPIC, TXN_TOPIC
from .peer_calls import PeerCalls

log = logging.getLogger("kcoord.txn.markers")

WRITE_TXN_MARKERS, ADD_PARTITIONS_TO_TXN = 27, 24
MARKERS_VERSION, VERIFY_VERSION = 1, 4
SHARD_LOAD_WAIT_S = 5.0
REQUEST_TIMEOUT_S = 10.0
RETRY_FIRST_S, RETRY_MAX_S = 0.05, 1.0
# the transaction was superseded (a newer producer epoch or coordinator): stop
SUPERSEDED = {Err.INVALID_PRODUCER_EPOCH, Err.TRANSACTION_COORDINATOR_FENCED}


class MarkerWriter:
    def __init__(self, data_plane, coordinator) -> None:
        self.data = data_plane
        self.coordinator = coordinator  # the group coordinator runtime

    async def write(self, topic: str, partition: int, producer_id: int, epoch: int,
                    commit: bool, coordinator_epoch: int) -> int:
        if topic != OFFSETS_TOPIC:
            return await self.data.write_marker_durable(topic, partition, producer_id, epoch,
                                                        commit, coordinator_epoch)
        # NOT_LEADER_OR_FOLLOWER when not coordinated here: the sender asks again
        return await self.coordinator.complete_txn(partition, producer_id, epoch, commit,
                                                   load_wait=SHARD_LOAD_WAIT_S)


class WriteTxnMarkersHandler:
    """WriteTxnMarkers (27): one control batch per (marker, partition) on
    the partitions this node leads."""

    def __init__(self, writer: MarkerWriter) -> None:
        self.writer = writer

    @serves("WriteTxnMarkers")
    async def write_txn_markers(self, _ctx, req: dict) -> dict:
        out = []
        for m in req["markers"]:
            jobs = []
            for t in m["topics"]:
                for p in t["partition_indexes"]:
                    jobs.append((t["name"], p, self.writer.write(
                        t["name"], p, m["producer_id"], m["producer_epoch"],
                        m["transaction_result"], m["coordinator_epoch"])))
            codes = await asyncio.gather(*(j[2] for j in jobs))
            topics: dict[str, list] = {}
            for (name, p, _), code in zip(jobs, codes):
                topics.setdefault(name, []).append({"partition_index": p, "error_code": code})
            out.append({"producer_id": m["producer_id"], "topics": [
                {"name": n, "partitions": ps} for n, ps in topics.items()]})
        return {"markers": out}


class MarkerSender:
    """The coordinator's side: markers to each partition's leader."""

    def __init__(self, cluster, writer: MarkerWriter) -> None:
        self.cluster = cluster          # ClusterNode: the view, peers' addresses, TLS/SASL
        self.writer = writer
        self.node_id = cluster.node_id
        self._peers = PeerCalls(cluster, f"kcoord-txn-{self.node_id}", REQUEST_TIMEOUT_S)
        self._call = self._peers.call

    async def write(self, c, coordinator_epoch: int, still_coordinator) -> bool:
        """Every partition of completion `c` has its marker (or is gone or
        superseded): True; False once still_coordinator() says no."""
        pending = set(c.partitions)
        delay = RETRY_FIRST_S
        while pending:
            if not still_coordinator():
                return False
            view = self.cluster.view
            by_leader: dict[int, list] = {}
            for topic, p in sorted(pending):
                record = view.topics.get(topic)
                if record is None or p >= record.partitions:
                    pending.discard((topic, p))  # deleted: nothing to mark
                    continue
                state = view.state(topic, p)
                if state is not None and state.leader >= 0:
                    by_leader.setdefault(state.leader, []).append((topic, p))
            results = await asyncio.gather(*(
                self._send(leader, tps, c, coordinator_epoch)
                for leader, tps in by_leader.items()))
            for answers in results:
                for tp, code in answers:
                    if code == Err.NONE:
                        pending.discard(tp)
                    elif code in SUPERSEDED:
                        log.warning("marker for %s on %s-%d refused (%d): superseded",
                                    c.transactional_id, tp[0], tp[1], code)
                        pending.discard(tp)
            if pending:
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)
        return True

    async def _send(self, leader: int, tps: list, c, coordinator_epoch: int) -> list:
        if leader == self.node_id:
            codes = await asyncio.gather(*(self.writer.write(
                t, p, c.producer_id, c.producer_epoch, c.commit, coordinator_epoch)
                for t, p in tps))
            return list(zip(tps, codes))
        by_topic: dict[str, list] = {}
        for t, p in tps:
            by_topic.setdefault(t, []).append(p)
        body = {"markers": [{"producer_id": c.producer_id, "producer_epoch": c.producer_epoch,
                             "transaction_result": c.commit, "coordinator_epoch": coordinator_epoch,
                             "topics": [{"name": t, "partition_indexes": ps}
                                        for t, ps in by_topic.items()]}]}
        try:
            resp = await self._call(leader, WRITE_TXN_MARKERS, MARKERS_VERSION, body)
        except Exception as exc:  # down, moved, refused: asked again
            log.info("WriteTxnMarkers to node %d failed: %s", leader, exc)
            return [(tp, Err.REQUEST_TIMED_OUT) for tp in tps]
        answers = []
        for m in resp["markers"]:
            for t in m["topics"]:
                for p in t["partitions"]:
                    answers.append(((t["name"], p["partition_index"]), p["error_code"]))
        return answers

    async def verify(self, transactional_id: str, producer_id: int, epoch: int, topic: str,
                     partition: int) -> int:
        """Ask the transaction's coordinator whether (topic, partition) is in
        the producer's ongoing transaction (AddPartitionsToTxn v4 VerifyOnly):
        NONE, TRANSACTION_ABORTABLE, a producer error, or
        COORDINATOR_NOT_AVAILABLE when the coordinator cannot be asked."""
        view = self.cluster.view
        record = view.topics.get(TXN_TOPIC)
        if record is None:
            return Err.COORDINATOR_NOT_AVAILABLE
        state = view.state(TXN_TOPIC, partition_for(transactional_id, record.partitions))
        if state is None or state.leader < 0 or state.leader == self.node_id:
            return Err.COORDINATOR_NOT_AVAILABLE  # not placed, or loading here
        body = {"transactions": [{"transactional_id": transactional_id,
                                  "producer_id": producer_id, "producer_epoch": epoch,
                                  "verify_only": True,
                                  "topics": [{"name": topic, "partitions": [partition]}]}]}
        try:
            resp = await self._call(state.leader, ADD_PARTITIONS_TO_TXN, VERIFY_VERSION, body)
        except Exception as exc:
            log.info("verifying %s with node %d failed: %s", transactional_id, state.leader, exc)
            return Err.COORDINATOR_NOT_AVAILABLE
        if resp["error_code"]:
            return resp["error_code"]
        for txn in resp["results_by_transaction"]:
            for t in txn["topic_results"]:
                for p in t["results_by_partition"]:
                    return p["partition_error_code"]
        return Err.COORDINATOR_NOT_AVAILABLE

    def close(self) -> None:
        self._peers.close()
