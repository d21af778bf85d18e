"""A single node completes a transaction without a task (TxnRuntime.
_complete_here): its markers are written once Prepare* is durable and
Complete* follows from their durability round.  Driven in one event loop
on a tmp data dir: a real data plane, group runtime and transaction
runtime, one fsync batcher as in `kcoord serve`."""
from __future__ import annotations

import asyncio
import threading

from kcoord.broker.data_handlers import DataPlane
from kcoord.broker.producer_ids import ProducerIds
from kcoord.log.durability import LocalDurability
from kcoord.log.fsync_batcher import FsyncBatcher
from kcoord.protocol.errors import Err
from kcoord.server.txn_handlers import TxnHandlers
from kcoord.server.txn_runtime import TxnRuntime
from kcoord.txn.records import ONGOING

from tests.server.runtime_harness import Node, answer, ctx


def _add_partitions(ids: dict) -> dict:
    return {"v3_and_below_transactional_id": "tx", "v3_and_below_producer_id": ids["pid"],
            "v3_and_below_producer_epoch": ids["epoch"],
            "v3_and_below_topics": [{"name": "t", "partitions": [0]}]}


def _code(response: dict) -> int:
    return response["results_by_topic_v3_and_below"][0]["results_by_partition"][0][
        "partition_error_code"]


async def _open_txn(handlers: TxnHandlers) -> dict:
    """InitProducerId for "tx" and its partition t-0 added: -> the ids."""
    got = await answer(handlers.init_producer_id(ctx(22, 4), {
        "transactional_id": "tx", "transaction_timeout_ms": 60000,
        "producer_id": -1, "producer_epoch": -1}))
    assert got["error_code"] == Err.NONE
    ids = {"pid": got["producer_id"], "epoch": got["producer_epoch"]}
    assert _code(await answer(handlers.add_partitions_to_txn(
        ctx(24, 3), _add_partitions(ids)))) == Err.NONE
    return ids


def test_a_failed_marker_fsync_is_retried_and_the_waiting_request_answered(tmp_path):
    """The data partition's marker fsync fails once: the completion goes the
    awaited way (which retries), Complete* is written, and the producer's
    next AddPartitionsToTxn, waiting for it, is answered; nothing hangs."""
    node = Node(tmp_path, **{"transaction.state.log.num.partitions": 1})
    fsync = FsyncBatcher(inline_quiet=True)
    data = DataPlane(node.catalogue, node.config, fsync)
    txn = TxnRuntime(node.catalogue, node.config, data, node.runtime, fsync,
                     ProducerIds(None), LocalDurability(fsync))
    handlers = TxnHandlers(txn, ProducerIds(None), node.groups)
    plog = node.catalogue.get("t").partitions[0]
    flushes: list[bool] = []
    real_flush = plog.flush

    def flush_failing_once() -> None:
        flushes.append(True)
        if len(flushes) == 1:
            raise OSError("fsync failed (test)")
        real_flush()

    async def scenario():
        txn.start()
        await txn.wait_loaded()
        ids = await _open_txn(handlers)
        plog.flush = flush_failing_once
        ended = await answer(handlers.end_txn(ctx(26, 3), {
            "transactional_id": "tx", "producer_id": ids["pid"],
            "producer_epoch": ids["epoch"], "committed": True}))
        assert ended["error_code"] == Err.NONE
        # the next transaction's first request waits for the completion
        again = await answer(handlers.add_partitions_to_txn(ctx(24, 3), _add_partitions(ids)),
                             timeout=30)
        assert _code(again) == Err.NONE
        assert len(flushes) >= 2, "the failed marker fsync was not retried"
        assert txn.core.txns["tx"].state == ONGOING
        assert plog.flushed_offset == plog.log_end_offset, "the marker is not durable"

    try:
        asyncio.run(scenario())
    finally:
        txn.stop()
        fsync.close()
        node.close()


def test_the_request_waiting_for_a_completion_shares_complete_s_round(tmp_path):
    """The producer's next request, sent while the markers' fsync is under
    way, waits for the completion, and its record and Complete* are made
    durable by one round of __transaction_state (one fsync, not two)."""
    node = Node(tmp_path, **{"transaction.state.log.num.partitions": 1})
    fsync = FsyncBatcher()  # in worker threads: the loop goes on while a marker is held
    data = DataPlane(node.catalogue, node.config, fsync)
    durability = LocalDurability(fsync)
    txn = TxnRuntime(node.catalogue, node.config, data, node.runtime, fsync,
                     ProducerIds(None), durability)
    handlers = TxnHandlers(txn, ProducerIds(None), node.groups)
    txn_log = txn.logs[0]
    plog = node.catalogue.get("t").partitions[0]
    held = threading.Event()
    real_flush = plog.flush

    def flush_held() -> None:
        assert held.wait(30), "the marker's fsync was never let go"
        real_flush()
    rounds: list[int] = []

    async def scenario():
        txn.start()
        await txn.wait_loaded()
        ids = await _open_txn(handlers)
        sync = durability.sync

        def counted(logs, done):
            if txn_log in logs:
                rounds.append(txn_log.log_end_offset)
            sync(logs, done)
        durability.sync = counted
        plog.flush = flush_held
        ending = handlers.end_txn(ctx(26, 3), {
            "transactional_id": "tx", "producer_id": ids["pid"],
            "producer_epoch": ids["epoch"], "committed": True})
        assert (await answer(ending))["error_code"] == Err.NONE
        waiting = handlers.add_partitions_to_txn(ctx(24, 3), _add_partitions(ids))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not waiting.done(), "answered while the markers were not durable"
        held.set()
        assert _code(await answer(waiting, timeout=30)) == Err.NONE
        assert txn.core.txns["tx"].state == ONGOING
        # PrepareCommit's round, then one for CompleteCommit and the new Ongoing
        assert rounds == [rounds[0], txn_log.log_end_offset], \
            f"__transaction_state rounds ending at {rounds}"
        assert rounds[0] < txn_log.log_end_offset - 1

    try:
        asyncio.run(scenario())
    finally:
        held.set()
        txn.stop()
        fsync.close()
        node.close()
