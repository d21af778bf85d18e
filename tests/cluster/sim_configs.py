"""Random but seeded configurations for the replication simulation."""
from __future__ import annotations

import random

from .replication_sim import SimConfig


def config_for(seed: int, produce_count: int = 40) -> SimConfig:
    rng = random.Random(seed * 7919 + 1)
    return SimConfig(
        nodes=rng.choice((2, 3, 3, 3, 4)),
        produce_count=produce_count,
        min_isr=rng.choice((1, 1, 2)),
        loss=rng.choice((0.0, 0.02, 0.1)),
        fault_rate=rng.choice((0.08, 0.15, 0.25)),
        lag_ms=rng.choice((60, 120, 300)),
        lease_ms=rng.choice((50, 100, 200)),
        flush_delay_ms=rng.choice(((0, 2), (0, 10), (5, 20))),
        bump_epoch_on_isr_removal=rng.random() < 0.5,
    )
