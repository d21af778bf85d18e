"""How long the register's groups could not commit once the cluster was healed.

A heal counts from the moment no fault is active any more (one fault ending
while another still holds is no heal), and runs until the next fault starts.
The final heal is reported apart: it runs on through the harness's wait for
the replicas to catch up, which no mid-run heal has."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Heal:
    start: float      # no fault active from here
    end: float        # the next fault starts (or the register stops)
    closed_by: str    # the kind of the fault whose end made the cluster fault-free


@dataclass(frozen=True)
class Gap:
    heal: Heal
    group: str
    seconds: float    # to the group's first acknowledged commit in the heal, or its length
    committed: bool   # False: the heal ended before the group committed


def heals(faults, t_stop: float) -> list[Heal]:
    """The fault-free windows after each stretch of overlapping faults."""
    spans = sorted((f.start, f.end if f.end is not None else t_stop, f.kind) for f in faults)
    out: list[Heal] = []
    cur_end, cur_kind = None, None
    for start, end, kind in spans:
        if cur_end is not None and start > cur_end:
            out.append(Heal(cur_end, start, cur_kind))
            cur_end = None
        if cur_end is None or end >= cur_end:
            cur_end, cur_kind = end, kind
    if cur_end is not None and cur_end < t_stop:
        out.append(Heal(cur_end, t_stop, cur_kind))
    return out


def no_commit_gaps(faults, commits, groups, t_stop: float) -> list[Gap]:
    """commits: (completion time, group) of every acknowledged register commit."""
    ordered = sorted(commits)
    gaps = []
    for heal in heals(faults, t_stop):
        for group in groups:
            first = next((t for t, g in ordered if g == group and heal.start <= t < heal.end),
                         None)
            if first is None:
                gaps.append(Gap(heal, group, heal.end - heal.start, False))
            else:
                gaps.append(Gap(heal, group, first - heal.start, True))
    return gaps


def recovery_figures(faults, commits, groups, t_stop: float, goal_s: float) -> dict:
    """The mid-run heals' worst gap, the final heal's apart, and how many heals met the goal
    (a heal shorter than the goal in which a group did not commit is not judged)."""
    gaps = no_commit_gaps(faults, commits, groups, t_stop)
    final_start = max((g.heal.start for g in gaps), default=None)
    mid = [g for g in gaps if g.heal.start != final_start]
    final = [g for g in gaps if g.heal.start == final_start]
    judged: dict[float, bool] = {}
    for g in mid:
        if g.committed or g.seconds >= goal_s:
            met = g.committed and g.seconds <= goal_s
            judged[g.heal.start] = judged.get(g.heal.start, True) and met

    def worst(gs):
        w = max(gs, key=lambda g: g.seconds, default=None)
        if w is None:
            return None, None
        return round(w.seconds, 2), f"{w.group} after {w.heal.closed_by}"

    mid_s, mid_at = worst(mid)
    final_s, final_at = worst(final)
    return {"no_commit_after_heal_s": mid_s, "no_commit_after_heal_where": mid_at,
            "no_commit_after_final_heal_s": final_s, "no_commit_after_final_heal_where": final_at,
            "heals": len({g.heal.start for g in mid}), "heals_judged": len(judged),
            "heals_within_goal": sum(judged.values()), "recovery_goal_s": goal_s}
