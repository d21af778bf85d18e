"""Custom server assignors from the `kcoord.assignors` entry-point group.

A package declares, in its pyproject.toml:

    [project.entry-points."kcoord.assignors"]
    sticky-ish = "my_package.assignor:assign"

where `assign(GroupSpec, {topic id: partition count}) -> {member id:
{topic id: partitions}}` (kcoord/coordinator/assignors/spec.py), or an
object with such an `assign`.  Only the names `group.consumer.assignors`
lists are loaded; a name that no assignor or entry point has, or one that
fails to load, stops the server with one line naming the key.
"""
from __future__ import annotations

import logging
from importlib.metadata import entry_points

from ..coordinator.assignors import ASSIGNORS, register

GROUP = "kcoord.assignors"
log = logging.getLogger("kcoord.config")


def load_assignors(names: list[str]) -> None:
    """Register the entry-point assignors among `names` kcoord does not have."""
    wanted = [n for n in names if n not in ASSIGNORS]
    if not wanted:
        return
    found = {ep.name: ep for ep in entry_points(group=GROUP) if ep.name in wanted}
    for name in wanted:
        ep = found.get(name)
        if ep is None:
            continue  # reported by the config check with the known names
        try:
            obj = ep.load()
        except Exception as exc:
            raise ValueError(f"group.consumer.assignors: {name}: entry point {ep.value} "
                             f"does not load: {exc!r}") from None
        assign = getattr(obj, "assign", obj)
        if not callable(assign):
            raise ValueError(f"group.consumer.assignors: {name}: entry point {ep.value} "
                             "is neither an assign function nor has one")
        register(name, assign)
        log.info("server assignor %s loaded from %s", name, ep.value)
