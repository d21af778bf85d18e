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


class _Config:
    fetch_max_bytes = 1 << 20
    fetch_wait_max_ms = 500
    request_timeout_ms = 1000
    retry_backoff_ms = 10


class _FollowerManager:
    """What ReplicaFetcher._fetch asks of the replica manager."""
    node_id = 1
    config = _Config()

    def __init__(self, replicas: dict) -> None:
        self.replicas = replicas

    def now_ms(self) -> int:
        return 0

    def handle(self, key, outs) -> None:
        pass

    async def flush(self, logs) -> None:
        for plog in logs:
            plog.flush()

    def has_request_ready(self, leader: int) -> bool:
        return False

    def requests_for(self, leader: int, carried=()) -> list:
        out = []
        for key, replica in self.replicas.items():
            if key in carried:
                continue
            request = replica.next_request()
            if request is not None:
                out.append((key, replica, request))
        return out


class _Leader:
    """A connection whose leader answers from a script: the partitions named."""

    def __init__(self) -> None:
        from kcoord.cluster.fetch_session import FollowerSession
        self.session = FollowerSession()
        self.bodies: list = []
        self.answer: list = []

    async def call(self, api_key, version, body, timeout):
        self.bodies.append(body)
        return {"error_code": 0, "session_id": 9, "responses": [{"topic": "t", "partitions": [
            {"partition_index": p, "error_code": 0, "high_watermark": 0, "log_start_offset": 0,
             "records": b""} for p in self.answer]}]}


def test_a_partition_left_out_of_the_answer_keeps_its_fetch_in_flight():
    """The leader's session leaves out partitions with nothing new: the
    follower keeps their fetches in flight (no new request, no answer
    handed to the replica) and lists them in the session as before; a
    state change drops the carried fetch and the replica asks anew."""
    from .test_replica import replica, state

    async def scenario():
        s = state(2, 1, (0, 1, 2))
        a, b = replica(1), replica(1)
        for r in (a, b):
            r.on_state(s, 0)
        manager = _FollowerManager({("t", 0): a, ("t", 1): b})
        fetcher = ReplicaFetcher(manager, leader_id=2)
        conn = _Leader()

        async def round_trip(answer):
            conn.answer = answer
            await fetcher._fetch(conn, manager.requests_for(2) + fetcher._still_carried())

        await round_trip([0, 1])                    # full: both answered
        assert not fetcher._carried
        await round_trip([0])                       # 1 left out: nothing new for it
        assert set(fetcher._carried) == {("t", 1)}
        carried_q = fetcher._carried[("t", 1)][1]
        assert b.awaits(carried_q) and b.next_request() is None
        await round_trip([0])                       # carried on, not listed again
        assert fetcher._carried[("t", 1)][1] is carried_q
        assert conn.bodies[-1]["topics"] == [] and conn.bodies[-1]["forgotten_topics_data"] == []
        b.on_state(state(2, 2, (0, 1, 2), version=99), 0)   # a new epoch: its request dropped
        assert ("t", 1) in [key for key, _, _ in fetcher._round_requests()]   # asked anew
        assert not fetcher._carried and b.next_request() is None   # (that one is in flight)

    asyncio.run(scenario())



def test_stop_ends_a_fetcher_parked_on_a_long_poll():
    """A graceful stop cancels the fetcher's task while it waits on a long
    poll; the task must end.  With mypyc (the module is compiled) an await
    in a finally block lost the cancellation: the fetcher ran on, the
    node's stop waited 10 s for it and its exit forever (CI saw the node
    SIGKILLed in test_graceful_stop_hands_leaderships_over_first)."""
    from .test_replica import replica, state

    async def scenario():
        requests = []

        async def silent_leader(reader, writer):   # reads fetches, never answers
            while data := await reader.read(65536):
                requests.append(data)

        server = await asyncio.start_server(silent_leader, "127.0.0.1", 0)
        address = server.sockets[0].getsockname()[:2]
        try:
            for round_ in range(10):    # the cancellation at different points of the wait
                r = replica(1)
                r.on_state(state(2, 1, (0, 1, 2)), 0)
                manager = _FollowerManager({("t", 0): r})
                manager.address_of = lambda node: address
                fetcher = ReplicaFetcher(manager, leader_id=2)
                requests.clear()
                fetcher.start()
                for _ in range(10000):
                    if requests:
                        break
                    await asyncio.sleep(0.001)
                assert requests, "the fetcher sent its fetch"
                for _ in range(round_ % 3):
                    fetcher.wake.set()      # woken with nothing new: it waits on
                    await asyncio.sleep(0)
                await asyncio.wait_for(fetcher.stop(), 30)
                assert fetcher.task.cancelled(), "the fetcher's task ended on its cancellation"
        finally:
            server.close()

    asyncio.run(scenario())
