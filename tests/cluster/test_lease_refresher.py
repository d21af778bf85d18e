"""The lease is refreshed from a thread of its own (lease_refresher.py), with
a real etcd: a node whose event loop is busy for 1.5 s (as taking ~100
leaderships on a loaded host keeps it: fault seeds 211, 212) keeps its
lease, refreshed while the loop was busy; a node whose loop is wedged past
the TTL still loses it (the watchdog: no refresh while the loop is silent)."""
import asyncio
import time

from kcoord.cluster.etcd_session import EtcdSession

TTL_MS = 2000
TTL_S = TTL_MS / 1000
WAIT_S = 30.0


def busy(seconds: float) -> None:
    """Hold the interpreter as Python code does (no sleep, no I/O)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sum(range(200))


async def until(predicate, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.02)


def test_a_busy_loop_keeps_its_lease_and_a_wedged_one_loses_it(etcd):
    host, port = etcd.endpoint.rsplit(":", 1)

    async def scenario():
        session = EtcdSession([(host, int(port))], TTL_MS)
        expired, lapses = [], []

        async def on_expired():
            expired.append(session.lease_id)
        session.on_expired = on_expired
        session.on_lapsed = lambda: lapses.append(time.monotonic())
        await session.open()
        try:
            lease = session.lease_id
            # busy: the refreshes go on meanwhile, answered while the loop is held
            start = time.monotonic()
            busy(1.5)
            refreshed_during = session._schedule.last_ok
            assert refreshed_during > start, "no refresh answered while the loop was busy"
            assert not session.lapsed
            await asyncio.sleep(TTL_S)      # etcd's own expiry check is periodic
            info = await session.client.get_lease_info(lease)
            assert info.TTL > 0 and not expired and not lapses and session.lease_id == lease

            # wedged: no refresh once the loop is silent for TTL/2, so etcd drops the lease
            held_before = session.held_back
            time.sleep(2.5 * TTL_S)
            assert session.held_back > held_before, "the watchdog held nothing back"
            await until(lambda: expired, "the wedged node's lease did not expire")
            assert lapses, "the node did not learn its lease lapsed"
            assert (await session.client.get_lease_info(lease)).TTL == -1
            assert expired == [session.lease_id] and session.lease_id != lease
            assert session.resumes == lease     # the same process, back under a new lease
            # the new lease is refreshed as before
            since = time.monotonic()
            await until(lambda: session._schedule.last_ok > since, "new lease not refreshed")
            assert not session.lapsed
        finally:
            await session.close()
    asyncio.run(scenario())


class DelayingProxy:
    """A TCP proxy to etcd that, once `delay_s` is set, hands every answer
    etcd sends to the client that much later (in order), as an etcd whose
    applies lag behind answers renewals (load 16: 0.5-1.5 s)."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.delay_s = 0.0
        self.server = None
        self.tasks: set = set()

    async def start(self) -> tuple[str, int]:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[:2]

    async def _serve(self, reader, writer) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        queue: asyncio.Queue = asyncio.Queue()

        async def upstream():
            try:
                while data := await reader.read(65536):
                    up_writer.write(data)
                    await up_writer.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                up_writer.close()

        async def answers():
            try:
                while data := await up_reader.read(65536):
                    queue.put_nowait((asyncio.get_running_loop().time() + self.delay_s, data))
            except (ConnectionError, asyncio.CancelledError):
                pass
            queue.put_nowait((0.0, b""))

        async def deliver():
            loop = asyncio.get_running_loop()
            try:
                while True:
                    due, data = await queue.get()
                    if not data:
                        break
                    await asyncio.sleep(max(0.0, due - loop.time()))
                    writer.write(data)
                    await writer.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                writer.close()
        await asyncio.gather(upstream(), answers(), deliver())

    def close(self) -> None:
        self.server.close()


def test_refreshes_go_on_while_etcd_answers_late(etcd):
    """etcd answering each renewal 1.5 s late (more than the refresh
    period): the next refreshes go out meanwhile on the same stream, as
    etcd's own client sends them, instead of each waiting for the previous
    answer (which spaced the renewals etcd saw by its answer delay)."""
    host, port = etcd.endpoint.rsplit(":", 1)

    async def scenario():
        proxy = DelayingProxy(host, int(port))
        session = EtcdSession([await proxy.start()], TTL_MS)
        expired = []

        async def on_expired():
            expired.append(session.lease_id)
        session.on_expired = on_expired
        await session.open()
        try:
            lease = session.lease_id
            opened = time.monotonic()   # connected first: a connect must finish in 1 s
            await until(lambda: session._schedule.last_ok > opened, "no refresh answered")
            proxy.delay_s = 1.5
            since = time.monotonic()
            # answers of refreshes sent after the delay began: they came through
            await until(lambda: session._schedule.last_ok > since + TTL_S, "no late answer")
            assert session._refresher.most_unanswered >= 2, "each refresh awaited the last"
            assert not expired and session.lease_id == lease
            proxy.delay_s = 0.0
        finally:
            await session.close()
            proxy.close()
    asyncio.run(scenario())
