"""KafkaConnection's framing: a frame split anywhere across reads (its size
field included), reads as bytes or as the bytearray the TLS layer hands
over, frames of many sizes: each frame reaches the handler whole, once and
in order.  Both read paths: data_received (the TLS layer) and the event
loop's buffered reads (get_buffer / buffer_updated), where a large frame is
read straight into its own buffer.  In-process, a fake transport, no
sockets."""
from __future__ import annotations

import random

from kcoord.server.network import LARGE_FRAME, READ_BUFFER
from tests.server.test_api_versions_repeat import SIZE, api_versions, connection, responses


def _read(conn, transport, piece: bytes, reads: list | None = None) -> None:
    """What the event loop does with piece waiting in the socket: read into
    each buffer get_buffer gives until piece is used up (reads: each read's
    (buffer object, byte count))."""
    at = 0
    while at < len(piece) and not transport.closed:
        buf = conn.get_buffer(-1)
        assert len(buf) > 0
        n = min(len(buf), len(piece) - at)
        buf[:n] = piece[at:at + n]
        if reads is not None:
            reads.append((buf.obj if isinstance(buf, memoryview) else buf, n))
        at += n
        conn.buffer_updated(n)


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


def test_buffered_reads_at_every_split_point_of_three_requests(tmp_path):
    data = b"".join(api_versions(i) for i in range(3))
    for cut in range(1, len(data)):
        _, conn, transport = connection(tmp_path)
        _read(conn, transport, data[:cut])
        _read(conn, transport, data[cut:])
        assert [c for c, _ in responses(bytes(transport.written))] == [0, 1, 2], cut


def test_buffered_reads_of_random_frames_and_pieces(tmp_path):
    rng = random.Random(29)
    edge = LARGE_FRAME - 4  # the longest frame that stays in the read buffer
    for trial in range(40):
        conn, transport, seen = _recording(tmp_path)
        frames = [rng.randbytes(rng.choice([0, 1, 3, 17, 4000, edge, edge + 1, 70_000, 300_000]))
                  for _ in range(rng.randint(1, 6))]
        data = b"".join(SIZE.pack(len(f)) + f for f in frames)
        for piece in _pieces(data, rng, bytes):
            _read(conn, transport, piece)
        assert seen == frames, trial
        # small frames are copied out of the read buffer as bytes (so is a
        # large one that arrived whole in one read); one that cannot fit the
        # read buffer is always read into its own
        for f in seen:
            if len(f) <= edge:
                assert type(f) is bytes, trial
            elif len(f) > READ_BUFFER - 4:
                assert type(f) is bytearray, trial
        assert conn.rlen == 0 and conn.large is None  # nothing left over


def test_a_large_frame_after_a_large_frame_is_read_only_into_its_own_buffer(tmp_path):
    conn, transport, seen = _recording(tmp_path)
    frames = [bytes([i]) * 200_000 for i in (1, 2, 3)]
    reads: list = []
    _read(conn, transport, b"".join(SIZE.pack(len(f)) + f for f in frames), reads)
    assert seen == frames
    # after the first frame, each next read takes only the size field into
    # the read buffer; every byte of the frame itself lands in its buffer
    for frame in seen[1:]:
        assert sum(n for obj, n in reads if obj is frame) == len(frame)
    assert [n for obj, n in reads if obj is conn.rbuf] == [READ_BUFFER, 4, 4]


def test_buffered_reads_close_on_a_frame_too_large_or_negative(tmp_path):
    for too_large in (False, True):
        conn, transport, seen = _recording(tmp_path)
        raw = SIZE.pack(conn.max_request_bytes + 1 if too_large else -1)
        _read(conn, transport, raw[:3])
        assert not transport.closed
        _read(conn, transport, raw[3:] + b"x" * 10)
        assert transport.closed and not seen
        assert conn.large is None


class _Keeper:
    """A gate that keeps what a handler might: nothing (a copy and the
    buffer's id), or a view of part of the frame."""

    def __init__(self, keep_view: bool) -> None:
        self.keep_view = keep_view
        self.copies: list[bytes] = []
        self.ids: list[int] = []
        self.views: list = []

    def intercept(self, _conn, frame) -> bool:
        self.copies.append(bytes(frame))
        self.ids.append(id(frame))
        if self.keep_view:
            self.views.append(memoryview(frame)[10:5000])
        return True


def _large_frames(keep_view: bool, tmp_path):
    """Five large frames, one after the other; -> (frames, the keeper, the
    first bytes of each frame's buffer before the reads filled it)."""
    _, conn, transport = connection(tmp_path)
    conn.gate = keeper = _Keeper(keep_view)
    rng = random.Random(7)
    frames = [rng.randbytes(n) for n in (300_000, 290_000, 310_000, 50_000, 300_000)]
    before = []
    for f in frames:  # the size field, then what the buffer held, then the frame
        _read(conn, transport, SIZE.pack(len(f)))
        before.append(bytes(conn.get_buffer(-1)[:16]))
        _read(conn, transport, f)
    return frames, keeper, before


def test_a_large_frame_nothing_holds_any_more_lends_its_buffer_to_the_next(tmp_path):
    frames, keeper, before = _large_frames(False, tmp_path)
    assert keeper.copies == frames
    # the buffer was not zero-filled anew: it held the previous frame's bytes
    assert before[0] == bytes(16)
    assert before[1:] == [f[:16] for f in frames[:-1]]


def test_a_large_frame_still_viewed_is_never_written_again(tmp_path):
    frames, keeper, before = _large_frames(True, tmp_path)
    assert keeper.copies == frames
    assert before == [bytes(16)] * len(frames)  # a new buffer each time
    # every view still shows its own frame's bytes
    assert [bytes(v) for v in keeper.views] == [f[10:5000] for f in frames]
