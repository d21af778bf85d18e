"""The share-group table (KIP-932): one row per share partition, from the
share coordinator's log (`__share_group_state`, replayed by Spark tasks, one
per log partition: share_state.py) and the share groups' records in
`__consumer_offsets` (types 10-15), with the share lag against the log ends
the lag job uses and the problems an operator should see:

    LAG_GROWING        the share lag grew over the last writes and now
    ARCHIVED_AT_LIMIT  records were archived at the delivery-count limit
                       (released or timed out that many times: poison records)

Share lag is Kafka's (KIP-1226, DescribeShareGroupOffsets' Lag): the log end
minus the share-partition start offset minus the records delivered for good
above it (delivery complete count).
"""
from __future__ import annotations

from .schema import ddl
from .share_state import (DEFAULT_DELIVERY_LIMIT, SHARE_STATE_FIELDS, read_partition,
                          share_state_partitions)

SHARE_GROUP_TABLE = "share_groups"
SHARE_RECORD_TYPES = (10, 11, 12, 13, 14, 15)
SHARE_METADATA = 11           # ShareGroupMetadata: the group exists until its tombstone
TREND_POINTS = 3              # lag points (last writes and now) that must not shrink

SHARE_GROUP_FIELDS: list[tuple[str, str]] = [
    ("group", "string"),
    ("topic", "string"),
    ("partition", "int"),
    ("start_offset", "bigint"),
    ("log_end_offset", "bigint"),
    ("in_flight", "bigint"),
    ("acknowledged", "bigint"),
    ("archived", "bigint"),
    ("delivery_complete_count", "int"),
    ("lag", "bigint"),
    ("archived_at_limit", "bigint"),
    ("lag_growing", "boolean"),
    ("problems", "array<string>"),
    ("group_in_offsets", "boolean"),   # a live share group in __consumer_offsets
    ("last_write_ms", "bigint"),
]


def share_state_df(spark, parts: list[int], data_dir=None, bootstrap_server: str | None = None,
                   client_properties: dict | None = None,
                   delivery_limit: int = DEFAULT_DELIVERY_LIMIT):
    """One row per share partition with a state (SHARE_STATE_FIELDS), from the
    __share_group_state partitions `parts` (share_state_partitions)."""
    names = [n for n, _ in SHARE_STATE_FIELDS]
    data_dir = None if data_dir is None else str(data_dir)
    props = dict(client_properties or {})

    def task(p):
        for row in read_partition(p, data_dir, bootstrap_server, props, delivery_limit):
            yield tuple(row[n] for n in names)
    rdd = spark.sparkContext.parallelize(parts, max(len(parts), 1)).flatMap(task)
    return spark.createDataFrame(rdd, schema=ddl(SHARE_STATE_FIELDS))


def live_share_groups(records) -> set[str]:
    """Share groups whose last ShareGroupMetadata record is not a tombstone
    (records None: the log holds none, known without a job)."""
    from pyspark.sql import functions as F
    if records is None:
        return set()
    rows = (records.filter((F.col("record_type") == SHARE_METADATA) & F.col("error").isNull())
            .groupBy("group").agg(F.max_by("tombstone", "offset").alias("gone")).collect())
    return {r["group"] for r in rows if not r["gone"]}


def _end_at(series: list[tuple[int, int]], ts: int) -> int | None:
    """The log end observed last at or before ts (None: none that early)."""
    best = None
    for end, seen in series:
        if seen <= ts and (best is None or seen >= best[1]):
            best = (end, seen)
    return None if best is None else best[0]


def share_rows(state_rows: list[dict], names: dict, obs: dict, live: set[str],
               past: dict | None = None) -> list[dict]:
    """The table's rows (topic ids named; the lag against `obs`, the lag
    job's {(topic, partition): [(log end, observed at)]}, the latest
    observation being the end now; the trend against `past`, log ends at
    the writes' times from a running server, else against `obs`)."""
    out = []
    for r in state_rows:
        topic = names.get(r["topic_id"])
        if topic is None or r["start_offset"] < 0:
            continue                  # a deleted topic, or a state never started
        tp = (topic, r["partition"])
        now = obs.get(tp, [])
        end = max(now, key=lambda o: o[1])[0] if now else None
        series = now if past is None else past.get(tp, [])
        done = max(r["delivery_complete_count"], 0)
        lag = None if end is None else end - r["start_offset"] - done
        points = []
        for h in r["history"] or []:
            at = _end_at(series, h["ts"])
            if at is not None and h["start_offset"] >= 0:
                points.append(at - h["start_offset"] - max(h["delivery_complete_count"], 0))
        if lag is not None:
            points.append(lag)
        tail = points[-TREND_POINTS:]
        growing = (lag is not None and lag > 0 and len(tail) == TREND_POINTS
                   and all(b >= a for a, b in zip(tail, tail[1:])) and tail[-1] > tail[0])
        problems = (["LAG_GROWING"] if growing else []) + \
            (["ARCHIVED_AT_LIMIT"] if r["archived_at_limit"] else [])
        out.append({"group": r["group"], "topic": topic, "partition": r["partition"],
                    "start_offset": r["start_offset"], "log_end_offset": end,
                    "in_flight": r["in_flight"], "acknowledged": r["acknowledged"],
                    "archived": r["archived"], "delivery_complete_count": done, "lag": lag,
                    "archived_at_limit": r["archived_at_limit"], "lag_growing": growing,
                    "problems": problems, "group_in_offsets": r["group"] in live,
                    "last_write_ms": r["last_write_ms"]})
    out.sort(key=lambda r: (r["group"], r["topic"], r["partition"]))
    return out


def share_groups_table(spark, records, names: dict, obs: dict, data_dir=None,
                       bootstrap_server: str | None = None,
                       client_properties: dict | None = None, history=None):
    """-> (the table's rows, the live share groups).  records: None when the log
    holds no ShareGroupMetadata record.  history: with log ends from a running
    server, ({(topic, partition)}, [times]) -> {(topic, partition): [(log end,
    time)]} (logend.server_log_end_history)."""
    parts = share_state_partitions(data_dir, bootstrap_server, client_properties)
    state = [] if not parts else [  # no share state yet: no job
        r.asDict(recursive=True) for r in
        share_state_df(spark, parts, data_dir, bootstrap_server, client_properties).collect()]
    live = live_share_groups(records)
    past = None
    if history is not None:
        tps = {(names[r["topic_id"]], r["partition"]) for r in state if r["topic_id"] in names}
        times = sorted({h["ts"] for r in state for h in r["history"] or []})
        past = history(tps, times) if tps and times else {}
    return share_rows(state, names, obs, live, past), live
