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
        drop(fut)
        raise asyncio.TimeoutError()
    return fut.result()


def drop(fut: asyncio.Future) -> None:
    """Cancel `fut` and retrieve its outcome whenever it ends: it may end with
    an error all the same (it ended in our cancellation's loop turn, or a
    wait_for inside it turned the cancellation into the error of what it
    waited on), and nobody else will look (no "never retrieved" traceback)."""
    fut.cancel()
    fut.add_done_callback(_retrieve)


def _retrieve(fut: asyncio.Future) -> None:
    if not fut.cancelled():
        fut.exception()


async def cancel_and_wait(task: asyncio.Future | None, timeout: float) -> None:
    """Cancel a task and give it up to `timeout` s to end (its outcome is dropped)."""
    if task is None:
        return
    drop(task)
    await asyncio.wait({task}, timeout=timeout)
