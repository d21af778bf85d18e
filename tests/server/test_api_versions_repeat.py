"""A connection answers a repeat of the same ApiVersions request bytes from a
memo (dispatcher.pure) without decoding it again.  The answers must be the
ones the full path gives, in order, with each request's correlation id, and
anything that differs (version, client id, a truncated or extended frame, a
change of the registered handlers) takes the full path with its checks.

Driven in-process through KafkaConnection.data_received with a fake
transport; no sockets.
"""
from __future__ import annotations

import struct

from kcoord.protocol.api import request_codec, response_codec
from kcoord.protocol.headers import encode_request_header
from kcoord.server.config import Config
from kcoord.server.dispatch import Dispatcher
from kcoord.server.meta_handlers import MetaHandlers
from kcoord.server.network import KafkaConnection

SIZE = struct.Struct(">i")


class FakeTransport:
    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False

    def write(self, data) -> None:
        self.written += data

    def get_extra_info(self, name):
        return ("127.0.0.1", 5555) if name == "peername" else None

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def connection(tmp_path):
    d = Dispatcher()
    MetaHandlers(Config(data_dir=tmp_path), d).register()
    conn = KafkaConnection(d, 1 << 20)
    transport = FakeTransport()
    conn.connection_made(transport)
    return d, conn, transport


def api_versions(correlation_id: int, version: int = 3, client: str = "c",
                 software: str = "kcoord-test") -> bytes:
    flexible = version >= 3
    body = request_codec(18, version)[0](
        {"client_software_name": software, "client_software_version": "1.0"})
    payload = bytes(encode_request_header(18, version, correlation_id, client, flexible)) + bytes(body)
    return SIZE.pack(len(payload)) + payload


def responses(written: bytes) -> list[tuple[int, bytes]]:
    """(correlation id, body) of each response frame."""
    out, pos = [], 0
    while pos < len(written):
        size, = SIZE.unpack_from(written, pos)
        frame = written[pos + 4:pos + 4 + size]
        out.append((SIZE.unpack_from(frame, 0)[0], frame[4:]))
        pos += 4 + size
    assert pos == len(written)
    return out


def test_repeats_answered_in_order_with_their_correlation_ids(tmp_path):
    _, conn, transport = connection(tmp_path)
    reqs = [api_versions(i) for i in range(50)]
    conn.data_received(b"".join(reqs[:10]))   # the first fills the memo, the rest use it
    conn.data_received(b"".join(reqs[10:]))
    assert conn.memo is not None
    got = responses(bytes(transport.written))
    assert [c for c, _ in got] == list(range(50))
    decode = response_codec(18, 3)[1]
    first, _ = decode(got[0][1], 0)
    assert first["error_code"] == 0 and first["api_keys"]
    assert len({body for _, body in got}) == 1


def test_frames_split_across_reads(tmp_path):
    _, conn, transport = connection(tmp_path)
    data = b"".join(api_versions(i) for i in range(20))
    for i in range(0, len(data), 7):
        conn.data_received(data[i:i + 7])
    assert [c for c, _ in responses(bytes(transport.written))] == list(range(20))


def test_different_requests_take_the_full_path(tmp_path):
    _, conn, transport = connection(tmp_path)
    conn.data_received(api_versions(1) + api_versions(2, version=2) + api_versions(3)
                       + api_versions(4, client="other") + api_versions(5, software="x"))
    got = responses(bytes(transport.written))
    assert [c for c, _ in got] == [1, 2, 3, 4, 5]
    # a v2 body has no tagged fields, so it differs; the client id and software
    # name do not change a v3 body
    assert got[1][1] != got[0][1] and got[0][1] == got[2][1] == got[3][1] == got[4][1]


def test_bad_frame_after_memoised_repeats_still_closes(tmp_path):
    _, conn, transport = connection(tmp_path)
    good = api_versions(1)
    conn.data_received(good + api_versions(2))
    assert conn.memo is not None
    # same size and prefix, but the compact string length byte is corrupted
    bad = bytearray(api_versions(3))
    header_len = len(encode_request_header(18, 3, 3, "c", True))
    bad[4 + header_len] = 0x7F
    conn.data_received(bytes(bad) + api_versions(4))
    assert transport.closed
    assert [c for c, _ in responses(bytes(transport.written))] == [1, 2]


def test_extended_frame_is_not_a_repeat(tmp_path):
    _, conn, transport = connection(tmp_path)
    conn.data_received(api_versions(1))
    frame = api_versions(2)
    longer = SIZE.pack(len(frame) - 4 + 1) + frame[4:] + b"\x00"  # one byte more
    conn.data_received(longer)
    # the full path decodes it (trailing bytes are ignored, as before) and answers
    assert [c for c, _ in responses(bytes(transport.written))] == [1, 2]
    assert conn.memo[0] == len(frame) - 4 + 1


def test_registering_a_handler_invalidates_the_memo(tmp_path):
    d, conn, transport = connection(tmp_path)
    conn.data_received(api_versions(1))
    before = responses(bytes(transport.written))[0][1]
    d.register(3, lambda ctx, req: {})  # (re)registering changes the advertised list
    d.register(10, lambda ctx, req: {})
    conn.data_received(api_versions(2))
    after = responses(bytes(transport.written))[1][1]
    assert after != before
    decode = response_codec(18, 3)[1]
    keys = {k["api_key"] for k in decode(after, 0)[0]["api_keys"]}
    assert 10 in keys
