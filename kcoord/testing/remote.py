"""The parent's side of a subprocess KafkaServer's faults: handles that call
into the child (kcoord/testing/child.py) by the fault's id."""
from __future__ import annotations


class RemoteParked:
    def __init__(self, node, fid: int, index: int, client_id, request) -> None:
        self._node, self._fid, self._index = node, fid, index
        self.client_id = client_id
        self.request = request

    def release(self) -> None:
        self._node.rpc("release_parked", self._fid, self._index)


class RemoteFault:
    def __init__(self, node, fid: int, api: str, kind: str) -> None:
        self._node, self._fid = node, fid
        self.api, self.kind = api, kind

    @property
    def fired(self) -> int:
        return self._node.rpc("on_fault", self._fid, "fired")

    def remove(self) -> None:
        self._node.rpc("on_fault", self._fid, "remove")

    def release(self, n: int | None = None) -> None:
        self._node.rpc("on_fault", self._fid, "release", n)

    def wait_parked(self, n: int = 1, timeout: float = 10.0) -> list[RemoteParked]:
        parked = self._node.rpc("on_fault", self._fid, "wait_parked", n, timeout)
        return [RemoteParked(self._node, self._fid, i, client_id, request)
                for i, (client_id, request) in enumerate(parked)]

    def __repr__(self) -> str:
        return f"<{self.kind} {self.api} in a subprocess>"


class RemoteFaults:
    """kafka.faults of a subprocess server: the same calls, run in the child."""

    def __init__(self, server) -> None:
        self._server = server

    def _add(self, kind: str, *args, **kwargs) -> RemoteFault:
        node = self._server._nodes[0]
        fid, api, kind = node.rpc("fault", kind, *args, **kwargs)
        return RemoteFault(node, fid, api, kind)

    def fail(self, api, error, count: int | None = 1, **where) -> RemoteFault:
        return self._add("fail", api, error, count, **where)

    def disconnect(self, api, count: int | None = 1, **where) -> RemoteFault:
        return self._add("disconnect", api, count, **where)

    def delay(self, api, ms: float, count: int | None = None, **where) -> RemoteFault:
        return self._add("delay", api, ms, count, **where)

    def park(self, api, count: int | None = None, **where) -> RemoteFault:
        return self._add("park", api, count, **where)

    def cap_versions(self, caps: dict) -> None:
        self._server._remote("faults.cap_versions", caps)

    def reset(self) -> None:
        if self._server._nodes and self._server._nodes[0].running:
            self._server._remote("faults.reset")
