"""Spark Python data sources over kcoord's data dir.

    spark.read.format("kcoord_offsets").load(DATA_DIR)        # batch
    spark.readStream.format("kcoord_offsets").load(DATA_DIR)  # streaming
    spark.read.format("kcoord_offsets").option("bootstrap", "HOST:PORT").load()  # over the wire
    spark.read.format("kcoord_log_ends").load(DATA_DIR)       # user topics' log ends
    spark.read.format("kcoord_log_ends").option("bootstrap", "127.0.0.1:9092").load()

`kcoord_offsets` options:
    split       "partition" (default): one input partition per __consumer_offsets
                partition; "segment": one per segment file
    verifyCrc   "true" (default) / "false"
    recordTypes keep only records of these key types, e.g. "2-8" or "0,1"
                (rows of other types, control records and bad input are left out)
    topic       the offsets topic's directory prefix (default __consumer_offsets)
    bootstrap   HOST:PORT[,HOST:PORT...]: read the topic over the Kafka protocol instead
                of a data dir (wire_source.py); `kafka.<client property>` options
                (e.g. kafka.security.protocol) go to the client

The streaming source's offsets are {"<log partition>": next offset}.  Every
micro-batch ends on batch boundaries (records of a batch are never split),
and a partition directory that appears later starts from its beginning.

`kcoord_log_ends` options:
    bootstrap     HOST:PORT of a running server (ListOffsets); else the data dir is read
    resolution    ms between kept observations of a partition's history (default 1000)
    numPartitions input partitions for a data-dir read (default: up to 8)

Register both with `register(spark)`.
"""
from __future__ import annotations

from pathlib import Path

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)

from .schema import LOG_ENDS_DDL, RECORDS_DDL, spark_schema


class OffsetsPartition(InputPartition):
    """What one task reads: segments of one log partition, maybe an offset range."""

    def __init__(self, log_partition: int, segments: list[str], start: int = -1,
                 end: int = 1 << 62, position: int = 0, topic_names: dict | None = None):
        self.log_partition = log_partition
        self.segments = segments       # segment file paths, in offset order
        self.start = start             # first offset to read
        self.end = end                 # one past the last offset to read
        self.position = position       # file position to start at in segments[0]
        self.topic_names = topic_names or {}
        super().__init__((log_partition, tuple(segments), start, end))


def parse_types(text: str | None) -> frozenset | None:
    """"2-8" or "0,1,5" -> the record types to keep; None keeps everything."""
    if not text:
        return None
    out = set()
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(out)


def _options(options) -> tuple[str, str, bool, str]:
    path = options.get("path")
    if not path:
        raise ValueError("kcoord_offsets needs a path: the kcoord data dir")
    split = options.get("split", "partition").lower()
    if split not in ("partition", "segment"):
        raise ValueError("split must be 'partition' or 'segment'")
    verify = options.get("verifyCrc", "true").lower() != "false"
    topic = options.get("topic", "__consumer_offsets")
    return path, split, verify, topic


def _read(partition: OffsetsPartition, verify: bool, columns: list[str] | None,
          types: frozenset | None = None):
    from .decode import RecordBatchBuilder
    from .segments import read_segment
    builder = RecordBatchBuilder(dict(partition.topic_names), columns, types)
    for i, seg in enumerate(partition.segments):
        yield from read_segment(seg, partition.log_partition, builder,
                                start_position=partition.position if i == 0 else 0,
                                min_offset=partition.start, max_offset=partition.end - 1,
                                verify_crc=verify)


class OffsetsDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "kcoord_offsets"

    def schema(self):
        return spark_schema("records")

    # A schema given with .schema(...) may name a subset of the columns (same
    # types): only those are built and sent to the JVM.
    def reader(self, schema):
        if self.options.get("bootstrap"):
            from .wire_source import WireOffsetsReader
            return WireOffsetsReader(self.options, _names(schema))
        return OffsetsReader(self.options, _names(schema))

    def streamReader(self, schema):
        if self.options.get("bootstrap"):
            from .wire_source import WireOffsetsStreamReader
            return WireOffsetsStreamReader(self.options, _names(schema))
        return OffsetsStreamReader(self.options, _names(schema))


def _names(schema) -> list[str] | None:
    names = [f.name for f in schema.fields] if schema is not None else None
    return None if names == [f.name for f in spark_schema("records").fields] else names


class OffsetsReader(DataSourceReader):
    def __init__(self, options, columns: list[str] | None = None) -> None:
        self.path, self.split, self.verify, self.topic = _options(options)
        self.columns = columns
        self.types = parse_types(options.get("recordTypes"))

    def partitions(self):
        from .segments import partition_dirs, segment_files
        from .logend import topic_id_names
        names = topic_id_names(self.path)
        parts = []
        for p, directory in partition_dirs(self.path, self.topic):
            segs = [str(path) for _, path in segment_files(directory)
                    if path.stat().st_size > 0]
            if not segs:
                continue
            if self.split == "segment":
                parts.extend(OffsetsPartition(p, [s], topic_names=names) for s in segs)
            else:
                parts.append(OffsetsPartition(p, segs, topic_names=names))
        # Spark wants at least one partition; an empty one reads nothing.
        return parts or [OffsetsPartition(-1, [])]

    def read(self, partition: OffsetsPartition):
        return _read(partition, self.verify, self.columns, self.types)


