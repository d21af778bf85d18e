"""A produced batch's maxTimestamp made the records' max, as Kafka's
LogValidator does on append (CreateTime topics): the time index, ListOffsets
by timestamp, retention by time and the Burrow API's lag history read only
batch headers, so a producer that sends -1 (sarama 1.22) or a wrong value
would otherwise hide its records' times.

Kafka walks every record of every batch.  In Python that walk costs more
than the rest of an append (measured in bench/results/produce_fetch.md), so
it is done where a wrong header can hide: always for a header that cannot be
right (-1, or below the batch's baseTimestamp) and for one-record batches
(one delta to read), and for a plausible header per client id until that
client's headers have agreed with their records VERIFY_FIRST times, then for
one batch in VERIFY_EVERY.  A wrong header is a producer library's bug, so
it repeats: any disagreement puts that client back under full checks.
"""
from __future__ import annotations

from collections import OrderedDict

from ..protocol.records import BatchHeader, records_max_timestamp, rewrite_max_timestamp

VERIFY_FIRST = 32     # batches of a client checked before its headers are trusted
VERIFY_EVERY = 64     # then one in this many is still checked
MAX_CLIENTS = 10_000  # client ids remembered (least recently seen forgotten first)


class MaxTimestampCheck:
    def __init__(self) -> None:
        self._agreed: OrderedDict[str | None, int] = OrderedDict()  # client id -> batches agreed

    def _must_walk(self, header: BatchHeader, client_id: str | None) -> bool:
        if header.max_timestamp < header.base_timestamp or header.records_count <= 1:
            return True
        agreed = self._agreed.get(client_id, 0)
        return agreed < VERIFY_FIRST or agreed % VERIFY_EVERY == 0

    def _count(self, client_id: str | None, agreed: bool) -> None:
        seen = self._agreed
        if agreed:
            seen[client_id] = seen.get(client_id, 0) + 1
            seen.move_to_end(client_id)
            if len(seen) > MAX_CLIENTS:
                seen.popitem(last=False)
        else:
            seen.pop(client_id, None)

    def fix(self, records, pos: int, header: BatchHeader, client_id: str | None):
        """-> (records, header): the batch at records[pos:] with its
        maxTimestamp set to its records' max (records becomes a bytearray
        when a header is rewritten).  CorruptRecordError from the walk."""
        if not self._must_walk(header, client_id):
            self._count(client_id, True)
            return records, header
        newest = records_max_timestamp(records, pos, header)
        if newest == header.max_timestamp:
            self._count(client_id, True)
            return records, header
        self._count(client_id, False)
        if records.__class__ is not bytearray:
            records = bytearray(records)
        rewrite_max_timestamp(records, pos, header, newest)
        return records, header._replace(max_timestamp=newest)
