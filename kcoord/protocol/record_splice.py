"""Large record sets kept out of a response's encoded frame.

While the server encodes a response (`collecting`), the encoders hand every
records field of at least SPLICE_MIN bytes to `put_records`, which notes
where it belongs instead of copying it into the frame; `pieces` then gives
the frame as the buffers to write in order, the records as they were read
from the log.  A 3 MB Fetch answer is then not copied once more in user
space (Kafka's FileRecords.writeTo keeps them out of the heap the same way).
Outside `collecting` (clients, tests, tagged fields) records are appended.
"""
from __future__ import annotations

import struct
from typing import Any

SPLICE_MIN = 64 * 1024  # below this a copy is cheaper than one more write
_SIZE = struct.Struct(">i")


class _Collector:
    __slots__ = ("active", "notes")

    def __init__(self) -> None:
        self.active = False
        self.notes: list[tuple[int, Any]] = []  # (position in the frame, records)


_collector = _Collector()


def put_records(b: bytearray, data: Any) -> None:
    """Append `data` to `b`, or, while collecting, note it for after b's end."""
    if _collector.active and len(data) >= SPLICE_MIN:
        _collector.notes.append((len(b), data))
    else:
        b += data


def forget_records(start: int) -> None:
    """Drop the notes at or past `start` (an encoding redone from there)."""
    notes = _collector.notes
    while notes and notes[-1][0] >= start:
        notes.pop()


def encode_collecting(encode: Any, response: Any, frame: bytearray) -> Any:
    """encode(response, frame) with large records left out: the frame
    (a bytearray) when none was, else the list of buffers to write in order,
    the frame's size field (its first 4 bytes) covering them all."""
    collector = _collector
    collector.active = True
    try:
        frame = encode(response, frame)
    finally:
        collector.active = False
    notes = collector.notes
    if not notes:
        return frame
    collector.notes = []
    size = len(frame) - 4
    pieces: list[Any] = []
    at = 0
    for position, data in notes:
        pieces.append(frame[at:position])  # the small encoded part (a copy of a few bytes)
        pieces.append(data)
        size += len(data)
        at = position
    pieces.append(frame[at:])
    _SIZE.pack_into(pieces[0], 0, size)
    return pieces
