"""State-batch merging (Kafka's PersisterStateBatchCombiner): checked against
a per-offset model on random writes."""
import random

import pytest

from kcoord.share.batch_merge import merge_batches
from kcoord.share.persister import StateBatch as B


def test_newer_run_wins_an_overlap_and_the_rest_survives():
    current = [B(0, 9, 0, 1)]
    assert merge_batches(current, [B(3, 5, 2, 1)], -1) == [
        B(0, 2, 0, 1), B(3, 5, 2, 1), B(6, 9, 0, 1)]


def test_touching_equal_runs_are_joined_and_different_ones_kept():
    assert merge_batches([B(0, 4, 2, 1)], [B(5, 9, 2, 1)], -1) == [B(0, 9, 2, 1)]
    assert merge_batches([B(0, 4, 2, 1)], [B(5, 9, 2, 2)], -1) == [B(0, 4, 2, 1), B(5, 9, 2, 2)]


def test_start_offset_prunes_and_cuts():
    assert merge_batches([B(0, 4, 2, 1), B(5, 9, 0, 2)], [], 7) == [B(7, 9, 0, 2)]
    assert merge_batches([B(0, 4, 2, 1)], [], 5) == []
    assert merge_batches([B(0, 4, 2, 1)], [], -1) == [B(0, 4, 2, 1)]


def test_later_runs_of_one_write_win_and_inverted_runs_are_ignored():
    assert merge_batches([], [B(0, 9, 0, 1), B(2, 3, 4, 5), B(8, 7, 2, 1)], -1) == [
        B(0, 1, 0, 1), B(2, 3, 4, 5), B(4, 9, 0, 1)]


def _model(model: dict, new, start: int) -> dict:
    for b in new:
        for o in range(b.first_offset, b.last_offset + 1):
            model[o] = (b.delivery_state, b.delivery_count)
    return {o: v for o, v in model.items() if start < 0 or o >= start}


def _expand(batches) -> dict:
    out = {}
    for b in batches:
        for o in range(b.first_offset, b.last_offset + 1):
            assert o not in out, "overlapping runs"
            out[o] = (b.delivery_state, b.delivery_count)
    return out


@pytest.mark.parametrize("seed", range(0, 200, 20))
def test_merge_equals_the_per_offset_model(seed):
    for s in range(seed, seed + 20):
        _schedule(random.Random(s))


def _schedule(rng: random.Random) -> None:
    batches, model, start = [], {}, -1
    for _ in range(30):
        new = []
        for _ in range(rng.randint(0, 3)):
            first = rng.randint(0, 60)
            new.append(B(first, first + rng.randint(0, 8), rng.choice((0, 2, 4)),
                         rng.randint(1, 3)))
        if rng.random() < 0.2:
            start = max(start, rng.randint(0, 60))
        batches = merge_batches(batches, new, start)
        model = _model(model, new, start)
        assert _expand(batches) == model
        # sorted, and no two touching runs that could be one
        for a, b in zip(batches, batches[1:]):
            assert a.last_offset < b.first_offset
            assert not (a.last_offset + 1 == b.first_offset
                        and (a.delivery_state, a.delivery_count) == (b.delivery_state,
                                                                     b.delivery_count))