class OffsetsStreamReader(DataSourceStreamReader):
    def __init__(self, options, columns: list[str] | None = None) -> None:
        self.path, self.split, self.verify, self.topic = _options(options)
        self.columns = columns
        self.types = parse_types(options.get("recordTypes"))
        # log partition -> {segment base: (path, scanned position, next offset)}
        self._scanned: dict[int, dict[int, tuple[str, int, int]]] = {}
        # (log partition, offset) -> (segment path, file position): where a batch starts
        self._where: dict[tuple[int, int], tuple[str, int]] = {}

    def initialOffset(self) -> dict:
        return {}

    def _scan(self) -> dict[int, int]:
        """Log end of every partition, walking only bytes not seen before."""
        from .segments import partition_dirs, segment_end, segment_files
        ends = {}
        for p, directory in partition_dirs(self.path, self.topic):
            known = self._scanned.setdefault(p, {})
            segs = segment_files(directory)
            live = {base for base, _ in segs}
            for base in [b for b in known if b not in live]:  # deleted by retention
                del known[base]
            end = None
            for base, path in segs:
                prev = known.get(base)
                if prev is not None and prev[1] > Path(path).stat().st_size:
                    prev = None  # rewritten (compaction): scan again
                pos, nxt = (prev[1], prev[2]) if prev else (0, base)
                self._where[(p, nxt)] = (str(path), pos)
                nxt, pos = segment_end(path, pos, nxt)
                known[base] = (str(path), pos, nxt)
                self._where[(p, nxt)] = (str(path), pos)
                end = nxt if end is None else max(end, nxt)
            if end is not None:
                ends[p] = end
        return ends

    def latestOffset(self, _start: dict | None = None, _limit=None) -> dict:
        return {str(p): end for p, end in self._scan().items()}

    def partitions(self, start: dict, end: dict):
        from .segments import segment_files
        from .logend import topic_id_names
        names = topic_id_names(self.path)
        parts = []
        for key, stop in end.items():
            p = int(key)
            begin = int(start.get(key, -1)) if start else -1
            if stop <= begin:
                continue
            directory = Path(self.path) / f"{self.topic}-{p}"
            segs = segment_files(directory)
            chosen = [str(path) for base, path in segs
                      if base < stop and (begin < 0 or _segment_may_hold(segs, base, begin))]
            position = 0
            where = self._where.get((p, begin))
            if chosen and where is not None and where[0] == chosen[0]:
                position = where[1]
            parts.append(OffsetsPartition(p, chosen, begin, stop, position, names))
        return parts

    def read(self, partition: OffsetsPartition):
        return _read(partition, self.verify, self.columns, self.types)

    def commit(self, end: dict) -> None:
        done = {int(k): int(v) for k, v in end.items()}
        self._where = {k: v for k, v in self._where.items() if k[1] >= done.get(k[0], -1)}


def _segment_may_hold(segs, base: int, offset: int) -> bool:
    """Can the segment starting at `base` hold offsets >= offset? (The next one starts later.)"""
    bases = [b for b, _ in segs]
    i = bases.index(base)
    return i + 1 >= len(bases) or bases[i + 1] > offset


# ------------------------------------------------------------ log ends


class LogEndsPartition(InputPartition):
    def __init__(self, items: list[tuple[str, int, str]]):
        self.items = items
        super().__init__(tuple(items))


class LogEndsDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "kcoord_log_ends"

    def schema(self):
        return spark_schema("log_ends")

    def reader(self, schema) -> "LogEndsReader":  # noqa: ARG002 (Spark passes it by name)
        return LogEndsReader(self.options)


class LogEndsReader(DataSourceReader):
    def __init__(self, options) -> None:
        self.path = options.get("path")
        self.bootstrap = options.get("bootstrap")
        self.resolution = int(options.get("resolution", "1000"))
        self.num = options.get("numPartitions")
        if not self.path and not self.bootstrap:
            raise ValueError("kcoord_log_ends needs a data dir path or a bootstrap server")

    def partitions(self):
        if self.bootstrap:
            return [LogEndsPartition([])]
        from .logend import user_partitions
        tps = [(t, p, str(d)) for t, p, d in user_partitions(self.path)]
        n = max(1, min(int(self.num) if self.num else 8, len(tps)))
        return [LogEndsPartition(tps[i::n]) for i in range(n)]

    def read(self, partition: LogEndsPartition):
        import pyarrow as pa

        from .logend import partition_history, server_log_ends
        from .schema import arrow_schema
        topics, parts, ends, stamps = [], [], [], []
        if self.bootstrap:
            for t, p, end, ts in server_log_ends(self.bootstrap):
                topics.append(t)
                parts.append(p)
                ends.append(end)
                stamps.append(ts)
        else:
            for t, p, directory in partition.items:
                for end, ts in partition_history(directory, self.resolution):
                    topics.append(t)
                    parts.append(p)
                    ends.append(end)
                    stamps.append(ts)
        yield pa.RecordBatch.from_arrays(
            [pa.array(topics, pa.string()), pa.array(parts, pa.int32()),
             pa.array(ends, pa.int64()), pa.array(stamps, pa.int64())],
            schema=arrow_schema("log_ends"))


def register(spark) -> None:
    spark.dataSource.register(OffsetsDataSource)
    spark.dataSource.register(LogEndsDataSource)


__all__ = ["OffsetsDataSource", "LogEndsDataSource", "register", "RECORDS_DDL", "LOG_ENDS_DDL"]
