"""A stopping server answers the requests it has read before it closes the
connection, and runs none against closed state (kcoord/server/shutdown.py).

Before, SIGTERM closed the logs under live connections: a long-polling fetch
was dropped with its connection (kafkajs then forgot its only broker and
crashed with "No broker available") and requests read in the last moments
failed with "log is closed" as internal errors."""
from __future__ import annotations

import socket

from tests.clients.wire import FETCH, WireClient, create_topic, decode_response, encode_request

VERSION = 12


def fetch_body(topic: str, max_wait_ms: int) -> dict:
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1,
            "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
            "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": topic, "topic_id": bytes(16), "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20,
                 "log_start_offset": -1}]}]}


def test_long_poll_fetch_is_answered_when_the_server_stops(server):
    with WireClient(server.port) as admin:
        assert create_topic(admin, "drain", 1)["error_code"] == 0
    client = WireClient(server.port, timeout=30)
    try:
        # One write, so one read on the server: once the immediate fetch is
        # answered, the long poll behind it (60 s on an empty partition) has
        # been read and is parked.
        client.send_raw(encode_request(FETCH, VERSION, fetch_body("drain", 0), 1)
                        + encode_request(FETCH, VERSION, fetch_body("drain", 60_000), 2))
        assert decode_response(FETCH, VERSION, client.recv_frame())[0] == 1
        server.stop()
        assert server.proc.returncode == 0, server.log_text()
        # answered (empty, no error) before the connection closed, not dropped
        cid, body = decode_response(FETCH, VERSION, client.recv_frame())
        assert cid == 2
        assert body["error_code"] == 0
        [part] = body["responses"][0]["partitions"]
        assert part["error_code"] == 0 and part["high_watermark"] == 0
        client.sock.settimeout(10)
        try:
            assert client.sock.recv(1) == b""
        except ConnectionResetError:
            pass
    finally:
        client.close()
    log = server.log_text()
    assert "internal error" not in log and "failed" not in log, log


def test_requests_pipelined_at_stop_are_answered_or_never_read(server):
    """Many connections each with a stream of requests: on stop every
    response a client gets is whole and in order, and the server logs no
    request that ran after its state was closed."""
    with WireClient(server.port) as admin:
        assert create_topic(admin, "drain-many", 1)["error_code"] == 0
    clients = [WireClient(server.port, timeout=30) for _ in range(8)]
    burst = b"".join(encode_request(FETCH, VERSION, fetch_body("drain-many", 0), i)
                     for i in range(1, 201))
    try:
        for c in clients:
            c.send_raw(burst)
        server.stop()
        assert server.proc.returncode == 0, server.log_text()
        for c in clients:
            expected = 1
            while True:
                try:
                    frame = c.recv_frame()
                except (ConnectionError, socket.timeout):
                    break  # EOF or reset: the rest was never read
                cid, body = decode_response(FETCH, VERSION, frame)
                assert cid == expected and body["error_code"] == 0
                expected += 1
    finally:
        for c in clients:
            c.close()
    log = server.log_text()
    assert "internal error" not in log and "log is closed" not in log, log


def test_a_long_poll_whose_client_left_does_not_run_after_the_logs_close(server):
    """Found by the fault harness: a consumer closed while its Fetch was
    parked leaves the request's task behind; at stop it was woken after the
    drain (nothing waits on a closed connection) and read a closed log:
    "Task exception was never retrieved ... log is closed", once per such
    consumer.  A woken long poll of a stopping server reads nothing more."""
    with WireClient(server.port) as admin:
        assert create_topic(admin, "gone", 1)["error_code"] == 0
    clients = [WireClient(server.port, timeout=30) for _ in range(4)]
    for c in clients:
        c.send_raw(encode_request(FETCH, VERSION, fetch_body("gone", 0), 1)
                   + encode_request(FETCH, VERSION, fetch_body("gone", 60_000), 2))
        assert decode_response(FETCH, VERSION, c.recv_frame())[0] == 1  # the poll is parked
        c.close()
    with WireClient(server.port) as c:  # the server has seen the clients go
        assert c.api_versions()["error_code"] == 0
    server.stop()
    assert server.proc.returncode == 0, server.log_text()
    log = server.log_text()
    assert "never retrieved" not in log and "log is closed" not in log, log
