"""The runtime simulation (runtime_sim.py) over many seeds: a bounded number
in CI; KCOORD_RUNTIME_SIM_SEEDS=N runs N (and KCOORD_RUNTIME_SIM_STEPS the
steps of each)."""
from __future__ import annotations

import os

import pytest

from tests.server.runtime_sim import run_seed

SEEDS = int(os.environ.get("KCOORD_RUNTIME_SIM_SEEDS", "200"))
STEPS = int(os.environ.get("KCOORD_RUNTIME_SIM_STEPS", "120"))
BLOCKS = 8


@pytest.mark.parametrize("block", range(BLOCKS))
def test_runtime_simulation(block, tmp_path):
    for seed in range(block, SEEDS, BLOCKS):
        run_seed(seed, tmp_path / f"seed-{seed}", STEPS)


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
