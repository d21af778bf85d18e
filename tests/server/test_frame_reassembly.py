"""KafkaConnection's framing: a frame split anywhere across reads (its size
field included), reads as bytes or as the bytearray the TLS layer hands
over, frames of many sizes: each frame reaches the handler whole, as bytes,
once and in order.  In-process, a fake transport, no sockets."""
from __future__ import annotations

import random

from tests.server.test_api_versions_repeat import SIZE, api_versions, connection, responses


class _Recorder:
    """A gate that takes every frame as handle_frame receives it (a compiled
    connection's methods cannot be replaced)."""

    def __init__(self) -> None:
        self.seen: list = []

    def intercept(self, _conn, frame) -> bool:
        self.seen.append(frame)
        return True


def _recording(tmp_path):
    _, conn, transport = connection(tmp_path)
    conn.gate = recorder = _Recorder()
    return conn, transport, recorder.seen


def _pieces(data: bytes, rng: random.Random, kind) -> list:
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(1, 12))))
    edges = [0, *cuts, len(data)]
    return [kind(data[a:b]) for a, b in zip(edges, edges[1:])]


def test_every_split_point_of_three_requests(tmp_path):
    data = b"".join(api_versions(i) for i in range(3))
    for cut in range(1, len(data)):
        _, conn, transport = connection(tmp_path)
        conn.data_received(data[:cut])
        conn.data_received(bytearray(data[cut:]))
        assert [c for c, _ in responses(bytes(transport.written))] == [0, 1, 2], cut


def test_random_frames_and_pieces_reach_the_handler_whole_as_bytes(tmp_path):
    rng = random.Random(13)
    for trial in range(40):
        conn, _, seen = _recording(tmp_path)
        frames = [rng.randbytes(rng.choice([0, 1, 3, 17, 4000, 70_000, 300_000]))
                  for _ in range(rng.randint(1, 6))]
        data = b"".join(SIZE.pack(len(f)) + f for f in frames)
        kind = bytes if trial % 2 else bytearray
        for piece in _pieces(data, rng, kind):
            conn.data_received(piece)
        assert seen == frames, trial
        assert all(type(f) is bytes for f in seen)
        assert not conn.parts  # nothing left over


def test_a_frame_too_large_closes_even_when_its_size_arrives_split(tmp_path):
    conn, transport, seen = _recording(tmp_path)
    size = SIZE.pack(conn.max_request_bytes + 1)
    conn.data_received(size[:2])
    conn.data_received(size[2:] + b"x" * 10)
    assert transport.closed and not seen
