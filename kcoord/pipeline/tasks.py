"""Spread many small work items (log partitions, stage files) over a few Spark tasks.

A PySpark task has a fixed cost in CPU (the JVM schedules it, pickles the
function and its input to a Python worker, collects its result): about 90 ms
of CPU each on the bench machine, which for one task per __consumer_offsets
partition (50 by default) was several times the work of a 1 M-record pass.
So each step runs a couple of tasks per core, each doing several items in
turn (each item still its own output file, so memory stays bounded by one
item), balanced by size so no task runs alone at the end.
"""
from __future__ import annotations

import os

# tasks per core: a spare one lets a core that finishes early take more
TASKS_PER_CORE = 2


def spread(items: list, cores: int, weight=None) -> list[list[tuple[int, object]]]:
    """items -> at most TASKS_PER_CORE * cores lists of (item index, item), the largest
    items placed first on the least loaded list (each list keeps its items' order)."""
    slots = max(1, min(len(items), TASKS_PER_CORE * max(1, cores)))
    weights = [weight(item) if weight else 1 for item in items]
    loads = [0] * slots
    lists: list[list[tuple[int, object]]] = [[] for _ in range(slots)]
    for i in sorted(range(len(items)), key=lambda i: -weights[i]):
        slot = loads.index(min(loads))
        loads[slot] += weights[i]
        lists[slot].append((i, items[i]))
    return [sorted(chunk, key=lambda pair: pair[0]) for chunk in lists if chunk]


def file_size(path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
