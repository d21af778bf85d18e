"""The share-fetch handlers in process: a real catalogue, data plane and
partition logs in a temporary directory, the share partition manager over an
in-memory persister, and requests as the client's dicts."""
from __future__ import annotations

from dataclasses import dataclass

from kcoord.broker.catalogue import Catalogue
from kcoord.broker.data_handlers import DataPlane
from kcoord.log.fsync_batcher import FsyncBatcher
from kcoord.protocol.records import build_batch
from kcoord.server.config import build_config
from kcoord.server.dispatch import RequestContext
from kcoord.server.share_fetch_handlers import ShareFetchHandlers
from kcoord.server.share_partitions import SharePartitionManager

from .memory_persister import MemoryPersister


@dataclass
class Conn:
    name: str


class Harness:
    def __init__(self, tmp_path, settings=(), reset="earliest", persister=None, **group):
        self.config = build_config("127.0.0.1:0", str(tmp_path / "data"), None, list(settings))
        self.config.data_dir.mkdir(parents=True, exist_ok=True)
        self.catalogue = Catalogue(self.config.data_dir, self.config.values)
        self.data = DataPlane(self.catalogue, self.config, FsyncBatcher())
        self.data.txn_verifier = lambda *_args: 0    # every transaction may write anywhere
        self.persister = persister or MemoryPersister()
        self.group = {"share.auto.offset.reset": reset, **group}
        self.restart()

    def restart(self):
        """A new manager and session cache over the same logs and persister."""
        self.shares = SharePartitionManager(
            self.catalogue, self.data, self.config, self.persister,
            group_config=lambda _g, name, default: self.group.get(name, default))
        self.handlers = ShareFetchHandlers(self.shares)

    def topic(self, name="t", partitions=1):
        return self.catalogue.create(name, partitions).topic_id

    def produce(self, name="t", index=0, count=5, per_batch=None, **txn):
        per_batch = per_batch or count
        plog = self.catalogue.get(name).partitions[index]
        while count > 0:
            n = min(per_batch, count)
            batch = build_batch([(b"k", b"v%d" % i, [], 0) for i in range(n)], **txn)
            result, _ = self.data._append(name, index, batch, 1, 11)
            assert result["error_code"] == 0, result
            count -= n
        return plog.log_end_offset

    @staticmethod
    def ctx(api_key=78, version=1, conn=None):
        return RequestContext(api_key, version, 1, "c", "127.0.0.1", connection=conn)

    async def fetch(self, member, epoch, parts=(), acks=None, max_records=500, max_wait=0,
                    min_bytes=1, forgotten=(), group="g", conn=None, version=1, **extra):
        """parts: [(topic id, partition)]; acks: {(topic id, p): [(first, last, [types])]}."""
        topics: dict = {}
        for tp in parts:
            topics.setdefault(tp[0], {})[tp[1]] = []
        for tp, batches in (acks or {}).items():
            topics.setdefault(tp[0], {})[tp[1]] = [
                {"first_offset": f, "last_offset": last, "acknowledge_types": list(types)}
                for f, last, types in batches]
        req = {"group_id": group, "member_id": member, "share_session_epoch": epoch,
               "max_wait_ms": max_wait, "min_bytes": min_bytes, "max_bytes": 1 << 20,
               "max_records": max_records, "batch_size": max_records or 1,
               "topics": [{"topic_id": t, "partitions": [
                   {"partition_index": p, "acknowledgement_batches": b} for p, b in ps.items()]}
                   for t, ps in topics.items()],
               "forgotten_topics_data": [{"topic_id": t, "partitions": list(ps)}
                                         for t, ps in _by_topic(forgotten).items()]}
        req.update(extra)
        return await self.handlers.share_fetch(self.ctx(78, version, conn), req)

    async def acknowledge(self, member, epoch, acks, group="g", version=1, **extra):
        topics: dict = {}
        for tp, batches in acks.items():
            topics.setdefault(tp[0], {})[tp[1]] = [
                {"first_offset": f, "last_offset": last, "acknowledge_types": list(types)}
                for f, last, types in batches]
        req = {"group_id": group, "member_id": member, "share_session_epoch": epoch,
               "topics": [{"topic_id": t, "partitions": [
                   {"partition_index": p, "acknowledgement_batches": b} for p, b in ps.items()]}
                   for t, ps in topics.items()], **extra}
        return await self.handlers.share_acknowledge(self.ctx(79, version), req)


def _by_topic(pairs):
    out: dict = {}
    for t, p in pairs:
        out.setdefault(t, []).append(p)
    return out


def partitions(resp):
    """{(topic id, partition): entry} of a response."""
    return {(t["topic_id"], p["partition_index"]): p for t in resp.get("responses", ())
            for p in t["partitions"]}


def acquired(resp, tp):
    entry = partitions(resp).get(tp)
    if entry is None:
        return []
    return [(r["first_offset"], r["last_offset"], r["delivery_count"])
            for r in entry["acquired_records"]]
