"""A graceful stop cancels the replica fetchers while their leaders'
listeners close: a call may end with an error in the same loop turn as the
cancellation, or turn the cancellation into that error (asyncio.wait_for
before 3.12).  Either way its outcome must be read, else asyncio logs
"Task exception was never retrieved" with a traceback (seen at the stop of
fault runs 107 and 109)."""
import asyncio
import gc

from kcoord.cluster.aio import bounded
from kcoord.cluster.fetcher import ReplicaFetcher


class Manager:
    def has_request_ready(self, _leader: int) -> bool:
        return False


async def _unretrieved_after_cancel(coro) -> list[str]:
    """Run `coro`, cancel it once its inner call has failed, and return what
    the loop's exception handler heard once the garbage is collected."""
    heard: list[str] = []
    asyncio.get_running_loop().set_exception_handler(
        lambda _loop, context: heard.append(context["message"]))
    task = asyncio.ensure_future(coro)
    await asyncio.sleep(0)      # it waits on its inner call
    await asyncio.sleep(0)      # the inner call ends; the task has not woken yet
    task.cancel()               # the graceful stop
    await asyncio.wait({task})
    assert task.cancelled()
    del task                    # its traceback holds the inner call's task
    for _ in range(3):
        await asyncio.sleep(0)  # done callbacks run
    gc.collect()
    return heard


def test_a_fetch_failing_as_the_fetcher_stops_leaves_no_unretrieved_exception():
    async def refused():
        raise ConnectionRefusedError("the leader stopped")

    async def scenario():
        fetcher = ReplicaFetcher(Manager(), leader_id=2)
        return await _unretrieved_after_cancel(fetcher._unless_new_follower(refused()))

    assert asyncio.run(scenario()) == []


def test_a_bounded_connect_turning_its_cancellation_into_an_error_is_read():
    async def connecting():
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:  # what wait_for does when the connect failed meanwhile
            raise ConnectionRefusedError("the leader stopped") from None

    async def scenario():
        return await _unretrieved_after_cancel(bounded(connecting(), 30))

    assert asyncio.run(scenario()) == []
