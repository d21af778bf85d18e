"""Loading a shard through its coordinator snapshot leaves the state a full
replay of the log leaves; a snapshot that disagrees with the log, or that
other code wrote, is ignored with one log line and the whole log replayed."""
from __future__ import annotations

import asyncio
import logging
import random
import shutil

import pytest

from kcoord.coordinator.shard import CoordinatorConfig
from kcoord.coordinator.snapshot import encode_state
from kcoord.log import LogConfig, PartitionLog
from kcoord.server.coordinator_runtime import ShardRuntime
from kcoord.server.shard_snapshot import FILE_NAME, read_snapshot, write_snapshot_file
from kcoord.server.snapshot_catchup import catch_up, segments_of
from kcoord.server.snapshot_schedule import ShardSnapshots
from tests.coordinator.test_state_snapshot import _state
from tests.server.test_load_replay import replay_one_by_one, state, write_log


def _shard(plog: PartitionLog, interval: int = 1) -> ShardRuntime:
    shard = ShardRuntime(0, plog, CoordinatorConfig(), 0)
    shard.snapshots = ShardSnapshots(interval, shard.commit.durability)
    return shard


def _load(shard: ShardRuntime) -> None:
    async def run():
        await shard.load(0)
    asyncio.run(run())


def _replayed(shard: ShardRuntime):
    """The core a load replays (before on_loaded touches it)."""
    shard.core = shard.new_core()
    asyncio.run(shard.replay_log())
    return shard.core


def _full_replay(plog: PartitionLog):
    shard = ShardRuntime(0, plog, CoordinatorConfig(), 0)  # no snapshots
    return _replayed(shard)


@pytest.mark.parametrize("seed", range(8))
def test_load_from_snapshot_equals_full_replay(tmp_path, seed, caplog):
    """A load writes a snapshot (its core is still replay state); after more
    records, a catch-up writes another from it; each later load starts from
    the newest and replays the rest: the state is the full replay's."""
    rnd = random.Random(seed)
    plog = PartitionLog(tmp_path / "__consumer_offsets-0",
                        LogConfig(segment_bytes=rnd.choice([3_000, 1 << 30])))
    groups, others = rnd.choice([4, 60]), rnd.choice([0.2, 0.02])
    write_log(plog, rnd, rnd.randint(1, 600), others, groups)
    first = _shard(plog)
    _load(first)
    assert first.snapshot_mark is not None and first.snapshot_mark.end == plog.log_end_offset

    write_log(plog, rnd, rnd.randint(1, 600), others, groups)
    cut = plog.log_end_offset
    if seed % 3:  # a catch-up (as in the worker, or at shutdown) moves the snapshot on
        done = catch_up(str(plog.path), segments_of(plog), first.snapshot_mark, cut,
                        CoordinatorConfig(), 0)
        assert done is not None and done[0].end == cut
    write_log(plog, rnd, rnd.randint(0, 20), others, groups)  # few: a lost record would show

    caplog.clear()
    with caplog.at_level(logging.INFO, "kcoord.coordinator"):
        shard = _shard(plog, interval=10**9)
        restored = _replayed(shard)
    assert "loaded from the snapshot" in caplog.text
    # only the records past the snapshot were replayed: a load replaying the
    # whole log over the snapshot's state would end in the same state
    _, past_the_snapshot, _ = replay_one_by_one(plog, since=shard.snapshot_mark.end)
    assert shard.records_loaded == past_the_snapshot
    full = _full_replay(plog)
    assert _state(restored) == _state(full)
    ref, _, _ = replay_one_by_one(plog)
    assert state(restored) == state(ref)
    plog.close()


def _with_snapshot(tmp_path, name: str, seed: int = 1) -> PartitionLog:
    plog = PartitionLog(tmp_path / name)
    write_log(plog, random.Random(seed), 300, 0.1, 8)
    _load(_shard(plog))
    assert (plog.path / FILE_NAME).exists()
    write_log(plog, random.Random(seed + 100), 50, 0.1, 8)
    return plog


def _ignored_with_one_line(plog: PartitionLog, caplog, why: str) -> None:
    caplog.clear()
    with caplog.at_level(logging.INFO, "kcoord.coordinator"):
        core = _replayed(_shard(plog, interval=10**9))
    lines = [r.getMessage() for r in caplog.records if "snapshot" in r.getMessage()]
    assert len(lines) == 1 and "ignoring the coordinator snapshot" in lines[0], lines
    assert why in lines[0], lines
    assert _state(core) == _state(_full_replay(plog))


def test_snapshot_of_another_log_is_ignored(tmp_path, caplog):
    plog = _with_snapshot(tmp_path, "a")
    other = _with_snapshot(tmp_path, "b", seed=2)
    shutil.copy(plog.path / FILE_NAME, other.path / FILE_NAME)
    _ignored_with_one_line(other, caplog, "is not the one it covered")


def test_snapshot_beyond_a_cut_log_is_ignored(tmp_path, caplog):
    plog = _with_snapshot(tmp_path, "a")
    plog.truncate_to(read_snapshot(plog, 0)[0].end - 1)
    _ignored_with_one_line(plog, caplog, "beyond the log end")


def test_corrupt_snapshot_is_ignored(tmp_path, caplog):
    plog = _with_snapshot(tmp_path, "a")
    path = plog.path / FILE_NAME
    data = path.read_bytes()
    path.write_bytes(data[:100] + bytes([data[100] ^ 0x40]) + data[101:])
    _ignored_with_one_line(plog, caplog, "corrupt or truncated")


