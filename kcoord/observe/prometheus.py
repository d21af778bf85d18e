"""/metrics: the Prometheus text exposition, built at scrape time.

Names: Kafka's group-coordinator metrics under `kcoord_group_coordinator_*`
(Kafka's group-coordinator-metrics group, in Prometheus' snake case and base
units), requests and log latency under `kcoord_*`, and lag with
kafka_exporter's names (`kafka_consumergroup_lag`, ...) plus
`kafka_consumergroup_lag_seconds` (exact, from the log; lag.py).
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                    HistogramMetricFamily)

from ..coordinator import group_overviews, offset_count, share_group_overviews
from ..coordinator.classic_group import (COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE,
                                         STABLE)
from ..coordinator.consumer_group import (GROUP_ASSIGNING, GROUP_DEAD, GROUP_EMPTY,
                                          GROUP_RECONCILING, GROUP_STABLE)
from ..protocol.api import APIS
from .events import Histogram, ServerMetrics
from .lag import RecordTimes, group_lags

CLASSIC_STATES = (PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE, DEAD, EMPTY)
CONSUMER_STATES = (GROUP_EMPTY, GROUP_ASSIGNING, GROUP_RECONCILING, GROUP_STABLE, GROUP_DEAD)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _histogram(name: str, doc: str, labels: list[str], series) -> HistogramMetricFamily:
    fam = HistogramMetricFamily(name, doc, labels=labels)
    for values, hist in series:
        fam.add_metric(values, hist.cumulative(), hist.sum)
    return fam


class KcoordCollector:
    """A prometheus_client collector over the live server (duck-typed: the
    runtime's shards, the topic catalogue, and ServerMetrics)."""

    def __init__(self, runtime, catalogue, metrics: ServerMetrics) -> None:
        self.runtime = runtime
        self.catalogue = catalogue
        self.metrics = metrics
        self.times = RecordTimes()

    def collect(self):
        yield from self._groups()
        yield from self._events()
        yield from self._requests()
        yield from self._lag()

    # ---------------------------------------------------------------- groups
    def _groups(self):
        classic = dict.fromkeys(CLASSIC_STATES, 0)
        consumer = dict.fromkeys(CONSUMER_STATES, 0)
        share = {"Empty": 0, "Stable": 0}  # Kafka's share-group-count{state} (Dead never entered)
        members = {"classic": 0, "consumer": 0, "share": 0}
        offsets = 0
        # shard states as the runtime names them (loading, active, failed,
        # not-owned in cluster mode); Kafka's num-partitions{state}
        states = {"loading": 0, "active": 0, "failed": 0}
        group_members = GaugeMetricFamily(
            "kafka_consumergroup_members", "Members of the consumer group",
            labels=["consumergroup"])
        for shard in self.runtime.shards:
            if shard.state in states:
                states[shard.state] += 1
        answers, _ = self.runtime.read_all(_overview)
        for overviews, shares, count in answers:
            for g in overviews:
                kind = "consumer" if g.protocol == "consumer" else "classic"
                by_state = consumer if kind == "consumer" else classic
                by_state[g.state] = by_state.get(g.state, 0) + 1
                members[kind] += g.members
                if g.members:
                    group_members.add_metric([g.group_id], g.members)
            for g in shares:
                share[g.state] = share.get(g.state, 0) + 1
                members["share"] += g.members
            offsets += count
        fam = GaugeMetricFamily("kcoord_group_coordinator_groups",
                                "Groups per protocol (Kafka's group-count)", labels=["protocol"])
        fam.add_metric(["classic"], sum(classic.values()))
        fam.add_metric(["consumer"], sum(consumer.values()))
        fam.add_metric(["share"], sum(share.values()))
        yield fam
        yield _gauge_by("kcoord_group_coordinator_classic_groups",
                        "Classic groups per state (Kafka's classic-group-count)", "state", classic)
        yield _gauge_by("kcoord_group_coordinator_consumer_groups",
                        "KIP-848 consumer groups per state (Kafka's consumer-group-count)",
                        "state", consumer)
        yield _gauge_by("kcoord_group_coordinator_share_groups",
                        "KIP-932 share groups per state (Kafka's share-group-count)", "state", share)
        yield _gauge_by("kcoord_group_coordinator_members",
                        "Members of all groups per protocol", "protocol", members)
        yield group_members
        yield GaugeMetricFamily("kcoord_group_coordinator_offsets",
                                "Committed offsets retained (Kafka's offset-count)", value=offsets)
        fam = GaugeMetricFamily("kcoord_group_coordinator_num_partitions",
                                "__consumer_offsets shards by state (Kafka's num-partitions)",
                                labels=["state"])
        for state, n in states.items():
            fam.add_metric([state], n)
        yield fam

    # ---------------------------------------------------------------- events
    def _events(self):
        m = self.metrics
        fam = CounterMetricFamily("kcoord_group_coordinator_rebalance",
                                  "Rebalances started: classic groups entering "
                                  "PreparingRebalance, consumer group epoch bumps",
                                  labels=["protocol"])
        for protocol, n in m.rebalances_started.items():
            fam.add_metric([protocol], n)
        yield fam
        fam = CounterMetricFamily("kcoord_group_coordinator_completed_rebalance",
                                  "Rebalances completed (a new generation Stable or Empty; "
                                  "a consumer group reconciled at its epoch)",
                                  labels=["protocol"])
        for protocol, n in m.rebalances_completed.items():
            fam.add_metric([protocol], n)
        yield fam
        yield _histogram("kcoord_group_coordinator_rebalance_duration_seconds",
                         "From the first rebalance start to its completion",
                         ["protocol"], [([p], h) for p, h in m.rebalance_seconds.items()])
        fam = GaugeMetricFamily("kcoord_group_coordinator_rebalances_in_progress",
                                "Groups rebalancing now", labels=["protocol"])
        open_by = {"classic": 0, "consumer": 0}
        for _, protocol, _, _ in list(m.open.values()):
            open_by[protocol] = open_by.get(protocol, 0) + 1
        for protocol, n in open_by.items():
            fam.add_metric([protocol], n)
        yield fam
        fam = CounterMetricFamily("kcoord_group_coordinator_session_expiration",
                                  "Members removed because their session expired",
                                  labels=["protocol"])
        for protocol, n in m.session_expirations.items():
            fam.add_metric([protocol], n)
        yield fam
        yield CounterMetricFamily("kcoord_group_coordinator_offset_commit",
                                  "Offsets committed (Kafka's offset-commit-count)",
                                  value=m.offset_commits)
        yield CounterMetricFamily("kcoord_group_coordinator_offset_expiration",
                                  "Offsets expired by retention (Kafka's offset-expiration-count)",
                                  value=m.offset_expirations)
        yield _histogram("kcoord_group_coordinator_partition_load_time_seconds",
                         "Time to load a __consumer_offsets shard", [],
                         [([], m.shard_load_seconds)])
        yield GaugeMetricFamily("kcoord_group_coordinator_partition_load_time_max_seconds",
                                "Longest shard load (Kafka's partition-load-time-max)",
                                value=m.shard_load_max)

    def _requests(self):
        m = self.metrics
        fam = CounterMetricFamily("kcoord_requests", "Requests handled per API",
                                  labels=["api"])
        for key, n in enumerate(m.request_counts):
            if n:
                api = APIS.get(key)
                fam.add_metric([api.name if api else str(key)], n)
        yield fam
        series = []
        for key, hist in sorted(m.requests.items()):
            api = APIS.get(key)
            series.append(([api.name if api else str(key)], hist))
        yield _histogram("kcoord_request_duration_seconds",
                         "Seconds from handing a request to its handler to its answer, "
                         "per API, sampled: 1 request in 16 is timed",
                         ["api"], series)
        yield _histogram("kcoord_log_append_duration_seconds",
                         "Coordinator log appends (one batch per shard and round)", [],
                         [([], m.append_seconds)])
        yield _histogram("kcoord_log_fsync_duration_seconds",
                         "Group-commit fsync rounds (every shard of a round together)", [],
                         [([], m.fsync_seconds)])

    # ---------------------------------------------------------------- lag
    def _lag(self):
        now_ms = self.runtime.clock.ms()  # the server's one clock
        topic_partitions = GaugeMetricFamily("kafka_topic_partitions",
                                             "Number of partitions for this topic",
                                             labels=["topic"])
        current = GaugeMetricFamily("kafka_topic_partition_current_offset",
                                    "Current offset (log end) of a partition",
                                    labels=["topic", "partition"])
        oldest = GaugeMetricFamily("kafka_topic_partition_oldest_offset",
                                   "Oldest offset (log start) of a partition",
                                   labels=["topic", "partition"])
        for name, topic in sorted(list(self.catalogue.topics.items())):
            if topic.internal:
                continue
            topic_partitions.add_metric([name], len(topic.partitions))
            for i, plog in enumerate(topic.partitions):
                current.add_metric([name, str(i)], plog.log_end_offset)
                oldest.add_metric([name, str(i)], plog.log_start_offset)
        yield topic_partitions
        yield current
        yield oldest
        labels = ["consumergroup", "topic", "partition"]
        offset = GaugeMetricFamily("kafka_consumergroup_current_offset",
                                   "Committed offset of the group in a partition", labels=labels)
        lag = GaugeMetricFamily("kafka_consumergroup_lag",
                                "Log end offset minus the group's committed offset",
                                labels=labels)
        seconds = GaugeMetricFamily("kafka_consumergroup_lag_seconds",
                                    "Now minus the timestamp of the first record the group "
                                    "has not committed (0 when caught up)", labels=labels)
        offset_sum = GaugeMetricFamily("kafka_consumergroup_current_offset_sum",
                                       "Sum of the group's committed offsets in a topic",
                                       labels=["consumergroup", "topic"])
        lag_sum = GaugeMetricFamily("kafka_consumergroup_lag_sum",
                                    "Sum of the group's lag in a topic",
                                    labels=["consumergroup", "topic"])
        sums: dict[tuple[str, str], list[int]] = {}
        committed: dict[tuple[str, str], set[int]] = {}
        for row in group_lags(self.runtime, self.catalogue, now_ms, self.times):
            if row.log_end < 0:
                continue  # the topic or partition is gone
            values = [row.group, row.topic, str(row.partition)]
            offset.add_metric(values, row.committed)
            lag.add_metric(values, row.lag)
            if row.lag_seconds is not None:
                seconds.add_metric(values, row.lag_seconds)
            acc = sums.setdefault((row.group, row.topic), [0, 0])
            acc[0] += row.committed
            acc[1] += row.lag
            committed.setdefault((row.group, row.topic), set()).add(row.partition)
        # as kafka_exporter (offset.show-all): a topic the group committed on shows
        # all its partitions, -1 for those without a committed offset
        for (group, topic), done in committed.items():
            t = self.catalogue.topics.get(topic)
            for p in range(len(t.partitions) if t is not None else 0):
                if p not in done:
                    offset.add_metric([group, topic, str(p)], -1)
                    lag.add_metric([group, topic, str(p)], -1)
        for (group, topic), (o, l) in sums.items():
            offset_sum.add_metric([group, topic], o)
            lag_sum.add_metric([group, topic], l)
        yield offset
        yield lag
        yield seconds
        yield offset_sum
        yield lag_sum


def _overview(core, _now: int):
    return group_overviews(core), share_group_overviews(core), offset_count(core)


def make_registry(runtime, catalogue, metrics: ServerMetrics,
                  more: list | None = None) -> CollectorRegistry:
    """The groups' collector and `more` (the share groups')."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(KcoordCollector(runtime, catalogue, metrics))
    for collector in more or ():
        registry.register(collector)
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)


__all__ = ["CONTENT_TYPE", "Histogram", "KcoordCollector", "exposition", "make_registry"]


def _gauge_by(name: str, doc: str, label: str, counts: dict) -> GaugeMetricFamily:
    """A gauge with one label, one sample per key of `counts`."""
    fam = GaugeMetricFamily(name, doc, labels=[label])
    for key, n in counts.items():
        fam.add_metric([key], n)
    return fam
