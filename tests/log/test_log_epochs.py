"""What the partition log keeps for replication: the leader-epoch cache and
its checkpoint file, truncation, reset, the fsynced end."""
from kcoord.log import LogConfig
from kcoord.log.epoch_checkpoint import CHECKPOINT
from kcoord.protocol.records import build_batch, iter_batches


def batch(n=1, epoch=-1, base=0):
    return build_batch([(b"k", b"v%d" % i, [], 1000 + i) for i in range(n)],
                       partition_leader_epoch=epoch, base_offset=base)


def epochs_on_disk(log):
    return [tuple(map(int, line.split())) for line in
            (log.path / CHECKPOINT).read_text().splitlines()[2:]]


def test_a_leader_append_stamps_its_epoch_and_records_where_it_starts(open_log):
    log = open_log()
    log.append(batch(2), leader_epoch=3)
    log.append(batch(1), leader_epoch=3)
    log.append(batch(2), leader_epoch=5)
    log.append(batch(1))                    # no epoch: nothing stamped, nothing assigned
    assert log.epochs.entries == [(3, 0), (5, 3)] == epochs_on_disk(log)
    data = log.read(0, 1 << 20)
    stamped = [h.partition_leader_epoch for _, h in iter_batches(data)]
    assert stamped[:3] == [3, 3, 5]
    # The CRC does not cover the epoch: the stamped batches still validate.
    from kcoord.protocol.records import validate_batch
    for pos, _ in iter_batches(data):
        validate_batch(data, pos)


def test_a_follower_append_keeps_the_leaders_offsets_and_epochs(open_log):
    log = open_log()
    log.append_raw(batch(3, epoch=2, base=0) + batch(2, epoch=4, base=3))
    assert log.epochs.entries == [(2, 0), (4, 3)]
    assert log.log_end_offset == 5


def test_truncation_cuts_epochs_at_the_new_end(open_log):
    log = open_log()
    log.append(batch(3), leader_epoch=1)
    log.append(batch(3), leader_epoch=2)
    log.truncate_to(4)                       # inside the epoch-2 batch: it goes whole
    assert log.log_end_offset == 3 and log.epochs.entries == [(1, 0)] == epochs_on_disk(log)
    log.assign_epoch(7, 3)                   # a leader took epoch 7 and wrote nothing
    assert not log.epochs_durable and epochs_on_disk(log) == [(1, 0)]
    log.store_epochs(*log.epochs_snapshot())  # what its fsync thread does
    assert log.epochs_durable and epochs_on_disk(log) == [(1, 0), (7, 3)]
    log.truncate_to(3)                       # at the end: only the empty epoch goes
    assert log.log_end_offset == 3 and log.epochs.entries == [(1, 0)]


def test_reset_restarts_an_empty_log_at_the_leaders_start(open_log):
    log = open_log()
    log.append(batch(3), leader_epoch=1)
    log.reset_to(40)
    assert (log.log_start_offset, log.log_end_offset) == (40, 40)
    assert log.epochs.entries == [] and log.flushed_offset == 40
    log.append_raw(batch(2, epoch=6, base=40))
    assert log.epochs.entries == [(6, 40)] and log.log_end_offset == 42


def test_a_new_log_start_rebases_the_first_epoch(open_log):
    log = open_log(LogConfig(segment_bytes=200))
    for epoch in (1, 1, 2, 2, 3):
        log.append(batch(2), leader_epoch=epoch)
    start = log.advance_log_start(5)
    assert start == 5 and log.epochs.entries == [(2, 5), (3, 8)]


def test_the_fsynced_end_follows_flushes(open_log):
    log = open_log()
    log.append(batch(2), leader_epoch=0)
    assert log.flushed_offset == 0
    log.flush()
    assert log.flushed_offset == 2


def test_reopening_restores_the_cache_and_repairs_it_after_a_crash(tmp_path, open_log):
    log = open_log()
    log.append(batch(2), leader_epoch=1)
    log.append(batch(2), leader_epoch=2)
    log.close()
    assert open_log().epochs.entries == [(1, 0), (2, 2)]
    # A crash after the segment write, before the checkpoint write: the
    # active segment's batches fill the missing epoch in (unclean open scans it).
    (tmp_path / "topic-0" / CHECKPOINT).write_text("0\n1\n1 0\n")
    reopened = open_log()
    assert reopened.recovery_scanned
    assert reopened.epochs.entries == [(1, 0), (2, 2)]
    # A power cut that left the checkpoint ahead of the log: cut to the log.
    reopened.truncate_to(2)
    (tmp_path / "topic-0" / CHECKPOINT).write_text("0\n2\n1 0\n2 2\n")
    assert open_log().epochs.entries == [(1, 0)]


