"""The core's one timer service: what each named timer is due at, and what
the runtime has been asked to arm.

Timers are data: arming or cancelling adds a Timer to a Result, and the
runtime (or a test's fake clock) calls the core's `on_timer(key, now)` when
one fires.  Re-arming is lazy: a timer the runtime holds that fires at or
before the new deadline is kept, and when it fires early `fired()` arms it
again for the current deadline.  So a member that heartbeats costs one
firing per session timeout, not a cancel and an arm per heartbeat, and
still expires exactly at its deadline.  Every timer of the core (classic,
consumer and migration) goes through here; the runtime never looks at a
deadline, it arms and cancels what it is told.
"""
from __future__ import annotations

from .result import Result, Timer
from .compiled import mypyc_attr


# pickled with the core (snapshot.py) and patched by tests: an ordinary class, its methods compiled
@mypyc_attr(native_class=False)
class Timers:
    __slots__ = ("deadlines", "armed")

    def __init__(self) -> None:
        self.deadlines: dict[tuple, int] = {}  # key -> when it is due
        self.armed: dict[tuple, int] = {}      # key -> when the runtime's timer fires

    def arm(self, res: Result, key: tuple, deadline: int) -> None:
        self.deadlines[key] = deadline
        armed = self.armed.get(key)
        if armed is None or armed > deadline:
            self.armed[key] = deadline
            res.timers.append(Timer(key, deadline))

    def touch(self, key: tuple, deadline: int):
        """arm() for the hot paths: no Result; -> the Timer to hand to the
        runtime, or None when the one it holds fires early enough."""
        self.deadlines[key] = deadline
        armed = self.armed.get(key)
        if armed is None or armed > deadline:
            self.armed[key] = deadline
            return Timer(key, deadline)
        return None

    def arm_if_absent(self, res: Result, key: tuple, deadline: int) -> None:
        if key not in self.deadlines:
            self.arm(res, key, deadline)

    def cancel(self, res: Result, key: tuple) -> bool:
        """Cancel a timer; True if it was pending."""
        pending = self.deadlines.pop(key, None) is not None
        if self.armed.pop(key, None) is not None:
            res.timers.append(Timer(key, None))
        return pending

    def pending(self, key: tuple) -> bool:
        return key in self.deadlines

    def fired(self, res: Result, key: tuple, now: int) -> bool:
        """The runtime's timer `key` fired: True if it is due (it is then no
        longer pending); False if it was cancelled or fired early (then it is
        armed again in `res` for its deadline)."""
        self.armed.pop(key, None)
        deadline = self.deadlines.get(key)
        if deadline is None:
            return False
        if now < deadline:
            self.armed[key] = deadline
            res.timers.append(Timer(key, deadline))
            return False
        del self.deadlines[key]
        return True
