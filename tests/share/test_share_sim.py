"""The share-partition simulation (share_sim.py): 500 seeded schedules in the
suite (KCOORD_SHARE_SIM_SEEDS for more; `python -m bench share_sim` runs the
long one), and each deliberately broken share partition is caught."""
import os

import pytest

from .share_sim import BROKEN, caught, run_seed

SEEDS = int(os.environ.get("KCOORD_SHARE_SIM_SEEDS", "500"))
CHUNK = 50


@pytest.mark.parametrize("first", range(0, SEEDS, CHUNK))
def test_schedules_keep_the_invariants(first):
    for seed in range(first, min(first + CHUNK, SEEDS)):
        run_seed(seed)


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_share_partitions_are_caught(name):
    assert caught(BROKEN[name], range(40)) >= 10, f"{name} slipped through"
