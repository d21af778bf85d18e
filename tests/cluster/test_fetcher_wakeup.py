"""The follower's fetcher drops a long poll as soon as a partition newly
following the same leader has a request to send (else that partition, and
the new leader's high watermark, would wait out replica.fetch.wait.max.ms)."""
import asyncio

from kcoord.cluster.fetcher import ReplicaFetcher


class Manager:
    def __init__(self) -> None:
        self.ready = False

    def has_request_ready(self, leader: int) -> bool:
        return self.ready


def test_a_long_poll_is_dropped_when_a_new_follower_has_a_request():
    async def scenario():
        manager = Manager()
        fetcher = ReplicaFetcher(manager, leader_id=2)
        poll = asyncio.get_running_loop().create_future()   # a long poll never answered

        async def long_poll():
            return await poll

        waiting = asyncio.ensure_future(fetcher._unless_new_follower(long_poll()))
        await asyncio.sleep(0)
        fetcher.wake.set()                      # a state change with nothing new to ask
        for _ in range(5):
            await asyncio.sleep(0)
        assert not waiting.done()
        manager.ready = True                    # a partition became this leader's follower
        fetcher.wake.set()
        assert await asyncio.wait_for(waiting, 10) is None
        assert poll.cancelled()                 # the poll itself was cancelled

    asyncio.run(scenario())


def test_a_long_poll_answered_is_returned():
    async def scenario():
        fetcher = ReplicaFetcher(Manager(), leader_id=2)

        async def answered():
            await asyncio.sleep(0)
            return {"responses": []}

        assert await asyncio.wait_for(fetcher._unless_new_follower(answered()), 10) == {
            "responses": []}

    asyncio.run(scenario())



def test_a_fetch_unanswered_for_a_lease_ttl_is_given_up():
    """A cut between follower and leader drops the answer in flight; the
    follower must not wait for TCP's backed-off retransmission (seconds
    after the heal) or replica.socket.timeout.ms (30 s): it reconnects
    after a lease TTL, as the controller would give up on a silent node."""
    from kcoord.cluster.replica_manager import fetcher_config
    config = {"etcd.lease.ttl.ms": 2000, "replica.fetch.wait.max.ms": 100,
              "replica.fetch.max.bytes": 1 << 20}
    assert fetcher_config(config).request_timeout_ms == 2000
    assert fetcher_config({**config, "etcd.lease.ttl.ms": 60000}).request_timeout_ms == 30000
