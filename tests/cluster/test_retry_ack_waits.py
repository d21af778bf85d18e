"""An idempotent producer's retry of a batch the leader already holds is
answered only once the high watermark passes that batch, as Kafka's
ReplicaManager waits for `requiredOffset` whatever the append found.  The
first send may have reached the leader's log but no follower (a slow link, a
pause); answering the retry from the duplicate check at once acknowledged
records that the next leader never had (a lost-write candidate of the fault
harness's run 106).

The real DataPlane, ReplicaManager and Replica on a tmp data dir, in one
event loop; the follower is played by hand through serve_follower_fetch."""
from __future__ import annotations

import asyncio

from kcoord.broker.catalogue import Catalogue
from kcoord.broker.data_handlers import DataPlane
from kcoord.cluster.replica import ReplicationConfig
from kcoord.cluster.replica_manager import ReplicaManager
from kcoord.cluster.state import PartitionState
from kcoord.log.fsync_batcher import FsyncBatcher
from kcoord.protocol.errors import Err
from kcoord.protocol.records import build_batch
from kcoord.server.config import Config
from tests.cluster.test_takeover_fence import Store
from tests.server.runtime_harness import ctx

ME, PEER = 1, 2
PRODUCE = 0


def produce_request(batch: bytes) -> dict:
    return {"transactional_id": None, "acks": -1, "timeout_ms": 30000,
            "topic_data": [{"name": "q", "partition_data": [{"index": 0, "records": batch}]}]}


def test_a_retried_batch_is_acknowledged_only_past_the_high_watermark(tmp_path):
    async def run():
        config = Config(data_dir=tmp_path)
        catalogue = Catalogue(tmp_path, config.values)
        catalogue.create("q", 1, {})
        data = DataPlane(catalogue, config, FsyncBatcher())
        manager = ReplicaManager(ME, catalogue, Store(), lambda node: None,
                                 replication=ReplicationConfig(30000, 1))
        data.replication = manager
        manager.start()
        manager.on_partition_state(PartitionState("q", 0, ME, 1, (ME, PEER), (ME, PEER), 1))
        replica = manager.replica("q", 0)
        assert replica.is_leader
        batch = build_batch([(b"k", b"v%d" % i, [], None) for i in range(4)],
                            producer_id=7, producer_epoch=0, base_sequence=0)

        async def send():
            answer = data.produce(ctx(PRODUCE, 9), produce_request(batch))
            if not isinstance(answer, dict):
                answer = await answer
            return answer["responses"][0]["partition_responses"][0]

        first = asyncio.ensure_future(send())
        await asyncio.sleep(0.2)
        retry = asyncio.ensure_future(send())
        await asyncio.sleep(0.2)  # both fsynced locally; no follower has fetched
        assert replica.high_watermark == 0
        assert not first.done() and not retry.done()
        # the follower fetches past the batch: both are answered, at the same offset
        _, outs = replica.serve_follower_fetch(PEER, 4, 1, 0)
        manager.handle(("q", 0), outs)
        a, b = await asyncio.wait_for(asyncio.gather(first, retry), 10)
        assert (a["error_code"], b["error_code"]) == (Err.NONE, Err.NONE)
        assert a["base_offset"] == b["base_offset"] == 0
        assert catalogue.get("q").partitions[0].log_end_offset == 4  # written once
        await manager.stop()
        catalogue.close()
    asyncio.run(run())
