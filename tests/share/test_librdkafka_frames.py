"""kcoord's ShareFetch / ShareAcknowledge schemas against the bytes the real
client and librdkafka's own mock cluster exchange: confluent-kafka's
ShareConsumer consumes from the mock through a recording proxy; every
ShareFetch and ShareAcknowledge request and response must decode with
kcoord's codec and encode back to the same bytes.

The proxy rewrites the broker addresses in Metadata and FindCoordinator
answers to its own, and caps ApiVersions at the versions kcoord's codec has
(so it can decode what it rewrites); the share APIs pass untouched."""
from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kcoord.protocol.api import APIS, request_codec, response_codec
from kcoord.protocol.headers import peek_request_header, skip_header_tags

confluent_kafka = pytest.importorskip("confluent_kafka")
if not hasattr(confluent_kafka, "ShareConsumer"):
    pytest.skip("confluent-kafka without ShareConsumer", allow_module_level=True)

pytestmark = pytest.mark.clients

ROOT = Path(__file__).resolve().parents[2]
_SIZE = struct.Struct(">i")
SHARE = (78, 79)


def _recv_exact(sock, n):
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError
        out += chunk
    return bytes(out)


def _frames(sock):
    while True:
        size, = _SIZE.unpack(_recv_exact(sock, 4))
        yield _recv_exact(sock, size)


class Proxy:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.requests: list[tuple[int, int, dict, bool]] = []   # key, version, body, same bytes
        self.responses: list[tuple[int, int, dict]] = []      # decoded, re-encoded exactly
        self.errors: list[str] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream, timeout=60)
            pending: dict[int, tuple[int, int]] = {}
            threading.Thread(target=self._up, args=(client, server, pending), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client, pending),
                             daemon=True).start()

    def _up(self, client, server, pending):
        try:
            for frame in _frames(client):
                key, version, corr, _, pos = peek_request_header(frame)
                pending[corr] = (key, version)
                if key in SHARE:
                    try:
                        pos = skip_header_tags(frame, pos)
                        encode, decode = request_codec(key, version)
                        body, end = decode(frame, pos)
                        same = end == len(frame) and bytes(encode(body)) == frame[pos:]
                        self.requests.append((key, version, body, same))
                    except Exception as exc:  # noqa: BLE001 (recorded, asserted on)
                        self.errors.append(f"request {key} v{version}: {exc!r}")
                server.sendall(_SIZE.pack(len(frame)) + frame)
        except (OSError, ConnectionError):
            pass
        finally:
            server.close()

    def _down(self, server, client, pending):
        try:
            for frame in _frames(server):
                corr, = _SIZE.unpack_from(frame, 0)
                key, version = pending.pop(corr, (None, None))
                if key in (18, 3, 10) or key in SHARE:
                    frame = self._inspect(key, version, frame)
                client.sendall(_SIZE.pack(len(frame)) + frame)
        except (OSError, ConnectionError):
            pass
        finally:
            client.close()

    def _inspect(self, key, version, frame):
        flexible = APIS[key].request.is_flexible(version) and key != 18
        pos = skip_header_tags(frame, 4) if flexible else 4
        head = frame[:pos]
        if key == 18 and version > APIS[18].max_version:
            return frame
        try:
            encode, decode = response_codec(key, version)
            body, end = decode(frame, pos)
        except Exception as exc:  # noqa: BLE001
            self.errors.append(f"response {key} v{version}: {exc!r}")
            return frame
        if key in SHARE:
            if end != len(frame) or bytes(encode(body)) != frame[pos:]:
                self.errors.append(f"response {key} v{version} does not re-encode exactly")
            self.responses.append((key, version, body))
            return frame
        if key == 18:              # only what kcoord's codec can read (and rewrite)
            keep = []
            for a in body["api_keys"]:
                ours = APIS.get(a["api_key"])
                if ours is None:
                    keep.append(a)              # not read here (ShareGroupHeartbeat...)
                elif a["min_version"] <= ours.max_version:
                    keep.append({**a, "max_version": min(a["max_version"], ours.max_version),
                                 "min_version": max(a["min_version"], ours.min_version)})
            body["api_keys"] = keep
        elif key == 3:
            for b in body["brokers"]:
                b["host"], b["port"] = "127.0.0.1", self.port
        elif key == 10:
            if "coordinators" in body and body["coordinators"]:
                for c in body["coordinators"]:
                    c["host"], c["port"] = "127.0.0.1", self.port
            else:
                body["host"], body["port"] = "127.0.0.1", self.port
        return head + bytes(encode(body))

    def close(self):
        self.listener.close()


@pytest.fixture
def mock_cluster():
    proc = subprocess.Popen([sys.executable, "-m", "bench.mock_helper", "--topic", "t:1"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    line = proc.stdout.readline()
    assert line.startswith("BOOTSTRAP "), line
    host, port = line.split()[1].split(",")[0].rsplit(":", 1)
    yield host, int(port)
    proc.stdin.close()
    proc.wait(10)


def test_librdkafka_share_frames_decode_and_round_trip(mock_cluster):
    proxy = Proxy(mock_cluster)
    bootstrap = f"127.0.0.1:{proxy.port}"
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    consumer = confluent_kafka.ShareConsumer({
        "bootstrap.servers": bootstrap, "group.id": "g", "share.acknowledgement.mode": "explicit"})
    consumer.subscribe(["t"])
    got = []
    deadline = time.monotonic() + 60
    n = 0
    try:
        while len(got) < 20 and time.monotonic() < deadline:
            producer.produce("t", b"v%d" % n)
            n += 1
            producer.poll(0)
            producer.flush(5)
            for msg in _poll(consumer):
                got.append(msg.offset())
                kind = (confluent_kafka.AcknowledgeType.ACCEPT if msg.offset() % 3 else
                        confluent_kafka.AcknowledgeType.RELEASE)
                consumer.acknowledge(msg, kind)
            consumer.commit_sync()
    finally:
        consumer.close()
        proxy.close()
    assert got, "the share consumer received nothing from the mock"
    assert not proxy.errors, proxy.errors
    kinds = {(k, v) for k, v, _, _ in proxy.requests}
    assert (78, 1) in kinds and (79, 1) in kinds, kinds
    assert all(same for *_, same in proxy.requests), "a share request did not re-encode exactly"
    fetched = [b for k, _, b in proxy.responses if k == 78]
    acquired = [r for b in fetched for t in b["responses"] for p in t["partitions"]
                for r in p["acquired_records"]]
    assert acquired and all(r["delivery_count"] >= 1 for r in acquired)
    assert any(b["acquisition_lock_timeout_ms"] > 0 for b in fetched)
    acks = [a for k, _, b, _ in proxy.requests for t in b["topics"] for p in t["partitions"]
            for a in p["acknowledgement_batches"]]
    assert any(a["acknowledge_types"] == [2] for a in acks), acks    # a RELEASE went out


def _poll(consumer):
    res = consumer.poll(0.5)
    return [m for m in (res or ()) if m is not None and m.error() is None]
