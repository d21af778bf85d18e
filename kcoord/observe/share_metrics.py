"""Share groups (KIP-932) on /metrics: what the share partitions led here
count as records change state, what they hold now, and each share
partition's lag from the share coordinator's state.

Counters are bumped by the share partitions themselves (ShareEvents, at the
event: no scanning) into one PartitionCounters per (group, topic id,
partition) that outlives the share partition being dropped and loaded again,
so they only grow.  Gauges are read at scrape time through the share
partition manager's and the share coordinator runtime's query methods.

Names follow Kafka's where it has one (ShareGroupMetrics'
RecordAcknowledgementsPerSec{ackType}, SharePartitionMetrics'
AcquisitionLockTimeoutPerSec, InFlightMessageCount, InFlightBatchCount), in
Prometheus' snake case under kcoord_share_*, with Kafka's `group`, `topic`,
`partition` tags.
"""
from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from ..share.events import DELIVERY_LIMIT, NO_RECORD, REJECTED, ShareEvents
from ..share.partition import ACCEPT, REJECT, RELEASE
from .events import Histogram

# group.share.delivery.count.limit is at most 10 in Kafka
DELIVERY_BUCKETS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
ACK_TYPES = {ACCEPT: "Accept", RELEASE: "Release", REJECT: "Reject"}  # Kafka's ackType tag
ARCHIVE_REASONS = (REJECTED, DELIVERY_LIMIT, NO_RECORD)


class PartitionCounters(ShareEvents):
    """One share partition's counters: plain ints, bumped on the hot path."""
    __slots__ = ("n_acquired", "n_acks", "n_archived", "n_lock_timeouts", "n_session_released",
                 "deliveries")

    def __init__(self) -> None:
        self.n_acquired = 0
        self.n_acks = dict.fromkeys(ACK_TYPES, 0)
        self.n_archived = dict.fromkeys(ARCHIVE_REASONS, 0)
        self.n_lock_timeouts = 0
        self.n_session_released = 0
        self.deliveries = Histogram(DELIVERY_BUCKETS)   # records acquired, by delivery count

    def acquired(self, delivery_count: int, n: int) -> None:
        self.n_acquired += n
        self.deliveries.observe(delivery_count, n)

    def acknowledged(self, kind: int, n: int) -> None:
        if kind in self.n_acks:
            self.n_acks[kind] += n

    def archived(self, reason: str, n: int) -> None:
        self.n_archived[reason] = self.n_archived.get(reason, 0) + n

    def lock_timed_out(self, n: int) -> None:
        self.n_lock_timeouts += n

    def session_released(self, n: int) -> None:
        self.n_session_released += n


class ShareMetrics:
    """The counters of every share partition this node has led."""

    def __init__(self) -> None:
        self.partitions: dict[tuple, PartitionCounters] = {}

    def for_partition(self, key: tuple) -> PartitionCounters:
        """The counters of share partition key (group, topic id, partition)."""
        counters = self.partitions.get(key)
        if counters is None:
            counters = self.partitions[key] = PartitionCounters()
        return counters


@dataclass(slots=True)
class ShareLag:
    """One share partition's lag (KIP-1226's: the high watermark minus the
    start offset minus the records delivered for good above it)."""
    group: str
    topic: str
    partition: int
    start_offset: int
    high_watermark: int
    lag: int


def share_lags(state_runtime, catalogue, high_watermark) -> list[ShareLag]:
    """Every share partition the share coordinator here holds a state for
    (read through its runtime's read path), with its lag; topics gone or
    never started (start -1) are left out.  high_watermark(topic, index)."""
    out = []
    answers, _ = state_runtime.read_all(lambda core, _now: core.offsets())
    for rows in answers:
        for (group, topic_id, partition), start, complete in rows:
            topic = catalogue.by_id.get(topic_id)
            if topic is None or partition >= len(topic.partitions) or start < 0:
                continue
            hw = high_watermark(topic, partition)
            out.append(ShareLag(group, topic.name, partition, start, hw,
                                hw - start - max(complete, 0)))
    out.sort(key=lambda r: (r.group, r.topic, r.partition))
    return out


