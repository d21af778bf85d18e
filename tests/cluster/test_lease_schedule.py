"""The etcd lease refresh schedule on a fake clock: a slow answer must not
leave etcd without a refresh for a whole TTL (a refresh sent only a period
after the previous ANSWER let the lease run out whenever one answer took
longer than TTL - TTL/3: the untouched nodes' expiries of the fault runs)."""
import random

from kcoord.cluster.etcd_session import RETRY_S, RefreshSchedule

TTL = 2.0


def keepalive(delays, ttl=TTL):
    """Drive the schedule as EtcdSession._refresh_loop does, against an etcd
    that restarts the TTL when a refresh arrives (at once) and answers after
    `delays[i]` (None: the answer is lost).  The longest gap between two
    refreshes reaching etcd, and the timeouts taken."""
    now = 0.0
    schedule = RefreshSchedule(ttl, now)
    arrivals, timeouts = [now], 0
    for delay in delays:
        now += schedule.delay(now)
        sent = now
        wait = schedule.sent(sent)
        arrivals.append(sent)
        if delay is None or delay > wait:
            now = sent + wait
            timeouts += 1
            schedule.failed(now)
            continue
        now = sent + delay
        schedule.answered(sent)
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    return max(gaps), timeouts


def test_one_slow_answer_does_not_delay_the_next_refresh():
    # answered 1.3 s after it was sent: the next refresh goes at once (its
    # period from the send is over), not a period later (1.97 s of a 2 s TTL)
    gap, timeouts = keepalive([0.01, 1.3, 0.01, 0.01])
    assert gap <= 1.3 + 1e-9, gap
    assert timeouts == 0


def test_an_answer_is_awaited_only_while_the_lease_lives():
    schedule = RefreshSchedule(TTL, 0.0)
    assert schedule.sent(TTL / 3) == TTL - TTL / 3   # then the lease is at its end
    schedule.answered(TTL / 3)
    assert schedule.sent(TTL / 3 + 0.1) == TTL - 0.1  # counted from the send answered


def test_a_lost_answer_is_followed_by_a_new_refresh_before_the_lease_ends():
    gap, timeouts = keepalive([0.01, None, 0.01, 0.01])
    assert timeouts == 1
    assert gap <= TTL - TTL / 3 + RETRY_S + 1e-9, gap


def test_seeded_slow_answers_never_leave_etcd_a_ttl_without_a_refresh():
    for seed in range(50):
        rng = random.Random(seed)
        # answers up to 0.95 TTL late (under load), a few lost
        delays = [None if rng.random() < 0.05 else rng.uniform(0, 0.95 * TTL)
                  for _ in range(200)]
        gap, _ = keepalive(delays)
        assert gap < TTL, (seed, gap)
