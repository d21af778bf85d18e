"""A produced batch's timestamps checked and its maxTimestamp set as Kafka's
LogValidator does on append to a CreateTime topic, for every batch:

- each record's timestamp (but NO_TIMESTAMP) within [now -
  message.timestamp.before.max.ms, now + message.timestamp.after.max.ms],
  else the batch is refused with INVALID_TIMESTAMP naming every record out of
  range (Produce's RecordErrors, Kafka's wording);
- the header's maxTimestamp made the records' max: the time index,
  ListOffsets by timestamp, retention by time and the Burrow API's lag
  history read only batch headers, so a producer that sends -1 (sarama 1.22)
  or a wrong value would otherwise hide its records' times.

One walk per batch finds the records' min and max timestamps (the length and
timestamp delta of each record only); the records are decoded one by one
only to name the ones out of range.
"""
from __future__ import annotations

from ..protocol.records import (BatchHeader, decode_batch, records_timestamp_range,
                                rewrite_max_timestamp)
from .topic_configs import TOPIC_CONFIGS

NO_TIMESTAMP = -1
BEFORE, AFTER = "message.timestamp.before.max.ms", "message.timestamp.after.max.ms"
REFUSED = "One or more records have been rejected due to invalid timestamp"


class InvalidTimestamps(Exception):
    """Records of a batch out of the topic's timestamp range: `errors` holds
    (record index, message) per record, as Produce's RecordErrors."""

    def __init__(self, errors: list[tuple[int, str]]) -> None:
        super().__init__(REFUSED)
        self.errors = errors


def timestamp_bounds(topic_configs: dict, broker_defaults: dict) -> tuple[int, int]:
    """(before.max.ms, after.max.ms) of a topic: its own value, else the
    broker's log.* synonym, else Kafka's default."""
    def value(key: str) -> int:
        v = topic_configs.get(key)
        if v is None:
            v = broker_defaults.get("log." + key)
        return int(TOPIC_CONFIGS[key][0].default if v is None else v)
    return value(BEFORE), value(AFTER)


def check_batch(records, pos: int, header: BatchHeader, now: int, before_ms: int,
                after_ms: int):
    """-> (records, header): the batch at records[pos:] with its maxTimestamp
    set to its records' max (records becomes a bytearray when a header is
    rewritten).  InvalidTimestamps for records out of range;
    CorruptRecordError from the walk."""
    low, high = records_timestamp_range(records, pos, header)
    earliest, latest = now - before_ms, now + after_ms
    if low < earliest or high > latest:  # (records without a timestamp are exempt)
        errors = out_of_range(records, pos, earliest, latest)
        if errors:
            raise InvalidTimestamps(errors)
    if high == header.max_timestamp:
        return records, header
    if records.__class__ is not bytearray:
        records = bytearray(records)
    rewrite_max_timestamp(records, pos, header, high)
    return records, header._replace(max_timestamp=high)


def out_of_range(records, pos: int, earliest: int, latest: int) -> list[tuple[int, str]]:
    """Every record of the batch whose timestamp is out of [earliest, latest],
    with Kafka's message (the offset is the producer's, before assignment)."""
    _, decoded = decode_batch(records, pos, verify_crc=False)
    return [(i, f"Timestamp {r.timestamp} of message with offset {r.offset} is out of range. "
                f"The timestamp should be within [{earliest}, {latest}]")
            for i, r in enumerate(decoded)
            if r.timestamp != NO_TIMESTAMP and not earliest <= r.timestamp <= latest]
