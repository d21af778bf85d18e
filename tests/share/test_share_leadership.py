"""Share partitions follow their data partition's leadership (a cluster):
real replica state machines (kcoord/cluster/replica.py) over the harness's
real partition log decide who leads; the share partition manager drops what
it no longer leads at its epoch, and a new term loads from the persister."""
import asyncio

from kcoord.cluster.replica import Replica, ReplicationConfig
from kcoord.cluster.state import PartitionState
from kcoord.protocol.errors import Err
from kcoord.share.partition import ACCEPT

from .harness import Harness, acquired, partitions


class Replicas:
    """The replica manager's lookup, over real replicas."""

    def __init__(self, replicas: dict) -> None:
        self.replicas = replicas

    def manages(self, name: str) -> bool:
        return name == "t"

    def replica(self, topic: str, partition: int):
        return self.replicas.get((topic, partition))

    def leader_hint(self, topic: str, partition: int):
        r = self.replicas[(topic, partition)]
        return (r.state.leader, r.leader_epoch, None) if not r.is_leader else None


def _term(replica: Replica, leader: int, epoch: int) -> None:
    replica.on_state(PartitionState("t", 0, leader, epoch, (leader,), (1, 2), epoch * 10), 0)


def test_a_lost_leadership_drops_the_share_partition_and_a_new_term_reads_the_state(tmp_path):
    h = Harness(tmp_path)

    async def scenario():
        tid = h.topic()
        end = h.produce(count=6)
        plog = h.catalogue.get("t").partitions[0]
        replica = Replica(1, plog, ReplicationConfig(100, 1), high_watermark=end)
        h.data.replication = Replicas({("t", 0): replica})
        _term(replica, 1, 1)
        r = await h.fetch("m1", 0, [(tid, 0)], max_records=6)
        assert acquired(r, (tid, 0)) == [(0, 5, 1)]
        r = await h.acknowledge("m1", 1, {(tid, 0): [(0, 1, [ACCEPT])]})
        assert partitions(r)[(tid, 0)]["error_code"] == 0
        _term(replica, 2, 2)                         # node 2 leads now
        h.shares.on_roles_changed()
        assert ("g", tid, 0) not in h.shares.partitions and not h.shares._timers
        r = await h.fetch("m1", 2, [(tid, 0)])
        entry = partitions(r)[(tid, 0)]
        assert entry["error_code"] == Err.NOT_LEADER_OR_FOLLOWER
        assert entry["current_leader"] == {"leader_id": 2, "leader_epoch": 2}
        _term(replica, 1, 3)                         # back here in a new term
        h.shares.on_roles_changed()
        r = await h.fetch("m2", 0, [(tid, 0)], max_records=6)
        # the acknowledged records stay done; the ones m1 held come back
        assert acquired(r, (tid, 0)) == [(2, 5, 1)]
        assert h.shares.partitions[("g", tid, 0)].leader_epoch == 3
    asyncio.run(asyncio.wait_for(scenario(), 30))
