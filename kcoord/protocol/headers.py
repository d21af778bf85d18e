"""Request and response headers, hand-written for speed.

Request header (RequestHeader.json), the version follows the request:
    v1  api_key int16, api_version int16, correlation_id int32,
        client_id nullable string with an int16 length (-1 = null)
    v2  v1 + tagged fields; used iff the request's version is flexible.
        client_id stays a non-compact int16-length string even here.
Response header (ResponseHeader.json):
    v0  correlation_id int32
    v1  v0 + tagged fields; used iff the request's version is flexible,
        except that ApiVersions responses always use v0 (a client that does
        not yet know the broker's versions must be able to read it).

Decoding takes two steps because only the API registry knows whether an
(api_key, api_version) is flexible: `peek_request_header` reads up to the
client id, `skip_header_tags` skips a v2 header's tagged fields.
`decode_request_header` does both.  Every decode failure raises
ProtocolError, nothing else.
"""
from __future__ import annotations

import struct
from typing import Callable

from .codegen import skip_tagged_fields
from .errors import ProtocolError

__all__ = [
    "API_VERSIONS_KEY", "peek_request_header", "skip_header_tags", "decode_request_header",
    "encode_request_header", "encode_response_header", "decode_response_header",
    "request_header_version", "response_header_version",
]

API_VERSIONS_KEY = 18

_FIXED = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length
_FIXED_SIZE = _FIXED.size  # 10
_CORR = struct.Struct(">i")


def request_header_version(flexible: bool) -> int:
    """RequestHeader version for a request whose own version is (not) flexible."""
    return 2 if flexible else 1


def response_header_version(api_key: int, flexible: bool) -> int:
    """ResponseHeader version for a response to a (not) flexible request version."""
    return 1 if flexible and api_key != API_VERSIONS_KEY else 0


def peek_request_header(buf) -> tuple[int, int, int, str | None, int]:
    """Read a request header up to and including the client id.

    Returns (api_key, api_version, correlation_id, client_id, pos) where pos is
    just after the client id: the body for a header v1, the tagged fields for v2.
    """
    try:
        api_key, api_version, correlation_id, n = _FIXED.unpack_from(buf, 0)
    except struct.error:
        raise ProtocolError("request header truncated") from None
    if n < 0:
        if n != -1:
            raise ProtocolError(f"invalid client_id length {n}")
        return api_key, api_version, correlation_id, None, _FIXED_SIZE
    end = _FIXED_SIZE + n
    if end > len(buf):
        raise ProtocolError("request header truncated in client_id")
    # Kafka decodes the client id leniently (malformed UTF-8 becomes U+FFFD).
    client_id = bytes(buf[_FIXED_SIZE:end]).decode("utf-8", "replace")
    return api_key, api_version, correlation_id, client_id, end


def skip_header_tags(buf, pos: int) -> int:
    """Skip a flexible header's tagged fields at pos; return the body's position."""
    try:
        if buf[pos] == 0:  # no tagged fields: the usual case
            return pos + 1
        return skip_tagged_fields(buf, pos)
    except ProtocolError:
        raise
    except Exception:
        raise ProtocolError("header tagged fields truncated") from None


def _registry_is_flexible(api_key: int, api_version: int) -> bool:
    from .api import APIS  # imported late: the registry imports every message module
    api = APIS.get(api_key)
    if api is None:
        raise ProtocolError(f"unknown api key {api_key}")
    return api.request.is_flexible(api_version)


def decode_request_header(buf, is_flexible: Callable[[int, int], bool] | None = None
                          ) -> tuple[int, int, int, str | None, int]:
    """Decode a whole request header.

    `is_flexible(api_key, api_version)` says whether the request uses header v2;
    by default kcoord's API registry answers (an unknown api key is a
    ProtocolError).  Returns (api_key, api_version, correlation_id, client_id, body_pos).
    """
    api_key, api_version, correlation_id, client_id, pos = peek_request_header(buf)
    flexible = (is_flexible or _registry_is_flexible)(api_key, api_version)
    if flexible:
        pos = skip_header_tags(buf, pos)
    return api_key, api_version, correlation_id, client_id, pos


def encode_request_header(api_key: int, api_version: int, correlation_id: int,
                          client_id: str | None, flexible: bool) -> bytes:
    """Request header v1 (v2 when flexible, with no tagged fields)."""
    if client_id is None:
        out = _FIXED.pack(api_key, api_version, correlation_id, -1)
    else:
        raw = client_id.encode()
        out = _FIXED.pack(api_key, api_version, correlation_id, len(raw)) + raw
    return out + b"\x00" if flexible else out


_EMPTY_TAGS = b"\x00"


def encode_response_header(correlation_id: int, flexible: bool) -> bytes:
    """Response header v0, or v1 (an empty tagged-field section) when flexible.

    Callers pick `flexible` with `response_header_version` (ApiVersions: never).
    """
    if flexible:
        return _CORR.pack(correlation_id) + _EMPTY_TAGS
    return _CORR.pack(correlation_id)


def decode_response_header(buf, flexible: bool) -> tuple[int, int]:
    """Decode a response header v0 (v1 when flexible); returns (correlation_id, body_pos)."""
    try:
        (correlation_id,) = _CORR.unpack_from(buf, 0)
    except struct.error:
        raise ProtocolError("response header truncated") from None
    pos = 4
    if flexible:
        pos = skip_header_tags(buf, pos)
    return correlation_id, pos
