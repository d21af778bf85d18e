"""The runtime simulation (runtime_sim.py) over many seeds: a bounded number
in CI; KCOORD_RUNTIME_SIM_SEEDS=N runs N (and KCOORD_RUNTIME_SIM_STEPS the
steps of each)."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.server.runtime_sim import run_seed

SEEDS = int(os.environ.get("KCOORD_RUNTIME_SIM_SEEDS", "200"))
STEPS = int(os.environ.get("KCOORD_RUNTIME_SIM_STEPS", "120"))
BLOCKS = 8
MEMORY_FS = "/dev/shm"


@pytest.fixture
def sim_dir(tmp_path):
    """The seeds' data dirs, on tmpfs where there is one: the simulation runs in
    one process and injects its own fsync failures, so a real disk's fsyncs
    (about half its time on a shared disk) prove nothing here."""
    if not os.path.isdir(MEMORY_FS) or not os.access(MEMORY_FS, os.W_OK):
        yield tmp_path
        return
    path = Path(tempfile.mkdtemp(prefix="kcoord-runtime-sim-", dir=MEMORY_FS))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("block", range(BLOCKS))
def test_runtime_simulation(block, sim_dir):
    for seed in range(block, SEEDS, BLOCKS):
        run_seed(seed, sim_dir / f"seed-{seed}", STEPS)


def test_the_shard_class_given_is_the_one_simulated(tmp_path):
    """bench/runtime_sim.py's broken runtimes reach the simulation (a module
    global patched once stopped doing so when the runtime took its SHARD class)."""
    from kcoord.server.coordinator_runtime import ShardRuntime
    from tests.server.runtime_sim import Simulation

    class Marked(ShardRuntime):
        pass
    sim = Simulation(0, tmp_path, 1, shard_class=Marked)
    try:
        assert sim.runtime.shards and all(type(s) is Marked for s in sim.runtime.shards)
    finally:
        sim.close()
