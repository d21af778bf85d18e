"""ShareFetch / ShareAcknowledge in process: share sessions (full and
incremental, epochs, Kafka's session errors and cache limit), piggy-backed
acknowledgements persisted before the answer, AcquiredRecords, long polling,
lock expiry, session end and connection close, read_committed, a restart."""
import asyncio

import pytest

from kcoord.protocol.errors import Err
from kcoord.share.partition import ACCEPT, ACKNOWLEDGED, ARCHIVED, AVAILABLE, GAP, RELEASE, REJECT
from kcoord.share.persister import ShareKey

from .harness import Conn, Harness, acquired, partitions

ACK_TYPES = (ACCEPT, RELEASE, REJECT)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


@pytest.fixture
def h(tmp_path):
    return Harness(tmp_path)


def test_full_then_incremental_session(h):
    async def scenario():
        tid = h.topic(partitions=2)
        h.produce(index=0, count=5)
        r = await h.fetch("m1", 0, [(tid, 0), (tid, 1)])
        assert r["error_code"] == 0 and r["acquisition_lock_timeout_ms"] == 30000
        assert acquired(r, (tid, 0)) == [(0, 4, 1)]
        assert set(partitions(r)) == {(tid, 0), (tid, 1)}   # full: every partition
        assert partitions(r)[(tid, 0)]["records"]            # the batches themselves
        h.produce(index=1, count=3)
        r = await h.fetch("m1", 1, acks={(tid, 0): [(0, 4, [ACCEPT])]})
        assert acquired(r, (tid, 1)) == [(0, 2, 1)]
        assert partitions(r)[(tid, 0)]["acknowledge_error_code"] == 0
        assert h.shares.partitions[("g", tid, 0)].start == 5
        r = await h.fetch("m1", 2)
        assert partitions(r) == {}                           # incremental: nothing new
        assert (await h.fetch("m1", 2))["error_code"] == Err.INVALID_SHARE_SESSION_EPOCH
    run(scenario())


@pytest.mark.parametrize("member,epoch,acks,code", [
    ("", 0, False, Err.INVALID_REQUEST),
    ("m" * 37, 0, False, Err.INVALID_REQUEST),
    ("m1", 0, True, Err.INVALID_REQUEST),               # acknowledgements opening a session
    ("m1", 7, False, Err.SHARE_SESSION_NOT_FOUND),
    ("m1", -1, False, Err.SHARE_SESSION_NOT_FOUND),
])
def test_top_level_errors(h, member, epoch, acks, code):
    async def scenario():
        tid = h.topic()
        r = await h.fetch(member, epoch, [(tid, 0)],
                          acks={(tid, 0): [(0, 0, [ACCEPT])]} if acks else None)
        assert r["error_code"] == code and not r.get("responses")
    run(scenario())


def test_share_acknowledge_session_rules(h):
    async def scenario():
        tid = h.topic()
        assert (await h.acknowledge("m1", 0, {}))["error_code"] == Err.INVALID_SHARE_SESSION_EPOCH
        assert (await h.acknowledge("m1", 1, {}))["error_code"] == Err.SHARE_SESSION_NOT_FOUND
        await h.fetch("m1", 0, [(tid, 0)])
        assert (await h.acknowledge("m1", 2, {}))["error_code"] == Err.INVALID_SHARE_SESSION_EPOCH
        assert (await h.acknowledge("m1", 1, {}))["error_code"] == 0
        assert (await h.fetch("m1", 2))["error_code"] == 0     # the epoch moved on
    run(scenario())


def test_session_cache_limit(tmp_path):
    h = Harness(tmp_path, ["group.share.max.share.sessions=1", "group.share.max.size=1"])

    async def scenario():
        tid = h.topic()
        assert (await h.fetch("m1", 0, [(tid, 0)]))["error_code"] == 0
        r = await h.fetch("m2", 0, [(tid, 0)], max_wait=10)
        assert r["error_code"] == Err.SHARE_SESSION_LIMIT_REACHED
        assert (await h.fetch("m1", 0, [(tid, 0)]))["error_code"] == 0   # replacing its own
    run(scenario())


