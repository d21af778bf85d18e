"""Timers that fire after a stall of their own process give the input that
queued meanwhile one chance to count first.

A process stopped (SIGSTOP, a VM pause) or starved (its host, its loop held
by one call) runs its due timers the moment it runs again, and the event
loop runs due timers before it polls the sockets: the heartbeats, EndTxn
and ShareAcknowledge requests sent during the stall would be read only after
the timers had expired the members, aborted the transactions and released
the locks they were about.  A timer that fires over STALL_LATE_MS late waits
STALL_GRACE_S once instead, so that input is read first; a client that sent
nothing during the stall still times out, STALL_GRACE_S later."""
from __future__ import annotations

STALL_LATE_MS = 1000
STALL_GRACE_S = 0.5


def fired_after_a_stall(due_ms: int, now_ms: int) -> bool:
    """Did a timer due at `due_ms` (the server's clock) fire after a stall?"""
    return now_ms - due_ms > STALL_LATE_MS
