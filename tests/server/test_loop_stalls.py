import asyncio
import logging
import time

from kcoord.server.loop_stalls import LoopStallReporter


def _block_the_loop(seconds: float) -> None:
    time.sleep(seconds)   # a callback that holds the loop, as a synchronous call would


def test_a_held_loop_is_reported_with_where_it_was(caplog):
    caplog.set_level(logging.WARNING, logger="kcoord.server.stalls")

    async def main():
        reporter = LoopStallReporter(asyncio.get_running_loop(), report_after_s=0.3).start()
        try:
            await asyncio.sleep(0.3)
            asyncio.get_running_loop().call_soon(_block_the_loop, 2.0)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not any(
                    "event loop ran nothing" in r.getMessage() for r in caplog.records):
                await asyncio.sleep(0.05)
        finally:
            reporter.stop()

    asyncio.run(main())
    reports = [r.getMessage() for r in caplog.records if "event loop ran nothing" in r.getMessage()]
    assert len(reports) == 1
    assert "_block_the_loop" in reports[0]
    assert "whole process" not in " ".join(r.getMessage() for r in caplog.records)


def test_a_turning_loop_reports_nothing(caplog):
    caplog.set_level(logging.WARNING, logger="kcoord.server.stalls")

    async def main():
        reporter = LoopStallReporter(asyncio.get_running_loop(), report_after_s=2.0).start()
        try:
            for _ in range(20):
                await asyncio.sleep(0.05)
        finally:
            reporter.stop()

    asyncio.run(main())
    assert not [r for r in caplog.records if r.name == "kcoord.server.stalls"]


def test_a_slow_garbage_collection_is_named_in_the_report(caplog):
    """A collection holds the interpreter for its length: the report says so
    (here a gc callback of the test's makes one collection last 1.5 s)."""
    import gc
    caplog.set_level(logging.WARNING, logger="kcoord.server.stalls")

    def slow(phase, _info):  # after the reporter's own "start" callback
        if phase == "start":
            time.sleep(1.5)

    def collect_slowly():
        gc.callbacks.append(slow)
        try:
            gc.collect()
        finally:
            gc.callbacks.remove(slow)

    async def main():
        reporter = LoopStallReporter(asyncio.get_running_loop(), report_after_s=0.3).start()
        try:
            await asyncio.sleep(0.3)
            asyncio.get_running_loop().call_soon(collect_slowly)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not any(
                    "ran nothing" in r.getMessage() for r in caplog.records):
                await asyncio.sleep(0.05)
        finally:
            reporter.stop()

    asyncio.run(main())
    reports = [r.getMessage() for r in caplog.records if "ran nothing" in r.getMessage()]
    assert reports and "garbage collections meanwhile: generation 2" in reports[0], reports