def test_acknowledgement_is_durable_before_the_answer(h):
    async def scenario():
        tid = h.topic()
        h.produce(count=4)
        await h.fetch("m1", 0, [(tid, 0)])
        r = await h.acknowledge("m1", 1, {(tid, 0): [(0, 1, [ACCEPT]), (2, 3, [REJECT])]})
        assert partitions(r)[(tid, 0)]["error_code"] == 0
        state = h.persister.states[ShareKey("g", tid, 0)]
        assert [(b.first_offset, b.last_offset, b.delivery_state) for b in state.batches] == [
            (0, 1, ACKNOWLEDGED), (2, 3, ARCHIVED)]
    run(scenario())


def test_acknowledge_errors_per_partition(h):
    async def scenario():
        tid = h.topic()
        h.produce(count=4)
        await h.fetch("m1", 0, [(tid, 0)])
        await h.fetch("m2", 0, [(tid, 0)])
        r = await h.fetch("m2", 1, acks={(tid, 0): [(0, 1, [ACCEPT])]})
        assert partitions(r)[(tid, 0)]["acknowledge_error_code"] == Err.INVALID_RECORD_STATE
        r = await h.fetch("m1", 1, acks={(tid, 0): [(3, 1, [ACCEPT])]})
        assert partitions(r)[(tid, 0)]["acknowledge_error_code"] == Err.INVALID_REQUEST
        r = await h.acknowledge("m1", 2, {(b"\x01" * 16, 0): [(0, 0, [ACCEPT])]})
        assert partitions(r)[(b"\x01" * 16, 0)]["error_code"] == Err.UNKNOWN_TOPIC_ID
    run(scenario())


def test_release_redelivers_with_delivery_count_two(h):
    async def scenario():
        tid = h.topic()
        h.produce(count=3)
        await h.fetch("m1", 0, [(tid, 0)])
        await h.fetch("m1", 1, acks={(tid, 0): [(0, 2, [RELEASE])]})
        r = await h.fetch("m2", 0, [(tid, 0)])
        assert acquired(r, (tid, 0)) == [(0, 2, 2)]
    run(scenario())


def test_final_epoch_acknowledges_then_releases(h):
    async def scenario():
        tid = h.topic()
        h.produce(count=4)
        await h.fetch("m1", 0, [(tid, 0)])
        r = await h.fetch("m1", -1, acks={(tid, 0): [(0, 1, [ACCEPT])]})
        assert r["error_code"] == 0 and partitions(r)[(tid, 0)]["acquired_records"] == []
        assert h.handlers.sessions.get("g", "m1") is None
        r = await h.fetch("m2", 0, [(tid, 0)])
        assert acquired(r, (tid, 0)) == [(2, 3, 2)]
    run(scenario())


def test_connection_close_releases_the_sessions_records(h):
    async def scenario():
        tid = h.topic()
        h.produce(count=2)
        conn = Conn("a")
        await h.fetch("m1", 0, [(tid, 0)], conn=conn)
        h.handlers.connection_closed(Conn("other"))
        assert (await h.fetch("m2", 0, [(tid, 0)]))["responses"][0]["partitions"][0][
            "acquired_records"] == []
        h.handlers.connection_closed(conn)
        r = await h.fetch("m2", 1)
        assert acquired(r, (tid, 0)) == [(0, 1, 2)]
    run(scenario())


def test_long_poll_answers_when_records_arrive(h):
    async def scenario():
        tid = h.topic()
        await h.fetch("m1", 0, [(tid, 0)])
        waiting = asyncio.ensure_future(h.fetch("m1", 1, max_wait=20_000))
        await asyncio.sleep(0)
        assert not waiting.done()
        h.produce(count=2)
        h.data.appended.notify()
        r = await asyncio.wait_for(waiting, 10)
        assert acquired(r, (tid, 0)) == [(0, 1, 1)]
    run(scenario())