class ShareCollector:
    """A prometheus_client collector of the share-group series."""

    def __init__(self, manager, state_runtime, catalogue, metrics: ShareMetrics) -> None:
        self.manager = manager              # SharePartitionManager: in_flight(), hw()
        self.state_runtime = state_runtime  # the share coordinator's runtime
        self.catalogue = catalogue
        self.metrics = metrics

    def _name(self, topic_id: bytes) -> str | None:
        topic = self.catalogue.by_id.get(topic_id)
        return None if topic is None else topic.name

    def collect(self):
        yield from self._counters()
        yield from self._in_flight()
        yield from self._lag()

    def _counters(self):
        acquired: dict[str, int] = {}
        acks: dict[tuple[str, str], int] = {}
        archived: dict[tuple[str, str], int] = {}
        deliveries: dict[str, Histogram] = {}
        timeouts = CounterMetricFamily(
            "kcoord_share_partition_acquisition_lock_timeout",
            "Acquired records whose acquisition lock ran out (Kafka's SharePartitionMetrics "
            "AcquisitionLockTimeoutPerSec)", labels=["group", "topic", "partition"])
        session_ends = CounterMetricFamily(
            "kcoord_share_partition_session_release",
            "Acquired records given back because their member's share session ended "
            "(its connection closed, or it left)", labels=["group", "topic", "partition"])
        for (group, topic_id, partition), c in list(self.metrics.partitions.items()):
            acquired[group] = acquired.get(group, 0) + c.n_acquired
            for kind, n in c.n_acks.items():
                acks[(group, ACK_TYPES[kind])] = acks.get((group, ACK_TYPES[kind]), 0) + n
            for reason, n in c.n_archived.items():
                archived[(group, reason)] = archived.get((group, reason), 0) + n
            hist = deliveries.setdefault(group, Histogram(DELIVERY_BUCKETS))
            hist.counts = [a + b for a, b in zip(hist.counts, c.deliveries.counts)]
            hist.sum += c.deliveries.sum
            name = self._name(topic_id)
            if name is not None:
                timeouts.add_metric([group, name, str(partition)], c.n_lock_timeouts)
                session_ends.add_metric([group, name, str(partition)], c.n_session_released)
        yield _counter("kcoord_share_group_records_acquired",
                       "Records acquired by share-group members (each delivery)",
                       ["group"], {(g,): n for g, n in acquired.items()})
        yield _counter("kcoord_share_group_record_acknowledgements",
                       "Records acknowledged per type (Kafka's ShareGroupMetrics "
                       "RecordAcknowledgementsPerSec{ackType})", ["group", "ack_type"], acks)
        yield _counter("kcoord_share_group_records_archived",
                       "Records archived (never delivered again): rejected, at the "
                       "delivery count limit, or with no record to deliver",
                       ["group", "reason"], archived)
        yield timeouts
        yield session_ends
        fam = HistogramMetricFamily("kcoord_share_group_record_delivery_count",
                                    "Records acquired by the delivery count they were given",
                                    labels=["group"])
        for group, hist in sorted(deliveries.items()):
            fam.add_metric([group], hist.cumulative(), hist.sum)
        yield fam

    def _in_flight(self):
        labels = ["group", "topic", "partition"]
        messages = GaugeMetricFamily("kcoord_share_partition_in_flight_messages",
                                     "Records in the share partition's in-flight window "
                                     "(Kafka's InFlightMessageCount)", labels=labels)
        batches = GaugeMetricFamily("kcoord_share_partition_in_flight_batches",
                                    "Runs of records of one state in the window "
                                    "(Kafka's InFlightBatchCount)", labels=labels)
        held = GaugeMetricFamily("kcoord_share_partition_acquired_records",
                                 "Records acquired by members now", labels=labels)
        for (group, topic_id, partition), (n, runs, acquired) in self.manager.in_flight():
            name = self._name(topic_id)
            if name is None:
                continue
            values = [group, name, str(partition)]
            messages.add_metric(values, n)
            batches.add_metric(values, runs)
            held.add_metric(values, acquired)
        yield messages
        yield batches
        yield held

    def _lag(self):
        labels = ["group", "topic", "partition"]
        start = GaugeMetricFamily("kcoord_share_group_start_offset",
                                  "The share-partition start offset the share coordinator holds",
                                  labels=labels)
        lag = GaugeMetricFamily("kcoord_share_group_lag",
                                "Records between the share-partition start offset and the high "
                                "watermark not yet acknowledged or archived (the Lag of "
                                "DescribeShareGroupOffsets)", labels=labels)
        for row in share_lags(self.state_runtime, self.catalogue, self.manager.hw):
            values = [row.group, row.topic, str(row.partition)]
            start.add_metric(values, row.start_offset)
            lag.add_metric(values, row.lag)
        yield start
        yield lag


def _counter(name: str, doc: str, labels: list[str], counts: dict[tuple, int]):
    """A counter family with one sample per label tuple, in label order."""
    fam = CounterMetricFamily(name, doc, labels=labels)
    for key, n in sorted(counts.items()):
        fam.add_metric(list(key), n)
    return fam
