"""Transaction APIs: InitProducerId (22), AddPartitionsToTxn (24),
AddOffsetsToTxn (25), EndTxn (26), TxnOffsetCommit (28), DescribeProducers
(61), DescribeTransactions (65), ListTransactions (66).

Checks that need the rest of the broker (does the partition exist, is the
group's shard loaded) are made here; the transaction core decides the rest.
"""
from __future__ import annotations

from typing import Callable

from ..coordinator.partitioner import partition_for
from ..coordinator.txn_offsets import txn_offset_commit
from ..protocol.api import error_item, error_response
from ..protocol.errors import Err
from .dispatch import Dispatcher, Reply, RequestContext, serves
from .txn_runtime import OFFSETS_TOPIC, TxnRuntime

# PRODUCER_FENCED (KIP-588) is sent as INVALID_PRODUCER_EPOCH below these versions
FENCED_SINCE = {22: 4, 24: 2, 25: 2, 26: 2}


def _for_version(ctx: RequestContext, code: int) -> int:
    if code == Err.PRODUCER_FENCED and ctx.api_version < FENCED_SINCE.get(ctx.api_key, 0):
        return Err.INVALID_PRODUCER_EPOCH
    return code


def _guarded(reply: Reply, step: Callable[[], None]) -> Callable[[], None]:
    """step(), whose failure fails `reply` (the connection then closes as for a
    handler that raised) instead of leaving the request unanswered."""
    def run() -> None:
        try:
            step()
        except Exception as exc:
            if not reply.done():
                reply.set_exception(exc)
    return run