class _GatedReads:
    """The in-memory persister whose reads wait for `opened` (a share
    coordinator not yet elected: the persister retrying)."""

    def __init__(self) -> None:
        from .memory_persister import MemoryPersister
        self.inner = MemoryPersister()
        self.opened = asyncio.Event()

    async def read(self, key, leader_epoch):
        await self.opened.wait()
        return await self.inner.read(key, leader_epoch)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_a_loading_share_partition_does_not_hold_the_fetch_past_max_wait(tmp_path):
    h = Harness(tmp_path, persister=_GatedReads())

    async def scenario():
        tid = h.topic()
        h.produce(count=3)
        # the state cannot be read: each fetch still answers (no records, no
        # error) once its MaxWaitMs is over, and the load goes on
        r = await asyncio.wait_for(h.fetch("m1", 0, [(tid, 0)], max_wait=50), 10)
        assert partitions(r)[(tid, 0)]["error_code"] == 0 and acquired(r, (tid, 0)) == []
        r = await asyncio.wait_for(h.fetch("m1", 1, max_wait=50), 10)
        assert acquired(r, (tid, 0)) == []
        assert not h.persister.opened.is_set() and ("g", tid, 0) in h.shares._loading
        # a long poll waiting on the load acquires once it ends
        waiting = asyncio.ensure_future(h.fetch("m1", 2, max_wait=20_000))
        await asyncio.sleep(0)
        assert not waiting.done()
        h.persister.opened.set()
        r = await asyncio.wait_for(waiting, 10)
        assert acquired(r, (tid, 0)) == [(0, 2, 1)]
    run(scenario())


def test_lock_expiry_hands_records_to_a_waiting_member(tmp_path):
    h = Harness(tmp_path, ["group.share.record.lock.duration.ms=1000",  # Kafka's minimum
                           "group.share.min.record.lock.duration.ms=1000"])

    async def scenario():
        tid = h.topic()
        h.produce(count=2)
        r = await h.fetch("m1", 0, [(tid, 0)])
        assert r["acquisition_lock_timeout_ms"] == 1000
        r = await h.fetch("m2", 0, [(tid, 0)], max_wait=20_000)   # woken by the expiry
        assert acquired(r, (tid, 0)) == [(0, 1, 2)]
        r = await h.fetch("m1", 1, acks={(tid, 0): [(0, 1, [ACCEPT])]})
        assert partitions(r)[(tid, 0)]["acknowledge_error_code"] == Err.INVALID_RECORD_STATE
    run(scenario())


def test_failed_write_answers_the_error_and_keeps_the_records(h):
    async def scenario():
        tid = h.topic()
        h.produce(count=2)
        await h.fetch("m1", 0, [(tid, 0)])
        h.persister.fail_next = 1
        r = await h.acknowledge("m1", 1, {(tid, 0): [(0, 1, [ACCEPT])]})
        assert partitions(r)[(tid, 0)]["error_code"] == Err.COORDINATOR_NOT_AVAILABLE
        r = await h.acknowledge("m1", 2, {(tid, 0): [(0, 1, [ACCEPT])]})
        assert partitions(r)[(tid, 0)]["error_code"] == 0
    run(scenario())


@pytest.mark.parametrize("persisted,client", [
    (Err.FENCED_STATE_EPOCH, Err.NOT_LEADER_OR_FOLLOWER),
    (Err.NOT_COORDINATOR, Err.COORDINATOR_NOT_AVAILABLE),
    (Err.INVALID_REQUEST, Err.UNKNOWN_SERVER_ERROR),
])
def test_persister_errors_as_kafka_maps_them(h, persisted, client):
    async def scenario():
        tid = h.topic()
        h.produce(count=2)
        await h.fetch("m1", 0, [(tid, 0)])
        h.persister.fail_next, h.persister.fail_code = 1, persisted
        r = await h.acknowledge("m1", 1, {(tid, 0): [(0, 1, [ACCEPT])]})
        assert partitions(r)[(tid, 0)]["error_code"] == client
        if client == Err.NOT_LEADER_OR_FOLLOWER:
            assert ("g", tid, 0) not in h.shares.partitions      # loaded again on next use
    run(scenario())


