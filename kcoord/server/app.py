"""`kcoord serve`: wire the handlers to the network and run until stopped."""
from __future__ import annotations

import asyncio
import logging
import signal

from .config import Config
from .dispatch import Dispatcher
from .meta_handlers import MetaHandlers
from .network import KafkaConnection

log = logging.getLogger("kcoord.server")


class Server:
    """Everything one kcoord process serves, on one listening socket."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.dispatcher = Dispatcher()
        self.meta = MetaHandlers(config, self.dispatcher)
        self.meta.register()
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        max_bytes = self.config["socket.request.max.bytes"]
        self._server = await loop.create_server(
            lambda: KafkaConnection(self.dispatcher, max_bytes),
            self.config.host, self.config.port, reuse_address=True, backlog=1024)
        # port 0 binds an ephemeral port: advertise the real one
        self.config.port = self._server.sockets[0].getsockname()[1]
        log.info("kcoord listening on %s:%d data-dir %s", self.config.host, self.config.port,
                 self.config.data_dir)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        log.info("kcoord stopped")


async def serve(config: Config) -> None:
    server = Server(config)
    await server.start()
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    await stopping.wait()
    await server.stop()


def run(config: Config) -> None:
    try:
        import uvloop
    except ImportError:  # uvloop is optional: plain asyncio works, just slower
        asyncio.run(serve(config))
    else:
        uvloop.run(serve(config))
