"""The lease-churn figure of a run: expiries of nodes no fault touched."""
from __future__ import annotations

from tests.faults.leases import lease_churn, touched

LINE = "2026-11-28 14:00:{:02d},500 WARNING kcoord.cluster.etcd: etcd lease 1 expired: registering again\n"


def fault(kind: str, node: int | None, start: float, end: float) -> dict:
    return {"kind": kind, "detail": {} if node is None else {"node": node},
            "start": start, "end": end}


def test_which_nodes_a_fault_touches():
    assert touched(fault("node-etcd", 2, 0, 1), (1, 2, 3)) == {2}
    assert touched(fault("minority-keeps-etcd", 2, 0, 1), (1, 2, 3)) == {1, 3}
    assert touched(fault("etcd-pause", None, 0, 1), (1, 2, 3)) == {1, 2, 3}
    assert touched(fault("client-coordinator", 1, 0, 1), (1, 2, 3)) == set()


def test_an_expiry_outside_its_nodes_faults_is_counted_apart(tmp_path):
    base = 1_000_000.0  # monotonic time of 14:00:00 on the wall clock below
    from datetime import datetime
    wall0 = datetime(2026, 11, 28, 14, 0, 0).timestamp()
    (tmp_path / "node-1.log").write_text(LINE.format(5))    # during its node-etcd cut
    (tmp_path / "node-2.log").write_text(LINE.format(5) + LINE.format(30))  # never touched
    (tmp_path / "node-3.log").write_text("")
    faults = [fault("node-etcd", 1, base + 3, base + 6), fault("slow", 3, base + 10, base + 20)]
    churn = lease_churn(tmp_path, [1, 2, 3], faults, lambda t: t - base + wall0, base + 20)
    assert churn["lease_expiries"] == 3
    assert churn["untouched_node_expiries"] == 2
    assert churn["untouched_after_heal"] == 1
    assert churn["untouched_at_s"] == [-14.5, 10.5]


def test_a_jumped_nodes_log_stamps_are_taken_back_to_true_time(tmp_path):
    base = 1_000_000.0
    from datetime import datetime
    wall0 = datetime(2026, 11, 28, 14, 0, 0).timestamp()
    # node 1's clock is 30 s ahead from 2 s to 8 s; it logs an expiry at true
    # 5 s (stamped 35 s) while it is paused from 4 s to 6 s: a touched node's
    (tmp_path / "node-1.log").write_text(LINE.format(35))
    faults = [fault("clock-jump", 1, base + 2, base + 8), fault("pause-group-leader", 1, base + 4,
                                                                  base + 6)]
    faults[0]["detail"]["offset_s"] = 30
    churn = lease_churn(tmp_path, [1, 2, 3], faults, lambda t: t - base + wall0, base + 20)
    assert churn["lease_expiries"] == 1
    assert churn["untouched_node_expiries"] == 0, churn