def test_start_offset_latest_by_default(tmp_path):
    h = Harness(tmp_path, reset="latest")

    async def scenario():
        tid = h.topic()
        h.produce(count=5)                                       # before the first fetch
        assert acquired(await h.fetch("m1", 0, [(tid, 0)]), (tid, 0)) == []
        h.produce(count=2)
        assert acquired(await h.fetch("m1", 1), (tid, 0)) == [(5, 6, 1)]
    run(scenario())


def test_max_records_across_partitions(h):
    async def scenario():
        tid = h.topic(partitions=3)
        for p in range(3):
            h.produce(index=p, count=4, per_batch=2)
        r = await h.fetch("m1", 0, [(tid, 0), (tid, 1), (tid, 2)], max_records=5)
        got = sum(last - first + 1 for tp in partitions(r) for first, last, _ in acquired(r, tp))
        assert 5 <= got <= 6                    # a soft limit: whole log batches
    run(scenario())


def test_unknown_topic_id_and_partition(h):
    async def scenario():
        tid = h.topic()
        r = await h.fetch("m1", 0, [(b"\x07" * 16, 0), (tid, 5)])
        ps = partitions(r)
        assert ps[(b"\x07" * 16, 0)]["error_code"] == Err.UNKNOWN_TOPIC_ID
        assert ps[(tid, 5)]["error_code"] == Err.UNKNOWN_TOPIC_OR_PARTITION
    run(scenario())


def test_read_committed_skips_aborted_transactions(tmp_path):
    h = Harness(tmp_path, **{"share.isolation.level": "read_committed"})

    async def scenario():
        tid = h.topic()
        h.produce(count=2)                                                  # 0-1
        h.produce(count=3, producer_id=7, producer_epoch=0, base_sequence=0,
                  transactional=True)                                       # 2-4 aborted
        h.data.write_marker("t", 0, 7, 0, False, 0)                         # 5: ABORT
        h.produce(count=2, producer_id=8, producer_epoch=0, base_sequence=0,
                  transactional=True)                                       # 6-7 open
        r = await h.fetch("m1", 0, [(tid, 0)])
        assert acquired(r, (tid, 0)) == [(0, 1, 1), (5, 5, 1)]              # stops at the LSO
        h.data.write_marker("t", 0, 8, 0, True, 0)                          # 8: COMMIT
        r = await h.fetch("m1", 1, acks={(tid, 0): [(0, 1, [ACCEPT]), (5, 5, [GAP])]})
        assert acquired(r, (tid, 0)) == [(6, 8, 1)]
        assert h.shares.partitions[("g", tid, 0)].start == 6
    run(scenario())


def test_restart_reloads_the_persisted_state(h):
    async def scenario():
        tid = h.topic()
        h.produce(count=6)
        await h.fetch("m1", 0, [(tid, 0)])
        await h.acknowledge("m1", 1, {(tid, 0): [(0, 1, [ACCEPT]), (2, 2, [RELEASE])]})
        h.restart()                                   # the acquired 3-5 were never persisted
        sp = (await h.shares.get("g", h.catalogue.by_id[tid], 0)).partition
        assert sp.start == 2
        assert sp.state_at(2)[:2] == (AVAILABLE, 1)
        r = await h.fetch("m2", 0, [(tid, 0)])
        assert acquired(r, (tid, 0)) == [(2, 2, 2), (3, 5, 1)]
        assert sp.state_at(0) is None and ACKNOWLEDGED   # 0-1 stay done
    run(scenario())


