"""PySpark analytics over the coordinator's log: consumer lag and group health.

Modules (Spark is imported only where it is needed):

  schema       row schemas of the data sources
  decode       __consumer_offsets segments -> Arrow batches (no Spark)
  logend       user topics' log ends from a data dir or over ListOffsets (no Spark)
  source       the Spark Python data sources `kcoord_offsets` and `kcoord_log_ends`
  wire         a small blocking Kafka client: Metadata, ListOffsets, Fetch from leaders (no Spark)
  wire_source  `kcoord_offsets` over the Kafka protocol (option bootstrap)
  timelag      exact time lag: the timestamp of the record at a committed offset (no Spark)
  preflight    checks of the input before Spark starts (no Spark)
  burrow       Burrow's evaluation rules (no Spark)
  generations  group records -> one row per generation / epoch (no Spark)
  share_state  __share_group_state (data dir or wire) replayed per share partition (no Spark)
  share_jobs   the share-group table: share lag and problems
  jobs         the batch pipeline writing the Parquet tables
  stream       the Structured Streaming pipeline keeping lag and status current
  report       the HTML report with inline SVG plots
  generate     a synthetic workload with known answers
  cli          `kcoord pipeline run | stream | generate`

See docs/pipeline.md.
"""
