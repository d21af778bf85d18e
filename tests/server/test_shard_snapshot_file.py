"""The snapshot file agrees with its log or is ignored (cut log, corrupt file, another log)."""
import logging
import shutil

from kcoord.coordinator.result import Record
from kcoord.log import PartitionLog
from kcoord.server.shard_batches import build_shard_batches
from kcoord.server.shard_snapshot import FILE_NAME, read_snapshot, write_snapshot


def _log(path, n: int, salt: int = 0) -> PartitionLog:
    plog = PartitionLog(path)
    for i in range(n):
        value = {"offset": i + salt, "leader_epoch": 0, "metadata": "", "commit_timestamp": 1,
                 "expire_timestamp": -1}
        plog.append(build_shard_batches([Record(1, {"group": "g", "topic": "t",
                                                    "partition": i}, value, 3)], 1))
    return plog


def test_agreeing_snapshot_is_read(tmp_path):
    plog = _log(tmp_path / "a", 5)
    mark = write_snapshot(plog, 3, b"state")
    assert mark is not None and mark.end == 3
    assert read_snapshot(plog, 0) == (mark, b"state")
    assert write_snapshot(plog, 9, b"state") is None  # no batch ends there


def test_disagreeing_snapshots_are_ignored_with_one_line(tmp_path, caplog):
    plog = _log(tmp_path / "a", 5)
    mark = write_snapshot(plog, 5, b"state")
    assert mark is not None
    other = _log(tmp_path / "b", 5, salt=100)
    shutil.copy(plog.path / FILE_NAME, other.path / FILE_NAME)
    with caplog.at_level(logging.WARNING, "kcoord.coordinator"):
        assert read_snapshot(other, 0) is None  # a snapshot of another log
    assert len(caplog.records) == 1 and "not the one it covered" in caplog.text
    data = (plog.path / FILE_NAME).read_bytes()
    (plog.path / FILE_NAME).write_bytes(data[:-2])
    assert read_snapshot(plog, 0) is None  # truncated
    (plog.path / FILE_NAME).write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    assert read_snapshot(plog, 0) is None  # corrupt
    (plog.path / FILE_NAME).write_bytes(data)
    assert read_snapshot(plog, 0) == (mark, b"state")
    plog.truncate_to(3)
    assert read_snapshot(plog, 0) is None  # the log cut below the snapshot