def test_v2_renew_and_record_limit(tmp_path):
    from kcoord.share.partition import RENEW
    h = Harness(tmp_path, ["group.share.record.lock.duration.ms=1000",
                           "group.share.min.record.lock.duration.ms=1000"])

    async def scenario():
        tid = h.topic()
        h.produce(count=6)
        r = await h.fetch("m1", 0, [(tid, 0)], max_records=2, version=2, share_acquire_mode=1)
        assert acquired(r, (tid, 0)) == [(0, 1, 1)]             # record_limit: the batch cut
        r = await h.fetch("m1", 1, acks={(tid, 0): [(0, 1, [RENEW])]}, version=2)
        assert partitions(r)[(tid, 0)]["acknowledge_error_code"] == Err.INVALID_REQUEST
        r = await h.fetch("m1", 2, acks={(tid, 0): [(0, 1, [RENEW])]}, version=2,
                          is_renew_ack=True)
        assert r["error_code"] == Err.INVALID_REQUEST                # a renewal must not fetch
        r = await h.fetch("m1", 2, acks={(tid, 0): [(0, 1, [RENEW])]}, version=2,
                          is_renew_ack=True, max_records=0, min_bytes=0, max_bytes=0)
        assert r["error_code"] == 0
        assert partitions(r)[(tid, 0)]["acknowledge_error_code"] == 0
        assert partitions(r)[(tid, 0)]["acquired_records"] == []
        r = await h.acknowledge("m1", 3, {(tid, 0): [(0, 1, [RENEW])]}, version=2)
        assert partitions(r)[(tid, 0)]["error_code"] == Err.INVALID_REQUEST  # no IsRenewAck
    run(scenario())


def test_deleted_topic_drops_its_share_partitions(h):
    async def scenario():
        tid = h.topic()
        h.catalogue.listeners.append(h.shares.on_topics_changed)
        h.produce(count=2)
        await h.fetch("m1", 0, [(tid, 0)])
        assert ("g", tid, 0) in h.shares.partitions
        h.catalogue.delete("t")
        assert ("g", tid, 0) not in h.shares.partitions
        r = await h.fetch("m1", 1)
        assert partitions(r)[(tid, 0)]["error_code"] == Err.UNKNOWN_TOPIC_ID
        assert not h.handlers.sessions.get("g", "m1").partitions     # left the session
    run(scenario())


def test_a_full_window_wakes_the_fetch_once_acknowledged(tmp_path):
    h = Harness(tmp_path, ["group.share.partition.max.record.locks=100"])  # Kafka's minimum

    async def scenario():
        tid = h.topic()
        h.produce(count=100)
        await h.fetch("m1", 0, [(tid, 0)])                       # the window is full
        h.produce(count=5)
        # the acknowledgement in this very request makes room: answered long before MaxWaitMs
        r = await asyncio.wait_for(
            h.fetch("m1", 1, acks={(tid, 0): [(0, 99, [ACCEPT])]}, max_wait=60_000), 10)
        assert acquired(r, (tid, 0)) == [(100, 104, 1)]
    run(scenario())


class Replication:
    """A cluster's replica manager as far as the share handlers ask: this node
    leads nothing; node 2 (epoch 7) leads everything."""
    def manages(self, _name):
        return True

    def replica(self, _name, _index):
        return None

    def leader_hint(self, _name, _index):
        return 2, 7, ("10.0.0.2", 9093)

    @staticmethod
    def endpoint_of(node_id, _listener):
        return ("leader.example", 9094) if node_id == 2 else None


def test_not_the_leader_names_the_leader(h):
    async def scenario():
        tid = h.topic()
        h.data.replication = Replication()
        r = await h.fetch("m1", 0, [(tid, 0)])
        entry = partitions(r)[(tid, 0)]
        assert entry["error_code"] == Err.NOT_LEADER_OR_FOLLOWER
        assert entry["current_leader"] == {"leader_id": 2, "leader_epoch": 7}
        assert r["node_endpoints"] == [{"node_id": 2, "host": "leader.example", "port": 9094,
                                        "rack": None}]
        r = await h.acknowledge("m1", 1, {(tid, 0): [(0, 0, [ACCEPT])]})
        assert partitions(r)[(tid, 0)]["error_code"] == Err.NOT_LEADER_OR_FOLLOWER
        assert partitions(r)[(tid, 0)]["current_leader"]["leader_id"] == 2
    run(scenario())


