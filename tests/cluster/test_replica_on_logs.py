"""The replica state machine driving real partition logs (kcoord.log's
PartitionLog is its ReplicaLog): a follower ends up with the leader's
segment bytes, and an old leader truncates what it alone wrote."""
from kcoord.cluster.replica import Completed, EpochQuery, Replica, ReplicationConfig
from kcoord.cluster.state import PartitionState
from kcoord.log import PartitionLog
from kcoord.protocol.errors import Err
from kcoord.protocol.records import build_batch, iter_batches


def batch(*values):
    return build_batch([(b"k", v, [], 1000) for v in values])


def read_range(log, start, end):
    """Whole batches holding offsets [start, end), as a fetcher sends them."""
    out = bytearray()
    offset = start
    while offset < end:
        data = log.read(offset, 1 << 20)
        for pos, header in iter_batches(data):
            last = header.base_offset + header.last_offset_delta
            if header.base_offset >= end:
                break
            if last >= offset:
                out += data[pos:pos + 12 + header.batch_length]
                offset = last + 1
        else:
            continue
        break
    return bytes(out)


def exchange(leader, follower, now=0):
    request = follower.next_request()
    if isinstance(request, EpochQuery):
        answer = leader.answer_epoch_query(request.current_leader_epoch, request.epoch)
        return follower.on_epoch_answer(request, *answer, now)
    served, outs = leader.serve_follower_fetch(follower.node_id, request.fetch_offset,
                                               request.current_leader_epoch, now)
    if served.error == Err.NONE and follower.accepts_fetched(request):
        data = read_range(leader.log, request.fetch_offset, served.read_end)
        if data:
            follower.log.append_raw(data)
            follower.log.flush()
    follower.on_fetch_answer(request, served, now)
    return outs


def segment_bytes(log):
    return b"".join(path.read_bytes() for path, _ in log.segment_files())


def test_replication_between_partition_logs(tmp_path):
    logs = [PartitionLog(tmp_path / f"n{i}" / "t-0") for i in range(2)]
    a, b = (Replica(i, logs[i], ReplicationConfig(100, 2)) for i in range(2))
    s1 = PartitionState("t", 0, 0, 1, (0, 1), (0, 1), 1)
    a.on_state(s1, 0)
    b.on_state(s1, 0)
    first, last = a.log.append(batch(b"x", b"y"), leader_epoch=a.leader_epoch)
    a.log.flush()
    assert a.on_flushed(0) == [] and a.await_offset(last + 1, "w1") == []
    outs = exchange(a, b) + exchange(a, b)
    assert [o.tokens for o in outs if isinstance(o, Completed)] == [("w1",)]
    assert segment_bytes(b.log) == segment_bytes(a.log)
    assert b.log.epochs.entries == a.log.epochs.entries == [(1, 0)]

    # a writes one more batch that b never sees, then b takes over (epoch 2).
    a.log.append(batch(b"lost"), leader_epoch=1)
    a.log.flush()
    s2 = PartitionState("t", 0, 1, 2, (0, 1), (0, 1), 2)
    b.on_state(s2, 0)
    outs = a.on_state(s2, 0)
    b.log.append(batch(b"z"), leader_epoch=b.leader_epoch)
    b.log.flush()
    b.on_flushed(0)
    for _ in range(3):          # a: OffsetForLeaderEpoch, then fetch, then report
        exchange(b, a)
    assert segment_bytes(a.log) == segment_bytes(b.log)
    assert a.log.epochs.entries == b.log.epochs.entries == [(1, 0), (2, 2)]
    assert b.high_watermark == 3
    for log in logs:
        log.close()
