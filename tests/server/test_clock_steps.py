"""Steps of the wall clock (the fault harness's clock-jump, Jepsen's clock
nemesis) and stalls of the coordinator's own process (SIGSTOP, a VM pause)
expire no member that heartbeats.

Member sessions are deadlines on the server's clock (kcoord/server/clock.py).
When that clock was the wall clock itself, a session timer firing just after
a step forward (or just after the step back that ends a step backward) found
every deadline armed before the step overdue by the step's size, and the
group rebalanced: commits failed with UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION
for seconds after the fault healed (fault runs of the clock mix).  The
server's clock now runs at the monotonic rate and slews towards the wall.

The runtime simulation's plumbing (the real CoordinatorRuntime and group
handlers on a virtual loop), its wall clock stepped against the loop's.
"""
from __future__ import annotations

import pytest

from kcoord.server.clock import SLEW, STEP_AT_ONCE_S, WallClock
from kcoord.server.coordinator_runtime import ACTIVE

from tests.server.runtime_sim import PARTITIONS, Simulation

GROUP = "classic-0"


class FakeTime:
    def __init__(self) -> None:
        self.mono = 100.0
        self.wall = 1_700_000_000.0

    def tick(self, s: float) -> None:
        self.mono += s
        self.wall += s


def test_the_clock_is_the_wall_clock_until_it_steps_then_slews_without_running_back():
    t = FakeTime()
    clock = WallClock(wall=lambda: t.wall, mono=lambda: t.mono)
    assert clock.time() == t.wall
    t.tick(1.5)
    assert clock.time() == t.wall
    for step in (30.0, -30.0, 120.0, -5.0):
        before = clock.time()
        t.wall += step
        seen = [clock.time()]
        assert seen[0] == pytest.approx(before, abs=1e-9)  # no time passed: no move
        for _ in range(20):
            t.tick(0.5)
            seen.append(clock.time())
        # it moved by the time elapsed, give or take the slew, never back
        assert all(b > a for a, b in zip(seen, seen[1:]))
        assert seen[-1] - seen[0] == pytest.approx(10.0, abs=10.0 * SLEW + 1e-5)
        for _ in range(int(abs(step) / SLEW) + 10):  # the gap closes at the slew
            t.tick(1.0)
            clock.time()
        assert clock.time() == t.wall
    # a clock hours off (set at boot) is not slewed for days: taken at once
    t.wall += 3 * 3600.0
    t.tick(0.5)
    assert clock.time() == t.wall
    t.wall -= STEP_AT_ONCE_S
    t.tick(0.5)
    assert clock.time() == t.wall


def _wait(sim: Simulation, ms: int) -> None:
    sim.quiesce()
    sim.loop.advance(ms)
    sim.quiesce()


def _stable_group(sim: Simulation) -> list:
    members = [c for c in sim.classic if c.group == GROUP]
    for _ in range(120):
        if all(c.synced for c in members) and len({c.generation for c in members}) == 1:
            return members
        for c in members:
            if not c.busy:
                sim.classic_next(c)
        _wait(sim, 500)
    raise AssertionError("the group never became stable")


def _heartbeat_all(sim: Simulation, members: list) -> None:
    for c in members:
        sim.classic_heartbeat(c)
    sim.quiesce()


def _session_timer_due(sim: Simulation) -> float:
    """Heartbeat every second until a session timer of the group's shard is
    due within the next second; -> when (loop time, s)."""
    shard = sim.shard(GROUP)
    members = [c for c in sim.classic if c.group == GROUP]
    for _ in range(30):
        whens = [h.when() for h in shard._timers.values()]
        if whens and min(whens) - sim.loop.time() < 1.0:
            return min(whens)
        _heartbeat_all(sim, members)
        _wait(sim, 1000)
    raise AssertionError("no session timer came due")


@pytest.mark.parametrize("step_s", [30, 120, -5, -30])
def test_a_wall_clock_step_expires_no_member_that_heartbeats(tmp_path, step_s):
    sim = Simulation(1, tmp_path, steps=0, wall_steps=True)
    try:
        for p in range(PARTITIONS):
            sim.load(p)
        sim.quiesce()
        assert sim.shard(GROUP).state is ACTIVE
        members = _stable_group(sim)
        generation = members[0].generation
        # the step, just before a session timer fires (before any heartbeat
        # after it: the window in which wall-clock deadlines looked overdue)
        when = _session_timer_due(sim)
        sim.wall_offset_ms = step_s * 1000
        sim.loop.advance(int((when - sim.loop.time()) * 1000) + 1)
        sim.quiesce()
        # a step backward ends with the step forward: the same, from the other side
        for _ in range(5):
            _heartbeat_all(sim, members)
            _wait(sim, 1000)
        when = _session_timer_due(sim)
        sim.wall_offset_ms = 0
        sim.loop.advance(int((when - sim.loop.time()) * 1000) + 1)
        sim.quiesce()
        for _ in range(15):  # a whole session timeout more of heartbeats
            _heartbeat_all(sim, members)
            assert all(c.synced and c.generation == generation for c in members), \
                [(c.name, c.synced, c.generation) for c in members]
            _wait(sim, 1000)
        sim.check()
    finally:
        sim.close()


def test_a_coordinator_stalled_past_the_sessions_reads_the_heartbeats_before_expiring(tmp_path):
    """The coordinator's process stops for longer than the session timeout
    while its members go on heartbeating: on waking, the loop runs the due
    session timers before it reads the heartbeats queued in the sockets
    (uvloop runs timers first).  A timer that fires over STALL_LATE_MS late
    waits STALL_GRACE_S once, so the queued heartbeats count."""
    from kcoord.server.coordinator_runtime import STALL_GRACE_S
    sim = Simulation(1, tmp_path, steps=0, wall_steps=True)
    try:
        for p in range(PARTITIONS):
            sim.load(p)
        sim.quiesce()
        members = _stable_group(sim)
        generation = members[0].generation
        _heartbeat_all(sim, members)
        # the stall: time passes (15 s > the 10 s session) and nothing runs
        sim.loop.now_ms += 15_000
        sim.loop.run_idle()                # the late timers, first
        _heartbeat_all(sim, members)       # then the heartbeats that waited
        _wait(sim, int(STALL_GRACE_S * 1000) + 100)
        for _ in range(12):  # a whole session timeout more of heartbeats
            _heartbeat_all(sim, members)
            assert all(c.synced and c.generation == generation for c in members), \
                [(c.name, c.synced, c.generation) for c in members]
            _wait(sim, 1000)
        # a member that stops heartbeating still expires, a session later
        gone, *rest = members
        for _ in range(14):
            for c in rest:
                sim.classic_heartbeat(c)
            _wait(sim, 1000)
        assert not all(c.synced and c.generation == generation for c in rest), \
            "a member that stopped heartbeating was never expired"
        sim.check()
    finally:
        sim.close()
