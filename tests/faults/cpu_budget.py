"""The clients' share of the host's CPU, capped (a cgroup-v1 cpu group).

Jepsen runs its clients on a control node of their own.  Here they share
two cores with etcd and the nodes, and librdkafka's broker threads can spin
(poll with a zero timeout while a partition has no reachable leader): a
run's client process was seen at 1.3 cores with 36 runnable threads.  Nice
alone does not hold that back (a node thread at nice -5 against 36 threads
at nice 0 gets a few percent of a core, and the kernel's own threads fall
behind too: nft rule changes took 13-30 s), so nodes no fault touched went
silent for seconds and lost their leases.  The workload threads are made in
a cpu group capped at CLIENT_SHARE of the cores; the nemesis (the main
thread) and every process it starts stay outside it."""
from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from pathlib import Path

CPU_ROOT = Path("/sys/fs/cgroup/cpu")
CLIENT_SHARE = 0.5     # of the host's cores, at least one core
PERIOD_US = 20_000     # short, so a throttled thread holding the GIL is not held long


def unavailable() -> str | None:
    if os.geteuid() != 0:
        return "not root"
    if not (CPU_ROOT / "cpu.cfs_quota_us").exists():
        return "no cgroup-v1 cpu controller at /sys/fs/cgroup/cpu"
    return None


class ClientCpuBudget:
    def __init__(self, name: str) -> None:
        self.group = CPU_ROOT / name
        self.cores = max(1.0, (os.cpu_count() or 1) * CLIENT_SHARE)
        self.active = False

    def create(self) -> "ClientCpuBudget":
        if unavailable():
            return self
        self.group.mkdir(exist_ok=True)
        (self.group / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        (self.group / "cpu.cfs_quota_us").write_text(str(int(self.cores * PERIOD_US)))
        self.active = True
        return self

    @contextmanager
    def threads_made_here(self):
        """Threads started in this block (and the threads they start) are capped:
        a thread is made in its creator's group, so the creator joins the group
        for the block and leaves it after."""
        if not self.active:
            yield
            return
        me = str(threading.get_native_id())
        (self.group / "tasks").write_text(me)
        try:
            yield
        finally:
            (CPU_ROOT / "tasks").write_text(me)

    def remove(self) -> None:
        if not self.active:
            return
        # threads still in the group (clients that outlived their join) go back first
        for tid in (self.group / "tasks").read_text().split():
            try:
                (CPU_ROOT / "tasks").write_text(tid)
            except OSError:
                pass   # gone meanwhile
        try:
            self.group.rmdir()
        except OSError:
            pass
        self.active = False
