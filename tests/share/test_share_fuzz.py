"""Random (well-formed) ShareFetch / ShareAcknowledge requests against the
in-process handlers: never an exception, only Kafka's error codes for these
APIs (§3.11), and the share partitions' invariants hold throughout."""
import asyncio
import random

from kcoord.protocol.errors import Err
from kcoord.share.partition import ACQUIRED

from .harness import Harness, partitions

TOP = {Err.NONE, Err.INVALID_REQUEST, Err.SHARE_SESSION_NOT_FOUND,
       Err.INVALID_SHARE_SESSION_EPOCH, Err.SHARE_SESSION_LIMIT_REACHED}
PART = {Err.NONE, Err.UNKNOWN_TOPIC_ID, Err.UNKNOWN_TOPIC_OR_PARTITION}
ACK = {Err.NONE, Err.INVALID_REQUEST, Err.INVALID_RECORD_STATE, Err.UNKNOWN_TOPIC_ID,
       Err.UNKNOWN_TOPIC_OR_PARTITION}


def test_random_requests(tmp_path):
    h = Harness(tmp_path, ["group.share.max.share.sessions=3", "group.share.max.size=3",
                           "group.share.partition.max.record.locks=100"])
    rng = random.Random(7)

    async def scenario():
        tids = [h.topic("a", 2), h.topic("b", 1), bytes(16), b"\x09" * 16]
        members = ["m1", "m2", "m3", "m4", "", "x" * 40]
        epochs: dict[str, int] = {}
        for step in range(300):
            if rng.random() < 0.3:
                h.produce(rng.choice("ab"), 0, rng.randint(1, 20), per_batch=rng.randint(1, 7))
            member = rng.choice(members)
            epoch = rng.choice([0, -1, rng.randint(-3, 9), epochs.get(member, 0)])
            parts = [(rng.choice(tids), rng.randint(-1, 2)) for _ in range(rng.randint(0, 3))]
            acks = {}
            for tp in parts:
                if rng.random() < 0.5:
                    first = rng.randint(-5, 150)
                    last = first + rng.randint(-2, 12)
                    n = rng.choice([1, 1, max(last - first + 1, 1), 3])
                    acks[tp] = [(first, last, [rng.randint(-1, 5) for _ in range(n)])]
            if rng.random() < 0.6:
                r = await h.fetch(member, epoch, parts, acks=acks, max_wait=0,
                                  max_records=rng.randint(0, 50), version=rng.choice([1, 2]),
                                  forgotten=parts[:1] if rng.random() < 0.2 else ())
                assert r["error_code"] in TOP, (step, r)
                for entry in partitions(r).values():
                    assert entry["error_code"] in PART, (step, entry)
                    assert entry["acknowledge_error_code"] in ACK, (step, entry)
            else:
                r = await h.acknowledge(member, epoch, acks, version=rng.choice([1, 2]))
                assert r["error_code"] in TOP, (step, r)
                for entry in partitions(r).values():
                    assert entry["error_code"] in ACK, (step, entry)
            if r["error_code"] == 0 and epoch >= 0:
                epochs[member] = epoch + 1
            if rng.random() < 0.05:
                h.handlers.connection_closed(None)
            for sp in h.shares.partitions.values():
                assert sp.end - sp.start <= 100 + 20                  # the window (+ a batch)
                for run in sp.runs:
                    assert run.count <= 5
                    assert run.state != ACQUIRED or run.member in members
    asyncio.run(asyncio.wait_for(scenario(), 60))
