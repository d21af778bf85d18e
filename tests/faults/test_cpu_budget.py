import threading

import pytest

from tests.faults.cpu_budget import CPU_ROOT, ClientCpuBudget, unavailable

pytestmark = pytest.mark.skipif(bool(unavailable()), reason=f"cpu cgroup: {unavailable()}")


def _cpu_group(tid: int) -> str:
    for line in open(f"/proc/self/task/{tid}/cgroup"):
        _, controllers, path = line.rstrip("\n").split(":", 2)
        if "cpu" in controllers.split(","):
            return path
    return ""


def test_threads_made_in_the_block_are_capped_and_their_maker_is_not(tmp_path):
    budget = ClientCpuBudget(f"kcoord-test-budget-{tmp_path.name}").create()
    try:
        quota = int((budget.group / "cpu.cfs_quota_us").read_text())
        period = int((budget.group / "cpu.cfs_period_us").read_text())
        assert quota / period == budget.cores >= 1.0
        seen, release = {}, threading.Event()

        def client():
            seen["tid"] = threading.get_native_id()
            seen["group"] = _cpu_group(seen["tid"])
            release.wait(30)

        with budget.threads_made_here():
            t = threading.Thread(target=client, daemon=True)
            t.start()
        for _ in range(600):   # bounded: 30 s
            if "group" in seen or not t.is_alive():
                break
            t.join(0.05)
        assert seen["group"].endswith(budget.group.name)
        assert not _cpu_group(threading.get_native_id()).endswith(budget.group.name)
        release.set()
        t.join(30)
    finally:
        budget.remove()
    assert not budget.group.exists() and CPU_ROOT.exists()
