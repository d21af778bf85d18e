"""A tiny blocking Kafka wire client for tests that need exact bytes.

Requests are encoded with kcoord's own codec (kcoord.protocol), so tests can
send well-formed requests, hand-broken ones, or raw garbage, and read what
the server answers.  Everything has a bounded timeout.
"""
from __future__ import annotations

import socket
import struct
import time

from kcoord.protocol.api import APIS, request_codec, response_codec
from kcoord.protocol.headers import decode_response_header, encode_request_header

API_VERSIONS = 18
_SIZE = struct.Struct(">i")


def encode_request(api_key: int, version: int, body: dict, correlation_id: int = 1,
                   client_id: str | None = "kcoord-tests") -> bytes:
    """A whole frame: size prefix, request header and body."""
    flexible = APIS[api_key].request.is_flexible(version)
    header = encode_request_header(api_key, version, correlation_id, client_id, flexible)
    payload = header + bytes(request_codec(api_key, version)[0](body))
    return _SIZE.pack(len(payload)) + payload


def decode_response(api_key: int, version: int, frame: bytes) -> tuple[int, dict]:
    """(correlation_id, body) of one response frame (without its size prefix)."""
    flexible = APIS[api_key].request.is_flexible(version) and api_key != API_VERSIONS
    correlation_id, pos = decode_response_header(frame, flexible)
    body, _ = response_codec(api_key, version)[1](frame, pos)
    return correlation_id, body


class WireClient:
    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 30.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self._next_id = 1

    # -------------------------------------------------------------- raw I/O
    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _recv_exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError(f"EOF after {len(out)} of {n} bytes")
            out += chunk
        return bytes(out)

    def recv_frame(self) -> bytes:
        size, = _SIZE.unpack(self._recv_exact(4))
        return self._recv_exact(size)

    def wait_closed(self, timeout: float = 10.0) -> bytes:
        """Read until the server closes the connection; returns what came before EOF.

        Raises AssertionError if the connection is still open after `timeout`.
        """
        deadline = time.monotonic() + timeout
        received = bytearray()
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"connection still open after {timeout}s "
                                     f"(received {bytes(received[:64])!r})")
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                continue
            except (ConnectionResetError, BrokenPipeError):
                return bytes(received)
            if not chunk:
                return bytes(received)
            received += chunk

    # ------------------------------------------------------------ requests
    def request(self, api_key: int, version: int, body: dict) -> dict:
        correlation_id = self._next_id
        self._next_id += 1
        self.sock.settimeout(self.timeout)
        self.send_raw(encode_request(api_key, version, body, correlation_id))
        got, response = decode_response(api_key, version, self.recv_frame())
        assert got == correlation_id, (got, correlation_id)
        return response

    def api_versions(self, version: int = 3) -> dict:
        body = {"client_software_name": "kcoord-tests", "client_software_version": "0"}
        return self.request(API_VERSIONS, version, body)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> "WireClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def wait_for_log(server, *patterns: str, since: int = 0, timeout: float = 10.0) -> str:
    """The first server log line (from index `since`) containing every pattern
    (case-insensitive), waiting up to `timeout` seconds for it."""
    deadline = time.monotonic() + timeout
    needles = [p.lower() for p in patterns]
    while True:
        for line in list(server.log_lines[since:]):
            low = line.lower()
            if all(n in low for n in needles):
                return line
        if time.monotonic() > deadline:
            raise AssertionError(f"no server log line containing {patterns!r}:\n"
                                 + server.log_text())
        time.sleep(0.02)


# ------------------------------------------------------- data-plane helpers
# Versions: flexible ones where kcoord serves them, so the tests exercise the
# compact encodings real clients (kafka-python, confluent-kafka) use.
CREATE_TOPICS, PRODUCE, FETCH, LIST_OFFSETS, METADATA = 19, 0, 1, 2, 3


def create_topic(client: WireClient, name: str, partitions: int = 1,
                 configs: dict[str, str] | None = None, version: int = 7) -> dict:
    """CreateTopics for one topic; returns that topic's result entry."""
    body = {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                        "assignments": [],
                        "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
            "timeout_ms": 30000, "validate_only": False}
    response = client.request(CREATE_TOPICS, version, body)
    [result] = response["topics"]
    return result


def produce(client: WireClient, topic: str, partition: int, records: bytes, acks: int = -1,
            version: int = 9) -> dict:
    """Produce one record set to one partition; returns its partition response."""
    body = {"transactional_id": None, "acks": acks, "timeout_ms": 30000,
            "topic_data": [{"name": topic,
                            "partition_data": [{"index": partition, "records": records}]}]}
    response = client.request(PRODUCE, version, body)
    [t] = response["responses"]
    [p] = t["partition_responses"]
    return p


def fetch(client: WireClient, topic: str, partition: int, offset: int,
          max_bytes: int = 50 * 1024 * 1024, version: int = 12, max_wait_ms: int = 0,
          topic_id: bytes | None = None) -> dict:
    """Fetch one partition (v13+ by topic id); returns its partition entry."""
    t = {"topic": topic, "topic_id": topic_id or bytes(16),
         "partitions": [{"partition": partition, "fetch_offset": offset,
                         "partition_max_bytes": max_bytes, "log_start_offset": -1}]}
    body = {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": max_bytes,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1, "topics": [t],
            "forgotten_topics_data": [], "rack_id": ""}
    response = client.request(FETCH, version, body)
    assert response.get("error_code", 0) == 0, response
    [tr] = response["responses"]
    [p] = tr["partitions"]
    return p


def list_offset(client: WireClient, topic: str, partition: int, timestamp: int = -1,
                version: int = 7) -> dict:
    """ListOffsets for one partition (-1 latest, -2 earliest); returns its entry."""
    body = {"replica_id": -1, "isolation_level": 0,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": partition, "timestamp": timestamp}]}]}
    response = client.request(LIST_OFFSETS, version, body)
    [t] = response["topics"]
    [p] = t["partitions"]
    return p


def metadata(client: WireClient, topics: list[str] | None, version: int = 12,
             allow_auto_create: bool = True) -> dict:
    body = {"topics": None if topics is None else [{"name": n, "topic_id": bytes(16)} for n in topics],
            "allow_auto_topic_creation": allow_auto_create,
            "include_topic_authorized_operations": False}
    return client.request(METADATA, version, body)


def read_partition(client: WireClient, topic: str, partition: int, start: int = 0,
                   deadline_s: float = 60.0) -> list:
    """Every (BatchHeader, [Record]) from `start` to the high watermark, in order."""
    from kcoord.protocol.records import decode_batch, iter_batches
    out = []
    offset = start
    end = time.monotonic() + deadline_s
    while True:
        p = fetch(client, topic, partition, offset)
        assert p["error_code"] == 0, p
        data = p["records"] or b""
        for pos, _ in iter_batches(data):
            header, records = decode_batch(data, pos)
            if header.next_offset <= offset:
                continue
            out.append((header, records))
            offset = header.next_offset
        if offset >= p["high_watermark"]:
            return out
        assert time.monotonic() < end, f"read_partition stuck at {offset} of {p['high_watermark']}"
