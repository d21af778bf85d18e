"""/metrics scraped while two groups rebalance again and again (real
confluent-kafka consumers: one KIP-848 group, one classic group).

Every scrape is checked against the one before it: counters never go down,
each histogram's +Inf bucket equals its count and its buckets are
cumulative, completed rebalances never outnumber started ones.  After each
storm step the rebalance counters and the duration histogram have moved,
the member gauges match the live consumers, commits and per-API request
counts show up, and the log has one line per rebalance start and end.
"""
from __future__ import annotations

import threading

import pytest

from tests.clients.group_workers import Ledger, Worker, produce

from .support import http_port, http_server, scrape, value, wait_for

pytestmark = pytest.mark.clients

PARTITIONS = 6
PROTOCOLS = {"consumer": {"group.protocol": "consumer"},
             "classic": {"group.protocol": "classic",
                         "partition.assignment.strategy": "range",
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}}


def _check_histograms(samples: dict) -> None:
    buckets: dict[tuple, list] = {}
    for (name, labels), v in samples.items():
        if name.endswith("_bucket"):
            rest = tuple(kv for kv in labels if kv[0] != "le")
            le = dict(labels)["le"]
            buckets.setdefault((name[:-7], rest), []).append(
                (float("inf") if le == "+Inf" else float(le), v))
    assert buckets, "no histogram in the scrape"
    for (base, labels), pairs in buckets.items():
        pairs.sort()
        counts = [c for _, c in pairs]
        assert counts == sorted(counts), (base, labels, pairs)
        assert pairs[-1][0] == float("inf")
        assert samples[(base + "_count", labels)] == pairs[-1][1], (base, labels)


def _check_monotone(before: dict, after: dict) -> None:
    histograms = {name[:-7] for name, _ in before if name.endswith("_bucket")}
    for key, v in before.items():
        name = key[0]
        if (name.endswith("_total") or name.rpartition("_")[0] in histograms) and key in after:
            assert after[key] >= v, (key, v, after[key])


def test_metrics_during_a_rebalance_storm(tmp_path):
    from confluent_kafka.admin import AdminClient, NewTopic

    server = http_server(tmp_path / "data")
    try:
        port = http_port(server)
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        for f in admin.create_topics([NewTopic("storm", PARTITIONS, 1)]).values():
            f.result(30)
        produce(server.bootstrap, "storm", 0, 600, PARTITIONS)  # so that revokes commit
        first = scrape(port)
        assert value(first, "kcoord_group_coordinator_rebalance_total", protocol="consumer") == 0
        assert value(first, "kcoord_group_coordinator_num_partitions", state="active") == 50

        # a scraper running through the whole storm, checking every scrape
        stop_scraping = threading.Event()
        scrapes: list[dict] = []
        problems: list[str] = []

        def scraper():
            previous = first
            while not stop_scraping.is_set():
                try:
                    now = scrape(port)
                    _check_histograms(now)
                    _check_monotone(previous, now)
                    for p in PROTOCOLS:
                        assert (value(now, "kcoord_group_coordinator_completed_rebalance_total",
                                      protocol=p)
                                <= value(now, "kcoord_group_coordinator_rebalance_total",
                                         protocol=p))
                except AssertionError as exc:
                    problems.append(repr(exc))
                    return
                scrapes.append(now)
                previous = now
                stop_scraping.wait(0.2)

        scraping = threading.Thread(target=scraper, daemon=True)
        scraping.start()

        ledgers = {p: Ledger() for p in PROTOCOLS}
        workers: dict[str, list[Worker]] = {p: [] for p in PROTOCOLS}

        def start(protocol: str, n: int) -> None:
            for _ in range(n):
                w = Worker(f"{protocol}-{len(workers[protocol])}", server.bootstrap,
                           f"storm-{protocol}", "storm", ledgers[protocol], PROTOCOLS[protocol])
                workers[protocol].append(w)
                w.start()
                w.ready.wait(30)

        def live(protocol: str) -> list[Worker]:
            return [w for w in workers[protocol] if w.is_alive() and not w.stop.is_set()]

        def settled(protocol: str, n: int):
            """n live consumers own every partition once, and the group is
            reported with n members and no rebalance in progress."""
            ledger = ledgers[protocol]
            with ledger.lock:
                owned = [ledger.owned[w.name] for w in live(protocol)]
            if len(owned) != n or sorted(p for o in owned for p in o) != list(range(PARTITIONS)):
                return None
            now = scrape(port)
            if (value(now, "kafka_consumergroup_members", consumergroup=f"storm-{protocol}") != n
                    or value(now, "kcoord_group_coordinator_rebalances_in_progress",
                             protocol=protocol) != 0):
                return None
            return now

        steps = [(3, None), (None, 1), (2, None)]  # start 3; stop 1; start 2 more
        expected = 0
        previous = first
        for add, remove in steps:
            for p in PROTOCOLS:
                if add:
                    start(p, add)
                if remove:
                    for w in live(p)[:remove]:
                        w.stop.set()
                        w.join(60)
            expected += (add or 0) - (remove or 0)
            for p in PROTOCOLS:
                now = wait_for(lambda: settled(p, expected), f"{p} group of {expected} settled")
            for p in PROTOCOLS:
                started = "kcoord_group_coordinator_rebalance_total"
                done = "kcoord_group_coordinator_completed_rebalance_total"
                hist = "kcoord_group_coordinator_rebalance_duration_seconds_count"
                assert value(now, started, protocol=p) > value(previous, started, protocol=p), p
                assert value(now, done, protocol=p) > value(previous, done, protocol=p), p
                assert value(now, hist, protocol=p) > value(previous, hist, protocol=p), p
            previous = now

        final = scrape(port)
        total_members = sum(len(live(p)) for p in PROTOCOLS)
        assert (value(final, "kcoord_group_coordinator_members", protocol="consumer")
                + value(final, "kcoord_group_coordinator_members", protocol="classic")
                == total_members)
        assert value(final, "kcoord_group_coordinator_consumer_groups", state="Stable") == 1
        assert value(final, "kcoord_group_coordinator_classic_groups", state="Stable") == 1
        assert value(final, "kcoord_group_coordinator_offset_commit_total") > 0  # revoke commits
        for api in ("ConsumerGroupHeartbeat", "JoinGroup", "SyncGroup", "OffsetCommit"):
            assert value(final, "kcoord_requests_total", api=api) > 0, api
        assert sum(v for (name, _), v in final.items()
                   if name == "kcoord_request_duration_seconds_count") > 0
        assert value(final, "kcoord_log_fsync_duration_seconds_count") > 0
        assert value(final, "kcoord_log_append_duration_seconds_count") > 0

        stop_scraping.set()
        scraping.join(30)
        assert problems == []
        assert len(scrapes) >= 3

        for p in PROTOCOLS:
            for w in workers[p]:
                w.stop.set()
            for w in workers[p]:
                w.join(60)
            assert [e for w in workers[p] for e in w.errors] == []

        # one INFO line per rebalance start and end, naming group, epoch, members, reason
        log = server.log_text()
        assert "group storm-consumer (consumer): rebalance started at epoch" in log
        assert "group storm-classic (classic): rebalance started at generation" in log
        assert "reason: new member" in log
        assert "group storm-consumer (consumer): rebalance completed at epoch" in log
        assert "group storm-classic (classic): rebalance completed at generation" in log
    finally:
        server.stop()