def test_state_initialized_anew_or_deleted_leaves_the_leader(h):
    from kcoord.server.share_partitions import GroupSidePersister
    from kcoord.share.persister import ShareKey as Key

    async def scenario():
        tid = h.topic()
        h.produce(count=4)
        await h.fetch("m1", 0, [(tid, 0)])
        group_side = GroupSidePersister(h.persister, h.shares)
        assert await group_side.initialize(Key("g", tid, 0), 1, 3) == 0   # AlterShareGroupOffsets
        assert ("g", tid, 0) not in h.shares.partitions
        r = await h.fetch("m2", 0, [(tid, 0)])
        assert acquired(r, (tid, 0)) == [(3, 3, 1)]       # from the new start, nothing held
        assert await group_side.delete(Key("g", tid, 0)) == 0
        assert ("g", tid, 0) not in h.shares.partitions
        assert (await group_side.summary(Key("g", tid, 0))).start_offset == -1
    run(scenario())


def test_acknowledgements_waiting_when_the_partition_is_dropped_are_answered(tmp_path):
    from .memory_persister import MemoryPersister
    persister = MemoryPersister(gate=asyncio.Event())
    h = Harness(tmp_path, persister=persister)

    async def scenario():
        tid = h.topic()
        h.produce(count=4)
        persister.gate.set()
        await h.fetch("m1", 0, [(tid, 0)])
        persister.gate.clear()                              # writes from here on are held
        started = persister.writes_started
        first = asyncio.ensure_future(h.acknowledge("m1", 1, {(tid, 0): [(0, 1, [ACCEPT])]}))
        for _ in range(1000):                               # its write is out (held)
            if persister.writes_started > started:
                break
            await asyncio.sleep(0.001)
        assert persister.writes_started == started + 1
        second = asyncio.ensure_future(h.acknowledge("m1", 2, {(tid, 0): [(2, 3, [ACCEPT])]}))
        for _ in range(20):                                 # it waits behind the held write
            await asyncio.sleep(0)
        assert persister.writes_started == started + 1 and not second.done()
        h.shares.drop(("g", tid, 0), Err.UNKNOWN_TOPIC_OR_PARTITION)
        persister.gate.set()
        r1, r2 = await asyncio.wait_for(asyncio.gather(first, second), 10)
        assert partitions(r1)[(tid, 0)]["error_code"] == 0  # its write went through
        assert partitions(r2)[(tid, 0)]["error_code"] == Err.UNKNOWN_TOPIC_OR_PARTITION
    run(scenario())


def test_a_long_poll_whose_connection_closed_acquires_nothing(h):
    async def scenario():
        tid = h.topic()
        conn = Conn("gone")
        await h.fetch("m1", 0, [(tid, 0)], conn=conn)
        waiting = asyncio.ensure_future(h.fetch("m1", 1, max_wait=20_000, conn=conn))
        await asyncio.sleep(0)
        h.handlers.connection_closed(conn)        # the session ends while it waits
        h.produce(count=3)
        h.data.appended.notify()
        r = await asyncio.wait_for(waiting, 10)
        assert acquired(r, (tid, 0)) == []
        r = await h.fetch("m2", 0, [(tid, 0)])
        assert acquired(r, (tid, 0)) == [(0, 2, 1)]    # nothing was locked for the dead member
    run(scenario())


def test_max_bytes_split_over_the_partitions(h):
    async def scenario():
        tid = h.topic(partitions=2)
        for p in (0, 1):
            h.produce(index=p, count=40, per_batch=10)      # four batches of ~200 bytes each
        r = await h.fetch("m1", 0, [(tid, 0), (tid, 1)], max_bytes=500)
        got = {tp: acquired(r, tp) for tp in partitions(r)}
        assert got[(tid, 0)] and got[(tid, 1)]            # both partitions served
        assert all(last - first < 20 for ranges in got.values() for first, last, _ in ranges)
    run(scenario())
