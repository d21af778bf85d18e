"""A real CoordinatorRuntime and GroupHandlers on a tmp data dir, driven in
one event loop (no server process): for the paths a wire test rarely shows
(a loading or unloaded shard, a failed write, an unload under a parked
request)."""
from __future__ import annotations

import asyncio
from pathlib import Path

from kcoord.broker.catalogue import Catalogue
from kcoord.log.durability import LocalDurability
from kcoord.server.config import Config
from kcoord.server.coordinator_runtime import CoordinatorRuntime
from kcoord.server.dispatch import Reply, RequestContext
from kcoord.server.group_handlers import GroupHandlers


class GatedSync(LocalDurability):
    """The single-node durability (fsync in threads) with two test gates:
    `fail` reports every sync as failed; `hold` keeps the callbacks until
    `release()` (a write stays in flight)."""

    def __init__(self) -> None:
        super().__init__()
        self.fail: BaseException | bool = False  # True: an fsync error; or this error
        self.hold = False
        self.held: list = []

    def sync(self, logs, done) -> None:
        if self.fail:
            error = self.fail if isinstance(self.fail, BaseException) else \
                OSError("fsync failed (test)")
            asyncio.get_running_loop().call_soon(done, [error] * len(logs))
            return
        if self.hold:
            self.held.append((logs, done))
            return
        super().sync(logs, done)

    def release(self) -> None:
        self.hold = False
        held, self.held = self.held, []
        for logs, done in held:
            super().sync(logs, done)


class Node:
    """One node's coordinator runtime and group handlers."""

    def __init__(self, data_dir: Path, partitions: int = 1, clock=None, shard_class=None,
                 **settings) -> None:
        self.config = Config(data_dir=data_dir)
        self.config.update({"offsets.topic.num.partitions": partitions,
                            "group.initial.rebalance.delay.ms": 0, **settings})
        self.catalogue = Catalogue(data_dir, self.config.values)
        self.sync = GatedSync()
        runtime_class = CoordinatorRuntime
        if shard_class is not None:  # a runtime whose shards are of that class
            runtime_class = type("CoordinatorRuntime", (CoordinatorRuntime,), {"SHARD": shard_class})
        self.runtime = runtime_class(self.catalogue, self.config, durability=self.sync,
                                     clock=clock)
        self.groups = GroupHandlers(self.runtime, self.catalogue, self.config)
        if self.catalogue.get("t") is None:
            self.catalogue.create("t", 4, {})

    def close(self) -> None:
        self.runtime.stop()
        self.catalogue.close()

    def shard(self, group_id: str = "g"):
        return self.runtime.shard_for(group_id)


def ctx(key: int, version: int) -> RequestContext:
    return RequestContext(key, version, 1, "client", "127.0.0.1")


async def answer(value, timeout: float = 10.0):
    """A handler's answer: at once, or once its Reply or coroutine completes."""
    if value.__class__ is Reply:
        return await asyncio.wait_for(value, timeout)
    if asyncio.iscoroutine(value):
        return await asyncio.wait_for(value, timeout)
    return value
