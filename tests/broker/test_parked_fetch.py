"""A parked Fetch (Kafka's DelayedFetch): woken by news on a partition it
reads, answered at once when that partition has records, and not read again
for writes to partitions it does not read (a follower's fetch covers every
partition it follows on a leader: a full re-read on each write anywhere was
most of a cluster's transaction CPU)."""
from __future__ import annotations

import asyncio

from kcoord.broker.append_notifier import AppendNotifier
from kcoord.broker.catalogue import Catalogue
from kcoord.broker.data_handlers import DataPlane
from kcoord.log.fsync_batcher import FsyncBatcher
from kcoord.protocol.records import build_batch, decode_all
from kcoord.server.config import Config


class _Ctx:
    api_version = 12
    listener = "PLAINTEXT"


def _long_poll(topic: str, offset: int) -> dict:
    return {"max_wait_ms": 30_000, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "topics": [{"topic": topic, "partitions": [
                {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}]}]}


async def _turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_notifier_wakes_only_the_fetches_of_the_log():
    async def scenario():
        notifier = AppendNotifier()
        a, b = object(), object()
        on_a, on_both, anything = notifier.wait([a]), notifier.wait([a, b]), notifier.wait()
        notifier.notify(b)
        assert not on_a.done() and on_both.result() is b and anything.done()
        notifier.notify(a)
        assert on_a.result() is a
        gone = notifier.wait([a, b])
        gone.cancel()
        await _turns()
        assert notifier._by_log == {}          # a cancelled poll leaves nothing behind
        everyone = notifier.wait([b])
        notifier.notify()                      # a role change: all of them, woken by None
        assert everyone.done() and everyone.result() is None

    asyncio.run(scenario())


def test_parked_fetch_reads_again_only_for_its_own_partition(tmp_path):
    async def scenario():
        cfg = Config(data_dir=tmp_path)
        catalogue = Catalogue(tmp_path, cfg.values)
        try:
            catalogue.create("mine", 1)
            catalogue.create("other", 1)
            plane = DataPlane(catalogue, cfg, FsyncBatcher())
            reads = []
            real = plane._fetch_once
            plane._fetch_once = lambda *a: reads.append(1) or real(*a)   # counts the reads
            polling = asyncio.ensure_future(plane.fetch(_Ctx(), _long_poll("mine", 0)))
            await _turns()
            assert len(reads) == 1 and not polling.done()
            for _ in range(3):                 # writes to a partition it does not read
                other = catalogue.partition("other", 0)
                other.append(build_batch([(b"k", b"v", [], 1000)]))
                plane.appended.notify(other)
                await _turns()
            assert len(reads) == 1 and not polling.done()
            mine = catalogue.partition("mine", 0)
            plane.appended.notify(mine)        # news with nothing new to read (an fsync, say)
            await _turns()
            assert len(reads) == 1 and not polling.done()
            mine.append(build_batch([(b"k", b"v", [], 1000)]))
            plane.appended.notify(mine)
            response = await asyncio.wait_for(polling, 10)
            part = response["responses"][0]["partitions"][0]
            assert len(decode_all(part["records"])) == 1 and len(reads) == 2
        finally:
            catalogue.close()

    asyncio.run(scenario())


def test_a_parked_session_fetch_answers_at_its_deadline_even_when_its_timer_fires_early(
        tmp_path):
    """A follower's session fetch parks on one timer for its whole wait; a
    timer may fire a little before the loop's clock reaches the deadline
    (uvloop counts whole milliseconds): the fetch still answers then,
    instead of parking again with no timer left."""
    from kcoord.broker.fetch_sessions import FetchSession

    class _Replication:
        @staticmethod
        def now_ms() -> int:
            return 0

    async def scenario():
        cfg = Config(data_dir=tmp_path)
        catalogue = Catalogue(tmp_path, cfg.values)
        try:
            plane = DataPlane(catalogue, cfg, FsyncBatcher())
            plane.replication = _Replication()
            reads = []
            plane._fetch_once = lambda *a: reads.append(1) or ({"responses": []}, 0, False)
            loop = asyncio.get_running_loop()
            on_time = loop.call_at
            loop.call_at = lambda when, *a, **kw: on_time(when - 0.2, *a, **kw)  # 200 ms early
            req = {**_long_poll("t", 0), "max_wait_ms": 300, "topics": []}
            session = FetchSession(1, replica=2)
            answer = await asyncio.wait_for(plane._session_poll(_Ctx(), session, req, set()), 10)
            assert answer == {"responses": []} and len(reads) == 2
            assert session.waiter is None
        finally:
            catalogue.close()

    asyncio.run(scenario())
