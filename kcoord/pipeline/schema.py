"""Row schemas of the pipeline's two data sources.

`RECORDS` is one row per __consumer_offsets record (and one per bad batch
or bad record, with `error` set).  Offset commits fill the flat columns;
group records fill `group_metadata` (classic, type 2) or `consumer_group`
(KIP-848, types 3-8).  `LOG_ENDS` is one row per observed log end of a
user topic partition: (topic, partition, log_end_offset, timestamp).

Spark type strings are the single source of truth; the Arrow schemas the
readers build their batches with are derived from them with Spark's own
converter, so the batches match what Spark checks exactly.
"""
from __future__ import annotations

from functools import lru_cache

_TOPIC_PARTITIONS = "array<struct<topic_id:string,topic:string,partitions:array<int>>>"

RECORD_FIELDS: list[tuple[str, str]] = [
    ("log_partition", "int"),        # the __consumer_offsets partition
    ("segment", "bigint"),           # base offset of the segment file
    ("offset", "bigint"),            # record offset (null on a batch-level error row)
    ("timestamp", "bigint"),         # record timestamp, ms
    ("record_type", "smallint"),     # key type: 0/1 offset commit, 2 group metadata, 3-8 KIP-848
    ("value_version", "smallint"),   # null for a tombstone
    ("tombstone", "boolean"),
    ("producer_id", "bigint"),
    ("transactional", "boolean"),
    ("control_type", "smallint"),    # control records: 0 abort, 1 commit
    ("group", "string"),
    ("topic", "string"),
    ("partition", "int"),
    ("member_id", "string"),
    ("committed_offset", "bigint"),
    ("leader_epoch", "int"),
    ("metadata", "string"),
    ("commit_timestamp", "bigint"),
    ("expire_timestamp", "bigint"),
    ("group_metadata",
     "struct<protocol_type:string,generation:int,protocol:string,leader:string,"
     "current_state_timestamp:bigint,members:array<struct<member_id:string,"
     "group_instance_id:string,client_id:string,client_host:string,rebalance_timeout:int,"
     "session_timeout:int,subscription:binary,assignment:binary>>>"),
    ("consumer_group",
     "struct<epoch:int,assignment_epoch:int,instance_id:string,rack_id:string,"
     "client_id:string,client_host:string,subscribed_topic_names:array<string>,"
     "subscribed_topic_regex:string,rebalance_timeout_ms:int,server_assignor:string,"
     "classic_session_timeout_ms:int,member_epoch:int,previous_member_epoch:int,state:smallint,"
     "topics:array<struct<topic_id:string,topic:string,num_partitions:int>>,"
     f"assigned:{_TOPIC_PARTITIONS},pending_revocation:{_TOPIC_PARTITIONS}>"),
    ("error", "string"),             # null, or the kind of bad input this row reports
    ("error_detail", "string"),
]

# Columns a reader builds only when a schema given with .schema(...) names them.
EXTRA_RECORD_FIELDS: list[tuple[str, str]] = [
    ("raw_value", "binary"),         # value bytes of a group record (types 2-8), else null
]

LOG_END_FIELDS: list[tuple[str, str]] = [
    ("topic", "string"),
    ("partition", "int"),
    ("log_end_offset", "bigint"),
    ("timestamp", "bigint"),         # when the log end was observed (batch max timestamp), ms
]


def _fields(which: str) -> list[tuple[str, str]]:
    """"records", "records+" (with the columns built on request), or "log_ends"."""
    if which == "records":
        return RECORD_FIELDS
    if which == "records+":
        return RECORD_FIELDS + EXTRA_RECORD_FIELDS
    return LOG_END_FIELDS


def ddl(fields: list[tuple[str, str]]) -> str:
    return ", ".join(f"`{name}` {typ}" for name, typ in fields)


RECORDS_DDL = ddl(RECORD_FIELDS)
LOG_ENDS_DDL = ddl(LOG_END_FIELDS)


def _spark_type(t: str):
    from pyspark.sql import types as T
    t = t.strip()
    simple = {"int": T.IntegerType(), "bigint": T.LongType(), "smallint": T.ShortType(),
              "string": T.StringType(), "boolean": T.BooleanType(), "binary": T.BinaryType(),
              "double": T.DoubleType()}
    if t in simple:
        return simple[t]
    if t.startswith("array<"):
        return T.ArrayType(_spark_type(t[6:-1]), True)
    if t.startswith("struct<"):
        return T.StructType([T.StructField(n, _spark_type(ft), True)
                             for n, ft in _split_struct(t[7:-1])])
    raise ValueError(t)


@lru_cache(maxsize=None)
def spark_schema(which: str):
    """The source's StructType, built without a JVM (readers run in workers)."""
    from pyspark.sql import types as T
    fields = _fields(which)
    return T.StructType([T.StructField(n, _spark_type(t), True) for n, t in fields])


@lru_cache(maxsize=None)
def arrow_schema(which: str):
    """The Arrow schema Spark expects from a reader of this source."""
    try:
        from pyspark.sql.pandas.types import to_arrow_schema
        return to_arrow_schema(spark_schema(which), timezone="UTC")
    except ImportError:  # no pyspark: the same layout, built by hand
        return _arrow_schema_fallback(which)


def _arrow_type(t: str):
    import pyarrow as pa
    t = t.strip()
    simple = {"int": pa.int32(), "bigint": pa.int64(), "smallint": pa.int16(),
              "string": pa.string(), "boolean": pa.bool_(), "binary": pa.binary(),
              "double": pa.float64()}
    if t in simple:
        return simple[t]
    if t.startswith("array<"):
        return pa.list_(pa.field("element", _arrow_type(t[6:-1])))
    if t.startswith("struct<"):
        return pa.struct([pa.field(n, _arrow_type(ft)) for n, ft in _split_struct(t[7:-1])])
    raise ValueError(t)


def _split_struct(body: str):
    depth, start, out = 0, 0, []
    for i, ch in enumerate(body + ","):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "," and depth == 0:
            name, typ = body[start:i].split(":", 1)
            out.append((name, typ))
            start = i + 1
    return out


def _arrow_schema_fallback(which: str):
    import pyarrow as pa
    fields = _fields(which)
    return pa.schema([pa.field(n, _arrow_type(t)) for n, t in fields])
