"""dispatch.Reply: the light future OffsetCommit answers through."""
import asyncio

import pytest

from kcoord.server.dispatch import Reply


def test_callbacks_run_at_once_in_order():
    seen = []
    r = Reply()
    r.add_done_callback(lambda x: seen.append(("a", x.result())))
    r.add_done_callback(lambda x: 1 / 0)  # a failing listener does not stop the rest
    r.add_done_callback(lambda x: seen.append(("b", x.result())))
    assert not r.done()
    r.set_result(5)
    assert seen == [("a", 5), ("b", 5)]
    r.add_done_callback(lambda x: seen.append(("late", x.result())))
    assert seen[-1] == ("late", 5)
    with pytest.raises(asyncio.InvalidStateError):
        r.set_result(6)


def test_exception_and_cancel():
    r = Reply()
    r.set_exception(ValueError("x"))
    assert isinstance(r.exception(), ValueError)
    with pytest.raises(ValueError):
        r.result()
    c = Reply()
    assert c.cancel() and not c.cancelled()
    assert isinstance(c.exception(), asyncio.CancelledError)
    assert not c.cancel()


def test_awaitable_before_and_after_done():
    async def main():
        r = Reply()
        waiter = asyncio.ensure_future(_wait(r))
        await asyncio.sleep(0)
        r.set_result("ok")
        assert await waiter == "ok"
        assert await r == "ok"
        bad = Reply()
        bad.set_exception(KeyError("k"))
        with pytest.raises(KeyError):
            await bad

    async def _wait(r):
        return await r

    asyncio.run(main())


def test_a_failing_first_callback_does_not_stop_the_others():
    """The first done callback is kept apart from the rest (no list for
    the usual one): its failure still lets the others run, in order."""
    seen = []
    r = Reply()
    r.add_done_callback(lambda x: 1 / 0)
    r.add_done_callback(lambda x: seen.append(("a", x.result())))
    r.add_done_callback(lambda x: seen.append(("b", x.result())))
    r.set_result(7)
    assert seen == [("a", 7), ("b", 7)]
    lone = Reply()
    lone.set_result(1)  # no callback at all
    assert lone.result() == 1
