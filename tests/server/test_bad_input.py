"""Issue 2 bad input: a bad frame closes only its own connection.

Each case opens a bystander connection first, then sends the bad bytes on
a second one and checks that
  - the offending connection is closed by the server (the socket sees EOF),
  - the server logs a line about it naming the peer,
  - the bystander still gets ApiVersions answered, and new connections work.
The server is shared by the module (socket.request.max.bytes set small so
the oversized case is cheap), which also shows it survives every case in turn.

ApiVersions is the exception: an unsupported ApiVersions version is answered
in the v0 format with UNSUPPORTED_VERSION and the supported list (KIP-511),
and the connection stays open for the client's retry.
"""
from __future__ import annotations

import random
import socket
import struct

import pytest

from kcoord.protocol.api import response_codec
from kcoord.protocol.errors import Err
from kcoord.protocol.headers import encode_request_header
from tests.clients.wire import WireClient, decode_response, encode_request, wait_for_log
from tests.support import ServerProcess

MAX_REQUEST = 65536
SIZE = struct.Struct(">i")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc = ServerProcess(tmp_path_factory.mktemp("bad-input") / "data",
                         settings={"socket.request.max.bytes": str(MAX_REQUEST)})
    proc.start()
    yield proc
    proc.stop()


def frame(payload: bytes) -> bytes:
    return SIZE.pack(len(payload)) + payload


def header(api_key: int, version: int, correlation_id: int = 7, flexible: bool = False) -> bytes:
    return encode_request_header(api_key, version, correlation_id, "bad-input", flexible)


def metadata_v1_truncated() -> bytes:
    """Metadata v1 whose topic array promises 3 names but holds one."""
    body = SIZE.pack(3) + struct.pack(">h", 3) + b"abc"
    return frame(header(3, 1) + body)


def produce_v9_truncated() -> bytes:
    """A flexible Produce cut in the middle of its topic array."""
    whole = encode_request(0, 9, {"transactional_id": None, "acks": 1, "timeout_ms": 1000,
                                  "topic_data": [{"name": "t", "partition_data": [
                                      {"index": 0, "records": b"x" * 100}]}]})
    payload = whole[4:]
    return frame(payload[:len(payload) - 60])


def seeded_garbage(seed: int, n: int = 4096) -> bytes:
    """Random bytes whose first four, read as a frame size, are not a sane size."""
    rng = random.Random(seed)
    while True:
        data = rng.randbytes(n)
        size, = SIZE.unpack_from(data)
        if not 0 <= size <= MAX_REQUEST:
            return data


def random_frame(seed: int) -> bytes:
    """A well-sized frame of random bytes (an API key no server knows, in practice)."""
    rng = random.Random(seed)
    payload = rng.randbytes(300)
    key, = struct.unpack_from(">h", payload)
    assert key not in range(0, 100), "pick another seed: this one names a real API"
    return frame(payload)


# name -> (bytes to send, words the log line must hold besides the peer)
CASES = {
    "negative-length": (SIZE.pack(-1) + b"\x00" * 16, ["-1"]),
    "most-negative-length": (SIZE.pack(-(2**31)) + b"\x00" * 16, [str(-(2**31))]),
    "oversized-length": (SIZE.pack(MAX_REQUEST + 1) + b"\x00" * 100, [str(MAX_REQUEST + 1)]),
    "huge-length": (SIZE.pack(2**31 - 1), [str(2**31 - 1)]),
    "truncated-header": (frame(struct.pack(">hhi", 18, 0, 1)[:7]), []),
    "truncated-client-id": (frame(struct.pack(">hhih", 3, 1, 1, 50) + b"short"), []),
    "truncated-body-metadata-v1": (metadata_v1_truncated(), []),
    "truncated-body-produce-v9": (produce_v9_truncated(), []),
    "unknown-api-key": (frame(header(9999, 0)), ["9999"]),
    "unserved-api-key": (frame(header(57, 0)), ["57"]),  # UpdateFeatures: known to Kafka
    "negative-api-key": (frame(header(-3, 0)), ["-3"]),
    "metadata-v13": (frame(header(3, 13, flexible=True) + b"\x00\x00\x00"), ["13"]),
    "produce-v2": (frame(header(0, 2) + b"\x00" * 20), ["v2", "version 2"]),
    "fetch-v99": (frame(header(1, 99, flexible=True) + b"\x00" * 20), ["99"]),
    "garbage-raw": (seeded_garbage(1), []),
    "garbage-frame": (random_frame(3), []),
}


