"""The lease is refreshed over a connection of its own (etcd_session.py): a
node's other etcd connection, held up by its own burst of writes after a
heal, must not take the lease with it (seed 180: the controller's lease
expired with no fault on it)."""
import asyncio

from kcoord.cluster.etcd_session import EtcdSession

TTL_MS = 2000


class HoldingProxy:
    """A TCP proxy to etcd whose first connection (the session's first: its
    writes' and watch's) can be held: bytes stop flowing both ways, as they
    do behind a stuck stream or a busy connection, without a reset."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.held = asyncio.Event()
        self.connections = 0
        self.server = None

    async def start(self) -> tuple[str, int]:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[:2]

    async def _serve(self, reader, writer) -> None:
        self.connections += 1
        holdable = self.connections == 1
        up_reader, up_writer = await asyncio.open_connection(*self.target)

        async def pipe(src, dst):
            try:
                while data := await src.read(65536):
                    while holdable and self.held.is_set():
                        await asyncio.sleep(0.05)
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                dst.close()
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def close(self) -> None:
        self.server.close()


def test_the_lease_lives_on_while_the_nodes_other_connection_is_held(etcd):
    host, port = etcd.endpoint.rsplit(":", 1)

    async def scenario():
        proxy = HoldingProxy(host, int(port))
        session = EtcdSession([await proxy.start()], TTL_MS)
        expired = []

        async def on_expired():
            expired.append(session.lease_id)
        session.on_expired = on_expired
        await session.open()
        try:
            lease = session.lease_id
            proxy.held.set()
            loop = asyncio.get_running_loop()
            since = loop.time()
            deadline = since + 30
            # refreshes answered for two whole TTLs after the other connection stopped
            while session._schedule.last_ok < since + 2 * TTL_MS / 1000 and not expired:
                assert loop.time() < deadline, "no refresh answered"
                await asyncio.sleep(0.05)
            assert not expired and session.lease_id == lease
        finally:
            proxy.held.clear()
            await session.close()
            proxy.close()
    asyncio.run(scenario())