def test_a_damaged_checkpoint_is_rebuilt_from_the_log(tmp_path, open_log):
    log = open_log()
    log.append(batch(2), leader_epoch=4)
    (tmp_path / "topic-0" / CHECKPOINT).write_text("garbage")
    assert open_log().epochs.entries == [(4, 0)]


def test_a_recovery_point_never_covers_an_append_whose_epoch_is_not_checkpointed(open_log,
                                                                              monkeypatch):
    """A flush (a worker thread) may run between an append's write and its
    epoch checkpoint; if the process then dies, reopening takes the epoch
    from the batches: the recovery point that flush wrote must not cover
    them, or the walk that fills epochs in would start past them."""
    from kcoord.log import partition_log, recovery_point
    monkeypatch.setattr(recovery_point, "RECOVERY_POINT_BYTES", 1)
    config = LogConfig(index_interval_bytes=50)
    log = open_log(config)
    for _ in range(10):
        log.append(batch(3), leader_epoch=1)
    log.flush()
    many = b"".join(batch(3) for _ in range(10))  # one append, index entries inside it
    with monkeypatch.context() as m:
        # the flush runs, then the crash beats the checkpoint write
        m.setattr(partition_log, "write_checkpoint", lambda *_a: log.flush())
        log.append(many, leader_epoch=2)
    assert open_log(config).epochs.entries == [(1, 0), (2, 30)]  # never closed: a crash


def test_a_followers_new_epoch_is_checkpointed_off_its_append_and_a_crash_before_finds_it(
        open_log, monkeypatch):
    """A follower's append of a new leader epoch (append_raw with
    defer_epochs) writes no checkpoint (a file fsync, a rename and a directory
    fsync, on the loop, for every partition of a leader that moved); the
    replica manager writes it in an fsync thread.  Until then the recovery
    point stops short of the epoch's batches, so a crash takes the epoch from
    them; once written, a crash finds it in the checkpoint."""
    from kcoord.log import recovery_point
    monkeypatch.setattr(recovery_point, "RECOVERY_POINT_BYTES", 1)
    config = LogConfig(index_interval_bytes=50)
    log = open_log(config)
    log.append_raw(b"".join(batch(3, epoch=1, base=3 * i) for i in range(10)))
    log.flush()
    assert epochs_on_disk(log) == [(1, 0)]
    log.append_raw(b"".join(batch(3, epoch=2, base=30 + 3 * i) for i in range(10)),
                   defer_epochs=True)
    assert log.epochs.entries == [(1, 0), (2, 30)] and not log.epochs_durable
    assert epochs_on_disk(log) == [(1, 0)]        # not written by the append
    log.flush()                                   # the follower's fsync; then a crash
    assert open_log(config).epochs.entries == [(1, 0), (2, 30)]
    version, text, where = log.epochs_pending()   # the fsync thread's write
    log.store_epochs(version, text)
    log.on_epochs_stored(version, where)
    assert log.epochs_pending() is None and epochs_on_disk(log) == [(1, 0), (2, 30)]
    log.append_raw(batch(3, epoch=2, base=60), defer_epochs=True)   # the same epoch
    assert log.epochs_durable
    log.flush()
    assert open_log(config).epochs.entries == [(1, 0), (2, 30)]
    # a truncation (a new leader) while a new epoch waits for its checkpoint:
    # the epoch starts below the new end, so it is checkpointed first
    log.append_raw(b"".join(batch(3, epoch=3, base=63 + 3 * i) for i in range(10)),
                   defer_epochs=True)
    log.truncate_to(75)
    assert log.epochs.entries == [(1, 0), (2, 30), (3, 63)]
    assert epochs_on_disk(log) == [(1, 0), (2, 30), (3, 63)]
    assert open_log(config).epochs.entries == [(1, 0), (2, 30), (3, 63)]
