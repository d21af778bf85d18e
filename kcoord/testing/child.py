"""A KafkaServer in a subprocess (KafkaServer(in_process=False)), driven by
its parent over stdin/stdout: one pickled (method, args, kwargs) frame per
call, one pickled (ok, value) answer.  Faults, the clock and inspection then
work as in process; a kill is a SIGKILL of this process.

    python -m kcoord.testing.child '{"config": {...}, "data_dir": "...", "port": 0,
                                     "virtual_time": false}'
"""
from __future__ import annotations

import json
import logging
import pickle
import struct
import sys

_SIZE = struct.Struct(">I")


def read_frame(stream):
    head = stream.read(4)
    if len(head) < 4:
        return None
    (n,) = _SIZE.unpack(head)
    return pickle.loads(stream.read(n))


def write_frame(stream, value) -> None:
    data = pickle.dumps(value)
    stream.write(_SIZE.pack(len(data)) + data)
    stream.flush()


class _Calls:
    """What the parent may call: the server's methods, and fault handles by id."""

    def __init__(self, server) -> None:
        self.server = server
        self.faults: dict[int, object] = {}

    def fault(self, kind: str, *args, **kwargs) -> tuple:
        fault = getattr(self.server.faults, kind)(*args, **kwargs)
        self.faults[id(fault)] = fault
        return id(fault), fault.api, fault.kind

    def on_fault(self, fid: int, name: str, *args):
        value = getattr(self.faults[fid], name)
        if callable(value):
            value = value(*args)
        if name == "wait_parked":
            return [(p.client_id, p.request) for p in value]
        return value

    def release_parked(self, fid: int, index: int) -> None:
        self.faults[fid].parked[index].release()

    def server_call(self, path: str, *args, **kwargs):
        target = self.server
        for part in path.split("."):
            target = getattr(target, part)
        return target(*args, **kwargs)


def main() -> int:
    spec = json.loads(sys.argv[1])
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from .server import KafkaServer
    server = KafkaServer(spec["config"], data_dir=spec["data_dir"],
                         virtual_time=spec["virtual_time"])
    server._nodes = server._make_nodes()
    server._nodes[0].port = spec["port"]
    server.start()
    out, inp = sys.stdout.buffer, sys.stdin.buffer
    write_frame(out, ("ready", server._nodes[0].port))
    calls = _Calls(server)
    while True:
        frame = read_frame(inp)
        if frame is None or frame[0] == "stop":  # the parent closed our stdin: a clean stop
            break
        method, args, kwargs = frame
        try:
            value = getattr(calls, method)(*args, **kwargs)
            write_frame(out, (True, value))
        except BaseException as exc:  # the parent raises it
            try:
                pickle.dumps(exc)
            except Exception:
                exc = RuntimeError(repr(exc))
            write_frame(out, (False, exc))
    for node in server._nodes:
        node.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
