"""tasks.spread: every item once, in a few balanced tasks, each keeping its items' order."""
from __future__ import annotations

from kcoord.pipeline.tasks import TASKS_PER_CORE, spread


def test_spread_places_every_item_once_in_a_few_balanced_tasks():
    sizes = [50, 7, 7, 30, 1, 1, 1, 20, 20, 5, 40, 3]
    chunks = spread(sizes, cores=2, weight=lambda size: size)
    assert len(chunks) == 2 * TASKS_PER_CORE
    placed = [i for chunk in chunks for i, _ in chunk]
    assert sorted(placed) == list(range(len(sizes)))
    assert all(sizes[i] == item for chunk in chunks for i, item in chunk)
    assert all([i for i, _ in chunk] == sorted(i for i, _ in chunk) for chunk in chunks)
    loads = [sum(item for _, item in chunk) for chunk in chunks]
    # greedy largest-first: no task carries more than the lightest plus the largest item
    assert max(loads) - min(loads) <= max(sizes)


def test_spread_never_makes_empty_tasks():
    assert spread([], cores=2) == []
    assert spread(["only"], cores=8) == [[(0, "only")]]
    assert sum(len(c) for c in spread(list(range(3)), cores=1)) == 3
