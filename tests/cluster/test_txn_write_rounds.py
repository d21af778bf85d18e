"""The transaction runtime's writes of one loop iteration share one
durability round (one fsync and one replication round on
__transaction_state), on a replicated node driven in process."""
import asyncio

from kcoord.protocol.errors import Err
from kcoord.protocol.internal_topics import TXN_TOPIC

from tests.cluster.test_takeover_fence import (ME, ctx, init_request, load_txn_partition,
                                              replicated, run_txn, txn_node)


def test_writes_of_one_iteration_share_one_durability_round(tmp_path):
    node, txn, handlers = txn_node(tmp_path)
    txn_log = txn.logs[0]
    rounds: list[int] = []
    sync = txn.durability.sync

    def counted(logs, done):
        rounds.append(len(logs))
        sync(logs, done)

    async def scenario():
        node.state(ME, 1, 1)
        await load_txn_partition(node, txn)
        txn.durability.sync = counted
        inits = [handlers.init_producer_id(ctx(22, 4), init_request(tid))
                 for tid in ("a", "b", "c")]
        answers = await asyncio.gather(*(replicated(node, i, txn_log, 1, TXN_TOPIC)
                                         for i in inits))
        assert [a["error_code"] for a in answers] == [Err.NONE] * 3
        assert len({a["producer_id"] for a in answers}) == 3
        assert rounds == [1], f"three writes in one iteration took rounds {rounds}"
    run_txn(node, txn, scenario)
