"""`kcoord_offsets` over the Kafka protocol: the same rows as the data-dir
source, read from a running kcoord, a kcoord cluster or Apache Kafka.

    spark.read.format("kcoord_offsets").option("bootstrap", "HOST:PORT").load()
    spark.readStream.format("kcoord_offsets").option("bootstrap", "HOST:PORT").load()

The driver asks Metadata for the partitions of `__consumer_offsets` (and the
topic ids, which KIP-848 records use instead of names) and ListOffsets for
each partition's log start (earliest) and high watermark (latest).  One
Spark input partition per log partition; each task fetches its own range
from the partition's leader and feeds the record bytes to the same decoder
as the file source (`RecordBatchBuilder.add_chunk`), so the columns and
their values are the same, except `segment`, which is null (there is no
segment file on this side of the wire).

Options besides `bootstrap`: `topic` (default __consumer_offsets),
`verifyCrc`, `recordTypes`, `fetchBytes` (bytes per Fetch, default 8 MiB),
and `kafka.<property>`: Kafka client properties (security.protocol, ssl.*,
sasl.*), handed to the client (wire.py, which registers TLS and SASL on import,
so the executors connect as the driver does).
"""
from __future__ import annotations

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from kcoord.protocol.records import HEADER_SIZE, LOG_OVERHEAD, header_struct

from .source import parse_types

_BATCH_HEAD = header_struct("base_offset", "batch_length", "magic", "crc", "last_offset_delta")
DEFAULT_FETCH_BYTES = 8 << 20
MAX_FETCH_BYTES = 256 << 20


def client_properties(options) -> dict:
    """`kafka.<name>` options -> Kafka client properties {name: value}."""
    return {k[len("kafka."):]: v for k, v in dict(options).items() if k.startswith("kafka.")}


class WirePartition(InputPartition):
    """One log partition's offset range [start, end) (start -1: from the log start)."""

    def __init__(self, log_partition: int, start: int, end: int, topic_names: dict) -> None:
        self.log_partition = log_partition
        self.start = start
        self.end = end
        self.topic_names = topic_names
        super().__init__((log_partition, start, end))


class _WireOptions:
    def __init__(self, options, columns) -> None:
        self.bootstrap = options.get("bootstrap")
        self.topic = options.get("topic", "__consumer_offsets")
        self.verify = options.get("verifyCrc", "true").lower() != "false"
        self.types = parse_types(options.get("recordTypes"))
        self.fetch_bytes = int(options.get("fetchBytes", DEFAULT_FETCH_BYTES))
        self.props = client_properties(options)
        self.columns = columns

    def cluster(self, every_topic: bool = True):
        """every_topic: Metadata of every topic (the id -> name map for KIP-848
        records, which the driver hands to the tasks); else of the topic alone."""
        from .wire import Cluster
        cluster = Cluster(self.bootstrap, self.props)
        cluster.refresh(None if every_topic else [self.topic])
        cluster.partitions(self.topic)  # a clear error if the topic cannot be read
        return cluster

    def read(self, part: WirePartition):
        cluster = self.cluster(every_topic=False)
        try:
            yield from read_range(cluster, self.topic, part, self.verify, self.columns,
                                  self.types, self.fetch_bytes)
        finally:
            cluster.close()


def offsets_range(cluster, topic: str) -> tuple[dict[int, int], dict[int, int]]:
    """({partition: log start}, {partition: high watermark}) from ListOffsets."""
    from .wire import EARLIEST, LATEST
    parts = sorted(cluster.partitions(topic))
    return (cluster.list_offsets(topic, parts, EARLIEST),
            cluster.list_offsets(topic, parts, LATEST))


