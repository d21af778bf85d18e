"""One (schema, version)'s encode and decode entry points around its
generated functions (codegen.py at run time, or the module written ahead
of time by codec_source.py); compiled by `make native`."""
from __future__ import annotations

from typing import Any, Callable

from .errors import ProtocolError

STRICT_MISSES = 16  # KeyErrors after which a codec encodes leniently only


class Codec:
    """encode: the strict encoder reads every non-tagged field as m[name],
    faster than m.get(name, default); a message that leaves a field out
    raises KeyError there and is encoded again by the lenient encoder, and
    a codec whose messages keep leaving fields out stops trying.
    decode: bytes go to the bytes decoder, any other buffer (bytearray,
    memoryview) to a decoder made on its first use; any failure is a
    ProtocolError."""

    def __init__(self, name: str, strict: Callable[..., Any],
                 lenient: Callable[[], Callable[..., Any]], decoder: Callable[..., Any],
                 views: Callable[[], Callable[..., Any]]) -> None:
        self.name = name
        self.strict: Callable[..., Any] | None = strict
        self.misses = 0
        self.make_lenient = lenient
        self.lenient: Callable[..., Any] | None = None
        self.decoder = decoder
        self.make_views = views
        self.views: Callable[..., Any] | None = None

    def encode(self, msg: Any, b: bytearray | None = None) -> bytearray:
        """msg's encoding, appended to b (a new bytearray by default)."""
        if b is None:
            b = bytearray()
        strict = self.strict
        if strict is not None:
            start = len(b)
            try:
                strict(msg, b)
                return b
            except KeyError:
                self.misses += 1
                if self.misses >= STRICT_MISSES:
                    self.strict = None
                del b[start:]
        lenient = self.lenient
        if lenient is None:
            lenient = self.lenient = self.make_lenient()
        lenient(msg, b)
        return b

    def decode(self, buf: Any, pos: int = 0) -> tuple[Any, int]:
        try:
            if buf.__class__ is bytes:
                result: tuple[Any, int] = self.decoder(buf, pos)
                return result
            views = self.views
            if views is None:
                views = self.views = self.make_views()
            result = views(buf, pos)
            return result
        except ProtocolError:
            raise
        except Exception as exc:  # any malformed input becomes one error type
            raise ProtocolError(f"cannot decode {self.name}: {exc!r}") from None
