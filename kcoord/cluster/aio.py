"""Bounded waits that never lose a cancellation.

asyncio.wait_for before Python 3.12 can swallow the cancellation of the
task awaiting it when the inner awaitable finishes at the same moment
(CPython gh-86296); in a loop that task then never stops, and whoever
awaits its end hangs.  asyncio.wait has no such race."""
from __future__ import annotations

import asyncio


async def bounded(aw, timeout: float):
    """The result of `aw` within `timeout` s, else asyncio.TimeoutError
    (and `aw` is cancelled, not awaited)."""
    fut = asyncio.ensure_future(aw)
    try:
        done, _ = await asyncio.wait({fut}, timeout=timeout)
    except BaseException:
        drop(fut)
        raise
    if not done:
        fut.cancel()
        raise asyncio.TimeoutError()
    return fut.result()


def drop(fut: asyncio.Future) -> None:
    """Cancel `fut`, or, when it already ended in the same loop turn as our
    own cancellation, retrieve its exception (no "never retrieved" traceback)."""
    if not fut.done():
        fut.cancel()
    elif not fut.cancelled():
        fut.exception()


async def cancel_and_wait(task: asyncio.Future | None, timeout: float) -> None:
    """Cancel a task and give it up to `timeout` s to end (its outcome is dropped)."""
    if task is None:
        return
    task.cancel()
    await asyncio.wait({task}, timeout=timeout)
    if task.done() and not task.cancelled():
        task.exception()  # retrieved: no "exception was never retrieved" noise
