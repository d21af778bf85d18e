"""Structured Streaming over a log that grows between micro-batches ends equal to the batch run."""
from __future__ import annotations

import shutil

from kcoord.pipeline import segments

from .conftest import read_table


def _copy_first_half(src, dst) -> list:
    """Copy the data dir with each __consumer_offsets partition cut at about half
    (whole segments, then part of one segment, at a batch boundary).
    -> [(source segment, destination)] still to copy in full."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__consumer_offsets-*"))
    rest = []
    for p, d in segments.partition_dirs(src):
        out = dst / d.name
        out.mkdir()
        segs = segments.segment_files(d)
        half = len(segs) // 2
        for i, (base, path) in enumerate(segs):
            target = out / path.name
            if i < half:
                shutil.copyfile(path, target)
            elif i == half:
                # the first half of its whole batches
                _, end = segments.segment_end(path)
                cut, pos = 0, 0
                with open(path, "rb") as fh:
                    data = fh.read()
                import struct
                while pos < end and pos < end // 2:
                    pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
                    cut = pos
                target.write_bytes(data[:cut])
                rest.append((path, target))
            else:
                rest.append((path, target))
    return rest


def test_stream_in_two_steps_equals_the_batch_run(spark, batch_run, tmp_path):
    from kcoord.pipeline.stream import run_stream
    data, out, summary, _ = batch_run
    grow = tmp_path / "data"
    rest = _copy_first_half(data, grow)
    stream_out = tmp_path / "out"
    logs = []
    first = run_stream(spark, grow, stream_out, available_now=True, as_of=summary["as_of"],
                       log=logs.append)
    assert first.batches >= 1
    early = {(r["group"], r["topic"], r["partition"]) for r in read_table(stream_out / "offsets")}
    assert early  # something was evaluated from the first half

    for path, target in rest:  # the log grows: the cut segment fills up, new segments appear
        shutil.copyfile(path, target)
    second = run_stream(spark, grow, stream_out, available_now=True, as_of=summary["as_of"],
                        log=logs.append)
    assert second.batches >= 1 and second.last_rows > 0
    for table in ("offsets", "lag", "status"):
        want = sorted(map(str, read_table(out / table)))
        got = sorted(map(str, read_table(stream_out / table)))
        assert got == want, table
    assert any("[stream] batch" in line for line in logs)
