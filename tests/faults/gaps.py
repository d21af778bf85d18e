"""How long the register's groups could not commit once the cluster was healed.

A heal counts from the moment no fault is active any more (one fault ending
while another still holds is no heal), and runs until the next fault starts.
The final heal is reported apart: it runs on through the harness's wait for
the replicas to catch up, which no mid-run heal has.

Two views of each heal, per group:
- as the clients saw it: from the heal to the group's first acknowledged
  commit;
- the server's: the same, less the time every member of the group was still
  waiting on a request sent into a cut between the clients and its node (or
  a lossy link) before the heal.  Such a request's packets were dropped; TCP
  resends them only when its backed-off retransmission timer fires, and the
  client waits for that or its own request timeout, whatever the server does.
  Only requests the client gave up on count (a timeout or a lost connection):
  a request the server answered late is the server's time, and a request
  sent after the heal, or to a node whose link with the clients was never
  cut (a paused node, say), is too.  So a coordinator that does not answer
  after a heal is still a miss: its members are free, send, and wait.
The goal is judged on the server's view."""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .history import FAIL, UNKNOWN

# faults that drop the packets between the clients and a node (nemesis.py)
_LOSSY_KINDS = ("loss",)
# the register client's exceptions that came from an answer, though a bad one
_ANSWERED = ("AssertionError", "ValueError")


@dataclass(frozen=True)
class Heal:
    start: float      # no fault active from here
    end: float        # the next fault starts (or the register stops)
    closed_by: str    # the kind of the fault whose end made the cluster fault-free


@dataclass(frozen=True)
class Wait:
    """A register request its client gave up on: no answer came."""
    process: str
    group: str
    node: int | None  # where it was sent
    sent: float
    returned: float   # when the client stopped waiting


@dataclass(frozen=True)
class Gap:
    heal: Heal
    group: str
    seconds: float    # to the group's first acknowledged commit in the heal, or its length
    committed: bool   # False: the heal ended before the group committed
    stuck: float = 0.0  # of `seconds`: every member waiting on a request sent into a client cut

    @property
    def server_seconds(self) -> float:
        return self.seconds - self.stuck


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


def client_cuts(faults, t_stop: float) -> dict[int, list[tuple[float, float]]]:
    """Per node, the spans in which packets between it and the clients were dropped."""
    out: dict[int, list[tuple[float, float]]] = {}
    for f in faults:
        detail = getattr(f, "detail", None) or {}
        nodes = {int(c.split("->")[1 if c.startswith("cli->") else 0][1:])
                 for c in detail.get("cuts", ()) if c.startswith("cli->") or c.endswith("->cli")}
        if f.kind in _LOSSY_KINDS and "node" in detail:
            nodes.add(detail["node"])
        for n in nodes:
            out.setdefault(n, []).append((f.start, f.end if f.end is not None else t_stop))
    return out


def waits_of(ops, old_timeout_s: float = 6.0) -> list[Wait]:
    """The register's requests that got no answer: commits with an unknown outcome
    from an exception, fetches failed by one, and the members' other requests
    (f "no-answer").  A history from before the client recorded when it gave up
    (extra "returned") had every timeout last `old_timeout_s`."""
    out = []
    for op in ops:
        if (op.f not in ("write", "read", "no-answer") or not isinstance(op.error, str)
                or op.error in _ANSWERED):
            continue  # an error code, or a garbled answer, is an answer
        if op.f == "write" and op.outcome == UNKNOWN:
            returned = op.extra.get("returned")
            if returned is None:
                returned = op.invoke + (old_timeout_s if op.error == "TimeoutError" else 0.0)
        elif op.outcome == FAIL:
            returned = op.complete
        else:
            continue
        out.append(Wait(op.process, op.key[0], op.node, op.invoke, returned))
    return out


