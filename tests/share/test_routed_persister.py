"""The cluster's SharePersister (server/share_routed_persister.py) with a
fake transport: each node's share coordinator is a real core; the test
moves ownership, drops connections and counts the requests sent."""
import asyncio

from kcoord.protocol.errors import Err
from kcoord.server.share_persister import AnswerPersister
from kcoord.server.share_routed_persister import ATTEMPTS, RoutedSharePersister
from kcoord.share.coordinator import ShareCoordinatorConfig, ShareCoordinatorShard, \
    batches_from_rows, share_request
from kcoord.share.persister import ShareKey, StateBatch as B

T = b"\x02" * 16
_ARGS = {83: lambda p: (p["state_epoch"], p["start_offset"]), 84: lambda p: (p["leader_epoch"],),
         85: lambda p: (p["state_epoch"], p["leader_epoch"], p["start_offset"],
                        p["delivery_complete_count"], batches_from_rows(p["state_batches"])),
         86: lambda _p: (), 87: lambda p: (p["leader_epoch"],)}
_OPS = {83: "initialize", 84: "read", 85: "write", 86: "delete", 87: "summary"}


class CoreNode(AnswerPersister):
    """A node's share coordinator: one real core for every key, answering
    NOT_COORDINATOR while it does not own them."""

    def __init__(self) -> None:
        self.core = ShareCoordinatorShard(0, ShareCoordinatorConfig(500, 300000))
        self.owner = True

    def run(self, op: str, key: ShareKey, *args) -> dict:
        if not self.owner:
            return {"partition": key.partition, "error_code": Err.NOT_COORDINATOR,
                    "error_message": None, "state_epoch": 0, "start_offset": -1,
                    "state_batches": [], "leader_epoch": 0, "delivery_complete_count": -1}
        req = share_request(key.group_id, key.topic_id, key.partition, 8)
        result = getattr(self.core, op)(0, req, *args)
        self.core.replay_emitted(result.records)
        return result.response

    async def _call(self, op: str, key: ShareKey, *args) -> dict:
        return self.run(op, key, *args)


class Cluster:
    def __init__(self) -> None:
        self.nodes = {1: CoreNode(), 2: CoreNode(), 3: CoreNode()}
        self.owner = 2
        self.sent: list = []
        self.down: set = set()
        self.sleeps: list = []

    async def send(self, node: int, api_key: int, _version: int, body: dict) -> dict:
        self.sent.append((node, api_key, body))
        if node in self.down:
            raise ConnectionResetError("peer gone")
        results = []
        for t in body["topics"]:
            parts = [self.nodes[node].run(_OPS[api_key], ShareKey(body["group_id"], t["topic_id"],
                                                                 p["partition"]), *_ARGS[api_key](p))
                     for p in t["partitions"]]
            results.append({"topic_id": t["topic_id"], "partitions": parts})
        return {"results": results}

    async def sleep(self, delay: float) -> None:
        self.sleeps.append(delay)

    def persister(self, node_id: int = 1) -> RoutedSharePersister:
        return RoutedSharePersister(node_id, self.nodes[node_id], lambda _key: self.owner,
                                    self.send, self.sleep)


def test_one_request_per_node_api_and_group_and_the_state_round_trips():
    async def go():
        c = Cluster()
        p = c.persister()
        keys = [ShareKey("g", T, i) for i in range(4)]
        codes = await asyncio.gather(*(p.initialize(k, 1, 10) for k in keys))
        assert codes == [0] * 4
        assert len(c.sent) == 1 and c.sent[0][0] == 2 and c.sent[0][1] == 83
        assert [q["partition"] for q in c.sent[0][2]["topics"][0]["partitions"]] == [0, 1, 2, 3]
        assert await p.write(keys[1], 1, 0, 10, [B(10, 14, 2, 1)], 5) == 0
        state = await p.read(keys[1], 0)
        assert (state.error_code, state.state_epoch, state.start_offset) == (0, 1, 10)
        assert state.batches == [B(10, 14, 2, 1)]
        summary = await p.summary(keys[1])
        assert (summary.error_code, summary.delivery_complete_count) == (0, 5)
        # two calls on one key in one turn: two requests, both answered
        a, b = await asyncio.gather(p.read(keys[0], 0), p.read(keys[0], 0))
        assert a.error_code == b.error_code == 0 and p.requests_sent == 6
        assert not c.nodes[1].core.states          # nothing landed on the asking node
    asyncio.run(go())


def test_the_owner_here_is_called_directly():
    async def go():
        c = Cluster()
        c.owner = 1
        p = c.persister(1)
        assert await p.initialize(ShareKey("g", T, 0), 0, 0) == 0
        assert not c.sent and c.nodes[1].core.states
    asyncio.run(go())


def test_moved_coordinator_and_lost_connection_are_found_again_with_backoff():
    async def go():
        c = Cluster()
        p = c.persister()
        c.nodes[2].owner = False                   # node 2 lost the key's partition
        c.down.add(2)                              # ... and is gone
        routes = iter([2, 2, None, 3])
        p.route = lambda _key: next(routes, 3)
        assert await p.initialize(ShareKey("g", T, 0), 1, 7) == 0
        assert [s[0] for s in c.sent] == [2, 2, 3]
        assert c.sleeps == [0.05, 0.1, 0.2]        # exponential
        assert c.nodes[3].core.states[("g", T, 0)].start_offset == 7
    asyncio.run(go())


def test_a_final_error_is_answered_at_once_and_retries_are_bounded():
    async def go():
        c = Cluster()
        p = c.persister()
        key = ShareKey("g", T, 0)
        await p.initialize(key, 1, 0)
        assert (await p.read(key, 5)).error_code == 0
        c.sleeps.clear()
        assert await p.write(key, 1, 4, -1, []) == Err.FENCED_LEADER_EPOCH
        assert not c.sleeps                         # not retried
        c.nodes[2].owner = False
        assert (await p.read(key, 5)).error_code == Err.NOT_COORDINATOR
        assert len(c.sleeps) == ATTEMPTS - 1
        p.route = lambda _key: None                 # no leader anywhere
        assert await p.delete(key) == Err.COORDINATOR_NOT_AVAILABLE
    asyncio.run(go())
