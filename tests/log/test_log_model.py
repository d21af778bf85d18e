"""Random operation sequences against a list-of-records model."""
import random

import pytest

from kcoord.log import LogConfig
from kcoord.protocol.records import build_batch, decode_all, iter_batches


def check(log, model):
    """The log holds exactly the model's records, reachable from any offset."""
    kept = [m for m in model if m[0] >= log.log_start_offset]
    # The end is one past the last batch, or the base of an empty active segment.
    data_end = kept[-1][0] + 1 if kept else log.log_start_offset
    assert log.log_end_offset == max(data_end, log.segment_base_offsets[-1])
    got, pos = [], log.log_start_offset
    while pos < log.log_end_offset:
        data = log.read(pos, 700)
        if not data:
            # Only a gap (left by append_raw, then truncation) reads empty.
            assert all(m[0] < pos for m in kept), pos
            break
        recs = [r for r in decode_all(data) if r.offset >= pos]
        assert recs, pos
        got += [(r.offset, r.value, r.timestamp) for r in recs]
        pos = recs[-1].offset + 1
    assert got == kept
    for offset, _, _ in got[:: max(1, len(got) // 40)]:
        (_, h), *_ = iter_batches(log.read(offset, 1))
        assert h.base_offset <= offset <= h.base_offset + h.last_offset_delta


@pytest.fixture
def no_fsync(monkeypatch):
    # Durability is not what this test checks, and fsync dominates its time.
    import os
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    monkeypatch.setattr(os, "fdatasync", lambda fd: None)


@pytest.mark.parametrize("seed", range(8))
def test_random_operations(open_log, no_fsync, seed):
    rng = random.Random(seed)
    config = LogConfig(segment_bytes=rng.choice([300, 800, 2500]),
                       index_interval_bytes=rng.choice([0, 100, 4096]))
    log = open_log(config)
    model = []  # (offset, value, timestamp) of every record in the log
    clock = 1_000
    for step in range(120):
        op = rng.random()
        if op < 0.6:
            batches, expect = b"", []
            offset = log.log_end_offset
            raw = rng.random() < 0.2
            if raw:
                offset += rng.randint(0, 50)  # replicas may leave gaps
            for _ in range(rng.randint(1, 3)):
                n = rng.randint(1, 6)
                recs = []
                for i in range(n):
                    clock += rng.randint(-5, 20)
                    value = b"%d-%d-" % (step, i) + b"z" * rng.randint(0, 80)
                    recs.append((None, value, [], clock))
                    expect.append((offset + i, value, clock))
                batches += build_batch(recs, base_offset=offset, compression=rng.choice([0, 0, 1]))
                offset += n
            first, last = (log.append_raw if raw else log.append)(batches)
            assert (first, last) == (expect[0][0], expect[-1][0])
            model += expect
        elif op < 0.7:
            log.close()
            log = open_log(config)
        elif op < 0.8 and model:
            # Truncate at a batch boundary or inside a batch.
            cut = rng.choice(model)[0]
            log.truncate_to(cut)
            model = [m for m in model if m[0] < log.log_end_offset]
            assert log.log_end_offset <= cut
        elif op < 0.9:
            limit = rng.randint(0, 3000)
            log.config = LogConfig(segment_bytes=config.segment_bytes,
                                   index_interval_bytes=config.index_interval_bytes,
                                   retention_bytes=limit, retention_ms=-1)
            log.apply_retention(now_ms=0)
            assert log.size_bytes >= min(limit, log.size_bytes)
            log.config = config
        else:
            target = rng.randint(900, clock + 10)
            kept = [m for m in model if m[0] >= log.log_start_offset]
            want = next(((o, ts) for o, _, ts in kept if ts >= target), None)
            assert log.offset_for_timestamp(target) == want
            if kept:
                best = max(kept, key=lambda m: (m[2], -m[0]))
                assert log.max_timestamp_offset() == (best[0], best[2])
        check(log, model)


def crash(log):
    """A process crash: nothing is sealed, cut or closed cleanly (the page
    cache keeps every write); the zeros' filler stops touching the files."""
    for seg in log._segments:
        seg.close()
    log._closed = True


@pytest.mark.parametrize("seed", range(6))
def test_random_operations_with_zeros_ahead_and_crashes(open_log, seed):
    """Segments written ahead with zeros (log.preallocate), with flushes,
    truncations, clean reopens and crashes in any order: the log always
    holds exactly the model's records, whatever the filler thread did."""
    rng = random.Random(1000 + seed)
    config = LogConfig(segment_bytes=rng.choice([2500, 70_000, 400_000]),
                       index_interval_bytes=rng.choice([0, 4096]), preallocate=True)
    log = open_log(config)
    model = []
    clock = 1_000
    for step in range(150):
        op = rng.random()
        if op < 0.55:
            n = rng.randint(1, 6)
            recs, offset = [], log.log_end_offset
            for i in range(n):
                clock += rng.randint(0, 20)
                recs.append((None, b"%d-%d-" % (step, i) + b"z" * rng.randint(0, 3000), [], clock))
            first, last = log.append(build_batch(recs))
            assert (first, last) == (offset, offset + n - 1)
            model += [(offset + i, recs[i][1], recs[i][3]) for i in range(n)]
        elif op < 0.75:
            log.flush()
        elif op < 0.85:
            crash(log)
            log = open_log(config)
        elif op < 0.92 and model:
            log.truncate_to(rng.choice(model)[0])
            model = [m for m in model if m[0] < log.log_end_offset]
        else:
            log.close()
            log = open_log(config)
            assert log.active.size == log.active.log_path.stat().st_size  # cut at the close
        check(log, model)