def read_range(cluster, topic: str, part: WirePartition, verify: bool = True,
               columns=None, types=None, fetch_bytes: int = DEFAULT_FETCH_BYTES,
               batch_rows: int | None = None):
    """Arrow batches of the records of [part.start, part.end) of one log partition."""
    from .decode import DEFAULT_BATCH_ROWS, RecordBatchBuilder
    from .wire import EARLIEST, ERROR_NAMES, OFFSET_OUT_OF_RANGE
    batch_rows = batch_rows or DEFAULT_BATCH_ROWS
    p = part.log_partition
    builder = RecordBatchBuilder(dict(part.topic_names), columns, types)
    builder.log_partition = p
    builder.segment = None
    offset = part.start
    if offset < 0:
        offset = cluster.list_offsets(topic, [p], EARLIEST)[p]
    end = part.end
    size = fetch_bytes
    while offset < end:
        code, data, hw, log_start = cluster.fetch(topic, p, offset, size)
        if code == OFFSET_OUT_OF_RANGE and 0 <= log_start and offset < log_start:
            # retention or compaction removed the start of the range meanwhile
            builder.add_error("fetch_error", f"{topic}-{p}: offsets {offset}..{log_start - 1} "
                              f"were removed before they were read", offset=offset)
            offset = log_start
            continue
        if code:
            builder.add_error("fetch_error", f"{topic}-{p}: Fetch at offset {offset}: "
                              f"{ERROR_NAMES.get(code, f'error {code}')}", offset=offset)
            break
        if not data:
            if hw <= offset:  # the high watermark moved back (a new leader): read to there
                break
            builder.add_error("fetch_error", f"{topic}-{p}: Fetch at offset {offset} returned "
                              f"no records below the high watermark {hw}", offset=offset)
            break
        pos, why = builder.add_chunk(data, 0, verify, offset, end - 1)
        nxt = _next_offset(data, pos)
        if why == "corrupt":
            h = _BATCH_HEAD.unpack_from(data, pos)
            builder.add_error("corrupt_batch", f"{topic}-{p}: bad batch header (length {h[1]}, "
                              f"magic {h[2]}) at offset {h[0]}; the rest of the partition "
                              f"is not read", offset=h[0])
            break
        if nxt is None:  # not one whole batch: the first batch is larger than asked for
            if size >= MAX_FETCH_BYTES:
                builder.add_error("corrupt_batch", f"{topic}-{p}: batch at offset {offset} is "
                                  f"larger than {MAX_FETCH_BYTES} bytes", offset=offset)
                break
            size = min(size * 4, MAX_FETCH_BYTES)
            continue
        if why == "done":
            break
        offset = max(nxt, offset + 1) if nxt <= offset else nxt
        if len(builder) >= batch_rows:
            out = builder.flush()
            if out is not None:
                yield out
    out = builder.flush()
    if out is not None:
        yield out


def _next_offset(data: bytes, stop: int) -> int | None:
    """The offset after the last whole batch in data[:stop] (None: no whole batch)."""
    pos = 0
    nxt = None
    head = _BATCH_HEAD.unpack_from
    while stop - pos >= HEADER_SIZE:
        base, length, _magic, _crc, lod = head(data, pos)
        nxt = base + lod + 1
        pos += LOG_OVERHEAD + length
    return nxt


class WireOffsetsReader(DataSourceReader):
    def __init__(self, options, columns=None) -> None:
        self.o = _WireOptions(options, columns)

    def partitions(self):
        cluster = self.o.cluster()
        try:
            starts, ends = offsets_range(cluster, self.o.topic)
            names = cluster.topic_names()
        finally:
            cluster.close()
        parts = [WirePartition(p, starts[p], ends[p], names) for p in sorted(ends)
                 if ends[p] > starts[p]]
        return parts or [WirePartition(-1, 0, 0, {})]

    def read(self, partition: WirePartition):
        if partition.end <= partition.start:
            return iter(())
        return self.o.read(partition)


class WireOffsetsStreamReader(DataSourceStreamReader):
    """Offsets are {"<log partition>": next offset}, each a high watermark (a
    batch boundary); a partition not in the start offsets is read from its log start."""

    def __init__(self, options, columns=None) -> None:
        self.o = _WireOptions(options, columns)
        self._names: dict = {}

    def initialOffset(self) -> dict:
        return {}

    def latestOffset(self, _start: dict | None = None, _limit=None) -> dict:
        from .wire import LATEST
        cluster = self.o.cluster()
        try:
            self._names = cluster.topic_names()
            ends = cluster.list_offsets(self.o.topic, sorted(cluster.partitions(self.o.topic)),
                                        LATEST)
        finally:
            cluster.close()
        return {str(p): end for p, end in sorted(ends.items()) if end > 0}

    def partitions(self, start: dict, end: dict):
        parts = []
        for key, stop in end.items():
            begin = int(start.get(key, -1)) if start else -1
            if stop <= begin:
                continue
            parts.append(WirePartition(int(key), begin, int(stop), dict(self._names)))
        return parts

    def read(self, partition: WirePartition):
        return self.o.read(partition)

    def commit(self, end: dict) -> None:
        pass
