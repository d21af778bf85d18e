"""The step trace (kcoord/log/step_trace.py) and the bench's reading of it
(bench/step_breakdown.py): silent unless kcoord.trace is at DEBUG; a
write's sync/flushed/replicated share an id; a step's segments come out
of the lines in order."""
import logging

from bench.step_breakdown import breakdown
from kcoord.log import step_trace


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record) -> None:
        self.lines.append(f"x DEBUG {record.name}: {record.getMessage()}")


class _Log:
    def __init__(self, name: str) -> None:
        self.path = type("P", (), {"name": name})()


def test_silent_when_off_and_ids_tie_a_write():
    logger = logging.getLogger("kcoord.trace")
    handler = _Lines()
    logger.addHandler(handler)
    try:
        logger.setLevel(logging.INFO)
        assert step_trace.sync_started([_Log("t-0")]) == 0
        step_trace.event("req", 24, 1, "c")
        assert handler.lines == []
        logger.setLevel(logging.DEBUG)
        trace_id = step_trace.sync_started([_Log("t-0"), _Log("u-1")])
        step_trace.write_event("flushed", trace_id)
        step_trace.write_event("replicated", 0)     # not traced: nothing
        assert trace_id > 0 and len(handler.lines) == 2
        assert handler.lines[0].split()[3:] == ["sync", handler.lines[0].split()[4],
                                                str(trace_id), "t-0,u-1"]
        assert handler.lines[1].split()[3] == "flushed"
    finally:
        logger.setLevel(logging.NOTSET)
        logger.removeHandler(handler)


def _line(event: str, t: float, *fields) -> str:
    return f"x DEBUG kcoord.trace: {event} {t:.6f} " + " ".join(str(f) for f in fields)


def test_breakdown_of_one_replicated_step():
    leader = [_line("req", 1.000, 22, 1, "c"), _line("ans", 1.001, 22, 1, "c"),
              _line("req", 2.000, 24, 7, "c"), _line("sync", 2.001, 5, "__transaction_state-3"),
              _line("flushed", 2.003, 5), _line("ans", 2.004, 1, 40, "kcoord-replica-2"),
              _line("ans", 2.006, 1, 17, "kcoord-replica-3"),   # its other follower, later
              _line("req", 2.009, 1, 41, "kcoord-replica-2"), _line("replicated", 2.010, 5),
              _line("ans", 2.011, 24, 7, "c")]
    follower = [_line("fetch-answer", 2.005, 1), _line("fetch-appended", 2.006, 1, "t-3"),
                _line("fetch-flushed", 2.008, 1), _line("fetch-sent", 2.0085, 1, 3)]
    got = breakdown({1: leader, 2: follower}, transactions=1)
    step = got["steps"]["AddPartitionsToTxn"]
    assert (step["requests"], step["total_ms"], step["to_append_ms"], step["leader_fsync_ms"],
            step["replication_ms"], step["hw_to_answer_ms"]) == (1, 11.0, 1.0, 2.0, 7.0, 1.0)
    rnd = got["follower_round"]
    assert (rnd["append_to_first_answer_ms"], rnd["append_to_last_answer_ms"],
            rnd["answer_to_appended_ms"], rnd["follower_fsync_ms"],
            rnd["fsynced_to_next_fetch_ms"], rnd["next_fetch_to_leader_ms"]) == (
                3.0, 5.0, 1.0, 2.0, 0.5, 0.5)
    assert got["per_transaction"] == {"leader_fsyncs": 1.0, "follower_fsyncs": 1.0,
                                      "fetch_rounds_with_records": 1.0}


def test_the_network_flag_follows_the_broker_logger_setting():
    from kcoord.server.logger_configs import BrokerLoggerResource
    resource, root_level = BrokerLoggerResource(0), logging.getLogger().level
    try:
        resource.replace("0", {"root": "INFO", "kcoord.trace": "DEBUG"})
        assert step_trace.enabled is True
        resource.replace("0", {"root": "INFO"})  # back to its parent's level: off
        assert step_trace.enabled is False
    finally:
        logging.getLogger("kcoord.trace").setLevel(logging.NOTSET)
        logging.getLogger().setLevel(root_level)
        step_trace.refresh()
