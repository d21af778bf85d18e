"""`kcoord serve` restarts through its coordinator snapshot: one written by
the worker every N records, one at a clean stop; after a clean stop and
after kill -9, the committed offsets and a classic group's state are back."""
from __future__ import annotations

import re
import time

from kcoord.server.shard_snapshot import snapshot_mark
from tests.clients.wire import WireClient, create_topic, wait_for_log
from tests.server.test_classic_wire import DESCRIBE, Conn, assign, form_group
from tests.server.test_load_replay import commit, fetched
from tests.support import ServerProcess

INTERVAL = 20
_LOADED = re.compile(r"loaded from the snapshot at offset (\d+) and (\d+) records after it")


def _wait_snapshot_past(shard_dir, end: int, timeout: float = 60.0) -> int:
    """Until the snapshot beside the log covers more than `end` (the worker's catch-up)."""
    deadline = time.monotonic() + timeout
    while True:
        mark = snapshot_mark(shard_dir)
        if mark is not None and mark.end > end:
            return mark.end
        assert time.monotonic() < deadline, f"no snapshot past offset {end}"
        time.sleep(0.05)


def _loaded_from_snapshot(srv: ServerProcess, since: int) -> tuple[int, int]:
    line = wait_for_log(srv, "loaded from the snapshot", since=since, timeout=60)
    m = _LOADED.search(line)
    assert m, line
    return int(m.group(1)), int(m.group(2))


def _check_state(srv: ServerProcess, expected: dict[str, int], group: str, ids: list[str]):
    with WireClient(srv.port) as c:
        assert {g: fetched(c, g) for g in expected} == expected
    conn = Conn(srv.port, "after")
    try:
        described = conn.call(DESCRIBE, 5, {"groups": [group],
                                            "include_authorized_operations": False})["groups"][0]
        assert described["error_code"] == 0 and described["group_state"] == "Stable", described
        assert [m["member_id"] for m in described["members"]] == ids
        assert [m["member_assignment"] for m in described["members"]] == [assign([0])]
    finally:
        conn.close()


def test_restarts_through_the_snapshot_keep_offsets_and_groups(tmp_path):
    data = tmp_path / "data"
    srv = ServerProcess(data, settings={
        "offsets.topic.num.partitions": "1", "group.initial.rebalance.delay.ms": "0",
        "group.coordinator.snapshot.interval.records": str(INTERVAL)})
    shard_dir = data / "__consumer_offsets-0"
    srv.start()
    opened: list[Conn] = []
    try:
        def conns(client_id: str = "wire") -> Conn:
            opened.append(Conn(srv.port, client_id))
            return opened[-1]
        # a session longer than the test: under load the serving between restarts
        # outlasts the default 10 s, and the member never heartbeats
        _, ids, _ = form_group(conns, "classic", 1, session=300000)
        expected: dict[str, int] = {}
        with WireClient(srv.port) as c:
            assert create_topic(c, "t")["error_code"] == 0
            for i in range(INTERVAL + 10):
                expected[f"g{i % 5}"] = i
                commit(c, f"g{i % 5}", i)
        first = _wait_snapshot_past(shard_dir, 0)  # written by the worker, while serving

        srv.stop()  # a clean stop snapshots what is past the worker's
        assert srv.proc.returncode == 0
        stopped_at = snapshot_mark(shard_dir).end
        assert stopped_at >= first
        mark = len(srv.log_lines)
        srv.start()
        assert _loaded_from_snapshot(srv, mark) == (stopped_at, 0)
        _check_state(srv, expected, "classic", ids)

        with WireClient(srv.port) as c:
            for i in range(INTERVAL + 10):
                expected[f"g{i % 5}"] = 1000 + i
                commit(c, f"g{i % 5}", 1000 + i)
            _wait_snapshot_past(shard_dir, stopped_at)
            for i in range(3):  # a tail past the worker's snapshot
                expected[f"g{i}"] = 5000 + i
                commit(c, f"g{i}", 5000 + i)
        srv.kill()
        stale = shard_dir / "coordinator.999999.tmp"  # a snapshot write the kill cut short
        stale.write_bytes(b"half a snapshot")
        mark = len(srv.log_lines)
        srv.start()
        at, after = _loaded_from_snapshot(srv, mark)
        assert at > stopped_at and not stale.exists()
        _check_state(srv, expected, "classic", ids)
    finally:
        for conn in opened:
            conn.close()
        srv.stop()
