"""Follower fetch sessions (KIP-227): the leader's FetchSessions and the
follower's FollowerSession talking to each other, sans-I/O, and the
replica's idle-partition shortcut (Replica.follower_idle) against
serve_follower_fetch."""
from kcoord.broker.fetch_sessions import FetchSessions
from kcoord.cluster.fetch_session import FollowerSession
from kcoord.protocol.errors import Err

from .test_replica import LAG, exchange, replica, state, write

FOLLOWER = 2


def _parts(offsets: dict) -> dict:
    return {key: {"partition": key[1], "current_leader_epoch": 1, "fetch_offset": off,
                  "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 100}
            for key, off in offsets.items()}


def _request(session_id, epoch, listed, forgotten=()):
    topics: dict = {}
    for (t, _), entry in listed.items():
        topics.setdefault(t, []).append(entry)
    gone: dict = {}
    for t, p in forgotten:
        gone.setdefault(t, []).append(p)
    return {"replica_id": FOLLOWER, "session_id": session_id, "session_epoch": epoch,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            "forgotten_topics_data": [{"topic": t, "partitions": ps} for t, ps in gone.items()]}


class Leader:
    """What the leader's logs say per partition: high watermark, records."""

    def __init__(self, hw: dict) -> None:
        self.hw = dict(hw)
        self.records: dict = {}
        self.sessions = FetchSessions(seed=7)
        self.read: list = []    # the (partition, fetch offset) of each full read

    def fetch(self, req: dict) -> dict:
        error, session, full, asked = self.sessions.resolve(req, FOLLOWER, by_id=False)
        if error:
            return {"error_code": error, "session_id": 0, "responses": []}
        responses = []
        for treq in full["topics"]:
            parts = []
            for preq in treq["partitions"]:
                key = (treq["topic"], preq["partition"])
                self.read.append((key, preq["fetch_offset"]))
                parts.append({"partition_index": key[1], "error_code": Err.NONE,
                              "high_watermark": self.hw[key], "last_stable_offset": self.hw[key],
                              "log_start_offset": 0, "records": self.records.pop(key, b"")})
            responses.append({"topic": treq["topic"], "partitions": parts})
        response = {"error_code": Err.NONE, "session_id": 0, "responses": responses}
        return self.sessions.respond(session, response, full is req, asked, by_id=False)


def _round(leader: Leader, follower: FollowerSession, offsets: dict):
    parts = _parts(offsets)
    sid, epoch, listed, forgotten = follower.request(parts)
    leader.read.clear()
    response = leader.fetch(_request(sid, epoch, listed, forgotten))
    sent = {(t["topic"], p["partition_index"]) for t in response["responses"]
            for p in t["partitions"]}
    if response["error_code"]:
        follower.reset()
        return listed, sent, None
    return listed, sent, follower.answers(response, parts)


def test_only_what_changed_travels_and_the_rest_is_filled_in():
    a, b, c = ("t", 0), ("t", 1), ("u", 0)
    leader = Leader({a: 5, b: 7, c: 0})
    follower = FollowerSession()
    listed, sent, answers = _round(leader, follower, {a: 5, b: 7, c: 0})
    assert set(listed) == {a, b, c} and sent == {a, b, c}      # the first one is full
    assert follower.session_id != 0 and follower.epoch == 1
    # nothing changed: nothing listed, nothing answered, every partition still read
    listed, sent, answers = _round(leader, follower, {a: 5, b: 7, c: 0})
    assert listed == {} and sent == set()
    assert {k for k, _ in leader.read} == {a, b, c}
    assert answers[b]["high_watermark"] == 7 and answers[b]["records"] == b""
    # a's records arrive and c's high watermark moves: only those travel
    leader.records[a] = b"rec"
    leader.hw[c] = 3
    listed, sent, answers = _round(leader, follower, {a: 5, b: 7, c: 0})
    assert sent == {a, c} and answers[a]["records"] == b"rec" and answers[c]["high_watermark"] == 3
    # the follower moved on a: only a is listed, and the leader reads it at 6
    listed, sent, answers = _round(leader, follower, {a: 6, b: 7, c: 0})
    assert set(listed) == {a} and (a, 6) in leader.read and sent == {a}
    # b is dropped: forgotten, no longer read
    listed, sent, answers = _round(leader, follower, {a: 6, c: 0})
    assert {k for k, _ in leader.read} == {a, c} and set(answers) == {a, c}


def test_a_lost_or_refused_session_starts_over_with_a_full_fetch():
    a, b = ("t", 0), ("t", 1)
    leader = Leader({a: 1, b: 1})
    follower = FollowerSession()
    _round(leader, follower, {a: 1, b: 1})
    _round(leader, follower, {a: 1, b: 1})
    # a wrong epoch (an answer the follower never saw): refused, then full again
    follower.epoch += 1
    _, _, answers = _round(leader, follower, {a: 1, b: 1})
    assert answers is None and follower.epoch == 0
    listed, sent, answers = _round(leader, follower, {a: 1, b: 1})
    assert set(listed) == {a, b} and sent == {a, b} and follower.epoch == 1
    # an unknown id (a restarted leader) and another replica's id are not found
    fresh = Leader({a: 1, b: 1})
    error, *_ = fresh.sessions.resolve(_request(follower.session_id, follower.epoch, {}),
                                       FOLLOWER, by_id=False)
    assert error == Err.FETCH_SESSION_ID_NOT_FOUND
    error, *_ = leader.sessions.resolve({**_request(follower.session_id, follower.epoch, {}),
                                         "replica_id": 9}, 9, by_id=False)
    assert error == Err.FETCH_SESSION_ID_NOT_FOUND
    # one session per follower: a new full fetch ends the previous one
    old = follower.session_id
    follower.reset()
    _round(leader, follower, {a: 1, b: 1})
    assert len(leader.sessions) == 1 and follower.session_id != old
    # a leader that keeps no session (session id 0): full fetches each time
    follower.answers({"error_code": 0, "session_id": 0, "responses": []}, _parts({a: 1}))
    assert follower.request(_parts({a: 1, b: 1}))[1] == 0


def _caught_up_pair():
    """A leader whose two followers have its records (end) and were told its
    high watermark: -> (leader, end, high watermark, (follower 1, follower 2))."""
    s = state(0, 1, (0, 1, 2))
    lead, f1, f2 = replica(0), replica(1), replica(2)
    for r in (lead, f1, f2):
        r.on_state(s, 0)
    end = write(lead, "a", "b")
    for f in (f1, f2):
        while f.log.log_end_offset < end:
            exchange(lead, f, now=1)
        exchange(lead, f, now=1)    # report it: the high watermark moves
    return lead, end, lead.high_watermark, (f1, f2)


def test_the_idle_shortcut_records_the_fetch_as_serve_follower_fetch_would():
    lead, end, hw, (_, f2) = _caught_up_pair()
    assert hw == end
    # caught up, in the ISR, told the high watermark: idle, caught-up time refreshed
    assert lead.follower_idle(1, end, 1, hw, now=500)
    assert lead._progress[1].last_caught_up_ms == 500
    # anything new for it is not idle: records past its position, a new high
    # watermark, another position, another epoch, not in the ISR
    assert not lead.follower_idle(1, end, 1, hw - 1, now=501)
    assert not lead.follower_idle(1, end - 1, 1, hw, now=501)
    assert not lead.follower_idle(1, end, 0, hw, now=501)
    lead.on_state(state(0, 1, (0, 2), version=99), 502)      # 1 leaves the ISR
    assert not lead.follower_idle(1, end, 1, hw, now=503)
    assert lead.follower_idle(2, end, 1, hw, now=503)
    write(lead, "c")
    assert not lead.follower_idle(2, end, 1, hw, now=504)
    # a follower is never idle
    assert not f2.follower_idle(1, end, 1, hw, now=505)


def test_an_idle_partition_left_out_of_a_session_is_caught_up_at_its_latest_fetch():
    lead, end, hw, _ = _caught_up_pair()
    session = FetchSessions(seed=3).resolve(_request(0, 0, {}), 1, by_id=False)[1]
    session.ms = 500
    assert lead.follower_idle(1, end, 1, hw, now=500, clock=session)
    session.set_idle(("t", 0), lead.log, lead)
    # fetches that leave it out only move the session's clock
    session.ms = 900
    assert lead.caught_up_ms(1) == 900
    # news (an append, before its fsync): read again, caught up as of the last fetch
    lead.log.append([(1, "c")])
    assert session.on_news(lead.log) is lead and ("t", 0) in session.look
    lead.on_log_news()
    session.ms = 1500
    assert lead.caught_up_ms(1) == 900
    # once behind, the lag counts from that fetch: 1 stays in the ISR within
    # it (2, last caught up at 1, does not)
    lead.log.flush()
    lead.on_flushed(1500)
    (proposal,) = lead.tick(900 + LAG - 1)
    assert proposal.proposed.isr == (0, 1)


def test_news_missed_by_a_session_credits_nothing_past_the_fsynced_end():
    lead, end, hw, _ = _caught_up_pair()
    session = FetchSessions(seed=3).resolve(_request(0, 0, {}), 1, by_id=False)[1]
    session.ms = 500
    assert lead.follower_idle(1, end, 1, hw, now=500, clock=session)
    session.set_idle(("t", 0), lead.log, lead)
    write(lead, "c")               # appended and fsynced, no news told
    session.ms = 5000              # the session keeps fetching without reading it
    assert lead.caught_up_ms(1) == 500
    lead.on_flushed(5000)
    assert lead._progress[1].idle_clock is None and lead.caught_up_ms(1) == 500


def test_a_closed_session_settles_what_it_carried():
    lead, end, hw, _ = _caught_up_pair()
    sessions = FetchSessions(seed=3)
    session = sessions.resolve(_request(0, 0, {}), 1, by_id=False)[1]
    session.ms = 700
    assert lead.follower_idle(1, end, 1, hw, now=700, clock=session)
    session.set_idle(("t", 0), lead.log, lead)
    session.ms = 800
    sessions.resolve(_request(session.id, -1, {}), 1, by_id=False)   # closed
    assert lead._progress[1].idle_clock is None
    session.ms = 99999                 # its clock is no longer anyone's
    assert lead.caught_up_ms(1) == 800


def test_a_parked_follower_fetch_is_woken_only_by_news_it_would_read_again_for():
    """An fsync or a high watermark moving on a log a parked follower fetch
    read wakes nothing (it reads to the log end: it would only park again);
    an append past what it saw, or the end of the leadership, wakes it."""
    import asyncio

    from kcoord.broker.fetch_sessions import FetchSession

    class Log:
        log_end_offset = 5

    class Leading:
        is_leader = True

    async def scenario():
        loop = asyncio.get_running_loop()
        plog, replica = Log(), Leading()
        session = FetchSession(1, FOLLOWER)
        session.watched = {id(plog): ("t", plog, replica, True, 5)}
        session.waiter = loop.create_future()
        session.on_news(plog)                   # its fsync, its high watermark: nothing new
        assert not session.waiter.done()
        plog.log_end_offset = 6                 # an append past what it read
        session.on_news(plog)
        assert session.waiter.result() is plog
        session.waiter = loop.create_future()
        session.watched = {id(plog): ("t", plog, replica, True, 6)}
        replica.is_leader = False               # no longer the leader: it answers
        session.on_news(plog)
        assert session.waiter.done()
        session.waiter = loop.create_future()
        session.on_news(Log())                  # a log it did not read
        assert not session.waiter.done()

    asyncio.run(scenario())
