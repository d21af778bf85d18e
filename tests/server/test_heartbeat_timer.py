"""The classic heartbeat path re-arms a member's session timer lazily (the
runtime keeps a handle that fires before the new deadline; the core re-arms
it then).  At the wire: a member that keeps heartbeating outlives many
session timeouts, and one that stops expires a session timeout after its
last heartbeat, not after an earlier deadline."""
from __future__ import annotations

import time

from kcoord.protocol.errors import Err
from tests.server.test_classic_wire import conns, form_group, g, shared_server  # noqa: F401

SESSION_MS = 1000


def test_heartbeats_keep_the_session_and_silence_expires_it(conns, g):  # noqa: F811
    cs, ids, generation = form_group(conns, g, 2, session=SESSION_MS)
    end = time.monotonic() + 3.5 * SESSION_MS / 1000  # several session timeouts
    while time.monotonic() < end:
        assert [c.heartbeat(g, m, generation) for c, m in zip(cs, ids)] == [Err.NONE] * 2
        time.sleep(0.15)
    last = time.monotonic()
    assert cs[1].heartbeat(g, ids[1], generation) == Err.NONE  # ids[1]'s last heartbeat
    code = Err.NONE
    while time.monotonic() < last + 15 and code == Err.NONE:
        time.sleep(0.05)
        code = cs[0].heartbeat(g, ids[0], generation)
    assert code == Err.REBALANCE_IN_PROGRESS
    # the session runs from the last heartbeat (a little clock slack for ms rounding)
    assert time.monotonic() - last >= SESSION_MS / 1000 - 0.05
    reply = cs[0].join(g, ids[0], session=SESSION_MS)
    assert [m["member_id"] for m in reply["members"]] == [ids[0]]