def test_snapshot_of_another_kcoord_version_is_ignored(tmp_path, caplog):
    plog = _with_snapshot(tmp_path, "a")
    mark, payload = read_snapshot(plog, 0)
    write_snapshot_file(plog.path, mark, bytes([payload[0] ^ 1]) + payload[1:])
    _ignored_with_one_line(plog, caplog, "another kcoord version")


def test_unreadable_payload_is_ignored(tmp_path, caplog):
    plog = _with_snapshot(tmp_path, "a")
    mark, payload = read_snapshot(plog, 0)
    core = _full_replay(plog)
    write_snapshot_file(plog.path, mark, encode_state(core)[:-10])  # whole file, broken pickle
    _ignored_with_one_line(plog, caplog, "ignoring the coordinator snapshot")


def test_compaction_waits_for_a_catch_up_and_drops_a_snapshot_below_it(tmp_path):
    """Compaction may drop a tombstone a snapshot's tail needs: a snapshot
    below the sealed segments is deleted first; none runs under a catch-up."""
    plog = PartitionLog(tmp_path / "__consumer_offsets-0", LogConfig(segment_bytes=3_000))
    write_log(plog, random.Random(5), 100, 0.1, 8)
    shard = _shard(plog)
    _load(shard)
    mark = shard.snapshot_mark
    assert mark is not None and (plog.path / FILE_NAME).exists()
    shard.snapshots.jobs[0] = object()  # a catch-up under way
    assert not shard.snapshots.may_compact(shard)
    shard.snapshots.jobs.clear()
    assert mark.end >= plog.active.base_offset
    assert shard.snapshots.may_compact(shard) and (plog.path / FILE_NAME).exists()
    write_log(plog, random.Random(6), 200, 0.1, 8)  # rolls segments past the snapshot
    assert mark.end < plog.active.base_offset
    assert shard.snapshots.may_compact(shard)
    assert not (plog.path / FILE_NAME).exists() and shard.snapshot_mark is None


def test_the_tails_of_all_shards_together_are_bounded(tmp_path):
    """No shard's tail reaches the interval, but once the tails of all of
    them reach TAIL_BOUND_INTERVALS intervals the longest is caught up
    (serving shards only), so a crash replays about the bound, not an
    interval per shard."""
    from kcoord.server.snapshot_schedule import TAIL_BOUND_INTERVALS
    interval = 20
    snapshots, shards = None, []
    for i in range(TAIL_BOUND_INTERVALS + 3):
        plog = PartitionLog(tmp_path / f"__consumer_offsets-{i}")
        shard = ShardRuntime(i, plog, CoordinatorConfig(), 0)
        snapshots = snapshots or ShardSnapshots(interval, shard.commit.durability)
        shard.snapshots = snapshots
        _load(shard)  # empty: serving, nothing noted past a snapshot
        shards.append(shard)
    shards[-1].unload()
    rnd, chosen = random.Random(3), []
    for i, shard in enumerate(shards):
        write_log(shard.plog, rnd, interval - 1 - (i == 4) * 5, 0.0, 4)
        chosen.append(snapshots.choose(shard))
        assert shard.plog.log_end_offset - snapshots.covered(shard) < interval
    total = 0
    for i, shard in enumerate(shards[:-1]):
        total += interval - 1 - (i == 4) * 5
        if total < snapshots.tail_bound:
            assert chosen[i] is None
    due = [c for c in chosen if c is not None]
    assert due and all(s is not shards[4] and s is not shards[-1] for s, _ in due)
    assert due[0] == (shards[0], shards[0].plog.log_end_offset)  # the first of the longest



_WORKER_OF_A_KILLED_SERVER = """
import os, sys, time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from kcoord.server.snapshot_catchup import die_with_parent
pool = ProcessPoolExecutor(1, mp_context=get_context("spawn"), initializer=die_with_parent,
                           initargs=(os.getpid(),))
# a long catch-up under way: the worker waits for a shell that names itself, then sleeps
pool.submit(os.system, "echo $$ > %s; exec sleep 600")
print(next(iter(pool._processes)), flush=True)
time.sleep(600)
"""


def test_a_catch_up_worker_dies_with_its_server(tmp_path):
    """kill -9 of the server leaves no worker busy with a catch-up that
    could write a snapshot into a data dir another server has opened since."""
    import os
    import signal
    import subprocess
    import sys
    import time
    started = tmp_path / "job-started"
    server = subprocess.Popen([sys.executable, "-c", _WORKER_OF_A_KILLED_SERVER % started],
                              stdout=subprocess.PIPE, text=True)
    sleeper = None
    try:
        worker = int(server.stdout.readline())
        deadline = time.monotonic() + 60
        while not (started.exists() and started.read_text().strip()):
            assert time.monotonic() < deadline, "the job never started"
            time.sleep(0.05)
        sleeper = int(started.read_text())
        server.send_signal(signal.SIGKILL)
        server.wait()
        deadline = time.monotonic() + 60
        while True:
            try:
                with open(f"/proc/{worker}/stat") as fh:
                    if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                        break
            except FileNotFoundError:
                break
            assert time.monotonic() < deadline, "the worker outlived its server"
            time.sleep(0.05)
    finally:
        server.kill()
        if sleeper is not None:
            os.kill(sleeper, signal.SIGKILL)