def _check_closes_only_offender(server, data: bytes, words: list[str]) -> None:
    with WireClient(server.port) as bystander:
        assert bystander.api_versions()["error_code"] == 0
        with WireClient(server.port) as bad:
            bad_peer = "127.0.0.1:%d" % bad.sock.getsockname()[1]
            since = len(server.log_lines)
            try:
                bad.send_raw(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server may close before it has read all of it
            bad.wait_closed(timeout=10)
            line = wait_for_log(server, bad_peer, since=since)
        # the line about it carries the offending value, when there is one
        if words:
            assert any(w.lower() in line.lower() for w in words), line
        assert server.proc.poll() is None, "server died:\n" + server.log_text()
        response = bystander.api_versions()
        assert response["error_code"] == 0
        assert any(k["api_key"] == 3 for k in response["api_keys"])
    with WireClient(server.port) as fresh:
        assert fresh.api_versions()["error_code"] == 0


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_frame_closes_only_its_connection(server, case):
    data, words = CASES[case]
    _check_closes_only_offender(server, data, words)


def test_bad_frame_after_good_frames_in_one_write(server):
    """Pipelined: good requests then a bad frame in one segment; the good ones are
    answered, in order, before the connection closes (Kafka reads a connection's
    next request only after answering the previous one)."""
    with WireClient(server.port) as bystander, WireClient(server.port) as c:
        good = b"".join(encode_request(18, 0, {}, correlation_id=i) for i in (1, 2))
        c.send_raw(good + SIZE.pack(-1))
        received = c.wait_closed(timeout=10)
        ids = []
        pos = 0
        while pos + 4 <= len(received):
            size, = SIZE.unpack_from(received, pos)
            got_id, body = decode_response(18, 0, received[pos + 4:pos + 4 + size])
            assert body["error_code"] == 0
            ids.append(got_id)
            pos += 4 + size
        assert ids == [1, 2], f"answered {ids} before closing"
        assert bystander.api_versions()["error_code"] == 0


def test_partial_frame_then_client_close(server):
    """A frame cut off by the client's own close is dropped quietly; the server carries on."""
    with WireClient(server.port) as c:
        c.send_raw(SIZE.pack(1000) + b"\x00" * 10)
    with WireClient(server.port) as c:
        c.send_raw(SIZE.pack(1000))
        c.sock.shutdown(socket.SHUT_WR)
        c.wait_closed(timeout=10)
    with WireClient(server.port) as fresh:
        assert fresh.api_versions()["error_code"] == 0


def test_frame_of_exactly_the_limit_is_read(server):
    """socket.request.max.bytes bounds the frame size; one of exactly that size is parsed.

    (A Metadata v1 request padded with trailing bytes to the limit: whether the
    server answers or rejects the trailing bytes, it must have read the frame,
    not refused it for its size.)"""
    with WireClient(server.port) as c:
        since = len(server.log_lines)
        payload = header(18, 0) + b"\x00" * (MAX_REQUEST - len(header(18, 0)))
        assert len(payload) == MAX_REQUEST
        c.send_raw(frame(payload))
        try:
            c.recv_frame()
        except ConnectionError:
            pass
        for line in server.log_lines[since:]:
            assert "socket.request.max.bytes" not in line and "frame size" not in line, line


def test_many_bad_connections_in_parallel(server):
    """Fifty connections each send garbage at once; all are closed, the bystander is fine."""
    with WireClient(server.port) as bystander:
        clients = [WireClient(server.port) for _ in range(50)]
        try:
            for i, c in enumerate(clients):
                c.send_raw(seeded_garbage(100 + i, 256))
            for c in clients:
                c.wait_closed(timeout=10)
        finally:
            for c in clients:
                c.close()
        assert bystander.api_versions()["error_code"] == 0


# --------------------------------------------------------------- KIP-511
@pytest.mark.parametrize("version", [5, 9, 127])
def test_unsupported_api_versions_version_gets_v0_answer(server, version):
    with WireClient(server.port) as c:
        # a future ApiVersions: flexible header and a body this server cannot know
        payload = header(18, version, correlation_id=4242, flexible=True) + \
            b"\x0dkcoord-future\x021\x00" + b"\x05extra"
        c.send_raw(frame(payload))
        response = c.recv_frame()
        # v0 response header (correlation id only), v0 body, nothing left over
        correlation_id, = SIZE.unpack_from(response)
        assert correlation_id == 4242
        body, end = response_codec(18, 0)[1](response, 4)
        assert end == len(response), "v0 body expected, with nothing after it"
        assert body["error_code"] == Err.UNSUPPORTED_VERSION
        ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
        assert ranges[18] == (0, 4)
        assert ranges[3] == (0, 12)
        assert 0 in ranges and 1 in ranges
        # the connection stays open: the client retries with a version it now knows
        retry = c.api_versions(version=3)
        assert retry["error_code"] == 0
        assert {k["api_key"]: (k["min_version"], k["max_version"])
                for k in retry["api_keys"]} == ranges


def test_api_versions_v0_to_v4_answer_normally(server):
    with WireClient(server.port) as c:
        for version in range(5):
            assert c.api_versions(version=version)["error_code"] == 0
