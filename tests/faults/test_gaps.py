from dataclasses import dataclass

from tests.faults.gaps import Wait, heals, recovery_figures, waits_of
from tests.faults.history import FAIL, UNKNOWN, History


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


@dataclass
class C(F):
    """A fault with the nemesis's detail (its cuts, its node)."""
    detail: dict


CUT_2 = {"node": 2, "cuts": ["cli->n2", "n2->cli"]}


def _waits(*spans):
    return [Wait(p, "g", node, sent, returned) for p, node, sent, returned in spans]


def test_members_stuck_on_requests_sent_into_a_client_cut_are_the_clients_time():
    faults = [C("client-coordinator", 0, 10, CUT_2), C("loss", 30, 35, {"node": 1})]
    # both members sent to node 2 inside the cut and gave up 6 s later; the first ack at 16
    waits = _waits(("m0", 2, 9.0, 15.0), ("m1", 2, 9.5, 15.5))
    out = recovery_figures(faults, [(16, "g"), (40, "g")], ["g"], t_stop=50, goal_s=3,
                           waits=waits, members={"g": ["m0", "m1"]})
    assert out["client_view_no_commit_after_heal_s"] == 6
    assert (out["client_view_heals_judged"], out["client_view_heals_within_goal"]) == (1, 0)
    assert out["client_stuck_after_heal_s"] == 5
    assert out["no_commit_after_heal_s"] == 1
    assert (out["heals_judged"], out["heals_within_goal"]) == (1, 1)


def test_a_free_member_or_a_request_sent_after_the_heal_is_the_servers_time():
    faults = [C("client-coordinator", 0, 10, CUT_2), C("loss", 30, 35, {"node": 1})]
    # m1 was not waiting at the heal: the group could have committed at once
    out = recovery_figures(faults, [(16, "g")], ["g"], t_stop=50, goal_s=3,
                           waits=_waits(("m0", 2, 9.0, 15.0)), members={"g": ["m0", "m1"]})
    assert (out["client_stuck_after_heal_s"], out["no_commit_after_heal_s"]) == (0, 6)
    # both sent after the heal and got no answer: the server's
    out = recovery_figures(faults, [(16, "g")], ["g"], t_stop=50, goal_s=3,
                           waits=_waits(("m0", 2, 10.5, 13.5), ("m1", 2, 10.6, 13.6)),
                           members={"g": ["m0", "m1"]})
    assert (out["no_commit_after_heal_s"], out["heals_within_goal"]) == (6, 0)


def test_a_coordinator_that_does_not_answer_after_the_heal_is_still_a_miss():
    # the coordinator was paused (no cut between it and the clients): the requests the
    # members sent it before the heal and gave up on are not the clients' time
    faults = [C("pause-group-leader", 0, 10, {"node": 2}), C("loss", 30, 35, {"node": 1})]
    waits = _waits(("m0", 2, 9.0, 12.0), ("m1", 2, 9.5, 12.5),
                   ("m0", 2, 12.1, 15.1), ("m1", 2, 12.6, 15.6))
    out = recovery_figures(faults, [(40, "g")], ["g"], t_stop=50, goal_s=3,
                           waits=waits, members={"g": ["m0", "m1"]})
    assert (out["client_stuck_after_heal_s"], out["no_commit_after_heal_s"]) == (0, 20)
    assert (out["heals_judged"], out["heals_within_goal"]) == (1, 0)
    # the same behind a client cut: the members are free 2 s after the heal, then the
    # coordinator still does not answer until the next fault: a miss of 18 s
    faults[0] = C("isolate-node", 0, 10, {"node": 2, "cuts": ["cli->n2", "n1->n2"]})
    out = recovery_figures(faults, [(40, "g")], ["g"], t_stop=50, goal_s=3,
                           waits=waits, members={"g": ["m0", "m1"]})
    assert (out["client_stuck_after_heal_s"], out["no_commit_after_heal_s"]) == (2, 18)
    assert (out["heals_judged"], out["heals_within_goal"]) == (1, 0)


def test_the_waits_come_from_the_history():
    h = History()
    ops = []
    for f, outcome, error in (("write", UNKNOWN, "TimeoutError"), ("write", UNKNOWN, 15),
                              ("read", FAIL, "ConnectionError"), ("read", FAIL, 16),
                              ("write", UNKNOWN, "AssertionError")):
        op = h.invoke("m0", f, ("g", 0), node=2)
        ops.append(h.complete(op, outcome, error=error))
    h.no_answer("m1", ("g",), 1.0, "join", "TimeoutError", node=3)
    ws = waits_of(h.snapshot())
    assert [(w.process, w.node) for w in ws] == [("m0", 2), ("m0", 2), ("m1", 3)]
    assert all(w.returned >= w.sent for w in ws)
    # a history from before "returned" was recorded: a timeout lasted the old client's 6 s
    del ops[0].extra["returned"]
    assert waits_of([ops[0]])[0].returned == ops[0].invoke + 6.0