class TxnHandlers:
    def __init__(self, runtime: TxnRuntime, producer_ids, groups) -> None:
        self.runtime = runtime
        self.core = runtime.core
        self.producer_ids = producer_ids  # idempotent producers (no transactional id)
        self.groups = groups              # GroupHandlers: the group coordinator's shards

    def register(self, d: Dispatcher) -> None:
        d.register_handlers(self)  # every @serves method below

    def _not_ready(self, tid: str | None) -> int:
        """NONE when this node coordinates `tid` now (an empty id is the
        core's to refuse), else NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS."""
        return self.runtime.state_error(tid) if tid else Err.NONE

    def _when_here(self, tid: str, respond: Callable[[int], dict],
                   write: Callable[[Callable[[int], None]], None]) -> Reply:
        """A write request answered without a task (each is one of a lone
        client's durable steps in series, so each loop iteration and task
        saved is latency saved): once `tid`'s completion under way is done
        (at once when none is), and this node still coordinates it,
        write(answer) appends, and answer(code) once durable answers
        respond(code)."""
        reply = Reply()

        def answer(code: int) -> None:
            reply.set_result(respond(code))

        def go() -> None:
            code = self._not_ready(tid)
            if code:
                answer(code)
            else:
                write(answer)
        self.runtime.when_settled(tid, _guarded(reply, go))
        return reply

    async def _settled_here(self, tid: str | None) -> int:
        """Wait for `tid`'s completion under way, then `_not_ready` again: the
        partition may have been unloaded during the wait (its ids left the core;
        the request would find no producer, INVALID_PRODUCER_ID_MAPPING, which a
        client takes as fatal), and Kafka answers NOT_COORDINATOR then."""
        await self.runtime.settled(tid)
        return self._not_ready(tid)

    # ------------------------------------------------------- InitProducerId
    @serves("InitProducerId")
    async def init_producer_id(self, ctx: RequestContext, req: dict) -> dict:
        tid = req["transactional_id"]
        if tid is None:
            return self.producer_ids.init_producer_id(ctx, req)
        code = self._not_ready(tid) or await self._settled_here(tid)
        if code:
            return error_response(ctx.api_key, ctx.api_version, req, code)
        res = self.core.init_producer_id(tid, req["transaction_timeout_ms"],
                                         req.get("producer_id", -1),
                                         req.get("producer_epoch", -1), self.runtime.clock.ms())
        # a fencing abort is finished before the answer (CONCURRENT_TRANSACTIONS):
        # the client's retry then finds the transaction complete
        code = await self.runtime.write_and_complete(res.records) or _for_version(ctx, res.error)
        if code:
            return error_response(ctx.api_key, ctx.api_version, req, code)
        return {"throttle_time_ms": 0, "error_code": Err.NONE, "producer_id": res.producer_id,
                "producer_epoch": res.producer_epoch}

    # --------------------------------------------------- AddPartitionsToTxn
    def _unknown(self, topics: list[dict]) -> set:
        bad = set()
        for t in topics:
            topic = self.runtime.catalogue.get(t["name"])
            count = -1 if topic is None else len(topic.partitions)
            for p in t["partitions"]:
                if not 0 <= p < count:
                    bad.add((t["name"], p))
        return bad

    @staticmethod
    def _results(topics: list[dict], code_of) -> list[dict]:
        return [{"name": t["name"], "results_by_partition": [
            {"partition_index": p, "partition_error_code": code_of((t["name"], p))}
            for p in t["partitions"]]} for t in topics]

    async def _add_one(self, ctx, tid: str, pid: int, epoch: int, topics: list[dict],
                       verify_only: bool) -> list[dict]:
        code = self._not_ready(tid)
        if code:
            return self._results(topics, lambda _tp: code)
        pairs = [(t["name"], p) for t in topics for p in t["partitions"]]
        if verify_only:
            res = self.core.verify_partitions(tid, pid, epoch, pairs)
            if res.error:
                return self._results(topics, lambda _tp: res.error)
            return self._results(topics, lambda tp: res.partition_errors[tp])
        unknown = self._unknown(topics)
        if unknown:
            return self._results(topics, lambda tp: Err.UNKNOWN_TOPIC_OR_PARTITION
                                 if tp in unknown else Err.OPERATION_NOT_ATTEMPTED)
        code = await self._settled_here(tid)
        if code:
            return self._results(topics, lambda _tp: code)
        res = self.core.add_partitions(tid, pid, epoch, pairs, self.runtime.clock.ms())
        error = await self.runtime.write(res.records) or _for_version(ctx, res.error)
        return self._results(topics, lambda _tp: error)

    @serves("AddPartitionsToTxn")
    def add_partitions_to_txn(self, ctx: RequestContext, req: dict):
        if ctx.api_version < 4:
            return self._add_for_client(ctx, req)
        return self._add_batched(ctx, req)

    def _add_for_client(self, ctx: RequestContext, req: dict):
        """v0-3 (a producer's): `_add_one` answered without a task."""
        tid, topics = req["v3_and_below_transactional_id"], req["v3_and_below_topics"]

        def respond(code: int) -> dict:
            return {"throttle_time_ms": 0,
                    "results_by_topic_v3_and_below": self._results(topics, lambda _tp: code)}
        code = self._not_ready(tid)
        if code:
            return respond(code)
        unknown = self._unknown(topics)
        if unknown:
            return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": self._results(
                topics, lambda tp: Err.UNKNOWN_TOPIC_OR_PARTITION
                if tp in unknown else Err.OPERATION_NOT_ATTEMPTED)}
        pairs = [(t["name"], p) for t in topics for p in t["partitions"]]

        def write(answer: Callable[[int], None]) -> None:
            res = self.core.add_partitions(tid, req["v3_and_below_producer_id"],
                                           req["v3_and_below_producer_epoch"], pairs,
                                           self.runtime.clock.ms())
            self.runtime.write_then(res.records,
                                    lambda code: answer(code or _for_version(ctx, res.error)))
        return self._when_here(tid, respond, write)

    async def _add_batched(self, ctx: RequestContext, req: dict) -> dict:
        """v4+ (a broker's, KIP-890): several transactions, some verify-only."""
        out = []
        for txn in req["transactions"]:
            results = await self._add_one(ctx, txn["transactional_id"], txn["producer_id"],
                                          txn["producer_epoch"], txn["topics"],
                                          txn["verify_only"])
            out.append({"transactional_id": txn["transactional_id"], "topic_results": results})
        return {"throttle_time_ms": 0, "error_code": Err.NONE, "results_by_transaction": out}

    # ------------------------------------------------------ AddOffsetsToTxn
    @serves("AddOffsetsToTxn")
    def add_offsets_to_txn(self, ctx: RequestContext, req: dict):
        tid = req["transactional_id"]
        code = self._not_ready(tid)
        if code:
            return error_response(ctx.api_key, ctx.api_version, req, code)  # its code is all it says

        def write(answer: Callable[[int], None]) -> None:
            # the group need not exist: its __consumer_offsets partition joins the txn
            partition = partition_for(req["group_id"], len(self.runtime.coordinator.shards))
            res = self.core.add_partitions(tid, req["producer_id"],
                                           req["producer_epoch"], [(OFFSETS_TOPIC, partition)],
                                           self.runtime.clock.ms())
            self.runtime.write_then(res.records,
                                    lambda code: answer(code or _for_version(ctx, res.error)))
        return self._when_here(tid, lambda code: error_response(ctx.api_key, ctx.api_version,
                                                                req, code), write)

    # --------------------------------------------------------------- EndTxn
    @serves("EndTxn")
    def end_txn(self, ctx: RequestContext, req: dict):
        # a retry while the last one's markers are under way answers as
        # Kafka does once it is CompleteCommit/Abort, not CONCURRENT_TRANSACTIONS
        tid = req["transactional_id"]
        code = self._not_ready(tid)
        if code:
            return error_response(ctx.api_key, ctx.api_version, req, code)  # its code is all it says

        def write(answer: Callable[[int], None]) -> None:
            res = self.core.end_txn(tid, req["producer_id"], req["producer_epoch"],
                                    req["committed"], self.runtime.clock.ms())
            # answered once Prepare* is durable (Kafka's shape); markers follow
            self.runtime.end_then(res.records,
                                  lambda code: answer(code or _for_version(ctx, res.error)))
        return self._when_here(tid, lambda code: error_response(ctx.api_key, ctx.api_version,
                                                                req, code), write)

    # ------------------------------------------------------ TxnOffsetCommit
    @serves("TxnOffsetCommit")
    def txn_offset_commit(self, ctx: RequestContext, req: dict):
        version = ctx.api_version

        def every(code: int) -> dict:
            if code == Err.COORDINATOR_LOAD_IN_PROGRESS and version < 2:
                code = Err.COORDINATOR_NOT_AVAILABLE
            return error_response(ctx.api_key, version, req, code)

        group_id = req["group_id"]
        if not group_id:
            return every(Err.INVALID_GROUP_ID)
        tid = req["transactional_id"]
        partition = self.groups.runtime.partition_for(group_id)
        markers = self.runtime.markers
        if markers is not None and self.runtime.state_error(tid) == Err.NOT_COORDINATOR:
            # a cluster: the producer's coordinator is another node; ask it
            return self._commit_verified_remotely(req, version, every, tid, partition)
        error = self._not_ready(tid)
        if error:
            return every(error)
        # the group's partition must be in the producer's transaction, or no
        # marker would ever resolve these offsets (KIP-890 part 1)
        code = self.core.in_transaction(req["producer_id"], req["producer_epoch"], OFFSETS_TOPIC,
                                        partition)
        return self._commit_checked(req, version, every, code)

    async def _commit_verified_remotely(self, req, version: int, every, tid: str,
                                        partition: int):
        code = await self.runtime.markers.verify(tid, req["producer_id"], req["producer_epoch"],
                                                 OFFSETS_TOPIC, partition)
        if code == Err.PRODUCER_FENCED:
            code = Err.INVALID_PRODUCER_EPOCH  # TxnOffsetCommit never answers 90
        elif code in (Err.TRANSACTION_ABORTABLE, Err.INVALID_PRODUCER_ID_MAPPING):
            code = Err.INVALID_TXN_STATE
        elif code in (Err.NOT_COORDINATOR, Err.COORDINATOR_LOAD_IN_PROGRESS,
                      Err.CONCURRENT_TRANSACTIONS):
            code = Err.COORDINATOR_NOT_AVAILABLE  # retriable: the client asks again
        answer = self._commit_checked(req, version, every, code)
        if isinstance(answer, Reply):
            answer = await answer
        return answer

    def _commit_checked(self, req, version: int, every, code: int):
        if code == Err.INVALID_TXN_STATE and version >= 4:
            code = Err.TRANSACTION_ABORTABLE
        if code:
            return every(code)
        self.groups.mark_unknown_partitions(req["topics"])

        return self.groups.runtime.write_txn(
            req["group_id"], req["producer_id"], req["producer_epoch"],
            lambda core, now: txn_offset_commit(core, req, version, now), every)

    # ----------------------------------------------------- describing state
    @serves("DescribeTransactions")
    async def describe_transactions(self, ctx: RequestContext, req: dict) -> dict:
        states = []
        for tid in req["transactional_ids"]:
            code = self._not_ready(tid)
            if code:
                states.append(error_item(ctx.api_key, ctx.api_version, ("transactional_ids",),
                                         tid, code))
            else:
                states.append(self.core.describe(tid))
        return {"throttle_time_ms": 0, "transaction_states": states}

    @serves("ListTransactions")
    async def list_transactions(self, ctx: RequestContext, req: dict) -> dict:
        # this node's partitions (an admin client asks every node and merges)
        if self.runtime.loading:
            return error_response(ctx.api_key, ctx.api_version, req,
                                  Err.COORDINATOR_LOAD_IN_PROGRESS)
        return self.core.list_transactions(req["state_filters"], req["producer_id_filters"],
                                           req.get("duration_filter", -1), self.runtime.clock.ms())

    @serves("DescribeProducers")
    def describe_producers(self, _ctx: RequestContext, req: dict) -> dict:
        topics = []
        for t in req["topics"]:
            topic = self.runtime.catalogue.get(t["name"])
            parts = []
            for p in t["partition_indexes"]:
                entry = {"partition_index": p, "error_code": Err.NONE, "error_message": None,
                         "active_producers": []}
                parts.append(entry)
                if topic is None or not 0 <= p < len(topic.partitions):
                    entry["error_code"] = Err.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                if isinstance(self.runtime.data._replicated(topic, p), int):
                    # a cluster: only the partition's leader has its producer state
                    entry["error_code"] = Err.NOT_LEADER_OR_FOLLOWER
                    continue
                state = self.runtime.data.txn_state(topic.partitions[p])
                entry["active_producers"] = [
                    {"producer_id": pid, "producer_epoch": e.epoch,
                     "last_sequence": e.last_sequence, "last_timestamp": e.last_timestamp,
                     "coordinator_epoch": e.coordinator_epoch,
                     "current_txn_start_offset": state.ongoing.get(pid, -1)}
                    for pid, e in sorted(state.producers.items())]
            topics.append({"name": t["name"], "partitions": parts})
        return {"throttle_time_ms": 0, "topics": topics}
