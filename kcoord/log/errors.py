"""Errors raised by the partition log."""
from kcoord.protocol.errors import Err


class LogError(Exception):
    """Base class for errors of kcoord.log."""


class OffsetOutOfRange(LogError):
    """A read asked for an offset outside [log_start_offset, log_end_offset].

    Carries the bounds so the broker can answer OFFSET_OUT_OF_RANGE and a
    client can reset its position without a second call.
    """

    error_code = Err.OFFSET_OUT_OF_RANGE

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int):
        super().__init__(
            f"offset {offset} is outside [{log_start_offset}, {log_end_offset}]"
        )
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class InvalidAppend(LogError, ValueError):
    """Input to append/append_raw is not a run of whole v2 batches, or its
    offsets would go backwards."""


class CorruptSegmentError(LogError):
    """A segment file holds bytes that are not a whole, well-formed batch
    where one should be.  `position` is the byte offset in the .log file."""

    def __init__(self, position: int, reason: str):
        super().__init__(f"{reason} at position {position}")
        self.position = position
        self.reason = reason
