"""Issue 11, one record reader: before/after, side by side in one run.

The same in-memory logs go through, in alternating subprocesses, the code
of a baseline tree (main before the change: pass its path) and of this
tree:

  load_match   the loader's scan (LogScan.scan_chunk in a worker-style
               collector) over bench/load.py's shape: batches of 100 type-1
               commits, taken whole by the shape pattern
  load_mixed   the loader's scan over batches whose shapes vary record to
               record (group ids of several lengths): the shape match
               fails, then the in-place walk takes the batch
  load_walk    load_mixed with the shape match turned off
               (LogScan.match_batch answering False): the in-place
               walk alone
  pipe_vec     the pipeline decoder (RecordBatchBuilder.add_chunk), column-wise
  pipe_loop    the same with vectorized=False: the per-record loop
  decode       records.decode_batch over every batch (the log's reader)

Figures are records per second of one process (median of the rounds).

    python -m bench.record_reader /path/to/baseline-tree [--records 400000] [--rounds 5]
"""
from __future__ import annotations

import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

CASES = ["load_match", "load_mixed", "load_walk", "pipe_vec", "pipe_loop", "decode"]


def _logs(records: int):
    from kcoord.coordinator.offsets import OffsetValue, offset_record
    from kcoord.protocol.record_codec import encode_record
    from kcoord.protocol.records import build_batch
    now = 1_700_000_000_000

    def log(group_name):
        out = bytearray()
        batch = []
        base = 0
        rnd = 0
        written = 0
        groups = 500
        while written < records:
            for g in range(groups):
                for tp in range(10):
                    rec = offset_record(group_name(g, tp), "orders", tp, OffsetValue(
                        offset=rnd * 1000 + tp, leader_epoch=0, metadata="",
                        commit_timestamp=now, expire_timestamp=None))
                    key, value = encode_record(rec)
                    batch.append((key, value, [], now + tp))
                    written += 1
                    if len(batch) == 100:
                        out += build_batch(batch, base_offset=base)
                        base += len(batch)
                        batch.clear()
            rnd += 1
        if batch:
            out += build_batch(batch, base_offset=base)
        return bytes(out), written

    return {"match": log(lambda g, tp: f"consumer-group-{g:05d}"),
            "mixed": log(lambda g, tp: "g" * (5 + (g + tp) % 7) + str(g))}


def _case(case: str, logs: dict) -> float:
    """Records per CPU-second of one case (its objects die on return)."""
    from kcoord.pipeline.decode import RecordBatchBuilder
    from kcoord.protocol.records import decode_batch, iter_batches
    from kcoord.server.shard_loader import CollectSink, LogScan
    buf, n = logs["mixed" if case in ("load_mixed", "load_walk") else "match"]
    gc.collect()  # each case starts from the same heap, whatever the one before left
    t0 = time.process_time()
    if case.startswith("load"):
        sink = CollectSink()
        scan = LogScan(sink)
        if case == "load_walk":
            scan.match_batch = lambda *a: False
        latest: dict = {}
        scan.scan_chunk(buf, latest, 0)
        sink.latest(latest)
        assert sink.records_loaded == n, (sink.records_loaded, n)
    elif case.startswith("pipe"):
        b = RecordBatchBuilder(vectorized=case == "pipe_vec")
        b.log_partition, b.segment = 0, 0
        b.add_chunk(buf, 0)
        assert len(b) == n, (len(b), n)
        b.flush()
    else:
        got = sum(len(decode_batch(buf, pos)[1]) for pos, _ in iter_batches(buf))
        assert got == n
    return n / (time.process_time() - t0)


def _worker(records: int) -> dict:
    logs = _logs(records)
    return {case: _case(case, logs) for case in CASES}


def main() -> None:
    import argparse
    from .common import loadavg, write_results
    p = argparse.ArgumentParser()
    p.add_argument("baseline", help="a checkout of the tree before the change")
    p.add_argument("--records", type=int, default=400_000)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    trees = {"before": str(Path(a.baseline).resolve()),
             "after": str(Path(__file__).resolve().parent.parent)}
    runs: dict = {t: {c: [] for c in CASES} for t in trees}
    loads = [loadavg()]
    for r in range(a.rounds):
        for t in (("before", "after") if r % 2 == 0 else ("after", "before")):
            env = dict(os.environ, PYTHONPATH=trees[t])
            # This file's _worker (so both trees run the same cases) over the
            # kcoord of tree t (first on sys.path).
            res = subprocess.run([sys.executable, "-c",
                                  f"import json,sys; sys.path.insert(0, {trees[t]!r}); "
                                  "import importlib.util as u; "
                                  f"s = u.spec_from_file_location('rr', {str(Path(__file__).resolve())!r}); "
                                  "m = u.module_from_spec(s); s.loader.exec_module(m); "
                                  f"print(json.dumps(m._worker({a.records})))"],
                                 env=env, cwd=trees[t], capture_output=True, text=True, check=True)
            for c, v in json.loads(res.stdout.strip().splitlines()[-1]).items():
                runs[t][c].append(v)
            print(t, r, {c: round(runs[t][c][-1]) for c in CASES}, flush=True)
        loads.append(loadavg())
    rows = ["| case | before (rec/s, median) | after (rec/s, median) | after / before |",
            "|---|---:|---:|---:|"]
    summary = {}
    for c in CASES:
        b, f = statistics.median(runs["before"][c]), statistics.median(runs["after"][c])
        summary[c] = {"before": round(b), "after": round(f), "ratio": round(f / b, 3)}
        rows.append(f"| {c} | {b:,.0f} | {f:,.0f} | {f / b:.3f} |")
    text = "\n".join(rows + ["", f"{a.rounds} rounds of {a.records:,} records each, before and "
                             "after alternating; CPU time of one process.",
                             "load average (1/5/15) at start and after each round: "
                             + "; ".join(str(x) for x in loads)])
    print(text)
    write_results("record_reader", "One record reader (issue 11): before/after", [text],
                  {"summary": summary, "runs": runs, "loadavg": loads, "records": a.records,
                   "rounds": a.rounds})


if __name__ == "__main__":
    main()