def client_stuck(heal: Heal, members: Iterable[str], waits: Iterable[Wait],
                 cuts: Mapping[int, list[tuple[float, float]]]) -> float:
    """How long after the heal every one of `members` still waited on a request
    sent before it to a node whose link with the clients was cut meanwhile."""
    free = {m: heal.start for m in members}
    for w in waits:
        if w.process not in free or not w.sent < heal.start < w.returned:
            continue
        if any(s < heal.start and e > w.sent for s, e in cuts.get(w.node, ())):
            free[w.process] = max(free[w.process], w.returned)
    return min(free.values(), default=heal.start) - heal.start


def no_commit_gaps(faults, commits, groups, t_stop: float, waits: Iterable[Wait] = (),
                   members: Mapping[str, Iterable[str]] | None = None) -> list[Gap]:
    """commits: (completion time, group) of every acknowledged register commit;
    members: each group's processes (without them no time is the client's)."""
    ordered = sorted(commits)
    waits = list(waits)
    cuts = client_cuts(faults, t_stop)
    gaps = []
    for heal in heals(faults, t_stop):
        for group in groups:
            first = next((t for t, g in ordered if g == group and heal.start <= t < heal.end),
                         None)
            seconds = (first if first is not None else heal.end) - heal.start
            stuck = client_stuck(heal, (members or {}).get(group, ()),
                                 [w for w in waits if w.group == group], cuts)
            gaps.append(Gap(heal, group, seconds, first is not None, min(stuck, seconds)))
    return gaps


def _judge(gaps: list[Gap], goal_s: float, measure) -> dict[float, bool]:
    """Per heal, whether every group committed within the goal (a heal shorter than
    the goal in which a group did not commit is not judged)."""
    judged: dict[float, bool] = {}
    for g in gaps:
        s = measure(g)
        if g.committed or s >= goal_s:
            met = g.committed and s <= goal_s
            judged[g.heal.start] = judged.get(g.heal.start, True) and met
    return judged


def recovery_figures(faults, commits, groups, t_stop: float, goal_s: float,
                     waits: Iterable[Wait] = (),
                     members: Mapping[str, Iterable[str]] | None = None) -> dict:
    """The mid-run heals' worst gap (the server's view; the clients' and their
    stuck time beside it), the final heal's apart, and how many heals met the goal."""
    gaps = no_commit_gaps(faults, commits, groups, t_stop, waits, members)
    final_start = max((g.heal.start for g in gaps), default=None)
    mid = [g for g in gaps if g.heal.start != final_start]
    final = [g for g in gaps if g.heal.start == final_start]
    judged = _judge(mid, goal_s, lambda g: g.server_seconds)
    judged_client = _judge(mid, goal_s, lambda g: g.seconds)

    def worst(gs, measure):
        w = max(gs, key=measure, default=None)
        if w is None:
            return None, None
        return round(measure(w), 2), f"{w.group} after {w.heal.closed_by}"

    server = lambda g: g.server_seconds  # noqa: E731
    mid_s, mid_at = worst(mid, server)
    final_s, final_at = worst(final, server)
    client_s, client_at = worst(mid, lambda g: g.seconds)
    stuck_s, stuck_at = worst(mid, lambda g: g.stuck)
    stuck_at = stuck_at if stuck_s else None
    return {"no_commit_after_heal_s": mid_s, "no_commit_after_heal_where": mid_at,
            "no_commit_after_final_heal_s": final_s, "no_commit_after_final_heal_where": final_at,
            "heals": len({g.heal.start for g in mid}), "heals_judged": len(judged),
            "heals_within_goal": sum(judged.values()), "recovery_goal_s": goal_s,
            "gap_measure": "server",
            "client_view_no_commit_after_heal_s": client_s,
            "client_view_no_commit_after_heal_where": client_at,
            "client_stuck_after_heal_s": stuck_s, "client_stuck_after_heal_where": stuck_at,
            "client_view_heals_judged": len(judged_client),
            "client_view_heals_within_goal": sum(judged_client.values())}
