from dataclasses import dataclass

from tests.faults.gaps import heals, recovery_figures


@dataclass
class F:
    kind: str
    start: float
    end: float | None


def test_overlapping_faults_heal_only_when_the_last_one_ends():
    faults = [F("a", 0, 10), F("b", 5, 20), F("c", 30, 35)]
    hs = heals(faults, t_stop=60)
    assert [(h.start, h.end, h.closed_by) for h in hs] == [(20, 30, "b"), (35, 60, "c")]


def test_a_fault_nested_inside_another_does_not_close_it():
    hs = heals([F("outer", 0, 20), F("inner", 2, 5)], t_stop=30)
    assert [(h.start, h.closed_by) for h in hs] == [(20, "outer")]


def test_gaps_count_from_the_heal_and_the_final_heal_is_apart():
    faults = [F("a", 0, 10), F("b", 5, 20), F("c", 30, 35)]
    # g1 commits 2 s after the mid heal; g2 commits during fault b (not after the heal) and
    # then 4 s after the heal; both commit 12 s into the final heal
    commits = [(22, "g1"), (12, "g2"), (24, "g2"), (47, "g1"), (47, "g2")]
    out = recovery_figures(faults, commits, ["g1", "g2"], t_stop=60, goal_s=3)
    assert out["no_commit_after_heal_s"] == 4
    assert out["no_commit_after_heal_where"] == "g2 after b"
    assert out["no_commit_after_final_heal_s"] == 12
    assert (out["heals"], out["heals_judged"], out["heals_within_goal"]) == (1, 1, 0)


def test_a_short_heal_without_a_commit_is_not_judged_and_a_long_one_fails():
    faults = [F("a", 0, 10), F("b", 11, 20), F("c", 40, 45)]
    out = recovery_figures(faults, [(13, "g")], ["g"], t_stop=50, goal_s=3)
    # heal 10-11: no commit, shorter than the goal; heal 20-40: none at all
    assert (out["heals"], out["heals_judged"], out["heals_within_goal"]) == (2, 1, 0)
    assert out["no_commit_after_heal_s"] == 20
    out = recovery_figures(faults, [(21, "g"), (10.5, "g")], ["g"], t_stop=50, goal_s=3)
    assert (out["heals_judged"], out["heals_within_goal"]) == (2, 2)
