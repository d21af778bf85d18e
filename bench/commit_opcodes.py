"""Python bytecodes the server executes per OffsetCommit, before and after:
a count that does not move with the load of a shared machine (CPU time
does, by +-15% from round to round), so a difference of a few percent in
the interpreted work shows up exactly.

Each tree (KCOORD_BASE_TREE, and KCOORD_AFTER_TREE or this one, as in
runtime_compare.py) runs in its own process: its real Server (uvloop) on a
tmp data dir, 100 of its KafkaConnections fed the frames bench/loadgen.py
sends for the offset_commit workload (8 commits per read, simple groups,
10 partitions) through a transport that only counts the answers, the group
commit fsyncing as when serving.  After a warm-up, a tracer counts every
bytecode run in kcoord's code (the opcode trace events of sys.settrace)
over the measured commits.  What this does not see: work in C (dict and
tuple allocation, struct, the event loop), the kernel, cache misses.

    python -m bench commit_opcodes
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

CONNS, DEPTH, PARTITIONS = 100, 8, 10
TOPIC = "bench-offsets"


def run(args) -> dict:
    from .common import ROOT, table, write_results
    trees = {"before": Path(os.environ.get("KCOORD_BASE_TREE", "/work/wt/runtime-base")),
             "after": Path(os.environ.get("KCOORD_AFTER_TREE", ROOT))}
    rounds = 2 if args.quick else 5
    counts = {}
    for which, path in trees.items():
        full = path.resolve()  # a relative tree is named as given, run from its full path
        out = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--child", str(full), str(rounds)],
            cwd=full, env={**os.environ, "PYTHONPATH": str(full)}, capture_output=True,
            text=True, timeout=900)
        if out.returncode != 0:
            raise RuntimeError(f"{which} ({path}): {out.stderr.strip()[-500:]}")
        counts[which] = json.loads(out.stdout.strip().splitlines()[-1])
    before, after = counts["before"], counts["after"]
    tb, ta = sum(before.values()), sum(after.values())
    rows = [["total", f"{tb:.1f}", f"{ta:.1f}", f"{ta - tb:+.1f}", f"{(ta / tb - 1) * 100:+.2f}%"]]
    diffs = sorted(set(before) | set(after),
                   key=lambda k: -abs(after.get(k, 0) - before.get(k, 0)))
    for k in diffs[:15]:
        b, a = before.get(k, 0.0), after.get(k, 0.0)
        if abs(a - b) >= 0.5:
            rows.append([k, f"{b:.1f}", f"{a:.1f}", f"{a - b:+.1f}", ""])
    sections = [
        f"before = {trees['before']}, after = {trees['after']}; {CONNS * DEPTH * rounds:,} "
        "measured commits each (after a warm-up). Bytecodes per OffsetCommit in kcoord's "
        "code (the request codec included); the functions whose count differs most below "
        "(a function moved or renamed shows as one down, one up).", "",
        table(["code", "before", "after", "change", "%"], rows)]
    write_results("commit_opcodes", "Python bytecodes per OffsetCommit, before and after",
                  sections, {"trees": {k: str(v) for k, v in trees.items()}, "rounds": rounds,
                             "per_commit": counts})
    return counts


def child(tree: str, rounds: int) -> None:
    """In the tree's process: serve, warm up, count."""
    import asyncio
    import struct
    import tempfile
    from collections import Counter

    here = Path(__file__).resolve().parent  # the script's dir: not a package root
    sys.path[:] = [tree] + [p for p in sys.path if Path(p or ".").resolve() != here]
    from bench.loadgen import frame
    from kcoord.server import app
    from kcoord.server.config import build_config
    from kcoord.server.network import KafkaConnection

    class Transport:
        """Counts the answer frames written; wakes its waiter at `want`."""

        def __init__(self) -> None:
            self.answered = 0
            self.want = 0
            self.waiter = None

        def write(self, data) -> None:
            pos = 0
            while pos < len(data):
                pos += 4 + struct.unpack_from(">i", data, pos)[0]
                self.answered += 1
            if self.waiter is not None and self.answered >= self.want and not self.waiter.done():
                self.waiter.set_result(None)

        def get_extra_info(self, name, default=None):
            return ("127.0.0.1", 40000) if name == "peername" else default

        def pause_reading(self) -> None: ...
        def resume_reading(self) -> None: ...
        def get_write_buffer_size(self) -> int: return 0
        def is_closing(self) -> bool: return False
        def close(self) -> None: ...

    def commits(conn: int, r: int) -> bytes:
        return b"".join(frame(8, 8, r * DEPTH + s, {
            "group_id": f"bench-group-{conn}", "generation_id_or_member_epoch": -1,
            "member_id": "", "group_instance_id": None, "retention_time_ms": -1,
            "topics": [{"name": TOPIC, "partitions": [
                {"partition_index": p, "committed_offset": 1000 * (r * DEPTH + s) + p,
                 "committed_leader_epoch": -1, "commit_timestamp": -1,
                 "committed_metadata": ""} for p in range(PARTITIONS)]}]})
            for s in range(DEPTH))

    counts: Counter = Counter()

    def tracer(frame_, event, arg):
        code = frame_.f_code
        name = code.co_filename
        if "/kcoord/" not in name and not name.startswith("<kcoord"):
            return None
        key = f"{name.rsplit('/kcoord/', 1)[-1]}:{code.co_name}"
        frame_.f_trace_opcodes = True

        def local(frame_, event, arg):
            if event == "opcode":
                counts[key] += 1
            return local
        return local

    async def main() -> None:
        with tempfile.TemporaryDirectory(prefix="kcoord-opcodes-") as tmp:
            server = app.Server(build_config("127.0.0.1:0", str(Path(tmp) / "data"), None, []))
            await server.start()
            try:
                server.catalogue.create(TOPIC, PARTITIONS, {})
                loop = asyncio.get_running_loop()
                conns = []
                for _ in range(CONNS):
                    c, t = KafkaConnection(server.dispatcher, 100 << 20), Transport()
                    c.connection_made(t)
                    conns.append((c, t))
                frames = [[commits(c, r) for r in range(4)] for c in range(CONNS)]

                async def client(i: int, n: int) -> None:
                    conn, t = conns[i]
                    for r in range(n):
                        t.want, t.waiter = t.answered + DEPTH, loop.create_future()
                        conn.data_received(frames[i][r % 4])
                        await asyncio.wait_for(t.waiter, 60)

                await asyncio.gather(*(client(i, 3) for i in range(CONNS)))  # warm-up
                sys.settrace(tracer)
                try:
                    await asyncio.gather(*(client(i, rounds) for i in range(CONNS)))
                finally:
                    sys.settrace(None)
            finally:
                await server.stop()

    try:
        import uvloop
        uvloop.run(main())
    except ImportError:
        asyncio.run(main())
    n = CONNS * DEPTH * rounds
    print(json.dumps({k: v / n for k, v in counts.items()}))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit("run as: python -m bench commit_opcodes")
